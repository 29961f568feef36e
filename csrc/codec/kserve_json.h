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

// Reads `body`: an inference header of `header_size` bytes (the whole body for a JSON
// request), then the binary inputs. Inputs may carry JSON `data` (read_tensor_data:
// converted into out->converted) and outputs may ask for JSON data back.
// True: `out` describes the request (views into `body` and out->converted), still to
// be validated. False: the request is not one the C++ reader takes (shared memory,
// classification, JSON data it does not convert exactly as the general path,
// parameters that are not scalars or whose `priority`/`timeout` are not non-negative
// integers, escaped names, malformed JSON or sizes): the Python general path parses it
// and answers with Triton's exact error when there is one.
bool read_infer_header(const uint8_t* body, size_t body_size, size_t header_size,
                       ParsedRequest* out);
// The same, with the header and the binary inputs after it apart: `header_size` bytes of
// JSON at `header`, `binary_size` bytes of inputs at `binary` (views into both).
bool read_infer_header(const uint8_t* header, size_t header_size, const uint8_t* binary,
                       size_t binary_size, ParsedRequest* out);

// An input's JSON `data` (`reader` at its value) as `count` elements of `datatype` in
// wire layout, appended to `out`: flat or nested arrays (flattened as the general path
// does), numbers for the numeric types, true/false for BOOL, strings for BYTES (u32
// length + UTF-8). False whenever the general path would refuse the data or convert it
// differently (FP16/BF16, a wrong count, out-of-range values numpy would wrap, mixed
// kinds): it then answers with its own message. `out` may hold partial bytes then.
bool read_tensor_data(JsonReader data, std::string_view datatype, uint64_t count,
                      std::vector<uint8_t>* out);

// Why an output asked for as JSON data cannot be written so, as the general path says
// it (`kind` set), or empty (`kind` kNone): FP16/BF16, unknown datatypes, a size that
// is not a whole number of elements.
std::string_view json_output_error(const ResponseOutput& output, ErrorKind* kind);

// `text` as the inside of a JSON string, escaped as the general path's encoder
// (orjson) escapes it: \" \\ \b \f \n \r \t, other control bytes as \u00xx.
std::string json_string_text(std::string_view text);

// The response body: `{"id":..,"model_name":..,"model_version":..,"parameters":{..},
// "outputs":[..]}` followed by the bytes of every binary output (binary_data_size;
// JSON outputs carry `data`, numbers in shortest round-trip form), or `{"error":".."}`.
// write_response_body() returns the JSON part's size.
template <typename Sink>
size_t write_response_body(const InferResponse& response, Sink& sink);

extern template size_t write_response_body<ByteCounter>(const InferResponse&, ByteCounter&);
extern template size_t write_response_body<ByteWriter>(const InferResponse&, ByteWriter&);
extern template size_t write_response_body<StringSink>(const InferResponse&, StringSink&);

}  // namespace naiad
