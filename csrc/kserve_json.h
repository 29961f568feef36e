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

#include "byte_sink.h"
#include "infer_types.h"

namespace naiad {

// Reads `body`: an inference header of `header_size` bytes, then the binary inputs.
// True: `out` describes the request (views into `body`), still to be validated.
// False: the request is not one the C++ reader takes (JSON tensor `data`, shared
// memory, classification, JSON outputs, parameters that are not scalars or whose
// `priority`/`timeout` are not non-negative integers, escaped names, malformed JSON or
// sizes): the Python
// general path parses it and answers with Triton's exact error when there is one.
bool read_infer_header(const uint8_t* body, size_t body_size, size_t header_size,
                       ParsedRequest* out);

// `text` as the inside of a JSON string, escaped as the general path's encoder
// (orjson) escapes it: \" \\ \b \f \n \r \t, other control bytes as \u00xx.
std::string json_string_text(std::string_view text);

// The response body: `{"id":..,"model_name":..,"model_version":..,"parameters":{..},
// "outputs":[..]}` followed by every output's bytes (binary_data_size), or
// `{"error":".."}`. write_response_body() returns the JSON part's size.
template <typename Sink>
size_t write_response_body(const InferResponse& response, Sink& sink);

extern template size_t write_response_body<ByteCounter>(const InferResponse&, ByteCounter&);
extern template size_t write_response_body<ByteWriter>(const InferResponse&, ByteWriter&);

}  // namespace naiad
