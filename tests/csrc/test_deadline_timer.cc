// The I/O loop's deadline heap and timerfd (csrc/http1/deadline_timer.h), on an injected
// clock: expire() takes `now`, and the fd is armed to absolute CLOCK_MONOTONIC times.
#include <poll.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "http1/deadline_timer.h"
#include "testing.h"

using namespace naiad;

namespace {

bool readable(int fd) {
  pollfd wait{fd, POLLIN, 0};
  return ::poll(&wait, 1, 0) == 1;
}

std::vector<uint32_t> streams(const std::vector<DeadlineTimer::Key>& keys) {
  std::vector<uint32_t> out;
  for (const DeadlineTimer::Key& key : keys) out.push_back(key.stream);
  return out;
}

}  // namespace

TEST(deadline_timer_expires_the_due_keys_earliest_first) {
  DeadlineTimer timer;
  timer.add(300, {7, 3});
  timer.add(100, {7, 1});
  timer.add(200, {8, 2});
  CHECK(timer.next() == 100);
  std::vector<DeadlineTimer::Key> due;
  timer.expire(99, &due);
  CHECK(due.empty());
  timer.expire(200, &due);  // at the deadline counts as passed
  CHECK(streams(due) == std::vector<uint32_t>({1, 2}));
  CHECK(due[1].connection == 8);
  CHECK(timer.size() == 1);
  CHECK(timer.next() == 300);
  due.clear();
  timer.expire(UINT64_MAX - 1, &due);
  CHECK(streams(due) == std::vector<uint32_t>({3}));
  CHECK(timer.size() == 0);
  CHECK(timer.next() == UINT64_MAX);
}

TEST(deadline_timer_removes_any_entry_by_handle_and_reuses_handles) {
  DeadlineTimer timer;
  // Deadlines in a scrambled order; every third removed: the rest expire in order.
  std::vector<uint32_t> handles;
  std::vector<uint64_t> kept;
  for (uint32_t i = 0; i < 60; ++i) {
    const uint64_t deadline = 1000 + (i * 37) % 61;
    handles.push_back(timer.add(deadline, {1, i}));
    if (i % 3 != 0) kept.push_back(deadline);
  }
  for (uint32_t i = 0; i < 60; i += 3) timer.remove(handles[i]);
  timer.remove(DeadlineTimer::kNone);  // nothing
  CHECK(timer.size() == kept.size());
  CHECK(timer.at(handles[1]) == 1000 + 37);
  // A freed handle is reused; its entry is the new one.
  const uint32_t again = timer.add(5, {2, 99});
  CHECK(again == handles[57]);
  CHECK(timer.at(again) == 5);
  std::vector<DeadlineTimer::Key> due;
  timer.expire(UINT64_MAX - 1, &due);
  CHECK(due.size() == kept.size() + 1);
  CHECK(due[0].stream == 99);
  std::sort(kept.begin(), kept.end());
  for (size_t i = 0; i < kept.size(); ++i) {
    const uint32_t stream = due[i + 1].stream;
    CHECK(1000 + (stream * 37) % 61 == kept[i]);
  }
}

TEST(deadline_timer_fd_is_readable_once_the_earliest_deadline_passed) {
  DeadlineTimer timer;
  CHECK(!readable(timer.fd()));
  // Absolute CLOCK_MONOTONIC nanoseconds: 1 ns after boot has passed, a century has not.
  const uint64_t far = DeadlineTimer::deadline_of(0, int64_t(99) * 365 * 24 * 3600 * 1000000);
  timer.add(far, {1, 1});
  CHECK(!readable(timer.fd()));
  timer.add(1, {1, 3});  // earlier than the armed one: re-armed
  CHECK(readable(timer.fd()));
  std::vector<DeadlineTimer::Key> due;
  timer.expire(2, &due);  // read, and armed to the far one
  CHECK(streams(due) == std::vector<uint32_t>({3}));
  CHECK(!readable(timer.fd()));
  due.clear();
  timer.expire(2, &due);  // a wake-up that finds nothing due
  CHECK(due.empty());
  CHECK(timer.size() == 1);
}

TEST(deadline_timer_takes_grpc_timeouts_as_grpcxx_does) {
  CHECK(DeadlineTimer::deadline_of(1000, 0) == 1000);  // due at once
  CHECK(DeadlineTimer::deadline_of(1000, 5) == 6000);
  CHECK(DeadlineTimer::deadline_of(1000, -1) == UINT64_MAX);  // none
  // The largest grpc-timeout (99999999H, ~11,400 years) is no deadline, not an overflow.
  CHECK(DeadlineTimer::deadline_of(1000, int64_t(99999999) * 3600 * 1000000) == UINT64_MAX);
}
