#include "core/sequence_batch_scheduler.h"

#include <algorithm>
#include <cstring>
#include <iterator>

namespace naiad {

namespace {

// A correlation id as a map key: numbers and strings never meet.
void key_of(const SubmitOptions& options, std::string* key) {
  key->clear();
  if (!options.sequence_key.empty()) {
    key->push_back('s');
    key->append(options.sequence_key.data(), options.sequence_key.size());
  } else {
    key->push_back('u');
    key->append(reinterpret_cast<const char*>(&options.sequence_id), sizeof(uint64_t));
  }
}

}  // namespace

SequenceBatchScheduler::SequenceBatchScheduler(const SequenceConfig& config) : config_(config) {
  if (config_.max_batch_size == 0) config_.max_batch_size = 1;
  slots_per_instance_ = config_.max_batch_size;
  if (config_.oldest && config_.max_candidate_sequences > 0) {
    slots_per_instance_ = config_.max_candidate_sequences;
  }
  std::sort(config_.preferred_batch_sizes.begin(), config_.preferred_batch_sizes.end());
}

EnqueueResult SequenceBatchScheduler::enqueue(const QueuedRequest& request,
                                              const SubmitOptions& options, uint64_t now_ns) {
  // Triton's checks, in its order.
  if (request.batch_size > 1) return EnqueueResult::kSequenceBatchSize;
  uint32_t flags = options.sequence_flags;
  if (options.sequence_id == 0 && options.sequence_key.empty()) {
    if (!config_.iterative) return EnqueueResult::kNoSequenceId;
    // A sequence of its own: 'i' keys are never a client's ('s', 'u').
    flags = kSequenceFlagStart | kSequenceFlagEnd;
    key_.assign(1, 'i');
    ++own_sequences_;
    key_.append(reinterpret_cast<const char*>(&own_sequences_), sizeof(uint64_t));
  } else {
    key_of(options, &key_);
  }
  const bool start = (flags & kSequenceFlagStart) != 0;
  const bool end = (flags & kSequenceFlagEnd) != 0;
  auto found = active_.find(key_);
  if (found != active_.end() && found->second.batcher >= 0) {
    // Idle past the limit is idle whenever the reaper looks (its timer may run late):
    // the request is refused, or starts a new sequence, the same either way.
    auto seen = last_seen_.find(key_);
    if (seen != last_seen_.end() && idled_out(seen->second, now_ns)) {
      last_seen_.erase(seen);
      release_idle(found);
      found = active_.end();
    }
  }
  if (!start && found == active_.end()) return EnqueueResult::kSequenceNotStarted;

  QueuedRequest queued = request;
  queued.enqueue_ns = now_ns;
  queued.sequence = sequence_word(0, flags);
  last_seen_[key_] = now_ns;
  if (next_reap_ns_ == 0) next_reap_ns_ = now_ns + config_.max_sequence_idle_us * 1000;
  ++queued_;

  // A START for a live correlation id goes on with the same slot or backlog entry:
  // the earlier sequence never ended; the worker resets the state at the START.
  if (found != active_.end() && found->second.batcher >= 0) {
    const Where where = found->second;
    batchers_[static_cast<size_t>(where.batcher)].slots[where.slot].queue.push_back(queued);
    if (end) active_.erase(found);
    return EnqueueResult::kOk;
  }
  Backlog* entry;
  if (found != active_.end()) {
    entry = &*found->second.backlog;
  } else {
    backlog_.emplace_back();
    entry = &backlog_.back();
    entry->key = key_;
    Where where;
    where.backlog = std::prev(backlog_.end());
    found = active_.emplace(key_, where).first;
  }
  entry->queue.push_back(queued);
  if (options.timeout_us != 0) {
    const uint64_t deadline = now_ns + options.timeout_us * 1000;
    if (entry->expires_ns == 0 || deadline < entry->expires_ns) entry->expires_ns = deadline;
    if (next_expiry_ns_ == 0 || deadline < next_expiry_ns_) next_expiry_ns_ = deadline;
  }
  if (end) {
    // Later requests with this id belong to another sequence.
    entry->ended = true;
    active_.erase(found);
  }
  return EnqueueResult::kOk;
}

void SequenceBatchScheduler::add_batchers(const std::vector<uint32_t>& idle) {
  for (uint32_t instance : idle) {
    if (batcher_of_.count(instance) != 0) continue;
    batcher_of_[instance] = static_cast<uint32_t>(batchers_.size());
    Batcher& b = batchers_.emplace_back();
    b.instance = instance;
    b.slots.resize(slots_per_instance_);
  }
}

void SequenceBatchScheduler::bind(uint32_t batcher, uint32_t slot, Backlog& entry) {
  Slot& s = batchers_[batcher].slots[slot];
  s.busy = true;
  s.release = false;
  s.queue = std::move(entry.queue);
  if (!entry.ended) {
    Where& where = active_[entry.key];
    where.batcher = static_cast<int32_t>(batcher);
    where.slot = slot;
  }
}

void SequenceBatchScheduler::fill_slots() {
  // Lowest slot index first, then the instances in order (Triton's ready-slot order):
  // the first sequences spread over the instances.
  for (uint32_t slot = 0; slot < slots_per_instance_ && !backlog_.empty(); ++slot) {
    for (uint32_t b = 0; b < batchers_.size() && !backlog_.empty(); ++b) {
      Slot& s = batchers_[b].slots[slot];
      if (s.busy) continue;
      bind(b, slot, backlog_.front());
      backlog_.pop_front();
    }
  }
}

uint64_t SequenceBatchScheduler::expire_backlog(uint64_t now_ns,
                                                std::vector<QueuedRequest>* rejected) {
  uint64_t next = 0;
  for (auto it = backlog_.begin(); it != backlog_.end();) {
    if (it->expires_ns == 0 || it->expires_ns > now_ns) {
      if (it->expires_ns != 0 && (next == 0 || it->expires_ns < next)) next = it->expires_ns;
      ++it;
      continue;
    }
    queued_ -= it->queue.size();
    rejected->insert(rejected->end(), it->queue.begin(), it->queue.end());
    // Its correlation id is unknown now (unless a later sequence took it over).
    auto found = active_.find(it->key);
    if (found != active_.end() && found->second.batcher < 0 && found->second.backlog == it) {
      active_.erase(found);
      last_seen_.erase(it->key);
    }
    it = backlog_.erase(it);
  }
  return next;
}

uint64_t SequenceBatchScheduler::reap(uint64_t now_ns) {
  const uint64_t idle_ns = config_.max_sequence_idle_us * 1000;
  uint64_t next = 0;
  for (auto it = last_seen_.begin(); it != last_seen_.end();) {
    if (!idled_out(it->second, now_ns)) {
      const uint64_t due = it->second + idle_ns;
      if (next == 0 || due < next) next = due;
      ++it;
      continue;
    }
    auto found = active_.find(it->first);
    if (found == active_.end()) {  // ended: nothing to reap
      it = last_seen_.erase(it);
      continue;
    }
    if (found->second.batcher < 0) {
      // Waiting for a slot is not idleness: look again later.
      const uint64_t again = now_ns + std::min<uint64_t>(idle_ns, 50000000);
      if (next == 0 || again < next) next = again;
      ++it;
      continue;
    }
    it = last_seen_.erase(it);
    release_idle(found);
  }
  return next;
}

bool SequenceBatchScheduler::idled_out(uint64_t last_seen_ns, uint64_t now_ns) const {
  return now_ns >= last_seen_ns && now_ns - last_seen_ns >= config_.max_sequence_idle_us * 1000;
}

void SequenceBatchScheduler::release_idle(std::unordered_map<std::string, Where>::iterator found) {
  // The slot goes once the requests already queued in it ran.
  Slot& s = batchers_[static_cast<size_t>(found->second.batcher)].slots[found->second.slot];
  s.release = true;
  active_.erase(found);
}

void SequenceBatchScheduler::take(Batcher& b, uint32_t slot, Placement* out) {
  Slot& s = b.slots[slot];
  QueuedRequest request = s.queue.front();
  s.queue.pop_front();
  --queued_;
  request.sequence = (request.sequence & ~uint64_t{0xffffffff}) | slot;
  out->requests.push_back(request);
  if ((request.sequence & kSequenceEndBit) != 0 && s.queue.empty()) s.release = true;
}

uint64_t SequenceBatchScheduler::form_direct(Batcher& b, uint64_t now_ns, bool arrivals_possible,
                                             Placement* out) {
  uint32_t ready = 0;
  int64_t last = -1;
  uint64_t earliest = UINT64_MAX;
  uint64_t shape = 0;
  bool have_shape = false;
  for (uint32_t slot = 0; slot < b.slots.size(); ++slot) {
    const Slot& s = b.slots[slot];
    if (s.queue.empty()) continue;
    if (!have_shape) {
      shape = s.queue.front().shape_key;
      have_shape = true;
    }
    ++ready;
    last = slot;
    earliest = std::min(earliest, s.queue.front().enqueue_ns);
  }
  if (last < 0) return 0;
  const uint64_t delay_ns = config_.max_queue_delay_us * 1000;
  if (delay_ns != 0 && config_.minimum_slot_utilization > 0 && arrivals_possible &&
      now_ns - earliest <= delay_ns &&
      static_cast<float>(ready) / static_cast<float>(config_.max_batch_size) <
          config_.minimum_slot_utilization) {
    return earliest + delay_ns + 1;
  }
  for (uint32_t slot = 0; slot <= static_cast<uint32_t>(last); ++slot) {
    Slot& s = b.slots[slot];
    // A slot without a request, or whose request cannot share the batch's shapes,
    // is a gap: the worker fills it with a not-ready request.
    if (s.queue.empty() || s.queue.front().shape_key != shape) continue;
    take(b, slot, out);
  }
  return 0;
}

uint64_t SequenceBatchScheduler::form_oldest(Batcher& b, uint64_t now_ns, bool arrivals_possible,
                                             Placement* out) {
  // The candidates: the next request of each sequence, oldest first.
  std::vector<std::pair<uint64_t, uint32_t>> candidates;  // (enqueue_ns, slot)
  for (uint32_t slot = 0; slot < b.slots.size(); ++slot) {
    if (!b.slots[slot].queue.empty()) {
      candidates.emplace_back(b.slots[slot].queue.front().enqueue_ns, slot);
    }
  }
  if (candidates.empty()) return 0;
  std::sort(candidates.begin(), candidates.end());
  const uint64_t shape = b.slots[candidates.front().second].queue.front().shape_key;
  size_t n = 0;  // candidates that can share the oldest one's batch, in order
  for (const auto& c : candidates) {
    if (b.slots[c.second].queue.front().shape_key == shape) candidates[n++] = c;
  }
  candidates.resize(n);
  size_t size = std::min<size_t>(n, config_.max_batch_size);
  const uint64_t delay_ns = config_.max_queue_delay_us * 1000;
  const uint64_t due = candidates.front().first + delay_ns;
  const bool waited = delay_ns == 0 || !arrivals_possible || now_ns >= due;
  if (size < config_.max_batch_size && !waited) {
    // Below the largest batch and within the delay: the largest preferred size that is
    // there goes now, else the batch waits for the delay. Once the oldest candidate
    // waited the delay (an instance busy meanwhile), everything there goes.
    size_t preferred = 0;
    for (uint32_t p : config_.preferred_batch_sizes) {
      if (p <= size) preferred = p;
    }
    if (preferred == 0) return due;
    size = preferred;
  }
  for (size_t i = 0; i < size; ++i) take(b, candidates[i].second, out);
  return 0;
}

void SequenceBatchScheduler::release_slots() {
  bool freed = false;
  for (Batcher& b : batchers_) {
    for (Slot& s : b.slots) {
      if (s.busy && s.release && s.queue.empty()) {
        s.busy = s.release = false;
        freed = true;
      }
    }
  }
  if (freed || !backlog_.empty()) fill_slots();
}

uint64_t SequenceBatchScheduler::schedule(uint64_t now_ns, const std::vector<uint32_t>& idle,
                                          bool arrivals_possible,
                                          std::vector<Placement>* placements,
                                          std::vector<QueuedRequest>* rejected) {
  add_batchers(idle);
  release_slots();
  // After the slots freed up to now went to the backlog: those sequences made it.
  if (next_expiry_ns_ != 0 && now_ns >= next_expiry_ns_) {
    next_expiry_ns_ = expire_backlog(now_ns, rejected);
  }
  if (next_reap_ns_ != 0 && now_ns >= next_reap_ns_) {
    next_reap_ns_ = reap(now_ns);
    release_slots();
  }
  uint64_t next = next_reap_ns_;
  if (next_expiry_ns_ != 0 && (next == 0 || next_expiry_ns_ < next)) next = next_expiry_ns_;
  for (uint32_t instance : idle) {
    Batcher& b = batchers_[batcher_of_[instance]];
    Placement& placement = placements->emplace_back();
    placement.instance = instance;
    const uint64_t hold = config_.oldest ? form_oldest(b, now_ns, arrivals_possible, &placement)
                                         : form_direct(b, now_ns, arrivals_possible, &placement);
    if (placement.requests.empty()) placements->pop_back();
    if (hold != 0 && (next == 0 || hold < next)) next = hold;
  }
  // Slots an END freed go to the backlog now, for the next batch.
  release_slots();
  return next;
}

std::vector<QueuedRequest> SequenceBatchScheduler::drain() {
  std::vector<QueuedRequest> all;
  for (Batcher& b : batchers_) {
    for (Slot& s : b.slots) {
      all.insert(all.end(), s.queue.begin(), s.queue.end());
      s = Slot{};
    }
  }
  for (Backlog& entry : backlog_) all.insert(all.end(), entry.queue.begin(), entry.queue.end());
  backlog_.clear();
  active_.clear();
  last_seen_.clear();
  next_reap_ns_ = 0;
  next_expiry_ns_ = 0;
  queued_ = 0;
  return all;
}

}  // namespace naiad
