// The I/O loops (HttpIo) of one front end when it runs several, each on a thread of
// its own (io_thread.h) with its own epoll set, its own lane and codec (they are
// single-threaded), sharing one Core.
//
// Ownership: a connection belongs to one loop for its whole life; only that loop's
// thread reads, writes or closes it. The loop holding a listener accepts and hands
// each new connection to the next loop, round robin (HttpIo::accept_all), through the
// target's mailbox; from then on the target alone touches it. A request's id carries
// its loop (Core::new_request_id's owner, which the loop sets on its codec while it
// takes requests: HttpIo::TakingIds), so a completion's requests are known to be whose
// without asking anyone: whichever thread
// polls the core posts each loop its share (HttpIo::route), and the loop that sends
// a request is the one that answers it.
//
// The batcher's arrivals hint (Scheduler::schedule) is the group's: each loop publishes
// its connections' arrival counts (publish(), relaxed stores to a line of its own) and
// adds the others' when it flushes the core, so that a loop whose clients all wait
// does not let a batch go while another loop's clients could still send.
//
// Threads: add() before any loop serves, then fixed; size(), loop(), next_loop() and
// owner_of() from any thread (next_loop is one atomic; the rest read what add() set);
// publish(index, ...) from loop `index`'s thread, others() from any.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "core/core.h"

namespace naiad {

class HttpIo;

class IoGroup {
 public:
  IoGroup() = default;
  IoGroup(const IoGroup&) = delete;
  IoGroup& operator=(const IoGroup&) = delete;

  // `io` becomes loop size(); std::length_error past Core::kMaxOwner loops.
  void add(HttpIo& io);
  uint32_t size() const { return static_cast<uint32_t>(loops_.size()); }
  HttpIo& loop(uint32_t index) const { return *loops_[index]; }
  // The loop the next accepted connection goes to.
  uint32_t next_loop() {
    return static_cast<uint32_t>(next_.fetch_add(1, std::memory_order_relaxed) % loops_.size());
  }
  // The loop that answers `request_id`; -1 for a request no loop sent (a worker's,
  // Python's general path).
  int owner_of(uint64_t request_id) const {
    const uint32_t owner = Core::request_owner(request_id);
    return owner == 0 || owner > loops_.size() ? -1 : static_cast<int>(owner - 1);
  }
  // Loop `index`'s connections counted open, and waiting for answers
  // (scheduling/arrivals.py's terms).
  void publish(uint32_t index, uint32_t open, uint32_t waiting) {
    counts_[index].open.store(open, std::memory_order_relaxed);
    counts_[index].waiting.store(waiting, std::memory_order_relaxed);
  }
  // The other loops' counts, added to `open` and `waiting`.
  void others(uint32_t index, uint32_t* open, uint32_t* waiting) const {
    for (uint32_t i = 0; i < loops_.size(); ++i) {
      if (i == index) continue;
      *open += counts_[i].open.load(std::memory_order_relaxed);
      *waiting += counts_[i].waiting.load(std::memory_order_relaxed);
    }
  }

 private:
  struct alignas(64) Counts {
    std::atomic<uint32_t> open{0}, waiting{0};
  };
  std::vector<HttpIo*> loops_;
  std::atomic<uint64_t> next_{0};
  Counts counts_[Core::kMaxOwner];
};

}  // namespace naiad
