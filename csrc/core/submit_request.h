// What a caller hands Core::submit: the request's metadata for the worker and where
// each input's bytes are (typed sources), with its scheduling options.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/input_regions.h"

namespace naiad {

// Where one input's bytes are. The core lays the request out itself (ipc_schema.h).
struct InputSource {
  InputKind kind = InputKind::kInline;
  const void* data = nullptr;  // kInline: valid for the duration of submit()
  uint64_t region = 0;         // kSystemShm / kCudaIpc: region id (input_regions.h)
  uint64_t offset = 0;         // within the region
  uint64_t size = 0;           // bytes
};

struct SubmitOptions {
  uint32_t batch_size = 1;
  uint32_t priority = 0;    // the request's `priority` parameter, 0 = default level
  uint64_t timeout_us = 0;  // the request's `timeout` parameter, 0 = none
  uint64_t shape_key = 0;   // requests with different keys never share a batch
  // Which config inputs the request's inputs are, in order (input_order_key): only
  // requests with equal keys have their inputs joined into batch tensors.
  uint64_t input_order = 0;
  // Sequence batching: the `sequence_id` parameter, a number or (`sequence_key` not
  // empty) a string, valid during submit(); `sequence_start` / `sequence_end` as
  // kSequenceFlagStart / kSequenceFlagEnd.
  uint64_t sequence_id = 0;
  std::string_view sequence_key;
  uint32_t sequence_flags = 0;
  // Trace extension: the request was sampled for tracing; the core keeps when it began
  // and when it was queued for Core::take_trace_stamps (tracing off: always false).
  bool traced = false;
  // Trace level TENSORS: the child traces of a traced request (ensemble steps, BLS calls
  // made with trace=) keep their input and output tensors (ChildTrace::tensors).
  bool trace_tensors = false;
  // Trace mode opentelemetry (Core::set_span_ids): the trace a traced request's spans
  // join, the client's `traceparent` trace id and trace-flags; 0: a trace of its own.
  uint64_t trace_id_high = 0;
  uint64_t trace_id_low = 0;
  uint64_t trace_flags = 0;
};

constexpr uint32_t kSequenceFlagStart = 1;  // Triton's TRITONSERVER_REQUEST_FLAG_SEQUENCE_*
constexpr uint32_t kSequenceFlagEnd = 2;

// The input_order of a request whose inputs are the model's config inputs
// `indices[0..n)`, in that order. _core.input_order_key computes the same.
inline uint64_t input_order_key(const uint32_t* indices, size_t n) {
  uint64_t key = 0;
  for (size_t i = 0; i < n; ++i) key = key * 1000003ULL + indices[i] + 1;
  return key;
}

struct SubmitRequest {
  uint64_t request_id = 0;
  std::string_view metadata;        // the worker's view of the request (ipc_schema.h)
  std::vector<InputSource> inputs;  // one per metadata input, same order
  SubmitOptions options;            // batch_size, priority, timeout_us, shape_key
};

// A model in the core's registry: its slot, and the generation that tells it apart
// from later models in the same slot, so a handle kept past remove_model() fails
// cleanly instead of reaching another model. `value` packs both (generation << 32 |
// slot) for Python, the fast lane's tables and the workers' submits; 0 is never a
// model.
struct ModelHandle {
  uint64_t value = 0;

  static ModelHandle of(uint32_t slot, uint32_t generation) {
    return ModelHandle{static_cast<uint64_t>(generation) << 32 | slot};
  }
  uint32_t slot() const { return static_cast<uint32_t>(value); }
  uint32_t generation() const { return static_cast<uint32_t>(value >> 32); }
};

// kModelGone: the handle's model was removed. kUnsupportedInput: an input's source
// cannot be read (a region kind with no registry, an unknown region, a range outside
// it). Either way nothing was queued. _core.pyx mirrors these values (SUBMIT_*).
enum class SubmitResult {
  kOk = 0,
  kArenaFull = 1,
  kQueueFull = 2,
  kModelGone = 3,
  kUnsupportedInput = 4,
  kSequenceBatchSize = 5,   // EnqueueResult::kSequenceBatchSize
  kNoSequenceId = 6,        // EnqueueResult::kNoSequenceId
  kSequenceNotStarted = 7,  // EnqueueResult::kSequenceNotStarted
};

}  // namespace naiad
