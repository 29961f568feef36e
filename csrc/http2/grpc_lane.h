// The gRPC framer of the infer request path (framer.h): takes a ModelInferRequest
// message (grpc_infer_message.h), routes it by model name and version to a codec model,
// fills a ParsedRequest with views into the message (typed contents converted into
// ParsedRequest::converted, grpc_contents.h) and queues it through the KServe codec
// (kserve_codec.h), the same codec, validator and core as HTTP/1.1's. What Triton
// refuses before the validator (each input's data, request parameters) it refuses with
// Triton's message. GrpcResponseWriter serializes each answer as a ModelInferResponse.
// A model or version it does not serve it looks up in the control plane's table
// (model_lookup.h): unknown, not ready or no version at all is refused with Triton's
// status and message; a version served but not by the lane (a decoupled model...) is
// the Python general path's. Outputs asked to be classified are named in Taken, for
// the answer (classify_outputs); tensor parameters of other keys than shm's and
// classification are ignored, as Triton 2.51 ignores them. A message protobuf could not parse is
// refused as grpc++ refuses it, before Triton sees it. A compressed message is inflated
// before it comes here (grpc_inflate.h).
//
// Threads and locks: as KServeCodec, one thread at a time — the front end's event loop,
// through _core.pyx, with the GIL released inside submit(). The codec's model table
// (KServeCodec::models), shared with the HTTP lane, changes only between requests (loading,
// unloading, a model's state); no member needs a lock. The writer is stateless.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "codec/classification.h"
#include "codec/framer.h"
#include "codec/kserve_codec.h"
#include "codec/model_lookup.h"

namespace naiad {

// ModelInferResponse bytes for an answer of the codec (without gRPC's 5-byte prefix).
// JSON text of the result block (output names, datatypes, shapes) becomes protobuf
// fields. For an error answer it writes nothing: see grpc_error_message().
class GrpcResponseWriter final : public ResponseWriter {
 public:
  size_t size(const InferResponse& response) const override;
  void write(const InferResponse& response, char* out) const override;
  // As a ModelStreamInferResponse (the answer of one request on a ModelStreamInfer call).
  size_t stream_size(const InferResponse& response) const;
  void stream_write(const InferResponse& response, char* out) const;
  // The same bytes as pieces for GrpcConnection::send_message, the tensors as views into
  // the result block (grpc::infer_response_parts): a large answer is copied once, from
  // the block into the frames.
  void parts(const InferResponse& response, bool streamed, std::string* scratch,
             std::vector<std::string_view>* parts) const;
};

// The plain text of an error answer's message (the result block keeps JSON escapes).
std::string grpc_error_message(const InferResponse& response);

// The `id` of a serialized ModelInferRequest ("" when it has none or is not readable):
// what a ModelStreamInfer error answer carries.
std::string grpc_request_id(std::string_view message);

class GrpcLane {
 public:
  explicit GrpcLane(KServeCodec& codec) : codec_(codec) {}

  // Every version the control plane knows of `name` (ModelLookup::set_model): a ready
  // one with a codec model is the lane's, "" naming the latest ready version.
  void set_model(const std::string& name, std::vector<ModelVersionState> versions) {
    codec_.models().set_model(name, std::move(versions));
  }
  void clear_models() { codec_.models().clear(); }
  void remove_model(uint32_t model) { codec_.models().remove_lane_model(model); }

  struct Taken {
    uint32_t model = 0;
    uint64_t request_id = 0;  // 0 when refused at once (`error`)
    uint32_t batch_size = 0;
    std::string error;  // Triton's message for a request refused at once
    ErrorKind error_kind = ErrorKind::kInvalidArgument;
    // A response cache hit (request_id 0, `cached.entry` set): the answer to write.
    CachedAnswer cached;
    // Outputs to classify in the answer (classification.h), in request order.
    std::vector<ClassifiedOutput> classify;
  };
  // Takes a serialized ModelInferRequest: queued, or refused (`error`, `error_kind`)
  // with Triton's status and message for its model and version, its inputs' data or
  // parameters, or the validator's (INVALID_ARGUMENT); a message that is no
  // ModelInferRequest with grpc++'s (INTERNAL "Unable to parse request"). False: the
  // general path's (see above), as is a classification when the caller does not
  // classify answers (`classifies` false: Python's stream answers).
  bool submit(std::string_view message, uint64_t now_ns, Taken* taken, bool classifies = true);

  // `response` with the outputs `wanted` classified (classify_outputs, with lane model
  // `model`'s labels; the tensors in `kept`). False: `error` holds Triton's message.
  bool classify(uint32_t model, const std::vector<ClassifiedOutput>& wanted,
                InferResponse* response, std::deque<Classification>* kept,
                std::string* error) const {
    return classify_outputs(codec_.model(model), wanted, response, kept, error);
  }

 private:
  KServeCodec& codec_;
};

}  // namespace naiad
