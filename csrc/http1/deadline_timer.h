// The deadlines of one I/O loop's calls (gRPC's grpc-timeout): a min-heap of
// (deadline, key) that also removes any entry by its handle, and a timerfd in the loop's
// epoll set armed to the earliest deadline, so that the loop wakes when one passes
// whoever drives it (an IoThread, or Python's event loop watching the epoll fd).
//
// The fd is re-armed only when a deadline earlier than the armed one comes, or when
// expire() runs: a removed earliest entry costs one wake-up that finds nothing due,
// rather than a syscall per answered call. The clock is the caller's (expire's `now`,
// CLOCK_MONOTONIC nanoseconds in the loop), so tests drive it without sleeping.
//
// Threads: the loop's owning thread only, as the loop (http_io.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace naiad {

class DeadlineTimer {
 public:
  // What a deadline is for: a call (stream) of a connection.
  struct Key {
    uint64_t connection = 0;
    uint32_t stream = 0;
  };
  static constexpr uint32_t kNone = UINT32_MAX;

  // Makes the timerfd; std::runtime_error when it cannot.
  DeadlineTimer();
  ~DeadlineTimer();
  DeadlineTimer(const DeadlineTimer&) = delete;
  DeadlineTimer& operator=(const DeadlineTimer&) = delete;

  int fd() const { return fd_; }
  // A deadline for `key` at `deadline_ns`: its handle, for remove().
  uint32_t add(uint64_t deadline_ns, Key key);
  // The deadline of `handle` is no longer wanted (kNone: nothing).
  void remove(uint32_t handle);
  // The keys whose deadlines are at or before `now_ns`, earliest first, taken out of the
  // heap; the fd is read (no longer readable) and armed to the next deadline.
  void expire(uint64_t now_ns, std::vector<Key>* due);
  // The deadline of `handle` (not kNone).
  uint64_t at(uint32_t handle) const { return heap_[position_[handle]].deadline_ns; }
  size_t size() const { return heap_.size(); }
  // The earliest deadline (UINT64_MAX: none).
  uint64_t next() const { return heap_.empty() ? UINT64_MAX : heap_[0].deadline_ns; }

  // A grpc-timeout of `timeout_us` from `now_ns` as a deadline; UINT64_MAX when it is so
  // far that it is none (as grpc++ takes a deadline past its clock's range for infinite).
  static uint64_t deadline_of(uint64_t now_ns, int64_t timeout_us);

 private:
  struct Entry {
    uint64_t deadline_ns;
    Key key;
    uint32_t handle;
  };
  void place(size_t at, Entry entry);  // entry at heap_[at], its handle's position kept
  void sift_up(size_t at);
  void sift_down(size_t at);
  void arm(uint64_t deadline_ns);  // the timerfd at `deadline_ns` (UINT64_MAX: disarmed)

  int fd_ = -1;
  uint64_t armed_ = UINT64_MAX;
  std::vector<Entry> heap_;
  std::vector<uint32_t> position_;  // by handle: the entry's index in heap_
  std::vector<uint32_t> free_;      // handles to reuse
};

}  // namespace naiad
