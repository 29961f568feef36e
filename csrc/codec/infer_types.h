// The protocol-neutral shapes of an inference request and its response, as the KServe
// codec (kserve_codec.h), the validator (request_validator.h) and every framer
// (framer.h: HTTP/1.1, gRPC over HTTP/2) exchange them. Nothing here knows a
// wire format: a framer's reader fills a ParsedRequest from its bytes, the codec
// answers with an InferResponse that the framer serializes.
#pragma once

#include <cstdint>
#include <deque>
#include <forward_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/submit_request.h"  // ModelHandle

namespace naiad {

struct Classification;  // classification.h

// One input of a model as its config declares it.
struct InputSpec {
  std::string name;
  std::string name_json;      // the same, escaped for a JSON string (the worker's block)
  std::string datatype;       // wire name: "FP32", "BYTES", ...
  std::vector<int64_t> dims;  // without the batch dim, -1 for any size
  uint32_t element_size = 0;  // bytes per element, 0 for BYTES
  bool optional = false;
  bool shape_tensor = false;  // is_shape_tensor: no batch dim even when batching
  // Variable dims and not ragged: requests of different shapes never share a batch.
  bool shape_keyed = false;
};

// What the codec and the validator know of one model version.
struct ModelSpec {
  ModelHandle core_model_id;  // the core's handle: stale once the core removed the model
  std::string name;           // as the config names it, for error messages
  std::string name_json;      // the same, escaped for a JSON string
  std::string version;        // "1"
  int64_t max_batch_size = 0;
  std::vector<InputSpec> inputs;
  std::vector<std::string> outputs;
  std::vector<std::string> outputs_json;  // the same, escaped for a JSON string
  // Each output's label lines (its label_filename), for classification; may be shorter.
  std::vector<std::vector<std::string>> output_labels;
  // response_cache { enable: true } with the server's cache on (response_cache.h).
  bool response_cache = false;
};

// One input of a request, as a framer's reader found it. Views point into the
// received bytes, which outlive the request's submit.
struct RequestInput {
  std::string_view name;
  std::string_view datatype;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // the tensor in wire layout (BYTES: u32 length, bytes, ...)
  uint64_t size = 0;
  uint32_t spec = 0;  // index into ModelSpec::inputs; set by validate_request()
  // Triton's shm extension: the tensor is `size` bytes at `shm_offset` of the client's
  // region `shm_region` (a reader sets these; the codec resolves them into `data`).
  bool in_shm = false;
  std::string_view shm_region;
  uint64_t shm_offset = 0;
  // The bytes are in a client's CUDA region (`data` null, `size` set): as Triton 2.51,
  // a BYTES tensor's elements are then checked where its bytes reach the host (the
  // worker, after its device-to-host copy: check_bytes_input), not here.
  bool on_device = false;
};

// A requested output the client placed in one of its shm regions.
struct OutputRegion {
  size_t output = 0;  // index into ParsedRequest::output_names
  std::string_view region;
  uint64_t offset = 0;
  uint64_t size = 0;
};

// A request as any framer hands it to the validator and the codec.
struct ParsedRequest {
  std::string_view id;               // the client's id, unescaped
  std::vector<RequestInput> inputs;  // in request order
  // Requested outputs by name; none listed asks for every output.
  std::vector<std::string_view> output_names;
  std::string_view parameters;  // the raw request parameters (a JSON object), or empty
  uint32_t priority = 0;        // the `priority` parameter, 0: the model's default
  uint64_t timeout_us = 0;      // the `timeout` parameter, 0: none
  // Requested outputs in client shm regions (a reader sets these).
  std::vector<OutputRegion> output_shm;
  // Where the worker writes them: the request block's `regions` JSON
  // (pysrc/naiad/worker/shm_outputs.py), or empty when none.
  std::string_view output_regions;
  // Trace mode opentelemetry: the client's W3C tracestate as a JSON string literal
  // (quotes and escapes included), or empty. The block carries it (`tracestate`) so
  // that the model's trace context has it, as Triton gives it (trace_context.h).
  std::string_view trace_state;
  // Sequence batching: `sequence_id` (a number, or a string in `sequence_key`) and
  // `sequence_start` / `sequence_end` as submit_request.h's kSequenceFlag* bits.
  uint64_t sequence_id = 0;
  std::string_view sequence_key;
  uint32_t sequence_flags = 0;
  // JSON outputs (KServe REST): output_json[i] says output_names[i] goes back as JSON
  // `data` rather than binary; json_unlisted says so of every output when none is
  // listed. Framers without JSON data (gRPC) leave them empty / false.
  std::vector<uint8_t> output_json;
  bool json_unlisted = false;
  // Triton's classification extension (classification.h): output_classes[i] is how many
  // classes output_names[i] comes back as (0: its tensor). Empty: none classified.
  std::vector<uint64_t> output_classes;
  // Wire bytes the reader made from JSON `data`: inputs' `data` may point into it (a
  // vector, whose bytes stay put when the request is moved; do not copy one).
  std::vector<uint8_t> converted;
  // The unescaped text of strings the client wrote with JSON escapes (names, ids,
  // regions), which the views above then point into (a list: its strings stay put when
  // the request is moved; do not copy one).
  std::forward_list<std::string> unescaped;

