// The I/O loops (HttpIo) of one front end when it runs several, each on a thread of
// its own (io_thread.h) with its own epoll set, its own lane and codec (they are
// single-threaded), sharing one Core.
//
// Ownership: a connection belongs to one loop for its whole life; only that loop's
// thread reads, writes or closes it. The loop holding a listener accepts and hands
// each new connection to the next loop, round robin (HttpIo::accept_all), through the
// target's mailbox; from then on the target alone touches it. A request's id carries
// its loop (Core::new_request_id's owner, set on the loop's codec by add()), so a
// completion's requests are known to be whose without asking anyone: whichever thread
// polls the core posts each loop its share (HttpIo::route), and the loop that sends
// a request is the one that answers it.
//
// Threads: add() before any loop serves, then fixed; size(), loop(), next_loop() and
// owner_of() from any thread (next_loop is one atomic; the rest read what add() set).
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "codec/kserve_codec.h"
#include "core/core.h"

namespace naiad {

class HttpIo;

class IoGroup {
 public:
  IoGroup() = default;
  IoGroup(const IoGroup&) = delete;
  IoGroup& operator=(const IoGroup&) = delete;

  // `io` becomes loop size(); `codec` is its lane's, which tags the loop's request ids.
  // std::length_error past Core::kMaxOwner loops.
  void add(HttpIo& io, KServeCodec& codec);
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

 private:
  std::vector<HttpIo*> loops_;
  std::atomic<uint64_t> next_{0};
};

}  // namespace naiad
