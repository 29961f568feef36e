#include "core/dynamic_batcher.h"

#include <algorithm>
#include <limits>

namespace naiad {

DynamicBatcher::DynamicBatcher(const BatcherConfig& config) : config_(config) {
  if (!config_.dynamic_batching || config_.max_batch_size == 0) {
    // One request per execution, in arrival order.
    config_.dynamic_batching = false;
    config_.max_batch_size = 1;
    config_.preferred_batch_sizes.clear();
    config_.max_queue_delay_us = 0;
  }
  preferred_.insert(config_.preferred_batch_sizes.begin(), config_.preferred_batch_sizes.end());
  max_preferred_ = preferred_.empty() ? config_.max_batch_size : *preferred_.rbegin();
  delay_ns_ = config_.max_queue_delay_us * 1000;
  uint32_t count = std::max<uint32_t>(config_.priority_levels, 1);
  levels_.resize(count);
  for (uint32_t i = 0; i < count; ++i) {
    bool has = i < config_.level_has_policy.size() && config_.level_has_policy[i];
    levels_[i].policy = has ? config_.level_policies[i] : config_.default_policy;
  }
}

bool DynamicBatcher::unbounded() const {
  for (const Level& level : levels_) {
    if (level.policy.max_queue_size != 0) return false;
  }
  return true;
}

DynamicBatcher::Level& DynamicBatcher::level_for(uint32_t priority) {
  // As Triton: 0 or a level beyond the configured ones means the default level.
  if (priority == 0 || priority > levels_.size()) priority = config_.default_priority_level;
  if (priority == 0 || priority > levels_.size()) priority = 1;
  return levels_[priority - 1];
}

EnqueueResult DynamicBatcher::enqueue(QueuedRequest request, uint32_t priority, uint64_t timeout_us,
                                      uint64_t now_ns) {
  Level& level = level_for(priority);
  const QueuePolicy& policy = level.policy;
  if (policy.max_queue_size != 0 &&
      level.queue.size() + level.delayed.size() >= policy.max_queue_size) {
    return EnqueueResult::kQueueFull;
  }
  uint64_t timeout = policy.default_timeout_us;
  if (policy.allow_timeout_override && timeout_us != 0) timeout = timeout_us;
  request.enqueue_ns = now_ns;
  request.timeout_ns = timeout == 0 ? 0 : now_ns + timeout * 1000;
  level.queue.push_back(request);
  ++queued_;
  return EnqueueResult::kOk;
}

uint64_t DynamicBatcher::apply_timeouts(uint64_t now_ns, std::vector<QueuedRequest>* rejected) {
  uint64_t next = 0;
  for (Level& level : levels_) {
    if (level.policy.default_timeout_us == 0 && !level.policy.allow_timeout_override) continue;
    for (auto it = level.queue.begin(); it != level.queue.end();) {
      if (it->timeout_ns == 0 || now_ns < it->timeout_ns) {
        if (it->timeout_ns != 0 && (next == 0 || it->timeout_ns < next)) next = it->timeout_ns;
        ++it;
        continue;
      }
      if (level.policy.timeout_action == TimeoutAction::kReject) {
        rejected->push_back(*it);
        --queued_;
      } else {
        QueuedRequest delayed = *it;
        delayed.timeout_ns = 0;  // delayed once, then served in turn
        level.delayed.push_back(delayed);
      }
      it = level.queue.erase(it);
    }
  }
  return next;
}

uint64_t DynamicBatcher::expire(uint64_t now_ns, std::vector<QueuedRequest>* rejected) {
  return apply_timeouts(now_ns, rejected);
}

void DynamicBatcher::grow(uint64_t now_ns, std::vector<QueuedRequest>* batch,
                          std::vector<QueuedRequest>* rejected) {
  if (!config_.dynamic_batching || batch->empty() || queued_ == 0) return;
  apply_timeouts(now_ns, rejected);
  uint32_t total = 0;
  for (const QueuedRequest& r : *batch) total += std::max<uint32_t>(r.batch_size, 1);
  const uint64_t shape_key = batch->front().shape_key;
  // In the walk order of next_batch, from the fronts, until one does not fit.
  for (Level& level : levels_) {
    for (std::deque<QueuedRequest>* queue : {&level.queue, &level.delayed}) {
      while (!queue->empty()) {
        if (total >= max_preferred_) return;  // saturated
        const QueuedRequest& r = queue->front();
        const uint32_t size = std::max<uint32_t>(r.batch_size, 1);
        if (total + size > max_preferred_ || r.shape_key != shape_key) return;
        batch->push_back(r);
        queue->pop_front();
        --queued_;
        total += size;
      }
    }
  }
}

uint64_t DynamicBatcher::next_batch(uint64_t now_ns, std::vector<QueuedRequest>* batch,
                                    std::vector<QueuedRequest>* rejected, bool arrivals_possible) {
  uint64_t next_timeout = apply_timeouts(now_ns, rejected);

  // Walk the queues in priority order (each level: its queue, then its delayed
  // requests) and take requests while the batch stays compatible.
  std::vector<Pick>& picks = picks_;
  picks.clear();
  uint32_t total = 0;
  size_t best_count = 0;  // picks forming the largest preferred size seen
  bool send_now = false;
  bool have_shape = false;
  uint64_t shape_key = 0;
  uint64_t oldest_ns = std::numeric_limits<uint64_t>::max();
  for (Level& level : levels_) {
    for (int part = 0; part < 2 && !send_now; ++part) {
      std::deque<QueuedRequest>& queue = part == 0 ? level.queue : level.delayed;
      for (size_t i = 0; i < queue.size(); ++i) {
        const QueuedRequest& r = queue[i];
        uint32_t size = std::max<uint32_t>(r.batch_size, 1);
        if (!picks.empty()) {
          if (total + size > config_.max_batch_size || (have_shape && r.shape_key != shape_key)) {
            send_now = true;
            break;
          }
        }
        if (!have_shape) {
          have_shape = true;
          shape_key = r.shape_key;
        }
        picks.push_back(Pick{&level, part == 1});
        total += size;
        oldest_ns = std::min(oldest_ns, r.enqueue_ns);
        if (preferred_.count(total) != 0) best_count = picks.size();
        if (!config_.dynamic_batching || total >= max_preferred_) {
          send_now = true;
          break;
        }
      }
    }
    if (send_now) break;
  }
  if (picks.empty()) return next_timeout;

  bool delay_exceeded = delay_ns_ != 0 && (now_ns - oldest_ns >= delay_ns_ || !arrivals_possible);
  size_t take = 0;
  if (best_count != 0 && !delay_exceeded) {
    take = best_count;
  } else if (send_now || delay_ns_ == 0 || delay_exceeded) {
    take = picks.size();
  } else {
    // Hold the batch: it may still grow into a preferred or full size.
    uint64_t deadline = oldest_ns + delay_ns_;
    if (next_timeout != 0 && next_timeout < deadline) deadline = next_timeout;
    return deadline;
  }

  // The picks are a prefix of the walk order, so pop from the fronts in that order.
  batch->reserve(batch->size() + take);
  for (size_t i = 0; i < take; ++i) {
    std::deque<QueuedRequest>& queue =
        picks[i].delayed ? picks[i].level->delayed : picks[i].level->queue;
    batch->push_back(queue.front());
    queue.pop_front();
  }
  queued_ -= take;
  return 0;
}

std::vector<QueuedRequest> DynamicBatcher::drain() {
  std::vector<QueuedRequest> all;
  for (Level& level : levels_) {
    all.insert(all.end(), level.queue.begin(), level.queue.end());
    all.insert(all.end(), level.delayed.begin(), level.delayed.end());
    level.queue.clear();
    level.delayed.clear();
  }
  queued_ = 0;
  return all;
}

bool DynamicBatcher::remove(uint64_t request_id, QueuedRequest* out) {
  for (Level& level : levels_) {
    for (std::deque<QueuedRequest>* queue : {&level.queue, &level.delayed}) {
      for (auto it = queue->begin(); it != queue->end(); ++it) {
        if (it->id != request_id) continue;
        *out = *it;
        queue->erase(it);
        --queued_;
        return true;
      }
    }
  }
  return false;
}

}  // namespace naiad