  // Set by validate_request():
  std::vector<uint32_t> outputs;  // output_names as indices into ModelSpec::outputs
  uint32_t batch_size = 1;
  uint64_t shape_key = 0;
};

// Why a request failed, as Triton's TRITONSERVER_Error_Code kinds. Each framer maps
// a kind to its own status (HTTP status, gRPC code); http_status_of() is the HTTP one.
enum class ErrorKind : uint8_t {
  kNone = 0,
  kUnknown = 1,
  kInternal = 2,
  kNotFound = 3,
  kInvalidArgument = 4,
  kUnavailable = 5,
  kUnsupported = 6,
  kAlreadyExists = 7,
};

// Triton's HTTP status for an error of `kind`.
int http_status_of(ErrorKind kind);

// One output of a response. Text fields are raw JSON string text as the worker wrote
// it (escapes kept): a JSON framer copies them, others unescape them.
struct ResponseOutput {
  std::string_view name;
  std::string_view datatype;
  std::string_view shape;         // the dims as a JSON array text: "[1,16]"
  const uint8_t* data = nullptr;  // the tensor in wire layout, in the result block
  uint64_t size = 0;
  bool json = false;    // goes back as JSON `data` (KServe REST), not as binary
  bool in_shm = false;  // written into the client's shm region: metadata only, no data
};

// A response, protocol-neutral: what a framer serializes. Views point into the result
// block and the codec's model table; both outlive the framer's write.
struct InferResponse {
  uint64_t request_id = 0;  // the core's id
  ErrorKind error = ErrorKind::kNone;
  std::string_view error_message;  // raw JSON string text
  // Holds a message built at answer time that error_message views (on the heap, so a
  // moved response keeps it valid); null for messages with longer-lived storage.
  std::shared_ptr<const std::string> owned_error_message;
  // The error came while the response was written (an output of a datatype that has no
  // order, to classify): Triton's HTTP frontend sends it as text/plain.
  bool error_in_writing = false;
  std::string id;               // the client's id, plain text, "" when none
  std::string_view model_name;  // JSON-escaped (ModelSpec::name_json)
  std::string_view model_version;
  std::string_view parameters;          // the response parameters, a raw JSON object, or empty
  std::vector<ResponseOutput> outputs;  // those the client asked for, in result order
  // The BYTES tensors of classified outputs, which `outputs` then views (on the heap, so
  // a moved or copied response keeps them valid).
  std::shared_ptr<const std::deque<Classification>> classified;
};

// The bytes of a response's tensors that travel as raw bytes (binary outputs: not JSON
// data, not in a client's shm region); 0 for an error.
inline uint64_t raw_output_bytes(const InferResponse& response) {
  if (response.error != ErrorKind::kNone) return 0;
  uint64_t bytes = 0;
  for (const ResponseOutput& output : response.outputs) {
    if (!output.json && !output.in_shm) bytes += output.size;
  }
  return bytes;
}

}  // namespace naiad
