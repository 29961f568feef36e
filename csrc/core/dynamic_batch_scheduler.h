// Triton's dynamic batcher (dynamic_batcher.h) as a Scheduler: any idle instance
// takes the next batch the policy lets go, in the order the instances were added.
// Threads: as every Scheduler, called with the core's mutex held; no lock of its own.
#pragma once

#include <vector>

#include "core/dynamic_batcher.h"
#include "core/scheduler.h"

namespace naiad {

class DynamicBatchScheduler final : public Scheduler {
 public:
  explicit DynamicBatchScheduler(const BatcherConfig& config)
      : batcher_(config), max_rows_(config.dynamic_batching ? config.max_batch_size : 0) {}

  EnqueueResult enqueue(const QueuedRequest& request, const SubmitOptions& options,
                        uint64_t now_ns) override {
    return batcher_.enqueue(request, options.priority, options.timeout_us, now_ns);
  }
  uint64_t schedule(uint64_t now_ns, const std::vector<uint32_t>& idle, bool arrivals_possible,
                    std::vector<Placement>* placements,
                    std::vector<QueuedRequest>* rejected) override;
  bool empty() const override { return batcher_.empty(); }
  bool always_accepts() const override { return batcher_.unbounded(); }
  size_t queued() const override { return batcher_.size(); }
  void grow(uint64_t now_ns, std::vector<QueuedRequest>* batch,
            std::vector<QueuedRequest>* rejected) override {
    batcher_.grow(now_ns, batch, rejected);
  }
  uint32_t max_batch_rows() const override { return max_rows_; }
  bool preserve_ordering() const override { return batcher_.preserve_ordering(); }
  std::vector<QueuedRequest> drain() override { return batcher_.drain(); }
  bool cancel(uint64_t request_id, QueuedRequest* out) override {
    return batcher_.remove(request_id, out);
  }

 private:
  DynamicBatcher batcher_;
  uint32_t max_rows_;
};

}  // namespace naiad
