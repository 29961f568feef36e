// The per-instance channel between the frontend's core and one worker process:
// a ring of batch messages going to the worker and a ring of completions coming
// back, both single-producer/single-consumer, living in the shared arena.
// Wake-ups go through eventfds and only when the other side said it is asleep,
// so a busy pipeline costs no system calls.
#pragma once

#include <atomic>
#include <cstdint>

namespace naiad {

// What the core sends a worker:
//   kBatch     a batch: `desc_offset` is its BatchHeader (ipc_schema.h), `n_requests`
//              requests; one batch at a time per instance.
//   kStop      finalize and exit after the batch running.
//   kResponse  a response to a request the worker submitted (BLS): `batch_id` is the
//              worker's tag for it, `desc_offset`/`size` a response block of one
//              response (request_index 0) that the worker frees once read.
//   kControlReply  the frontend's answer to the worker's control request `batch_id`
//              (tag; SubmitKind::kControl): `desc_offset`/`size` a block of JSON,
//              {} or {"error": message}, that the worker frees once read.
//   kRefused   the core could not queue the worker's request `batch_id` (tag):
//              `n_requests` is a SubmitResult, or kRefusedQueued | a CompletionStatus
//              (core.h's included) when it was queued but failed without a final
//              response.
enum class MessageKind : uint32_t {
  kBatch = 1,
  kStop = 2,
  kResponse = 3,
  kRefused = 4,
  kControlReply = 5,
};
constexpr uint32_t kRefusedQueued = 0x100;

struct BatchMessage {
  uint64_t batch_id;
  uint64_t desc_offset;
  uint32_t n_requests;
  MessageKind kind;
  uint64_t size;  // kResponse: the response block's bytes
};

// What a worker sends the core on to_core (BLS):
//   kSubmit  a request: the worker laid it out in the arena (ipc_schema.h request
//            block, inputs inside it) and names it by `tag`; its responses come back
//            as kResponse messages with that tag.
//   kCancel  cancels the worker's request `tag` (ResponseIterator.cancel()) as a
//            client's cancellation does (Core::cancel): dropped while queued, flagged
//            for request.is_cancelled() while it runs; only `tag` is read.
//   kControl  a model-control request (pb_utils.load_model, unload_model): the
//            worker wrote a control block (ipc_schema.h ControlHeader) of
//            `block_size` bytes at `block_offset`; the core hands it to the frontend
//            (a kCompletionControl completion), whose answer comes back as a
//            kControlReply message with this `tag` (Core::reply_control).
enum class SubmitKind : uint32_t { kSubmit = 0, kCancel = 1, kControl = 2 };

struct SubmitMessage {
  uint64_t tag;
  uint64_t block_offset;
  uint64_t model;  // the target's ModelHandle value (stale: refused as kModelGone)
  uint32_t priority;
  uint32_t sequence_flags;  // kSequenceFlagStart | kSequenceFlagEnd (submit_request.h)
  uint64_t timeout_us;
  uint64_t shape_key;
  // The correlation id: a number, or a string of `sequence_key_size` bytes at arena
  // offset `sequence_key_offset` (inside the request block, after its inputs).
  uint64_t sequence_id;
  uint64_t sequence_key_offset;
  uint32_t sequence_key_size;
  SubmitKind kind;
  // Trace extension (trace=request.trace()): 1 + the index in batch `trace_batch` of
  // the request whose trace this call continues as a child trace; 0: none.
  uint32_t trace_index;
  uint64_t trace_batch;
  uint64_t block_size;  // kControl: the control block's bytes
};

// What a worker posts for a batch: responses (a response block, ipc_schema.h, with
// 0..N responses per request, per-request errors inside), and once, last, that the
// batch is done: its inputs can go and the instance takes the next batch. The 1:1
// case is one message with both flags. status (with kPostBatchDone): 0 = ran,
// nonzero = the batch failed as a whole (CompletionStatus); requests without a final
// response then fail.
constexpr uint32_t kPostResponses = 1;  // result_offset/result_size: a response block
constexpr uint32_t kPostBatchDone = 2;
// With kPostBatchDone: the instance is free, but the requests without a final response
// stay open (a decoupled model answers them later, from any thread): the core keeps
// them, and their inputs, until each got its final response or was failed. Without
// it they fail at once.
constexpr uint32_t kPostKeepOpen = 4;

struct CompletionMessage {
  uint64_t batch_id;
  uint64_t result_offset;
  uint64_t result_size;
  int32_t status;
  uint32_t flags;  // kPostResponses | kPostBatchDone | kPostKeepOpen
};

enum CompletionStatus : int32_t {
  kCompletionOk = 0,
  kCompletionWorkerFailed = 1,  // the worker raised outside the model or ran out of arena
  kCompletionInstanceDied = 2,  // the worker process died with the batch in flight
  kCompletionArenaFull = 7,     // the arena had no room for the batch's responses
  // 3..6 and 8 are the core's own statuses (core.h), for requests that never ran.
};

template <typename T, uint32_t Capacity>
struct SpscRing {
  static_assert((Capacity & (Capacity - 1)) == 0, "capacity is a power of two");
  alignas(64) std::atomic<uint64_t> head;  // next slot to read (consumer)
  alignas(64) std::atomic<uint64_t> tail;  // next slot to write (producer)
  alignas(64) T slots[Capacity];

  void reset() {
    head.store(0, std::memory_order_relaxed);
    tail.store(0, std::memory_order_relaxed);
  }
  bool push(const T& item) {
    uint64_t t = tail.load(std::memory_order_relaxed);
    if (t - head.load(std::memory_order_acquire) >= Capacity) return false;
    slots[t & (Capacity - 1)] = item;
    tail.store(t + 1, std::memory_order_release);
    return true;
  }
  bool pop(T* out) {
    uint64_t h = head.load(std::memory_order_relaxed);
    if (h == tail.load(std::memory_order_acquire)) return false;
    *out = slots[h & (Capacity - 1)];
    head.store(h + 1, std::memory_order_release);
    return true;
  }
};

// One batch goes to a worker at a time, but responses come back 0..N per request:
// room for a full batch of 1:1 responses in separate messages. A producer that finds
// a ring full waits for room; nothing is ever dropped.
constexpr uint32_t kRingCapacity = 64;

struct Channel {
  SpscRing<BatchMessage, kRingCapacity> to_worker;
  SpscRing<CompletionMessage, kRingCapacity> to_frontend;
  SpscRing<SubmitMessage, kRingCapacity> to_core;  // the worker's own requests (BLS)
  // The worker sets this before it blocks on its eventfd; the frontend writes the
  // eventfd only when it is set.
  alignas(64) std::atomic<uint32_t> worker_sleeping;

  void reset() {
    to_worker.reset();
    to_frontend.reset();
    to_core.reset();
    worker_sleeping.store(0, std::memory_order_relaxed);
  }
};

// Writes 1 to an eventfd, retrying on EINTR; EAGAIN (counter saturated) is a wake already.
void signal_eventfd(int fd);
// Blocks until the eventfd is readable and consumes its counter.
void wait_eventfd(int fd);
// Consumes the counter without blocking (the fd must be non-blocking).
void drain_eventfd(int fd);

}  // namespace naiad
