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

#include "core/core.h"
#include "fake_worker.h"
#include "ipc/worker_endpoint.h"
#include "testing.h"

using namespace naiad;
using namespace naiad_testing;

namespace {

uint64_t blocks(Core& core) { return core.arena().stats().blocks_in_use; }

// A request of one inline input, `payload`.
SubmitRequest request_of(uint64_t id, const std::string& payload) {
  SubmitRequest request;
  request.request_id = id;
  InputSource input;
  input.data = payload.data();
  input.size = payload.size();
  request.inputs.push_back(input);
  return request;
}

TEST(registry_stale_handle_fails_cleanly) {
  Core core(1 << 20, nullptr, false);
  ModelHandle old = core.add_model(batching(8, true));
  CHECK(old.value != 0);
  CHECK(core.remove_model(old));
  CHECK(!core.remove_model(old));
  CHECK(blocks(core) == 0);
  const std::string x = "x";
  CHECK(core.submit(old, request_of(1, x)) == SubmitResult::kModelGone);
  CHECK(blocks(core) == 0);  // the request's block went back at once
  // A new model takes the slot under a new generation: the old handle stays gone.
  ModelHandle fresh = core.add_model(batching(8, true));
  CHECK(fresh.slot() == old.slot() && fresh.generation() != old.generation());
  CHECK(core.submit(old, request_of(2, x)) == SubmitResult::kModelGone);
  CHECK(core.submit(fresh, request_of(3, x)) == SubmitResult::kOk);
  bool threw = false;
  try {
    core.add_instance(old);
  } catch (const std::out_of_range&) {
    threw = true;
  }
  CHECK(threw);
  CHECK(core.remove_model(fresh));
  CHECK(core.poll().size() == 1);  // request 3, failed as its model went
  CHECK(core.submit(ModelHandle{}, request_of(4, x)) == SubmitResult::kModelGone);
  CHECK(blocks(core) == 0);  // request 3's slab went with it
}

TEST(registry_remove_fails_the_queue_and_frees_idle_instances) {
  Core core(1 << 20, nullptr, false);
  ModelHandle model = core.add_model(batching(8, true));
  uint32_t a = core.add_instance(model);
  core.add_instance(model);
  for (uint64_t id = 1; id <= 3; ++id) CHECK(submit_bytes(core, model, id, "queued"));
  // Two channels and the model's staging slab, holding the three requests' rows.
  CHECK(blocks(core) == 2 + 1);
  CHECK(core.assembler().slabs() == 1 && core.assembler().placed_bytes() == 3 * 6);
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

// The assembler follows the registry: a removed model's queued rows are released as
// they fail, its slab goes once the rows of its batch in flight are released too, and
// a model added in the same slot stages in a slab of its own.
TEST(registry_remove_releases_the_models_slab_and_a_reused_slot_starts_fresh) {
  Core core(1 << 22, nullptr, false);
  ModelHandle model = core.add_model(batching(2, true));
  uint32_t instance = core.add_instance(model);
  InstanceEndpoint ep = core.endpoint(instance);
  WorkerEndpoint worker(dup(core.arena().fd()), ep.channel_offset, dup(ep.wake_fd),
                        dup(core.notify_fd()));
  core.instance_starting(instance);
  core.instance_up(instance);
  for (uint64_t id = 1; id <= 4; ++id) CHECK(submit_bytes(core, model, id, "rows"));
  CHECK(core.assembler().slabs() == 1);
  core.flush();
  BatchMessage running = worker.next();  // requests 1 and 2; 3 and 4 stay queued
  CHECK(running.kind == MessageKind::kBatch && running.n_requests == 2);
  CHECK(core.remove_model(model));
  std::vector<Completion> done = core.poll();
  CHECK(done.size() == 1 && done[0].status == kCompletionModelGone);
  CHECK(done.size() == 1 && (done[0].request_ids == std::vector<uint64_t>{3, 4}));
  CHECK(core.assembler().slabs() == 1);  // rows 1 and 2 are the running batch's tensors
  CHECK(core.submit(model, request_of(5, "late")) == SubmitResult::kModelGone);
  ModelHandle fresh = core.add_model(batching(2, true));
  CHECK(fresh.slot() == model.slot());
  CHECK(submit_bytes(core, fresh, 6, "new"));
  CHECK(core.assembler().slabs() == 2);  // the new model's own slab
  worker.complete(running.batch_id, 0, 0, kCompletionOk);
  done = core.poll();
  CHECK(done.size() == 1 && (done[0].request_ids == std::vector<uint64_t>{1, 2}));
  CHECK(core.assembler().slabs() == 1);  // the removed model's slab is gone
  CHECK(worker.next().kind == MessageKind::kStop);
  CHECK(core.instance_down(instance).empty());
  CHECK(core.remove_model(fresh));
  done = core.poll();
  CHECK(done.size() == 1 && (done[0].request_ids == std::vector<uint64_t>{6}));
  CHECK(core.assembler().slabs() == 0);
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
      while (!stop.load()) {
        ModelHandle model{current.load()};
        uint64_t id = core.new_request_id();
        SubmitResult result = core.submit(model, request_of(id, payload));
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
