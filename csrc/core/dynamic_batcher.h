// Triton's dynamic batching policy for one model, in one place: priority levels,
// per-level queue policies (timeouts with REJECT or DELAY, max queue size), preferred
// batch sizes, the queue delay bound, and shape compatibility. It is pure: the caller
// passes the time in, so the policy is tested with an injected clock, and the core
// (core.cc) owns the mechanics (arena, channels, threads). DynamicBatchScheduler
// (dynamic_batch_scheduler.h) puts it behind the core's Scheduler interface.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <set>
#include <vector>

#include "core/scheduler.h"  // QueuedRequest, EnqueueResult

namespace naiad {

enum class TimeoutAction : uint32_t { kReject = 0, kDelay = 1 };  // ModelQueuePolicy

struct QueuePolicy {
  TimeoutAction timeout_action = TimeoutAction::kReject;
  uint64_t default_timeout_us = 0;  // 0: requests never time out in the queue
  bool allow_timeout_override = false;
  uint32_t max_queue_size = 0;  // 0: unbounded
};

struct BatcherConfig {
  // A model without dynamic batching runs one request per execution: max 1 request,
  // no delay, one FIFO level.
  bool dynamic_batching = false;
  uint32_t max_batch_size = 0;
  std::vector<uint32_t> preferred_batch_sizes;
  uint64_t max_queue_delay_us = 0;
  bool preserve_ordering = false;
  uint32_t priority_levels = 0;  // 0: a single level
  uint32_t default_priority_level = 0;
  QueuePolicy default_policy;
  // Per-level overrides: policies[level - 1] when has_policy[level - 1].
  std::vector<QueuePolicy> level_policies;
  std::vector<bool> level_has_policy;
};

class DynamicBatcher {
 public:
  explicit DynamicBatcher(const BatcherConfig& config);

  // `priority` and `timeout_us` are the request's parameters (0 = not given).
  EnqueueResult enqueue(QueuedRequest request, uint32_t priority, uint64_t timeout_us,
                        uint64_t now_ns);

  // Called when an instance is idle. Fills `batch` with the requests to execute now
  // (possibly none) and appends requests whose queue timeout expired under REJECT to
  // `rejected`. Returns the time at which the decision could change when the batch
  // is held back (delay or a queued timeout), 0 when there is nothing to wait for.
  //
  // `arrivals_possible` false says no request can join before the delay ends (every
  // client connection is waiting for an answer): waiting could not grow the batch,
  // so it leaves now, as if the delay had passed. The delay stays an upper bound.
  uint64_t next_batch(uint64_t now_ns, std::vector<QueuedRequest>* batch,
                      std::vector<QueuedRequest>* rejected, bool arrivals_possible = true);

  // `batch` (formed by next_batch) has not run yet: appends the queued requests, in
  // priority order, that fit it (its shape, at most the largest preferred batch size,
  // or max_batch_size without preferred sizes), as Triton's batcher adds requests to a
  // payload waiting in the rate limiter until it is saturated. No queue delay applies:
  // the batch already waits. Expired requests go to `rejected` as in next_batch.
  void grow(uint64_t now_ns, std::vector<QueuedRequest>* batch,
            std::vector<QueuedRequest>* rejected);
  // Applies queue timeouts without forming a batch (no instance idle). Returns the
  // next timeout deadline, 0 if none.
  uint64_t expire(uint64_t now_ns, std::vector<QueuedRequest>* rejected);

  size_t size() const { return queued_; }
  // No level has a max_queue_size: enqueue() never refuses a request.
  bool unbounded() const;
  bool empty() const { return queued_ == 0; }
  bool preserve_ordering() const { return config_.preserve_ordering; }
  // Removes and returns every queued request (the model is being removed).
  std::vector<QueuedRequest> drain();
  // Removes request `request_id` from whichever queue holds it (cancelled); false when
  // none does.
  bool remove(uint64_t request_id, QueuedRequest* out);

 private:
  struct Level {
    QueuePolicy policy;
    std::deque<QueuedRequest> queue;
    std::deque<QueuedRequest> delayed;  // timed out under DELAY: served after `queue`
  };
  // A request next_batch would take: from `level`'s queue or its delayed queue.
  struct Pick {
    Level* level;
    bool delayed;
  };
  Level& level_for(uint32_t priority);
  uint64_t apply_timeouts(uint64_t now_ns, std::vector<QueuedRequest>* rejected);

  BatcherConfig config_;
  std::set<uint32_t> preferred_;
  uint32_t max_preferred_ = 1;
  uint64_t delay_ns_ = 0;
  std::vector<Level> levels_;  // levels_[0] is priority 1, the highest
  // Requests in every level's queue and delayed queue: asked on every dispatch, so
  // counted as they come and go rather than summed.
  size_t queued_ = 0;
  // next_batch's walk, kept from call to call for its room (it runs on every dispatch).
  std::vector<Pick> picks_;
};

}  // namespace naiad
