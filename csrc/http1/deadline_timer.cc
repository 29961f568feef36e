#include "http1/deadline_timer.h"

#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace naiad {

namespace {

// Past this a deadline is none: about 100 years, far inside uint64 nanoseconds.
constexpr uint64_t kFarthestUs = uint64_t(100) * 365 * 24 * 3600 * 1000000;

}  // namespace

DeadlineTimer::DeadlineTimer() {
  fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (fd_ < 0) {
    throw std::runtime_error(std::string("deadline timer: ") + std::strerror(errno));
  }
}

DeadlineTimer::~DeadlineTimer() { ::close(fd_); }

uint64_t DeadlineTimer::deadline_of(uint64_t now_ns, int64_t timeout_us) {
  if (timeout_us < 0 || static_cast<uint64_t>(timeout_us) > kFarthestUs) return UINT64_MAX;
  return now_ns + static_cast<uint64_t>(timeout_us) * 1000;
}

uint32_t DeadlineTimer::add(uint64_t deadline_ns, Key key) {
  uint32_t handle;
  if (free_.empty()) {
    handle = static_cast<uint32_t>(position_.size());
    position_.push_back(0);
  } else {
    handle = free_.back();
    free_.pop_back();
  }
  heap_.push_back(Entry{deadline_ns, key, handle});
  position_[handle] = static_cast<uint32_t>(heap_.size() - 1);
  sift_up(heap_.size() - 1);
  if (deadline_ns < armed_) arm(deadline_ns);
  return handle;
}

void DeadlineTimer::remove(uint32_t handle) {
  if (handle == kNone) return;
  const size_t at = position_[handle];
  free_.push_back(handle);
  const Entry last = heap_.back();
  heap_.pop_back();
  if (at == heap_.size()) return;  // it was the last
  place(at, last);
  sift_up(at);
  sift_down(position_[last.handle]);
}

void DeadlineTimer::expire(uint64_t now_ns, std::vector<Key>* due) {
  uint64_t count;
  [[maybe_unused]] ssize_t got = ::read(fd_, &count, sizeof count);  // EAGAIN: not fired
  armed_ = UINT64_MAX;                                               // a fired timerfd is disarmed
  while (!heap_.empty() && heap_[0].deadline_ns <= now_ns) {
    due->push_back(heap_[0].key);
    remove(heap_[0].handle);
  }
  arm(next());
}

void DeadlineTimer::place(size_t at, Entry entry) {
  heap_[at] = entry;
  position_[entry.handle] = static_cast<uint32_t>(at);
}

void DeadlineTimer::sift_up(size_t at) {
  const Entry entry = heap_[at];
  while (at > 0) {
    const size_t parent = (at - 1) / 2;
    if (heap_[parent].deadline_ns <= entry.deadline_ns) break;
    place(at, heap_[parent]);
    at = parent;
  }
  place(at, entry);
}

void DeadlineTimer::sift_down(size_t at) {
  const Entry entry = heap_[at];
  for (;;) {
    size_t child = 2 * at + 1;
    if (child >= heap_.size()) break;
    if (child + 1 < heap_.size() && heap_[child + 1].deadline_ns < heap_[child].deadline_ns) {
      ++child;
    }
    if (entry.deadline_ns <= heap_[child].deadline_ns) break;
    place(at, heap_[child]);
    at = child;
  }
  place(at, entry);
}

void DeadlineTimer::arm(uint64_t deadline_ns) {
  if (deadline_ns == armed_) return;
  itimerspec when{};
  if (deadline_ns != UINT64_MAX) {
    // 0 disarms a timerfd: a deadline at the clock's origin is due at once anyway.
    const uint64_t at = deadline_ns == 0 ? 1 : deadline_ns;
    when.it_value.tv_sec = static_cast<time_t>(at / 1000000000);
    when.it_value.tv_nsec = static_cast<long>(at % 1000000000);
  }
  timerfd_settime(fd_, TFD_TIMER_ABSTIME, &when, nullptr);
  armed_ = deadline_ns;
}

}  // namespace naiad
