// inference.ModelInferRequest / ModelInferResponse (protos/grpc_service.proto) in
// protobuf's wire format, by hand: the gRPC fast path reads requests and writes
// responses without the protobuf library and without copying tensor bytes on the way in
// (views into the received message) or more than once on the way out.
//
// The reader is bounds-checked against every length it is given (varints of at most 10
// bytes, lengths within the enclosing message, wire types 3/4 and field 0 refused) and
// skips unknown fields as protobuf does; it is fuzzed (tests/csrc/test_grpc_fuzz.cc,
// tests/fuzz/fuzz_grpc.cc).
// It decides nothing about the model: validation is the codec's. The cursor is
// protobuf_wire.h's.
//
// Pure functions over caller-owned bytes; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace naiad::grpc {

// One entry of a map<string, InferParameter>.
struct Parameter {
  enum class Kind : uint8_t { kNone, kBool, kInt64, kString, kDouble, kUint64 };
  std::string_view key;
  Kind kind = Kind::kNone;
  bool bool_value = false;
  int64_t int64_value = 0;
  uint64_t uint64_value = 0;
  double double_value = 0;
  std::string_view string_value;
};

struct InferInputView {
  std::string_view name;
  std::string_view datatype;
  std::vector<int64_t> shape;
  std::vector<Parameter> parameters;
  // Typed contents (InferTensorContents): the bytes of each occurrence of the field, in
  // order (protobuf merges them), each well formed (grpc_contents.h converts them).
  std::vector<std::string_view> contents;
  bool has_contents() const { return !contents.empty(); }
};

struct RequestedOutputView {
  std::string_view name;
  std::vector<Parameter> parameters;
};

// A ModelInferRequest as views into its message bytes (which must outlive it).
struct InferRequestView {
  std::string_view model_name;
  std::string_view model_version;
  std::string_view id;
  std::vector<Parameter> parameters;
  std::vector<InferInputView> inputs;
  std::vector<RequestedOutputView> outputs;
  std::vector<std::string_view> raw_input_contents;
};

// Reads a ModelInferRequest. False (with `error` saying where) when the bytes are not a
// well-formed message of that type.
bool read_infer_request(std::string_view message, InferRequestView* out, std::string* error);

// One output of a response to write.
struct OutputToWrite {
  std::string_view name;
  std::string_view datatype;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  uint64_t size = 0;
};

struct ResponseToWrite {
  std::string_view model_name;
  std::string_view model_version;
  std::string_view id;
  std::vector<Parameter> parameters;  // the response's, written as its map (field 4)
  std::vector<OutputToWrite> outputs;
};

// ModelInferResponse bytes: size first, then write exactly that many at `out`, so the
// caller allocates the destination once and tensor bytes are copied once. `streamed`
// wraps it as ModelStreamInferResponse.infer_response (field 2).
size_t infer_response_size(const ResponseToWrite& response, bool streamed = false);
void write_infer_response(const ResponseToWrite& response, char* out, bool streamed = false);

// The same bytes as write_infer_response, as pieces to send one after the other, so a
// connection copies the tensors once, from the result block into its frames: the
// message's own bytes (tags, lengths, names, shapes) are written into `scratch`, and
// `parts` alternates views into `scratch` with views of each output's data. `parts`
// views `scratch` and the outputs' data: both must outlive its use.
void infer_response_parts(const ResponseToWrite& response, bool streamed, std::string* scratch,
                          std::vector<std::string_view>* parts);

}  // namespace naiad::grpc
