// Triton's sequence batcher as a Scheduler (scheduler.h): every request of a sequence
// (one correlation id, from its START request to its END request) runs on the one
// instance batch slot the sequence was given, in the order it arrived.
//
// - Each instance has `slots` sequence slots: max_batch_size of them under the direct
//   strategy, max_candidate_sequences under oldest. A starting sequence takes the free
//   slot with the lowest index (instances in the order they were seen), or waits in
//   the backlog, first come first served, until one frees up.
// - direct: a batch holds the next request of each slot that has one, slot i at
//   position i; a request's slot goes down to the worker (ipc_schema.h
//   RequestHeader::sequence), which fills the gaps with not-ready requests as Triton
//   does. max_queue_delay_microseconds / minimum_slot_utilization may hold a batch.
// - oldest: the next request of each of the instance's sequences is a candidate; the
//   oldest candidates form a batch: up to max_batch_size once the oldest waited
//   max_queue_delay_microseconds, else the largest preferred_batch_size there is, else
//   the batch waits.
// - A sequence waiting in the backlog past the `timeout` of one of its requests (from
//   its arrival) fails whole: schedule() rejects every request it holds there
//   (RejectReason::kSequenceTimeout), and its correlation id is forgotten, as Triton's
//   reaper does. A sequence holding a slot has no such deadline.
// - iterative_sequence: a request without a correlation id is a sequence of its own,
//   START and END, under a key no client id can take.
// - A sequence idle for max_sequence_idle_microseconds (no request since) loses its
//   correlation id mapping, and its slot once its queued requests ran; a later request
//   without START is refused as Triton refuses it.
//
// An instance runs one batch at a time (the core's rule), so a sequence never has two
// requests in flight, as Triton's oldest strategy requires.
//
// Threads: as every Scheduler, called with the core's mutex held; no lock of its own.
#pragma once

#include <cstdint>
#include <deque>
#include <list>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/scheduler.h"

namespace naiad {

struct SequenceConfig {
  bool oldest = false;          // strategy: oldest, else direct
  uint32_t max_batch_size = 1;  // the model's (at least 1)
  uint64_t max_sequence_idle_us = 1000000;
  uint64_t max_queue_delay_us = 0;
  float minimum_slot_utilization = 0;           // direct
  uint32_t max_candidate_sequences = 0;         // oldest: slots per instance (0: max_batch_size)
  std::vector<uint32_t> preferred_batch_sizes;  // oldest
  bool preserve_ordering = false;               // oldest
  // iterative_sequence: a request without a correlation id is a sequence of its own
  // (START and END), which its model may reschedule (in the worker) until it is done.
  bool iterative = false;
};

// QueuedRequest::sequence, as the worker reads it from RequestHeader::sequence.
constexpr uint64_t kSequenceValid = uint64_t{1} << 63;
constexpr uint64_t kSequenceStartBit = uint64_t{1} << 32;
constexpr uint64_t kSequenceEndBit = uint64_t{1} << 33;
inline uint64_t sequence_word(uint32_t slot, uint32_t flags) {
  return kSequenceValid | (uint64_t{flags & 3u} << 32) | slot;
}

class SequenceBatchScheduler final : public Scheduler {
 public:
  explicit SequenceBatchScheduler(const SequenceConfig& config);

  EnqueueResult enqueue(const QueuedRequest& request, const SubmitOptions& options,
                        uint64_t now_ns) override;
  uint64_t schedule(uint64_t now_ns, const std::vector<uint32_t>& idle, bool arrivals_possible,
                    std::vector<Placement>* placements,
                    std::vector<QueuedRequest>* rejected) override;
  bool empty() const override { return queued_ == 0; }
  size_t queued() const override { return queued_; }
  RejectReason reject_reason() const override { return RejectReason::kSequenceTimeout; }
  uint32_t max_batch_rows() const override { return config_.max_batch_size; }
  bool preserve_ordering() const override { return config_.oldest && config_.preserve_ordering; }
  std::vector<QueuedRequest> drain() override;

  // For tests and statistics: sequences holding a slot, and those in the backlog.
  size_t active_sequences() const { return active_.size(); }
  size_t backlog_sequences() const { return backlog_.size(); }

 private:
  struct Slot {
    bool busy = false;     // a sequence holds it
    bool release = false;  // give it up once `queue` is empty (idle, ended)
    std::deque<QueuedRequest> queue;
  };
  struct Batcher {
    uint32_t instance;
    std::vector<Slot> slots;
  };
  struct Backlog {
    std::string key;
    bool ended = false;       // its END request is in `queue`
    uint64_t expires_ns = 0;  // the earliest deadline its requests' timeouts give; 0: none
    std::deque<QueuedRequest> queue;
  };
  struct Where {           // a live correlation id: its slot, or its backlog entry
    int32_t batcher = -1;  // index into batchers_, -1: in the backlog
    uint32_t slot = 0;
    std::list<Backlog>::iterator backlog;
  };

  void add_batchers(const std::vector<uint32_t>& idle);
  // Gives free slots to backlogged sequences, oldest first.
  void fill_slots();
  // Frees the slots given up whose queue ran empty, then fills free slots.
  void release_slots();
  void bind(uint32_t batcher, uint32_t slot, Backlog& entry);
  // Rejects the backlogged sequences whose deadline passed; returns the next deadline.
  uint64_t expire_backlog(uint64_t now_ns, std::vector<QueuedRequest>* rejected);
  // Forgets idle correlation ids; returns the next time one may become idle.
  uint64_t reap(uint64_t now_ns);
  // The idle rule, for reap() and enqueue() alike: a sequence whose last request came
  // max_sequence_idle_us or more before `now_ns` idled out.
  bool idled_out(uint64_t last_seen_ns, uint64_t now_ns) const;
  // Gives up the slot of a live sequence that idled out (the requests already queued
  // in it still run) and forgets the id: reap()'s, and enqueue()'s when the reaper's
  // look has not come yet.
  void release_idle(std::unordered_map<std::string, Where>::iterator found);
  // The batch for batcher `b`; 0 or the time the policy holds it until.
  uint64_t form_direct(Batcher& b, uint64_t now_ns, bool arrivals_possible, Placement* out);
  uint64_t form_oldest(Batcher& b, uint64_t now_ns, bool arrivals_possible, Placement* out);
  // Takes slot `s`'s next request into `out`, freeing the slot after an END.
  void take(Batcher& b, uint32_t s, Placement* out);

  SequenceConfig config_;
  uint32_t slots_per_instance_;
  std::vector<Batcher> batchers_;
  std::unordered_map<uint32_t, uint32_t> batcher_of_;    // instance id -> index
  std::unordered_map<std::string, Where> active_;        // correlation key -> where
  std::list<Backlog> backlog_;                           // sequences waiting for a slot
  std::unordered_map<std::string, uint64_t> last_seen_;  // key -> last enqueue (ns)
  uint64_t next_reap_ns_ = 0;                            // 0: nothing to reap
  uint64_t next_expiry_ns_ = 0;  // earliest backlog deadline (maybe gone since); 0: none
  size_t queued_ = 0;            // requests held, all queues
  uint64_t own_sequences_ = 0;   // iterative: the keys of requests without a correlation id
  std::string key_;              // scratch
};

}  // namespace naiad
