// The one definition of what crosses the shared arena between the frontend and the
// workers: the request block, the batch descriptor and the response block. C++ uses
// these structs directly; Python reads and writes them only through _core.pyx, which
// declares the same header. Every struct is plain, little-endian, fixed-size and
// 8-byte aligned, so both languages see the same bytes with no parsing.
//
// JSON appears only for the variable, human-shaped parts (names, datatypes, shapes,
// parameters); offsets, sizes, counts and flags are always fields of these structs.
#pragma once

#include <cstdint>

namespace naiad {

// Where blocks align their tensors (and where the arena aligns blocks).
constexpr uint64_t kTensorAlign = 64;

inline uint64_t align_tensor(uint64_t value) {
  return (value + kTensorAlign - 1) & ~(kTensorAlign - 1);
}

// ---- Request block: one per queued request, written by Core::submit ----------------
//
//   RequestHeader | InputSlot[n_inputs] | metadata (metadata_size bytes)
//
// The metadata is the request as the worker sees it, JSON:
//   {"id": str, "inputs": [[name, datatype, shape], ...],
//    "outputs": [name, ...] | null, "parameters": {...}}
// with one InputSlot per metadata input, in the same order. A slot names the input's
// bytes anywhere in the arena: in the request's own block, in a staging slab, or in
// the batch tensor of the batch the request runs in (batch_assembler.h).
constexpr uint32_t kRequestMagic = 0x31515249;  // "IRQ1"

// Trace mode opentelemetry: the W3C trace context of a traced request's model span
// (Triton's: what its model gets as request.trace().get_context(), trace_context.h).
// All zero for a request not traced in that mode.
struct SpanContext {
  uint64_t trace_id_high;  // the 128-bit trace id, big half first
  uint64_t trace_id_low;
  uint64_t span_id;      // 0: no context
  uint64_t trace_flags;  // W3C trace-flags: bit 0, sampled
};

struct RequestHeader {
  uint32_t magic;
  uint32_t n_inputs;
  uint32_t metadata_size;
  uint32_t batch_size;   // rows the request adds to a batch (its inputs' first dim)
  uint64_t input_order;  // which config inputs, in order (core.h input_order_key)
  // Set at dispatch by a sequence batcher (sequence_batch_scheduler.h), else 0: bit 63
  // set, bits 0-31 the sequence's slot on its instance, bit 32 START, bit 33 END.
  uint64_t sequence;
  // kRequestCancelled: set by Core::cancel while the request runs, read by the worker
  // (request.is_cancelled()); accessed atomically only (request_cancelled below).
  uint64_t flags;
  // Set by the core when it traces the request in mode opentelemetry (core.h
  // Core::set_span_ids), before the request is queued; read by the worker with the
  // batch (_core.pyx WorkerEndpoint.trace_contexts).
  SpanContext span;
};

constexpr uint64_t kRequestCancelled = 1;

// The request's flags word, read and written atomically: the core sets it while the
// worker may read it, from another process.
inline void mark_request_cancelled(RequestHeader* header) {
  __atomic_fetch_or(&header->flags, kRequestCancelled, __ATOMIC_RELEASE);
}
inline bool request_cancelled(const RequestHeader* header) {
  return (__atomic_load_n(&header->flags, __ATOMIC_ACQUIRE) & kRequestCancelled) != 0;
}

struct InputSlot {
  uint64_t offset;  // arena offset of the input's bytes (or of the rows kept for them)
  uint64_t size;    // bytes (wire layout: raw little-endian, BYTES length-prefixed)
  // 0: the bytes are at `offset`. Else the id of the client's system-shm region that
  // holds them, at `region_offset` of it (shm_registry.h, bounds checked at submit):
  // the core copies them into the rows at `offset` only when the request shares its
  // batch (batch_assembler.h); a request that runs alone is read there in place by
  // the worker, which maps the region (pysrc/naiad/worker/shm_outputs.py).
  uint64_t region;
  uint64_t region_offset;
};

inline uint64_t request_metadata_offset(uint32_t n_inputs) {
  return sizeof(RequestHeader) + uint64_t{n_inputs} * sizeof(InputSlot);
}

static_assert(sizeof(SpanContext) == 32, "SpanContext layout");
static_assert(sizeof(RequestHeader) == 72, "RequestHeader layout");
static_assert(sizeof(InputSlot) == 32, "InputSlot layout");

// ---- Batch descriptor: one per dispatched batch, at BatchMessage::desc_offset -------
//
//   BatchHeader | BatchRequest[n_requests] | BatchTensor[n_tensors] | gathered tensors
//
// When every request of the batch has the same inputs in the same order, input i of
// the whole batch is ONE contiguous tensor of `rows` rows (batch-major, [N, ...]) and
// BatchTensor i says where; the requests' own InputSlots then point inside it, row
// after row in batch order, so per-request views and the batch view share the bytes.
// n_tensors is 0 when the requests' inputs differ (optional inputs, another order):
// the worker then reads each request's slots only. Tensors the core had to gather
// (batch_assembler.h) live in the descriptor's own block, after the arrays.
struct BatchHeader {
  uint32_t n_requests;
  uint32_t n_tensors;
  uint32_t rows;      // sum of the requests' batch_size
  uint32_t gathered;  // 1: the tensors were copied together at dispatch (second copy)
};

struct BatchRequest {
  uint64_t request_id;
  uint64_t block_offset;  // the request block (RequestHeader) in the arena
  uint32_t batch_size;
  uint32_t first_row;  // where its rows start in the batch tensors
};

struct BatchTensor {
  uint64_t offset;  // arena offset of the [rows, ...] tensor
  uint64_t size;    // bytes
  // As InputSlot: a one-request batch's input still in its client region (its slot's).
  uint64_t region;
  uint64_t region_offset;
};

inline uint64_t batch_requests_offset() { return sizeof(BatchHeader); }
inline uint64_t batch_tensors_offset(uint32_t n_requests) {
  return sizeof(BatchHeader) + uint64_t{n_requests} * sizeof(BatchRequest);
}

static_assert(sizeof(BatchHeader) == 16, "BatchHeader layout");

// ---- Response block: responses a worker posts for requests of a batch ---------------
//
//   ResponseHeader | ResponseRecord[n_responses] | OutputSlot[n_outputs]
//   | each response's JSON | the output tensors, each 64-byte aligned
//
// A request gets 0..N responses, the last one flagged kResponseFinal; one block may
// carry responses for several requests (the 1:1 case: one final response for every
// request of the batch, in one block). A response's JSON holds only what varies in
// shape: {"outputs": [[name, datatype, shape], ...], "error": message,
// "parameters": {...}} (each member optional); its output sizes and offsets are
// OutputSlots and its error code a field. Offsets are from the block's start, so a
// block can be read (or copied) as a whole.
constexpr uint32_t kResponseMagic = 0x31505352;  // "RSP1"
constexpr uint32_t kResponseFinal = 1;           // the request's last response
constexpr uint32_t kResponseError = 2;           // the request failed: "error" in JSON
// With kResponseError: the model itself answered with this error (a Python model's
// InferenceResponse(error=...)), not a failure to run it. Triton 2.51's Python backend
// counts such a request a success in the statistics (probed: success, queue and
// compute counted, no failure), as response_counts_as_failure says.
constexpr uint32_t kResponseModelError = 4;

// The one rule for the statistics of a request's final response: a failure, or a
// success (kResponseModelError: an error response the model sent counts as one).
inline bool response_counts_as_failure(uint32_t flags) {
  return (flags & kResponseError) != 0 && (flags & kResponseModelError) == 0;
}

// ResponseHeader.flags: the model wrote the outputs' bytes into the block itself
// (response_block.h, output-major), none was copied in.
constexpr uint32_t kResponseOutputsInPlace = 1;
// ResponseHeader.flags: the block answers requests that started apart (the core's
// answer to several ensemble requests at once) and ends with one uint64 per response,
// in record order: when that response's request started (monotonic ns), what its queue
// time counts up to instead of the completion's dispatch time. Only the core writes it.
constexpr uint32_t kResponseStartedEach = 2;

struct ResponseHeader {
  uint32_t magic;
  uint32_t n_responses;
  uint32_t n_outputs;
  uint32_t flags;  // kResponseOutputsInPlace | kResponseStartedEach
  // Worker-side timings of the batch (ns): start, compute_input, compute_infer,
  // compute_output.
  uint64_t timings[4];
};

struct ResponseRecord {
  uint32_t request_index;  // the request's position in its batch (BatchRequest order)
  uint32_t flags;          // kResponseFinal | kResponseError | kResponseModelError
  int32_t error_code;      // pb_utils.TritonError code, with kResponseError
  uint32_t n_outputs;      // its outputs: OutputSlot[first_output, first_output + n)
  uint32_t first_output;
  uint32_t json_size;
  uint64_t json_offset;  // from the block start
};

struct OutputSlot {
  uint64_t offset;  // from the block start
  uint64_t size;    // bytes, wire layout
};

inline uint64_t response_records_offset() { return sizeof(ResponseHeader); }
inline uint64_t response_outputs_offset(uint32_t n_responses) {
  return sizeof(ResponseHeader) + uint64_t{n_responses} * sizeof(ResponseRecord);
}

static_assert(sizeof(ResponseHeader) == 48, "ResponseHeader layout");
static_assert(sizeof(ResponseRecord) == 32, "ResponseRecord layout");
static_assert(sizeof(OutputSlot) == 16, "OutputSlot layout");
static_assert(sizeof(BatchRequest) == 24, "BatchRequest layout");
static_assert(sizeof(BatchTensor) == 32, "BatchTensor layout");

// ---------------------------------------------------------------------------
// Control block: a worker's model-control request (channel.h SubmitKind::kControl:
// pb_utils.load_model / unload_model), written by the worker, read and freed by the
// frontend (Core::take_control):
//   ControlHeader · uint64_t file_size[n_files] · the request's JSON
//   {"op": "load" | "unload", "name", "config", "files": [path, ...],
//    "unload_dependents", "caller", "model", "initializing"} (json_size bytes) · each
//   file's bytes, in the order of "files".
constexpr uint32_t kControlMagic = 0x314c5443;  // "CTL1"

struct ControlHeader {
  uint32_t magic;
  uint32_t n_files;
  uint64_t json_size;
};

inline uint64_t control_json_offset(uint32_t n_files) {
  return sizeof(ControlHeader) + uint64_t{n_files} * sizeof(uint64_t);
}

static_assert(sizeof(ControlHeader) == 16, "ControlHeader layout");

}  // namespace naiad
