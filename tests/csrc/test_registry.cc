// The core's model registry while serving: handles that go stale, removal that
// fails the queue, lets batches in flight finish and frees instances, and add/remove
// racing with submits from other threads (run under TSan by make test-core-sanitize).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core.h"
#include "fake_worker.h"
#include "testing.h"
#include "worker_endpoint.h"

using namespace naiad;
using namespace naiad_testing;

namespace {

uint64_t blocks(Core& core) { return core.arena().stats().blocks_in_use; }

TEST(registry_stale_handle_fails_cleanly) {
  Core core(1 << 20, nullptr, false);
  ModelHandle old = core.add_model(batching(8, true));
  CHECK(old.value != 0);
  CHECK(core.remove_model(old));
  CHECK(!core.remove_model(old));
  CHECK(blocks(core) == 0);
  std::vector<SubmitPart> parts{{"x", 1, 0}};
  CHECK(core.submit(old, 1, 1, parts, SubmitOptions{}) == SubmitResult::kModelGone);
  CHECK(blocks(core) == 0);  // the request's block went back at once
  // A new model takes the slot under a new generation: the old handle stays gone.
  ModelHandle fresh = core.add_model(batching(8, true));
  CHECK(fresh.slot() == old.slot() && fresh.generation() != old.generation());
  CHECK(core.submit(old, 2, 1, parts, SubmitOptions{}) == SubmitResult::kModelGone);
  CHECK(core.submit(fresh, 3, 1, parts, SubmitOptions{}) == SubmitResult::kOk);
  bool threw = false;
  try {
    core.add_instance(old);
  } catch (const std::out_of_range&) {
    threw = true;
  }
  CHECK(threw);
  CHECK(core.remove_model(fresh));
  CHECK(core.poll().size() == 1);  // request 3, failed as its model went
  CHECK(core.submit(ModelHandle{}, 4, 1, parts, SubmitOptions{}) == SubmitResult::kModelGone);
}

TEST(registry_remove_fails_the_queue_and_frees_idle_instances) {
  Core core(1 << 20, nullptr, false);
  ModelHandle model = core.add_model(batching(8, true));
  uint32_t a = core.add_instance(model);
  core.add_instance(model);
  for (uint64_t id = 1; id <= 3; ++id) CHECK(submit_bytes(core, model, id, "queued"));
  CHECK(blocks(core) == 2 + 3);  // two channels, three requests
  CHECK(core.remove_model(model));
  std::vector<Completion> done = core.poll();
  CHECK(done.size() == 1);
  if (done.size() != 1) return;
  CHECK(done[0].status == kCompletionModelGone && done[0].batch_id == 0);
  CHECK((done[0].request_ids == std::vector<uint64_t>{1, 2, 3}));
  // No worker was started on either instance: channels and eventfds are gone now.
  CHECK(blocks(core) == 0);
  bool threw = false;
  try {
    core.endpoint(a);
  } catch (const std::out_of_range&) {
    threw = true;
  }
  CHECK(threw);
  CHECK(core.instance_down(a).empty());  // a stale instance id finds nothing
  core.instance_up(a);
  core.stop_instance(a);
}

TEST(registry_remove_lets_the_batch_in_flight_finish_then_frees_its_instance) {
  Core core(1 << 20, nullptr, false);
  ModelHandle model = core.add_model(batching(1, false));
  uint32_t instance = core.add_instance(model);
  InstanceEndpoint ep = core.endpoint(instance);
  WorkerEndpoint worker(dup(core.arena().fd()), ep.channel_offset, dup(ep.wake_fd),
                        dup(core.notify_fd()));
  core.instance_starting(instance);
  core.instance_up(instance);
  CHECK(submit_bytes(core, model, 1, "running"));
  core.flush();
  BatchMessage running = worker.next();
  CHECK(running.kind == MessageKind::kBatch);
  CHECK(submit_bytes(core, model, 2, "queued"));  // one request per batch: it waits
  CHECK(core.remove_model(model));
  std::vector<Completion> done = core.poll();
  CHECK(done.size() == 1 && done[0].status == kCompletionModelGone);
  CHECK(done.size() == 1 && (done[0].request_ids == std::vector<uint64_t>{2}));
  // The worker finishes what it runs; the result arrives as usual.
  uint64_t result = worker.arena().alloc(64, running.batch_id);
  worker.complete(running.batch_id, result, 64, kCompletionOk);
  done = core.poll();
  CHECK(done.size() == 1 && done[0].status == kCompletionOk);
  CHECK(done.size() == 1 && (done[0].request_ids == std::vector<uint64_t>{1}));
  core.arena().free(result);
  // Then it is told to stop; the instance goes once its process is reported gone.
  CHECK(worker.next().kind == MessageKind::kStop);
  core.instance_up(instance);  // a late "ready" for a removed model changes nothing
  CHECK(blocks(core) == 1);    // the channel, still mapped by the worker
  CHECK(core.instance_down(instance).empty());
  CHECK(blocks(core) == 0);
  CHECK(core.in_flight() == 0);
}

TEST(registry_remove_fails_a_batch_whose_worker_dies_after) {
  Core core(1 << 20, nullptr, false);
  ModelHandle model = core.add_model(batching(4, true));
  uint32_t instance = core.add_instance(model);
  InstanceEndpoint ep = core.endpoint(instance);
  WorkerEndpoint worker(dup(core.arena().fd()), ep.channel_offset, dup(ep.wake_fd),
                        dup(core.notify_fd()));
  core.instance_up(instance);
  CHECK(submit_bytes(core, model, 7, "x"));
  core.flush();
  BatchMessage running = worker.next();
  CHECK(worker.arena().alloc(100, running.batch_id) != 0);  // its result, never posted
  CHECK(core.remove_model(model));
  std::vector<Completion> failed = core.instance_down(instance);
  CHECK(failed.size() == 1 && failed[0].status == kCompletionInstanceDied);
  CHECK(blocks(core) == 0);
}

// Submitters on several threads while the main thread adds a model, serves it with
// a worker, and removes it, many times over. Every request the core accepted is
// answered exactly once, ran or failed as removed; nothing leaks.
TEST(registry_add_and_remove_under_concurrent_submits) {
  Core core(1 << 24);
  std::atomic<uint64_t> current{0};  // the handle submitters use now
  std::atomic<bool> stop{false};
  const int kSubmitters = 3;
  std::vector<std::vector<uint64_t>> accepted(kSubmitters);
  std::atomic<int> gone{0};
  std::vector<std::thread> submitters;
  for (int t = 0; t < kSubmitters; ++t) {
    submitters.emplace_back([&, t] {
      std::string payload(100, 'p');
      std::vector<SubmitPart> parts{{payload.data(), payload.size(), 0}};
      while (!stop.load()) {
        ModelHandle model{current.load()};
        uint64_t id = core.new_request_id();
        SubmitResult result = core.submit(model, id, payload.size(), parts, SubmitOptions{});
        if (result == SubmitResult::kOk) accepted[t].push_back(id);
        if (result == SubmitResult::kModelGone) gone++;
        std::this_thread::yield();
      }
    });
  }
  std::vector<uint64_t> answered;
  auto take = [&](std::vector<Completion> done) {
    for (Completion& c : done) {
      answered.insert(answered.end(), c.request_ids.begin(), c.request_ids.end());
      if (c.result_offset != 0) core.arena().free(c.result_offset);
    }
  };
  for (int generation = 0; generation < 30; ++generation) {
    ModelHandle model = core.add_model(batching(4, true));
    uint32_t instance = core.add_instance(model);
    core.instance_starting(instance);
    auto worker = std::make_unique<FakeWorker>(core, instance);
    core.instance_up(instance);
    current.store(model.value);
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(2);
    while (std::chrono::steady_clock::now() < until) take(core.poll());
    CHECK(core.remove_model(model));
    take(core.poll());
    worker.reset();  // it got its stop message: the thread ends
    take(core.instance_down(instance));
  }
  stop.store(true);
  for (std::thread& t : submitters) t.join();
  take(core.poll());  // requests failed by the last removal after its poll
  std::vector<uint64_t> all;
  for (const auto& ids : accepted) all.insert(all.end(), ids.begin(), ids.end());
  std::sort(all.begin(), all.end());
  std::sort(answered.begin(), answered.end());
  CHECK(!all.empty() && gone.load() > 0);
  CHECK(std::adjacent_find(all.begin(), all.end()) == all.end());  // ids are unique
  CHECK(answered == all);
  CHECK(core.in_flight() == 0);
  CHECK(blocks(core) == 0);
}

}  // namespace
