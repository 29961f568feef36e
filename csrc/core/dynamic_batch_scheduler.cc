#include "core/dynamic_batch_scheduler.h"

namespace naiad {

uint64_t DynamicBatchScheduler::schedule(uint64_t now_ns, const std::vector<uint32_t>& idle,
                                         bool arrivals_possible, std::vector<Placement>* placements,
                                         std::vector<QueuedRequest>* rejected) {
  for (uint32_t instance : idle) {
    if (batcher_.empty()) return 0;
    // Formed in place: the core moves the requests on into its batch.
    Placement& placement = placements->emplace_back();
    placement.instance = instance;
    uint64_t wait = batcher_.next_batch(now_ns, &placement.requests, rejected, arrivals_possible);
    if (placement.requests.empty()) {
      // The policy holds the batch back: the other idle instances would get the same answer.
      placements->pop_back();
      return wait;
    }
  }
  // Every instance busy: only queue timeouts can be due before one frees up.
  return batcher_.empty() ? 0 : batcher_.expire(now_ns, rejected);
}

}  // namespace naiad
