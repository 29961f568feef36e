// What the core asks of a model's request queue. A scheduler holds the model's queued
// requests and decides which of them run next and on which instance; the core owns
// the mechanics around it (arena blocks, instance channels, batches in flight, the
// timer thread). Triton's dynamic batcher is one implementation
// (dynamic_batch_scheduler.h). A sequence batcher (a sequence's requests stay on one
// instance) or an ensemble scheduler is another, added with Core::add_model(scheduler)
// without touching the core: that is why instance choice is the scheduler's.
//
// Threads: the core calls every method with its mutex held (see core.h), from any
// thread calling into the core (the submitting threads, the timer thread), never two
// at once. An implementation needs no lock of its own and must not block or call back
// into the core.
#pragma once

#include <cstdint>
#include <vector>

#include "core/submit_request.h"  // SubmitOptions: how a request asks to be scheduled

namespace naiad {

// A request waiting in a scheduler: its block in the arena and what batching needs.
struct QueuedRequest {
  uint64_t id;
  uint64_t offset;  // the request block in the arena
  uint64_t size;
  uint32_t batch_size;
  uint64_t shape_key;   // requests with different keys never share a batch
  uint64_t enqueue_ns;  // when it entered the queue
  uint64_t timeout_ns;  // absolute deadline in the queue, 0 = none
  // What a sequence batcher tells the worker (ipc_schema.h RequestHeader::sequence);
  // the batch assembler writes it into the request block at dispatch. 0: none.
  uint64_t sequence = 0;
};

// kSequence*: refused by a sequence batcher, as Triton refuses it (a request of more
// than one row, one without a correlation id, one of a sequence never started).
enum class EnqueueResult {
  kOk,
  kQueueFull,
  kSequenceBatchSize,
  kNoSequenceId,
  kSequenceNotStarted
};

// What submit answers for a scheduler's EnqueueResult.
inline SubmitResult submit_result_of(EnqueueResult result) {
  switch (result) {
    case EnqueueResult::kOk:
      return SubmitResult::kOk;
    case EnqueueResult::kQueueFull:
      return SubmitResult::kQueueFull;
    case EnqueueResult::kSequenceBatchSize:
      return SubmitResult::kSequenceBatchSize;
    case EnqueueResult::kNoSequenceId:
      return SubmitResult::kNoSequenceId;
    case EnqueueResult::kSequenceNotStarted:
      return SubmitResult::kSequenceNotStarted;
  }
  return SubmitResult::kQueueFull;
}

// A batch the scheduler formed: `requests` run together on instance `instance`.
struct Placement {
  uint32_t instance = 0;
  std::vector<QueuedRequest> requests;
};

// Why schedule() rejected requests: their own queue timeout expired (the dynamic
// batcher's REJECT policy), or the timeout of the sequence they belong to did, in the
// sequence batcher's backlog (Triton fails the whole backlogged sequence).
enum class RejectReason { kQueueTimeout, kSequenceTimeout };

class Scheduler {
 public:
  virtual ~Scheduler() = default;

  virtual EnqueueResult enqueue(const QueuedRequest& request, const SubmitOptions& options,
                                uint64_t now_ns) = 0;

  // `idle` lists the model's instances that can take a batch now, in the order they
  // were added. Appends to `placements` the batches to run now, at most one per idle
  // instance and only on those, and to `rejected` the requests that must fail
  // (their queue timeout expired under REJECT). Returns when the decision could
  // change without a new request or a completion (a held batch's queue delay, a
  // queue timeout), 0 when nothing is due. `arrivals_possible` false: no client can
  // send before a queue delay ends, so holding a batch cannot grow it.
  virtual uint64_t schedule(uint64_t now_ns, const std::vector<uint32_t>& idle,
                            bool arrivals_possible, std::vector<Placement>* placements,
                            std::vector<QueuedRequest>* rejected) = 0;

  virtual bool empty() const = 0;
  // enqueue() never refuses a request (returns kOk whatever the queue holds) and reads
  // nothing of `options` but its plain numbers (not sequence_key, a view valid only
  // during submit): the core may then queue a submit later than it returned, at the end
  // of its submitting thread's turn (Core::Turn), with the time its turn began staging it.
  virtual bool always_accepts() const { return false; }
  // Requests held, not yet placed in a batch: Triton's pending-request gauge counts them
  // (with those of batches waiting for the rate limiter).
  virtual size_t queued() const = 0;
  // A batch formed for an instance still waits for its resources (the rate limiter):
  // appends to it the queued requests that may join it now, as Triton's dynamic
  // batcher grows the payload it staged until it runs. Appends to `rejected` the
  // requests whose queue timeout expired. A scheduler whose batches cannot grow
  // leaves it as it is.
  virtual void grow(uint64_t now_ns, std::vector<QueuedRequest>* batch,
                    std::vector<QueuedRequest>* rejected) {
    (void)now_ns;
    (void)batch;
    (void)rejected;
  }
  // What the requests schedule() rejects failed of.
  virtual RejectReason reject_reason() const { return RejectReason::kQueueTimeout; }
  // The most requests one batch of this scheduler holds: the core stages their inputs
  // batch-major, in rows for batches that large (batch_assembler.h). 0 or 1: each
  // request is laid out in a block of its own.
  virtual uint32_t max_batch_rows() const { return 0; }
  // Completions leave in the order their batches were dispatched (Triton's
  // preserve_ordering); the core holds the early finishers back.
  virtual bool preserve_ordering() const = 0;
  // Removes and returns every queued request: the model is being removed.
  virtual std::vector<QueuedRequest> drain() = 0;
  // Removes queued request `request_id` into `out` (the client cancelled it); false
  // when it is not queued here. A scheduler that cannot remove one leaves it queued.
  virtual bool cancel(uint64_t request_id, QueuedRequest* out) {
    (void)request_id;
    (void)out;
    return false;
  }
};

}  // namespace naiad
