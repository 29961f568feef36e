// Unit tests of the C++ core: the shared arena allocator, the SPSC channel with its
// eventfd wake-ups, and the core's batch forming and failure handling. A worker is
// played by a thread (or a forked process) holding a WorkerEndpoint.
#include <dirent.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/core.h"
#include "fake_worker.h"
#include "ipc/arena.h"
#include "ipc/ipc_schema.h"
#include "ipc/worker_endpoint.h"
#include "testing.h"

using namespace naiad;
using namespace naiad_testing;

namespace {

TEST(arena_alloc_free_coalesces) {
  Arena arena = Arena::create(1 << 20);
  ArenaStats empty = arena.stats();
  CHECK(empty.blocks_in_use == 0);
  uint64_t a = arena.alloc(100);
  uint64_t b = arena.alloc(5000);
  uint64_t c = arena.alloc(1);
  CHECK(a != 0 && b != 0 && c != 0);
  CHECK(a % kArenaAlign == 0 && b % kArenaAlign == 0 && c % kArenaAlign == 0);
  std::memset(arena.base() + b, 0xab, 5000);  // writing the whole block harms no neighbour
  CHECK(arena.stats().blocks_in_use == 3);
  arena.free(b);
  arena.free(a);
  arena.free(c);
  ArenaStats after = arena.stats();
  CHECK(after.blocks_in_use == 0);
  CHECK(after.bytes_in_use == 0);
  CHECK(after.largest_free == empty.largest_free);  // fully merged again
}

TEST(arena_exhaustion_returns_zero_and_recovers) {
  Arena arena = Arena::create(1 << 16);
  std::vector<uint64_t> blocks;
  for (;;) {
    uint64_t off = arena.alloc(1000);
    if (off == 0) break;
    blocks.push_back(off);
  }
  CHECK(blocks.size() > 10);
  CHECK(arena.alloc(1 << 20) == 0);
  for (uint64_t off : blocks) arena.free(off);
  CHECK(arena.alloc(30000) != 0);
}

TEST(arena_free_tagged_reclaims_one_owner) {
  Arena arena = Arena::create(1 << 20);
  uint64_t keep = arena.alloc(64, 7);
  arena.alloc(64, 9);
  arena.alloc(300, 9);
  CHECK(arena.free_tagged(9) == 2);
  CHECK(arena.stats().blocks_in_use == 1);
  arena.free(keep);
  CHECK(arena.stats().blocks_in_use == 0);
}

TEST(arena_is_shared_across_processes) {
  Arena arena = Arena::create(1 << 20);
  pid_t pid = fork();
  if (pid == 0) {
    Arena child = Arena::attach(dup(arena.fd()));
    uint64_t off = child.alloc(16, 42);
    std::memcpy(child.base() + off, "from-child", 11);
    _exit(off == 0 ? 1 : 0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK(arena.stats().blocks_in_use == 1);
  CHECK(arena.free_tagged(42) == 1);
}

TEST(core_round_trip_frees_everything) {
  Core core(1 << 22);
  ModelHandle model = core.add_model(batching(8, true));
  uint32_t instance = core.add_instance(model);
  ArenaStats baseline = core.arena().stats();
  core.instance_up(instance);
  {
    FakeWorker worker(core, instance);
    CHECK(submit_bytes(core, model, 11, "hello"));
    std::vector<Completion> done = collect(core, 1);
    CHECK(done.size() == 1);
    CHECK(done[0].status == kCompletionOk);
    CHECK(done[0].request_ids.size() == 1 && done[0].request_ids[0] == 11);
    core.stop_instance(instance);
  }
  CHECK(core.assembler().slabs() == 0);
  CHECK(core.arena().stats().blocks_in_use == baseline.blocks_in_use);
  CHECK(core.in_flight() == 0);
}

TEST(core_batches_queued_requests_up_to_max_batch_size) {
  Core core(1 << 22);
  ModelHandle model = core.add_model(batching(4, true));
  uint32_t instance = core.add_instance(model);
  // Queue before the instance is up, so the batcher sees them all at once.
  for (uint64_t id = 1; id <= 10; ++id) CHECK(submit_bytes(core, model, id, "x"));
  // Queued: the channel and the model's staging slab, holding the ten requests' rows.
  CHECK(core.arena().stats().blocks_in_use == 1 + 1);
  CHECK(core.assembler().slabs() == 1 && core.assembler().placed_bytes() == 10);
  core.instance_up(instance);
  FakeWorker worker(core, instance);
  std::vector<Completion> done = collect(core, 10);
  std::vector<size_t> sizes;
  std::vector<uint64_t> order;
  for (const Completion& c : done) {
    sizes.push_back(c.request_ids.size());
    order.insert(order.end(), c.request_ids.begin(), c.request_ids.end());
  }
  CHECK((sizes == std::vector<size_t>{4, 4, 2}));
  CHECK((order == std::vector<uint64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  core.stop_instance(instance);
}

TEST(core_requests_submitted_together_leave_in_one_batch) {
  Core core(1 << 22);
  ModelHandle model = core.add_model(batching(8, true));
  uint32_t instance = core.add_instance(model);
  core.instance_up(instance);
  FakeWorker worker(core, instance);
  // The instance is idle, yet nothing leaves before flush(): the frontend submits
  // all requests of one event-loop turn first.
  for (uint64_t id = 1; id <= 3; ++id) CHECK(submit_bytes(core, model, id, "x"));
  CHECK(core.in_flight() == 0);
  // Queued: the channel and the model's staging slab, holding the three requests' rows.
  CHECK(core.arena().stats().blocks_in_use == 1 + 1);
  CHECK(core.assembler().slabs() == 1 && core.assembler().placed_bytes() == 3);
  core.flush();
  std::vector<Completion> done = collect(core, 3);
  CHECK(done.size() == 1 && done[0].request_ids.size() == 3);
  core.stop_instance(instance);
}

TEST(core_counts_request_batch_sizes_not_requests) {
  Core core(1 << 22);
  ModelHandle model = core.add_model(batching(8, true));
  uint32_t instance = core.add_instance(model);
  CHECK(submit_bytes(core, model, 1, "a", 5));
  CHECK(submit_bytes(core, model, 2, "b", 4));  // 5 + 4 > 8: next batch
  CHECK(submit_bytes(core, model, 3, "c", 3));
  core.instance_up(instance);
  FakeWorker worker(core, instance);
  std::vector<Completion> done = collect(core, 3);
  CHECK(done.size() == 2);
  CHECK(done.size() == 2 && done[0].request_ids.size() == 1 && done[1].request_ids.size() == 2);
  core.stop_instance(instance);
}

TEST(core_without_dynamic_batching_runs_one_request_per_execution) {
  Core core(1 << 22);
  ModelHandle model = core.add_model(batching(8, false));
  uint32_t instance = core.add_instance(model);
  for (uint64_t id = 1; id <= 5; ++id) CHECK(submit_bytes(core, model, id, "x"));
  core.instance_up(instance);
  FakeWorker worker(core, instance);
  std::vector<Completion> done = collect(core, 5);
  CHECK(done.size() == 5);
  core.stop_instance(instance);
  CHECK(worker.max_batch.load() == 1);
}

TEST(core_instance_down_fails_in_flight_and_reclaims_worker_blocks) {
  Core core(1 << 22);
  ModelHandle model = core.add_model(batching(8, true));
  uint32_t instance = core.add_instance(model);
  ArenaStats baseline = core.arena().stats();
  core.instance_up(instance);
  CHECK(submit_bytes(core, model, 5, "payload"));
  CHECK(core.running_since(instance) == 0);  // queued, not running
  core.flush();
  CHECK(core.in_flight() == 1);
  // The execution timeout's clock (scheduling/instance.py) starts at the dispatch.
  CHECK(core.running_since(instance) != 0);
  // A worker that took the batch, allocated its result, then died.
  InstanceEndpoint ep = core.endpoint(instance);
  WorkerEndpoint dying(dup(core.arena().fd()), ep.channel_offset, dup(ep.wake_fd),
                       dup(core.notify_fd()));
  BatchMessage message = dying.next();
  CHECK(message.kind == MessageKind::kBatch);
  CHECK(dying.arena().alloc(1000, message.batch_id) != 0);
  std::vector<Completion> failed = core.instance_down(instance);
  CHECK(failed.size() == 1);
  CHECK(failed[0].status == kCompletionInstanceDied);
  CHECK(failed[0].request_ids == std::vector<uint64_t>{5});
  CHECK(core.running_since(instance) == 0);
  CHECK(core.arena().stats().blocks_in_use == baseline.blocks_in_use);
  // Queued work waits for the restarted instance instead of being lost.
  CHECK(submit_bytes(core, model, 6, "later"));
  CHECK(core.arena().stats().blocks_in_use == baseline.blocks_in_use + 1);
  core.instance_up(instance);
  FakeWorker worker(core, instance);
  std::vector<Completion> done = collect(core, 1);
  CHECK(done.size() == 1 && done[0].request_ids[0] == 6);
  core.stop_instance(instance);
}

TEST(core_two_instances_share_a_model_queue) {
  Core core(1 << 24);
  ModelHandle model = core.add_model(batching(4, true));
  uint32_t a = core.add_instance(model);
  uint32_t b = core.add_instance(model);
  core.instance_up(a);
  core.instance_up(b);
  FakeWorker wa(core, a);
  FakeWorker wb(core, b);
  const int total = 2000;
  std::atomic<int> submitted{0};
  size_t completed = 0;
  while (completed < static_cast<size_t>(total)) {
    if (submitted < total) {
      CHECK(submit_bytes(core, model, static_cast<uint64_t>(submitted + 1), "abc"));
      submitted++;
    }
    for (Completion& c : core.poll()) {
      completed += c.request_ids.size();
      core.arena().free(c.result_offset);
    }
  }
  CHECK(completed == static_cast<size_t>(total));
  CHECK(wa.batches.load() > 0 && wb.batches.load() > 0);
  core.stop_instance(a);
  core.stop_instance(b);
}

TEST(core_submit_reports_a_full_arena) {
  Core core(1 << 16);
  ModelHandle model = core.add_model(batching(1, false));
  std::string big(1 << 17, 'x');
  CHECK(!submit_bytes(core, model, 1, big));
  CHECK(core.arena().stats().blocks_in_use == 0);
}

}  // namespace

namespace {

struct ManualClock {
  uint64_t now = 1000000;
};

TEST(core_preserve_ordering_holds_later_batches) {
  BatcherConfig config = batching(1, true);
  config.preserve_ordering = true;
  Core core(1 << 22);
  ModelHandle model = core.add_model(config);
  uint32_t a = core.add_instance(model);
  uint32_t b = core.add_instance(model);
  core.instance_up(a);
  core.instance_up(b);
  auto attach = [&](uint32_t instance) {
    InstanceEndpoint ep = core.endpoint(instance);
    return std::make_unique<WorkerEndpoint>(dup(core.arena().fd()), ep.channel_offset,
                                            dup(ep.wake_fd), dup(core.notify_fd()));
  };
  auto wa = attach(a);
  auto wb = attach(b);
  CHECK(submit_bytes(core, model, 1, "first"));
  CHECK(submit_bytes(core, model, 2, "second"));
  core.flush();
  BatchMessage ma = wa->next();
  BatchMessage mb = wb->next();
  wb->complete(mb.batch_id, 0, 0, kCompletionOk);  // the later batch finishes first
  CHECK(core.poll().empty());
  wa->complete(ma.batch_id, 0, 0, kCompletionOk);
  std::vector<Completion> done = core.poll();
  CHECK(done.size() == 2);
  CHECK(done.size() == 2 && done[0].request_ids[0] == 1 && done[1].request_ids[0] == 2);
}

// Waits (up to 5 s) for the core's notify eventfd without calling Core::poll, which
// would dispatch what is due itself: what a worker answers meanwhile was sent by the
// timer thread.
bool notified(Core& core) {
  pollfd p{core.notify_fd(), POLLIN, 0};
  return ::poll(&p, 1, 5000) == 1;
}

// What the core's timerfd is armed for now: the time left, from its it_value in
// /proc/self/fdinfo (0 when disarmed). What the timer waits for, without waiting for it.
// -1 unless exactly one timerfd is open (the test's core's).
int64_t timer_left_ns() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int found = -1;
  int count = 0;
  while (dirent* entry = readdir(dir)) {
    char link[64] = {};
    const std::string path = std::string("/proc/self/fd/") + entry->d_name;
    if (readlink(path.c_str(), link, sizeof link - 1) <= 0) continue;
    if (std::strcmp(link, "anon_inode:[timerfd]") == 0) {
      found = std::atoi(entry->d_name);
      ++count;
    }
  }
  closedir(dir);
  if (count != 1) return -1;
  const std::string info = "/proc/self/fdinfo/" + std::to_string(found);
  FILE* file = std::fopen(info.c_str(), "r");
  if (file == nullptr) return -1;
  int64_t left = -1;
  char line[128];
  while (std::fgets(line, sizeof line, file) != nullptr) {
    long long sec = 0, nsec = 0;
    if (std::sscanf(line, "it_value: (%lld, %lld)", &sec, &nsec) == 2) {
      left = sec * 1000000000LL + nsec;
    }
  }
  std::fclose(file);
  return left;
}

// A held batch leaves at its deadline, sent by the timer thread, which the core sets to
// wake then: once, not before (the real clock), and not later (what it is armed for).
TEST(core_queue_delay_is_enforced_by_the_timer_thread) {
  BatcherConfig config = batching(8, true);
  config.max_queue_delay_us = 2000;
  Core core(1 << 22);
  ModelHandle model = core.add_model(config);
  uint32_t instance = core.add_instance(model);
  core.instance_up(instance);
  FakeWorker worker(core, instance);
  uint64_t start = monotonic_ns();
  CHECK(submit_bytes(core, model, 1, "lone"));
  core.flush();
  CHECK(core.in_flight() == 0);  // held for the delay
  // Armed for its deadline, not later (0 once it fired): "not long after it" with no
  // bound on how fast this machine is.
  const int64_t left = timer_left_ns();
  CHECK(left >= 0 && left <= 2000000);
  CHECK(notified(core));
  std::vector<Completion> done = collect(core, 1);
  uint64_t waited = done.empty() ? 0 : done[0].dispatch_ns - start;
  CHECK(done.size() == 1);
  CHECK(waited >= 2000000);  // not before the delay
  CHECK(core.timer_wakeups() == 1);
  core.stop_instance(instance);
}

// One that leaves before its deadline (the frontend saw every client waiting, or the
// batch filled) clears the timer: the thread is not woken for it.
TEST(core_a_batch_leaving_before_its_deadline_clears_the_timer) {
  BatcherConfig config = batching(8, true);
  // Far beyond the test's run: the batch can only leave because no client can send.
  config.max_queue_delay_us = 600000000;
  Core core(1 << 22);
  ModelHandle model = core.add_model(config);
  uint32_t instance = core.add_instance(model);
  core.instance_up(instance);
  FakeWorker worker(core, instance);
  CHECK(submit_bytes(core, model, 2, "held"));
  core.flush();
  CHECK(core.in_flight() == 0);  // held: the timer is set
  CHECK(core.timer_settings() == 1);
  CHECK(timer_left_ns() > 0);
  core.flush(false);  // no client can send more: it leaves now
  CHECK(collect(core, 1).size() == 1);
  // Disarmed, not left to fire for nothing: the thread cannot wake for it.
  CHECK(timer_left_ns() == 0);
  CHECK(core.timer_settings() == 2);
  CHECK(core.timer_wakeups() == 0);
  core.stop_instance(instance);
}

// The timer waits for the earliest deadline of any model: a later model's held batch
// that comes first does not delay an earlier one, and when the batch it waited for
// leaves early (here: full), it waits for the next deadline instead of waking for none.
TEST(core_timer_follows_the_earliest_deadline_across_models) {
  BatcherConfig slow = batching(8, true);
  slow.max_queue_delay_us = 300000;
  BatcherConfig fast = batching(2, true);
  fast.max_queue_delay_us = 20000;
  // A clock the test moves: what is due when the timer thread wakes is then decided by
  // the test, not by how late a loaded machine wakes it (it still sleeps in real time).
  std::atomic<uint64_t> now{1000000000};
  Core core(1 << 22, [&now] { return now.load(); });
  ModelHandle slow_model = core.add_model(slow);
  ModelHandle fast_model = core.add_model(fast);
  uint32_t slow_instance = core.add_instance(slow_model);
  uint32_t fast_instance = core.add_instance(fast_model);
  core.instance_up(slow_instance);
  core.instance_up(fast_instance);
  FakeWorker slow_worker(core, slow_instance);
  FakeWorker fast_worker(core, fast_instance);

  uint64_t start = now;
  CHECK(submit_bytes(core, slow_model, 1, "slow"));
  core.flush();
  CHECK(submit_bytes(core, fast_model, 2, "fast"));
  core.flush();
  // Armed for the fast model's 20 ms, not the slow one's 300 ms it was set to first
  // (each time it wakes before the test moves the clock, it is armed for 20 ms again).
  int64_t left = timer_left_ns();
  CHECK(left >= 0 && left <= 20000000);
  now = start + 20000000;
  CHECK(notified(core));
  std::vector<Completion> done = collect(core, 1);  // the fast model's, at its 20 ms
  CHECK(done.size() == 1 && done[0].request_ids[0] == 2);
  CHECK(done.size() == 1 && done[0].dispatch_ns == start + 20000000);
  CHECK(core.held_for_idle() == start + 300000000);  // the slow one is still held
  now = start + 300000000;
  CHECK(notified(core));
  done = collect(core, 1);  // then the slow model's, at its 300 ms
  CHECK(done.size() == 1 && done[0].request_ids[0] == 1);
  CHECK(done.size() == 1 && done[0].dispatch_ns == start + 300000000);

  start = now;
  CHECK(submit_bytes(core, slow_model, 3, "slow"));
  core.flush();
  CHECK(submit_bytes(core, fast_model, 4, "fast"));
  core.flush();  // the timer now waits for the fast model's 20 ms
  left = timer_left_ns();
  CHECK(left >= 0 && left <= 20000000);
  const uint64_t full_at = monotonic_ns();
  CHECK(submit_bytes(core, fast_model, 5, "fast, full"));
  core.flush();  // a full batch of two: it leaves, and the timer goes back to 300 ms
  left = timer_left_ns();
  const uint64_t read_at = monotonic_ns();
  // It expires (or expired) no sooner than 300 ms after the batch filled, on the real
  // clock the timerfd runs on: a lower bound, so a slow machine cannot fail it.
  CHECK(left >= 0 && read_at + static_cast<uint64_t>(left) >= full_at + 300000000);
  done = collect(core, 2);
  CHECK(done.size() == 1 && done[0].request_ids.size() == 2);
  CHECK(core.held_for_idle() == start + 300000000);
  now = start + 300000000;
  CHECK(notified(core));
  done = collect(core, 1);
  CHECK(done.size() == 1 && done[0].request_ids[0] == 3);
  CHECK(done.size() == 1 && done[0].dispatch_ns == start + 300000000);
  core.stop_instance(slow_instance);
  core.stop_instance(fast_instance);
}

// While the frontend's turn defers the timer, a deadline that passes is met by the turn:
// dispatch_due() between its events, or settle_timer() as it ends. Neither sets the
// timerfd nor wakes the timer thread (a timer that expires at once would cost both).
TEST(core_a_deadline_passing_in_a_deferred_turn_is_met_by_the_turn) {
  BatcherConfig config = batching(8, true);
  config.max_queue_delay_us = 20000;  // 20 ms
  // A clock the test moves: "not due yet" is then true however slow the machine is.
  std::atomic<uint64_t> now{1000000};
  Core core(1 << 22, [&now] { return now.load(); });
  ModelHandle model = core.add_model(config);
  uint32_t instance = core.add_instance(model);
  core.instance_up(instance);
  FakeWorker worker(core, instance);

  core.defer_timer();
  CHECK(submit_bytes(core, model, 1, "held"));
  core.flush();
  now += 19999999;
  core.dispatch_due();  // 1 ns before its deadline: it stays held
  CHECK(core.in_flight() == 0);
  now += 1;
  core.dispatch_due();  // due: it leaves, on this thread
  CHECK(core.in_flight() == 1);
  core.settle_timer();  // nothing left to wait for
  std::vector<Completion> done = collect(core, 1);
  CHECK(done.size() == 1 && done[0].dispatch_ns == 1000000 + 20000000);

  core.defer_timer();
  const uint64_t start = now;
  CHECK(submit_bytes(core, model, 2, "held, then the turn ends"));
  core.flush();
  now += 30000000;
  core.settle_timer();  // due: it leaves as the turn ends
  CHECK(core.in_flight() == 1);
  done = collect(core, 1);
  CHECK(done.size() == 1 && done[0].request_ids[0] == 2);
  CHECK(done.size() == 1 && done[0].dispatch_ns == start + 30000000);
  CHECK(core.timer_settings() == 0);
  CHECK(core.timer_wakeups() == 0);

  core.stop_instance(instance);
}

// Several I/O loops' turns defer the timer at once: the first to end leaves the timer
// to the others, and the last sets it to the deadline a batch is still held for.
TEST(core_the_last_of_overlapping_deferred_turns_sets_the_timer) {
  BatcherConfig config = batching(8, true);
  config.max_queue_delay_us = 600000000;  // far beyond the test: it stays held
  Core core(1 << 22);
  ModelHandle model = core.add_model(config);
  uint32_t instance = core.add_instance(model);
  core.instance_up(instance);
  FakeWorker worker(core, instance);
  core.defer_timer();  // loop 0's turn
  core.defer_timer();  // loop 1's
  CHECK(submit_bytes(core, model, 1, "held"));
  core.flush();
  CHECK(core.in_flight() == 0);
  core.settle_timer();  // loop 0's ends: loop 1's goes on
  CHECK(core.timer_settings() == 0);
  core.settle_timer();
  CHECK(core.timer_settings() == 1);
  CHECK(timer_left_ns() > 0);
  core.flush(false);
  CHECK(collect(core, 1).size() == 1);
  core.stop_instance(instance);
}

// Outside a deferred turn the timer thread meets a deadline, and dispatch_due() after the
// batch left finds nothing.
TEST(core_a_deadline_outside_a_deferred_turn_is_met_by_the_timer_thread) {
  BatcherConfig config = batching(8, true);
  config.max_queue_delay_us = 20000;  // 20 ms
  Core core(1 << 22);
  ModelHandle model = core.add_model(config);
  uint32_t instance = core.add_instance(model);
  core.instance_up(instance);
  FakeWorker worker(core, instance);
  CHECK(submit_bytes(core, model, 3, "timer"));
  core.flush();
  CHECK(notified(core));
  CHECK(collect(core, 1).size() == 1);
  core.dispatch_due();
  CHECK(core.in_flight() == 0);
  CHECK(core.timer_wakeups() == 1);
  core.stop_instance(instance);
}

TEST(core_reports_queue_timeouts_and_full_queues) {
  ManualClock clock;
  BatcherConfig config = batching(8, true);
  config.max_queue_delay_us = 1000000;
  config.default_policy.default_timeout_us = 100;
  config.default_policy.max_queue_size = 2;
  Core core(1 << 22, [&clock] { return clock.now; }, false);
  ModelHandle model = core.add_model(config);
  uint32_t instance = core.add_instance(model);
  core.instance_up(instance);
  ArenaStats baseline = core.arena().stats();
  CHECK(submit_bytes(core, model, 1, "a"));
  CHECK(submit_bytes(core, model, 2, "b"));
  SubmitRequest third;
  third.request_id = 3;
  CHECK(core.submit(model, third) == SubmitResult::kQueueFull);
  core.flush();
  CHECK(core.poll().empty());
  clock.now += 100000;  // 100 us: both time out
  core.tick();
  std::vector<Completion> done = core.poll();
  CHECK(done.size() == 1);
  CHECK(done.size() == 1 && done[0].status == kCompletionTimedOut);
  CHECK(done.size() == 1 && (done[0].request_ids == std::vector<uint64_t>{1, 2}));
  CHECK(core.arena().stats().blocks_in_use == baseline.blocks_in_use);
}

}  // namespace

namespace {

// A registry of one host region, as the shared-memory registry serves it.
class OneRegion : public InputRegions {
 public:
  explicit OneRegion(std::string bytes) : bytes_(std::move(bytes)) {}
  const uint8_t* map(InputKind kind, uint64_t region, uint64_t offset, uint64_t size) override {
    if (kind != InputKind::kSystemShm || region != 7 || offset > bytes_.size() ||
        size > bytes_.size() - offset) {
      return nullptr;
    }
    return reinterpret_cast<const uint8_t*>(bytes_.data()) + offset;
  }
  bool host_range(uint64_t region, uint64_t offset, uint64_t size) override {
    return map(InputKind::kSystemShm, region, offset, size) != nullptr;
  }

 private:
  std::string bytes_;
};

TEST(core_lays_out_the_request_block_of_ipc_schema) {
  Core core(1 << 22, nullptr, false);
  ModelHandle model = core.add_model(batching(1, false));
  uint32_t instance = core.add_instance(model);
  core.instance_up(instance);
  InstanceEndpoint ep = core.endpoint(instance);
  WorkerEndpoint worker(dup(core.arena().fd()), ep.channel_offset, dup(ep.wake_fd),
                        dup(core.notify_fd()));
  SubmitRequest request;
  request.request_id = 5;
  request.metadata = "{\"id\":\"x\"}";
  const std::string first = "abc", second(100, 'z');
  for (const std::string* bytes : {&first, &second}) {
    InputSource source;
    source.data = bytes->data();
    source.size = bytes->size();
    request.inputs.push_back(source);
  }
  CHECK(core.submit(model, request) == SubmitResult::kOk);
  core.flush();
  BatchMessage message = worker.next();
  const BatchRequest& record =
      *worker.arena().at<BatchRequest>(message.desc_offset + batch_requests_offset());
  const uint8_t* block = worker.arena().base() + record.block_offset;
  const auto& header = *reinterpret_cast<const RequestHeader*>(block);
  CHECK(header.magic == kRequestMagic && header.n_inputs == 2);
  CHECK(header.metadata_size == request.metadata.size());
  CHECK(std::memcmp(block + request_metadata_offset(2), request.metadata.data(),
                    request.metadata.size()) == 0);
  const auto* slots = reinterpret_cast<const InputSlot*>(block + sizeof(RequestHeader));
  CHECK(slots[0].size == 3 && slots[1].size == 100);
  CHECK(slots[0].offset % kTensorAlign == 0 && slots[1].offset % kTensorAlign == 0);
  CHECK(std::memcmp(worker.arena().base() + slots[0].offset, "abc", 3) == 0);
  CHECK(std::memcmp(worker.arena().base() + slots[1].offset, second.data(), 100) == 0);
  worker.complete(message.batch_id, 0, 0, kCompletionOk);
  CHECK(core.poll().size() == 1);
}

TEST(core_refuses_region_inputs_until_a_registry_maps_them) {
  Core core(1 << 22, nullptr, false);
  ModelHandle model = core.add_model(batching(1, false));
  SubmitRequest request;
  request.request_id = 1;
  InputSource shm;
  shm.kind = InputKind::kSystemShm;
  shm.region = 7;
  shm.offset = 2;
  shm.size = 3;
  request.inputs.push_back(shm);
  CHECK(core.submit(model, request) == SubmitResult::kUnsupportedInput);
  OneRegion region("..xyz..");
  core.set_input_regions(&region);
  CHECK(core.submit(model, request) == SubmitResult::kOk);
  request.inputs[0].offset = 6;  // past the region's end
  CHECK(core.submit(model, request) == SubmitResult::kUnsupportedInput);
  request.inputs[0].kind = InputKind::kCudaIpc;
  request.inputs[0].offset = 2;
  CHECK(core.submit(model, request) == SubmitResult::kUnsupportedInput);
  // One request queued: its block of its own (the model does not batch), its input
  // left in the region (read in place, or copied at dispatch: batch_assembler.h).
  CHECK(core.arena().stats().blocks_in_use == 1 && core.assembler().placed_bytes() == 0);
}

}  // namespace
