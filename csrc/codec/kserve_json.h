// KServe v2 REST's JSON, with Triton's binary tensor data extension: the inference
// header a client sends (JSON, then the inputs' bytes) and the response JSON the
// server sends back (JSON, then the outputs' bytes). Knows nothing of HTTP: the HTTP
// framer (http_framer.h) puts its head around these bodies.
//
// Pure functions over caller-owned bytes: any thread may call them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "codec/infer_types.h"
#include "codec/json_reader.h"
#include "util/byte_sink.h"

namespace naiad {

// A request the reader refuses as Triton 2.51 refuses it while reading its JSON: the
// error's kind (kNone: not refused) and Triton's message (plain text).
struct Refusal {
  ErrorKind kind = ErrorKind::kNone;
  std::string message;
};

// Reads `body`: an inference header of `header_size` bytes (the whole body for a JSON
// request), then the binary inputs. Inputs may carry JSON `data` (read_tensor_data:
// converted into out->converted) and outputs may ask for JSON data back.
// True: `out` describes the request (views into `body`, out->converted and
// out->unescaped), still to be validated. False with `refusal` set: Triton refuses the
// request with that error (JSON `data` it does not take, an input with both or neither
// of `data` and `binary_data_size`, a custom parameter that is null, an object or an
// array). False otherwise: the request is not one the C++ reader takes (a
// classification that is no unsigned integer or with a shm region, `priority`/`timeout`
// that are not non-negative integers, a name or id holding a NUL, members of the wrong
// JSON type, malformed JSON or sizes): the Python general path parses it.
// Outputs to classify are in out->output_classes.
bool read_infer_header(const uint8_t* body, size_t body_size, size_t header_size,
                       ParsedRequest* out, Refusal* refusal = nullptr);
// The same, with the header and the binary inputs after it apart: `header_size` bytes of
// JSON at `header`, `binary_size` bytes of inputs at `binary` (views into both).
bool read_infer_header(const uint8_t* header, size_t header_size, const uint8_t* binary,
                       size_t binary_size, ParsedRequest* out, Refusal* refusal = nullptr);

// What read_tensor_data made of an input's JSON `data`.
enum class DataRead : uint8_t {
  kConverted,  // appended to `out`
  kRefused,    // Triton refuses it: `refusal` says how
  kNotRead,    // beyond this reader (a number past a double, bad JSON): the general path's
};

// An input's JSON `data` (`data` at its value, which the caller has skipped whole as
// valid JSON: read_input does) as `count` elements of `datatype` in
// wire layout, appended to `out`, as Triton 2.51 reads it: nested arrays of any depths
// flattened; BOOL from true/false; integers written without fraction or exponent that
// fit int64 (signed types) or uint64 (unsigned), cut to the type's size; FP32/FP64 from
// any number read as a double; BYTES from strings (u32 length + UTF-8; their count is
// the validator's). A tensor of no elements (other than BYTES) reads nothing, as Triton.
// Refused with Triton's kind and message, in Triton's order: data
// that is no array, FP16/BF16 or an unknown datatype (naming input `name`), the first
// element of the wrong kind, more or fewer elements than `count`. `out` may hold
// partial bytes unless converted.
DataRead read_tensor_data(JsonReader data, std::string_view datatype, std::string_view name,
                          uint64_t count, std::vector<uint8_t>* out, Refusal* refusal);

// The same over `json`, the whole text of one `data` value (kNotRead unless it is one
// JSON value): the general path's reading of a request the lane left to it.
DataRead read_tensor_data_text(std::string_view json, std::string_view datatype,
                               std::string_view name, uint64_t count, std::vector<uint8_t>* out,
                               Refusal* refusal);

// Why an output asked for as JSON data cannot be written so, as the general path says
// it (`kind` set), or empty (`kind` kNone): FP16/BF16, unknown datatypes, a size that
// is not a whole number of elements.
std::string_view json_output_error(const ResponseOutput& output, ErrorKind* kind);

// `text` as the inside of a JSON string, escaped as the general path's encoder
// (orjson) escapes it: \" \\ \b \f \n \r \t, other control bytes as \u00xx.
std::string json_string_text(std::string_view text);
// Whether json_string_text(text) differs from `text`.
bool needs_json_escape(std::string_view text);

// The response body: `{"id":..,"model_name":..,"model_version":..,"parameters":{..},
// "outputs":[..]}` followed by the bytes of every binary output (binary_data_size;
// JSON outputs carry `data`, numbers in shortest round-trip form), or `{"error":".."}`.
// write_response_body() returns the JSON part's size.
template <typename Sink>
size_t write_response_body(const InferResponse& response, Sink& sink);

extern template size_t write_response_body<ByteCounter>(const InferResponse&, ByteCounter&);
extern template size_t write_response_body<ByteWriter>(const InferResponse&, ByteWriter&);
extern template size_t write_response_body<StringSink>(const InferResponse&, StringSink&);
// The JSON part alone, for a writer that sends the binary outputs from the block.
size_t write_response_json(const InferResponse& response, ByteWriter& sink);

}  // namespace naiad
