// The core's side of the trace extension: the stamps of each traced request and the
// child traces Triton 2.51 writes for the steps of a traced ensemble request and the
// BLS calls made with trace=request.trace(), kept as trees by their root.
//
// Owned by Core. Every method but new_span runs with Core::mutex_ held, on whichever
// thread is inside the Core call (an I/O loop, the frontend, the timer thread);
// new_span draws ids without a lock, before submit takes it. With tracing off the
// tables stay empty and the core asks only any().
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "codec/trace_tensor.h"
#include "core/trace_context.h"
#include "ipc/arena.h"
#include "ipc/response_block.h"

namespace naiad {

// When a traced request (SubmitOptions::traced) began its submit and entered its
// model's queue (monotonic ns), the trace file's REQUEST_START and QUEUE_START.
// In mode opentelemetry (Core::set_span_ids) also the ids its model span is exported
// under, the context its model was given (trace_context.h).
struct TraceStamps {
  uint64_t request_start_ns = 0;
  uint64_t queue_start_ns = 0;
  SpanContext span{};
};

// A child trace, as Triton 2.51 writes one for each step of a traced ensemble request
// and each BLS call made with trace=request.trace() (a trace of its own whose
// parent_id is the trace of the request that made it). Kept by the core, which sees
// the child start, queue and finish; read by the frontend with its root's trace.
struct ChildTrace {
  uint64_t request_id = 0;  // the core's id of the child request (a step's, a BLS call's)
  uint64_t parent = 0;      // the core's id of the request it is a child of
  uint64_t model = 0;       // the child's model (a ModelHandle value)
  std::string id;           // its request id, JSON string text (escapes kept)
  uint64_t request_start_ns = 0;
  uint64_t queue_start_ns = 0;
  uint64_t timings[4] = {0, 0, 0, 0};  // its batch's worker timings; 0s for an ensemble
  uint64_t request_end_ns = 0;
  // At trace level TENSORS (its root's SubmitOptions::trace_tensors): its inputs as
  // queued (TENSOR_QUEUE_INPUT) and its responses' outputs (TENSOR_BACKEND_OUTPUT).
  TensorRecords tensors;
  // In mode opentelemetry: its model span's ids (its root's trace), as its model got them.
  SpanContext span{};
};

class TraceTable {
 public:
  explicit TraceTable(Arena& arena) : arena_(arena) {}

  // Trace mode opentelemetry: each traced request and child trace gets its model
  // span's ids. Set once, before serving; read without a lock.
  void set_span_ids(bool on) { span_ids_.store(on, std::memory_order_relaxed); }
  bool span_ids() const { return span_ids_.load(std::memory_order_relaxed); }
  // A model span's ids in trace (high, low); no lock.
  SpanContext new_span(uint64_t trace_id_high, uint64_t trace_id_low, uint8_t trace_flags) {
    return new_span_context(span_id_source_, trace_id_high, trace_id_low, trace_flags);
  }

  // --- with Core::mutex_ held ---
  // Requests traced and still running (roots and children): false with tracing off.
  bool any() const { return !nodes_.empty(); }
  bool tracks(uint64_t request_id) const { return nodes_.count(request_id) != 0; }
  // A client's traced request was queued: its stamps, and the root of its tree.
  void start_root(uint64_t request_id, const TraceStamps& stamps, bool tensors);
  // The stamps of `request_id`, forgotten once read; false when it has none.
  bool take_stamps(uint64_t request_id, TraceStamps* stamps);
  // The finished children of `root`, in the order they finished; the root is
  // forgotten (children still running then are dropped when they end).
  std::vector<ChildTrace> take_children(uint64_t root);
  // A child of traced request `parent` starts (nothing when the parent is not traced,
  // or its root was read already). `block`: the child's request block (arena offset),
  // given its span and read for its inputs when the tree keeps tensors.
  void start_child(uint64_t parent, uint64_t request_id, uint64_t model, std::string_view metadata,
                   uint64_t request_start_ns, uint64_t queue_start_ns, uint64_t block);
  // Whether `request_id` is a child whose tree keeps tensors.
  bool child_keeps_tensors(uint64_t request_id) const;
  // A response of child `request_id`: its outputs kept.
  void child_outputs(uint64_t request_id, const ResponseEntry& response);
  // Child `request_id` ends at `now_ns` (`timings`: its batch's, or null); a root is
  // left to take_children.
  void end_child(uint64_t request_id, const uint64_t* timings, uint64_t now_ns);

 private:
  struct Node {
    uint64_t root = 0;     // a root's is its own id
    bool tensors = false;  // the tree keeps tensors (the root's trace_tensors)
    ChildTrace trace;
  };
  Arena& arena_;
  std::atomic<bool> span_ids_{false};
  SpanIdSource span_id_source_;                       // lock-free
  std::unordered_map<uint64_t, TraceStamps> stamps_;  // traced requests, by request id
  // Traced requests and their children still running, by request id; and the children
  // finished, by their root.
  std::unordered_map<uint64_t, Node> nodes_;
  std::unordered_map<uint64_t, std::vector<ChildTrace>> done_;
};

}  // namespace naiad
