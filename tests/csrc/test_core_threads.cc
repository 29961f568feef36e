// The core under several submitting threads (issue 40): submits staged in a thread's
// Core::Turn and queued under one lock acquisition, and threads submitting to one model
// and to two while workers complete. Run it under TSan (build/test_core_tsan): the
// concurrent cases are there for it.
#include <algorithm>
#include <atomic>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/core.h"
#include "fake_worker.h"
#include "testing.h"

using namespace naiad;
using namespace naiad_testing;

namespace {

struct ManualClock {
  uint64_t now = 1000000;
};

// What another thread sees: the model's pending requests, read from a thread of its own.
size_t pending_seen_elsewhere(Core& core, ModelHandle model) {
  size_t seen = 0;
  std::thread other([&] { seen = core.pending_requests(model); });
  other.join();
  return seen;
}

TEST(core_turn_queues_its_submits_at_the_threads_next_call) {
  ManualClock clock;
  Core core(1 << 22, [&clock] { return clock.now; }, false);
  ModelHandle model = core.add_model(batching(8, true));
  {
    Core::Turn turn(core);
    for (uint64_t id = 1; id <= 3; ++id) CHECK(submit_bytes(core, model, id, "x"));
    // Staged in the turn: another thread does not see them queued yet...
    CHECK(pending_seen_elsewhere(core, model) == 0);
    // ...this one does: its call queued them first.
    CHECK(core.pending_requests(model) == 3);
    CHECK(pending_seen_elsewhere(core, model) == 3);
    CHECK(submit_bytes(core, model, 4, "x"));
  }
  // The turn's end queued what was still staged.
  CHECK(pending_seen_elsewhere(core, model) == 4);
  uint32_t instance = core.add_instance(model);
  core.instance_up(instance);
  FakeWorker worker(core, instance);
  core.flush();
  std::vector<Completion> done = collect(core, 4);
  CHECK(done.size() == 1);
  CHECK(done.size() == 1 && (done[0].request_ids == std::vector<uint64_t>{1, 2, 3, 4}));
  core.stop_instance(instance);
}

// A staged request enters its queue with the time it was submitted, not the time the
// turn queued it: its queue delay runs from its submit.
TEST(core_turn_queues_at_submit_time_not_at_flush_time) {
  ManualClock clock;
  BatcherConfig config = batching(8, true);
  config.max_queue_delay_us = 100;
  Core core(1 << 22, [&clock] { return clock.now; }, false);
  ModelHandle model = core.add_model(config);
  uint32_t instance = core.add_instance(model);
  core.instance_up(instance);
  FakeWorker worker(core, instance);
  {
    Core::Turn turn(core);
    CHECK(submit_bytes(core, model, 1, "x"));
    clock.now += 100000;  // the delay passed during the turn
    core.flush();         // queued at its submit time: due, it leaves
    CHECK(core.in_flight() == 1);
  }
  std::vector<Completion> done = collect(core, 1);
  CHECK(done.size() == 1 && done[0].request_ids == std::vector<uint64_t>{1});
  {
    Core::Turn turn(core);
    CHECK(submit_bytes(core, model, 2, "x"));
    core.flush();  // submitted now: held for the delay
    CHECK(core.in_flight() == 0);
    CHECK(core.held_for_idle() == clock.now + 100000);
  }
  clock.now += 100000;
  core.tick();
  CHECK(collect(core, 1).size() == 1);
  core.stop_instance(instance);
}

// The requests a turn stages between two of its queueings arrived together: they
// share one clock read, the first's. A group staged after a queueing reads it again.
TEST(core_turn_reads_the_clock_once_per_staged_group) {
  ManualClock clock;
  BatcherConfig config = batching(8, true);
  config.max_queue_delay_us = 1000000;  // held: only the timeouts decide
  config.default_policy.default_timeout_us = 100;
  Core core(1 << 22, [&clock] { return clock.now; }, false);
  ModelHandle model = core.add_model(config);
  uint32_t instance = core.add_instance(model);
  core.instance_up(instance);
  auto timed_out_after = [&](uint64_t us) {
    clock.now += us * 1000;
    core.tick();
    std::vector<uint64_t> ids;
    for (const Completion& c : core.poll()) {
      CHECK(c.status == kCompletionTimedOut);
      ids.insert(ids.end(), c.request_ids.begin(), c.request_ids.end());
    }
    return ids;
  };
  Core::Turn turn(core);
  CHECK(submit_bytes(core, model, 1, "x"));
  clock.now += 60000;
  CHECK(submit_bytes(core, model, 2, "x"));  // one group with 1: 1's time
  core.flush();
  clock.now += 30000;
  CHECK(submit_bytes(core, model, 3, "x"));  // a new group: read at 90 us
  core.flush();
  CHECK((timed_out_after(20) == std::vector<uint64_t>{1, 2}));  // at 110 us
  CHECK((timed_out_after(80) == std::vector<uint64_t>{3}));     // at 190 us
}

// What could refuse a request still answers at submit: a bounded queue, a stale handle.
TEST(core_turn_submits_that_can_be_refused_are_answered_at_once) {
  BatcherConfig config = batching(8, true);
  config.default_policy.max_queue_size = 2;
  Core core(1 << 22, nullptr, false);
  ModelHandle bounded = core.add_model(config);
  ModelHandle removed = core.add_model(batching(8, true));
  CHECK(core.remove_model(removed));
  ArenaStats baseline = core.arena().stats();
  Core::Turn turn(core);
  CHECK(submit_bytes(core, bounded, 1, "a"));
  CHECK(submit_bytes(core, bounded, 2, "b"));
  CHECK(!submit_bytes(core, bounded, 3, "c"));  // kQueueFull, as without a turn
  SubmitRequest request;
  request.request_id = 4;
  CHECK(core.submit(removed, request) == SubmitResult::kModelGone);
  CHECK(core.pending_requests(bounded) == 2);
  CHECK(core.remove_model(bounded));
  CHECK(core.poll().size() == 1);
  CHECK(core.arena().stats().blocks_in_use == baseline.blocks_in_use);
}

// The model goes while its requests are staged: removed by this thread, the turn's
// next submits fail at once; removed by another, the staged ones complete as its
// queued ones do (kCompletionModelGone), their rows released.
TEST(core_turn_requests_of_a_removed_model_fail_as_queued_ones) {
  Core core(1 << 22, nullptr, false);
  ModelHandle model = core.add_model(batching(8, true));
  ModelHandle other = core.add_model(batching(8, true));
  const ArenaStats baseline = core.arena().stats();
  {
    Core::Turn turn(core);
    CHECK(submit_bytes(core, model, 1, "x"));
    CHECK(submit_bytes(core, other, 2, "x"));
    std::thread remover([&] { CHECK(core.remove_model(other)); });
    remover.join();
    // Queues the turn first: 1 fails as a queued request, 2 finds its model gone.
    CHECK(core.remove_model(model));
    SubmitRequest request;
    request.request_id = 3;
    CHECK(core.submit(model, request) == SubmitResult::kModelGone);
    std::vector<Completion> done = core.poll();
    std::vector<uint64_t> gone;
    for (const Completion& c : done) {
      CHECK(c.status == kCompletionModelGone);
      gone.insert(gone.end(), c.request_ids.begin(), c.request_ids.end());
    }
    std::sort(gone.begin(), gone.end());
    CHECK((gone == std::vector<uint64_t>{1, 2}));
  }
  CHECK(core.assembler().slabs() == 0);
  CHECK(core.arena().stats().blocks_in_use == baseline.blocks_in_use);
}

// N I/O threads, each a loop: a turn of submits, a flush, a poll. They submit to one
// model and to two, while fake workers (threads) complete batches; every request
// completes exactly once, and the arena comes back as it was.
void submit_from_threads(int threads, bool shared_model) {
  Core core(1 << 26);
  std::vector<ModelHandle> models;
  std::vector<uint32_t> instances;
  for (int m = 0; m < (shared_model ? 1 : 2); ++m) {
    models.push_back(core.add_model(batching(16, true)));
    for (int i = 0; i < 2; ++i) instances.push_back(core.add_instance(models.back()));
  }
  const ArenaStats baseline = core.arena().stats();
  std::vector<std::unique_ptr<FakeWorker>> workers;
  for (uint32_t instance : instances) {
    core.instance_up(instance);
    workers.push_back(std::make_unique<FakeWorker>(core, instance));
  }
  constexpr uint64_t kTurns = 300;
  constexpr uint64_t kPerTurn = 7;
  const uint64_t total = static_cast<uint64_t>(threads) * kTurns * kPerTurn;
  std::atomic<int> ready{0};
  std::atomic<uint64_t> completed{0};
  std::atomic<bool> failed{false};
  std::vector<std::vector<uint64_t>> seen(static_cast<size_t>(threads));
  auto io_thread = [&](int t) {
    auto take = [&] {
      for (Completion& c : core.poll()) {
        if (c.status != kCompletionOk) failed = true;
        if (c.result_offset != 0) core.arena().free(c.result_offset);
        seen[static_cast<size_t>(t)].insert(seen[static_cast<size_t>(t)].end(),
                                            c.request_ids.begin(), c.request_ids.end());
        completed.fetch_add(c.request_ids.size());
      }
    };
    // Every thread starts its submits together (a latch, not a sleep).
    ready.fetch_add(1);
    while (ready.load() < threads) std::this_thread::yield();
    for (uint64_t turn_index = 0; turn_index < kTurns; ++turn_index) {
      {
        Core::Turn turn(core);
        for (uint64_t i = 0; i < kPerTurn; ++i) {
          const uint64_t id = (static_cast<uint64_t>(t) * kTurns + turn_index) * kPerTurn + i + 1;
          // Two models: a thread alternates between them, so both see every thread.
          const ModelHandle model = models[(id % models.size())];
          if (!submit_bytes(core, model, id, "abcd")) failed = true;
        }
        core.flush();
      }
      take();
    }
    while (completed.load() < total && !failed) {
      pollfd p{core.notify_fd(), POLLIN, 0};
      ::poll(&p, 1, 1);
      take();
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(io_thread, t);
  for (std::thread& thread : pool) thread.join();
  CHECK(!failed);
  std::vector<uint64_t> all;
  for (const std::vector<uint64_t>& ids : seen) all.insert(all.end(), ids.begin(), ids.end());
  std::sort(all.begin(), all.end());
  CHECK(all.size() == total);
  for (uint64_t i = 0; i < all.size(); ++i) CHECK(all[i] == i + 1);
  for (uint32_t instance : instances) core.stop_instance(instance);
  workers.clear();
  CHECK(core.in_flight() == 0);
  CHECK(core.assembler().slabs() == 0);
  CHECK(core.arena().stats().blocks_in_use == baseline.blocks_in_use);
}

TEST(core_two_threads_submit_to_one_model_while_batches_complete) { submit_from_threads(2, true); }

TEST(core_two_threads_submit_to_two_models_while_batches_complete) {
  submit_from_threads(2, false);
}

}  // namespace
