// The one request validator: a request against its model's config, with Triton's
// checks, in Triton's order (InferenceRequest::Normalize), with Triton's messages.
// Every entry point uses it: the KServe codec for what a framer parsed in C++, and the
// Python general path (through _core.pyx) for what only Python parses today (JSON
// tensor data). The order, so the first error a client sees is Triton's:
//
// 1. duplicate input names
// 2. unknown requested output names
// 3. unknown input names
// 4. input count (missing required inputs; `optional: true` inputs may be absent)
// 5. batch dimension (batching models): present, equal across inputs, <= max_batch_size
// 6. per input: datatype, shape against dims (-1 is a wildcard), data byte size
//    (BYTES: element count)
//
// Pure functions: any thread may call them; nothing is shared.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "codec/infer_types.h"

namespace naiad {

// Checks `request` against `model`. True: valid, and the request's `spec` indices,
// `outputs`, `batch_size` (the first dim for a batching model, 1 otherwise; 0 for a
// zero batch) and `shape_key` are set. False: `error` holds Triton's message (an
// invalid-argument error, HTTP 400).
bool validate_request(const ModelSpec& model, ParsedRequest* request, std::string* error);

// A BYTES tensor's elements (u32 length, bytes, ...) checked against the count its
// `shape` gives, with Triton's messages: the check validate_request makes, for the bytes
// of an input a worker copied from a client's CUDA region (RequestInput::on_device).
// `batching`: the model batches (a zero first dim is then not counted, as Triton).
bool check_bytes_input(std::string_view model_name, std::string_view request_id,
                       std::string_view input_name, const int64_t* shape, size_t rank,
                       bool batching, const uint8_t* data, uint64_t size, std::string* error);

// The elements of a BYTES tensor (u32 length, bytes, ...), or -1 when malformed.
int64_t count_bytes_elements(const uint8_t* data, uint64_t size);

// Triton's LogRequest() prefix: "[request id: <id>] ", "<id_unknown>" when empty.
std::string log_prefix(std::string_view request_id);

// FNV-1a over (config index, rank, dims) of shape-keyed inputs, in config order:
// requests with different keys never share a batch.
class ShapeKey {
 public:
  void add(uint32_t index, const int64_t* dims, size_t rank);
  uint64_t value() const { return hash_; }

 private:
  void mix(uint64_t word);
  uint64_t hash_ = 1469598103934665603ULL;
};

}  // namespace naiad
