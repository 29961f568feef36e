// The rate limiter (rate_limiter.h) alone, and in the core: resources taken for an
// execution and given back when it ends, fails or its worker dies; models sharing a
// resource never run at once; priorities weight executions as in Triton.
#include <unistd.h>

#include <atomic>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/core.h"
#include "core/rate_limiter.h"
#include "fake_worker.h"
#include "testing.h"

using namespace naiad;
using namespace naiad_testing;

namespace {

InstanceRateLimit needs(std::vector<RateLimitResource> resources, uint32_t priority = 0,
                        int32_t device = 0) {
  InstanceRateLimit limits;
  limits.device = device;
  limits.priority = priority;
  limits.resources = std::move(resources);
  return limits;
}

RateLimiterConfig execution_count(std::vector<ServerResource> resources = {}) {
  RateLimiterConfig config;
  config.execution_count = true;
  config.resources = std::move(resources);
  return config;
}

// The worker side of one instance, driven by the test: what the core sent it.
struct ManualWorker {
  ManualWorker(Core& core, uint32_t instance) {
    InstanceEndpoint ep = core.endpoint(instance);
    endpoint = std::make_unique<WorkerEndpoint>(dup(core.arena().fd()), ep.channel_offset,
                                                dup(ep.wake_fd), dup(core.notify_fd()));
  }
  // The batch waiting for it, if any (0: none).
  uint64_t take() {
    BatchMessage message;
    if (!endpoint->try_next(&message) || message.kind != MessageKind::kBatch) return 0;
    return message.batch_id;
  }
  std::unique_ptr<WorkerEndpoint> endpoint;
};

}  // namespace

TEST(rate_limiter_counts_default_to_the_most_any_instance_asks) {
  RateLimiter limiter(execution_count());
  CHECK(limiter.add_instance(1, needs({{"R1", false, 4}, {"R2", false, 4}})).empty());
  CHECK(limiter.add_instance(2, needs({{"R2", false, 5}, {"R3", false, 10}})).empty());
  CHECK(limiter.add_instance(3, needs({{"R1", false, 1}, {"G", true, 2}}, 0, 1)).empty());
  CHECK(limiter.available("R1", 0) == 4);
  CHECK(limiter.available("R2", 0) == 5);
  CHECK(limiter.available("R3", 0) == 10);
  CHECK(limiter.available("R1", 1) == 1);  // per device: instance 3 runs on device 1
  CHECK(limiter.available("G", kGlobalResource) == 2);
  limiter.remove_instance(2);  // the counts follow the instances registered
  CHECK(limiter.available("R2", 0) == 4);
  CHECK(limiter.available("R3", 0) == 0);
}

TEST(rate_limiter_refuses_what_the_flags_do_not_give_with_tritons_message) {
  // --rate-limit-resource=R:1 ; an instance asking for 2.
  RateLimiter limiter(execution_count({{"R", 1, kEveryDevice}}));
  std::string refused = limiter.add_instance(7, needs({{"R", false, 2}}));
  CHECK(refused ==
        "Resource count for \"R\" is limited to 1 which will prevent scheduling of one or more "
        "model instances, the minimum required count is 2");
  CHECK(!limiter.holds(7) && limiter.available("R", 0) == 0);  // nothing registered
  CHECK(limiter.add_instance(8, needs({{"R", false, 1}})).empty());
  // A name the flags do not give has none; a count for another device does not count.
  RateLimiter other(execution_count({{"R", 10, 10}}));
  CHECK(other.add_instance(1, needs({{"R", false, 4}})) ==
        "Resource count for \"R\" is limited to 0 which will prevent scheduling of one or more "
        "model instances, the minimum required count is 4");
  // A global resource takes the largest count given for it on any device.
  RateLimiter global(execution_count({{"G", 3, 1}, {"G", 2, kEveryDevice}}));
  CHECK(global.add_instance(1, needs({{"G", true, 3}})).empty());
  CHECK(global.available("G", kGlobalResource) == 3);
}

TEST(rate_limiter_refuses_a_name_both_global_and_per_device) {
  RateLimiter limiter(execution_count());
  CHECK(limiter.add_instance(1, needs({{"R2", true, 2}})).empty());
  CHECK(limiter.add_instance(2, needs({{"R2", false, 2}})) ==
        "Resource \"R2\" is present as both global and device-specific resource in the model "
        "configuration.");
  CHECK(limiter.available("R2", kGlobalResource) == 2);
  CHECK(limiter.available("R2", 0) == 0);
}

TEST(rate_limiter_takes_resources_for_an_execution_and_gives_them_back) {
  RateLimiter limiter(execution_count({{"R", 3, kEveryDevice}}));
  CHECK(limiter.add_instance(1, needs({{"R", false, 2}})).empty());
  CHECK(limiter.add_instance(2, needs({{"R", false, 2}})).empty());
  CHECK(limiter.add_instance(3, needs({{"R", false, 2}}, 0, 1)).empty());  // device 1
  limiter.stage(1);
  limiter.stage(2);
  limiter.stage(3);
  uint32_t id = 0;
  CHECK(limiter.next(&id) && id == 1);
  CHECK(limiter.holds(1) && limiter.available("R", 0) == 1);
  // Instance 2 needs 2 of the 1 left on device 0; it is first now, so device 1's
  // instance waits behind it (Triton tries only the first staged instance).
  CHECK(!limiter.next(&id));
  CHECK(limiter.staged(2) && limiter.staged(3));
  limiter.release(1);
  CHECK(!limiter.holds(1) && limiter.available("R", 0) == 3);
  CHECK(limiter.next(&id) && id == 2);
  CHECK(limiter.next(&id) && id == 3);
  CHECK(limiter.available("R", 1) == 1);
  CHECK(limiter.staged_count() == 0);
  // Removing an instance that holds resources gives them back.
  limiter.remove_instance(2);
  CHECK(limiter.available("R", 0) == 3);
  limiter.release(3);
  CHECK(limiter.available("R", 1) == 3);
}

TEST(rate_limiter_priority_two_gets_half_the_executions) {
  RateLimiter limiter(execution_count());
  CHECK(limiter.add_instance(1, needs({{"R", false, 1}}, 1)).empty());
  CHECK(limiter.add_instance(2, needs({{"R", false, 1}}, 2)).empty());
  // Both always have work: the one that ran is staged again before the next pick.
  limiter.stage(1);
  limiter.stage(2);
  int runs[3] = {0, 0, 0};
  for (int i = 0; i < 60; ++i) {
    uint32_t id = 0;
    CHECK(limiter.next(&id));
    uint32_t other = 0;
    CHECK(!limiter.next(&other));  // one copy of R: the other waits
    ++runs[id];
    limiter.release(id);
    limiter.stage(id);
  }
  CHECK(runs[1] == 40 && runs[2] == 20);
  // order(): the idle instance that ran least, weighted, goes first; equals keep order.
  std::vector<uint32_t> idle{2, 1};
  limiter.order(idle.begin(), idle.end());
  CHECK((idle == std::vector<uint32_t>{2, 1}));  // ranks 40 and 40: as given
}

namespace {

// Two models of one instance each, both asking for `each`, their workers driven by
// the test; the core has no timer thread (the test decides when the policy runs).
struct TwoModels {
  TwoModels(const RateLimiterConfig& config, const std::vector<RateLimitResource>& each,
            uint32_t priority_a = 0, uint32_t priority_b = 0,
            const BatcherConfig& batcher_b = batching(1, false))
      : core(1 << 22, nullptr, false) {
    core.configure_rate_limiter(config);
    a = core.add_model(batching(1, false));
    b = core.add_model(batcher_b);
    ia = core.add_instance(a, needs(each, priority_a));
    ib = core.add_instance(b, needs(each, priority_b));
    baseline = core.arena().stats();
    wa = std::make_unique<ManualWorker>(core, ia);
    wb = std::make_unique<ManualWorker>(core, ib);
    core.instance_up(ia);
    core.instance_up(ib);
  }
  // The worker posts the batch's end (no response block: its requests fail).
  void end(ManualWorker& worker, uint64_t batch, int32_t status = kCompletionOk) {
    worker.endpoint->complete(batch, 0, 0, status);
  }
  Core core;
  ModelHandle a, b;
  uint32_t ia = 0, ib = 0;
  ArenaStats baseline;
  std::unique_ptr<ManualWorker> wa, wb;
};

const std::vector<RateLimitResource> kOneR{{"R", false, 1}};

}  // namespace

TEST(core_rate_limit_two_models_sharing_one_resource_never_run_at_once) {
  TwoModels t(execution_count({{"R", 1, kEveryDevice}}), kOneR);
  CHECK(submit_bytes(t.core, t.a, 1, "a"));
  CHECK(submit_bytes(t.core, t.b, 2, "b"));
  t.core.flush();
  uint64_t batch_a = t.wa->take();
  CHECK(batch_a != 0);
  CHECK(t.wb->take() == 0);  // formed, but waiting for R
  CHECK(t.core.rate_limit_available("R", 0) == 0 && t.core.rate_limit_staged() == 1);
  t.end(*t.wa, batch_a);
  std::vector<Completion> done = t.core.poll();
  CHECK(done.size() == 1 && done[0].request_ids == std::vector<uint64_t>{1});
  uint64_t batch_b = t.wb->take();
  CHECK(batch_b != 0);
  CHECK(t.core.rate_limit_available("R", 0) == 0 && t.core.rate_limit_staged() == 0);
  // A failed execution gives the resource back too.
  t.end(*t.wb, batch_b, kCompletionWorkerFailed);
  done = t.core.poll();
  CHECK(done.size() == 1 && done[0].status == kCompletionWorkerFailed);
  CHECK(t.core.rate_limit_available("R", 0) == 1);
  CHECK(t.core.in_flight() == 0);
  CHECK(t.core.arena().stats().blocks_in_use == t.baseline.blocks_in_use);
}

// Triton's pending-request gauge: a request counts from submit until its batch runs,
// waiting for the rate limiter included; a running one does not.
TEST(core_pending_requests_count_queued_and_staged_not_running) {
  TwoModels t(execution_count({{"R", 1, kEveryDevice}}), kOneR);
  CHECK(submit_bytes(t.core, t.a, 1, "a"));
  CHECK(submit_bytes(t.core, t.b, 2, "b"));
  CHECK(submit_bytes(t.core, t.b, 3, "b"));
  CHECK(t.core.pending_requests(t.a) == 1 && t.core.pending_requests(t.b) == 2);
  t.core.flush();
  uint64_t batch_a = t.wa->take();
  CHECK(batch_a != 0);
  // a runs; b's first request is staged for R, its second queued behind it.
  CHECK(t.core.pending_requests(t.a) == 0 && t.core.pending_requests(t.b) == 2);
  t.end(*t.wa, batch_a);
  CHECK(t.core.poll().size() == 1);
  uint64_t batch_b = t.wb->take();
  CHECK(batch_b != 0);
  CHECK(t.core.pending_requests(t.b) == 1);
  t.end(*t.wb, batch_b);
  CHECK(t.core.poll().size() == 1);
  batch_b = t.wb->take();
  CHECK(batch_b != 0 && t.core.pending_requests(t.b) == 0);
  t.end(*t.wb, batch_b);
  CHECK(t.core.poll().size() == 1);
  t.core.remove_model(t.b);
  CHECK(t.core.pending_requests(t.b) == 0);  // a removed model's handle counts nothing
}

TEST(core_rate_limit_off_ignores_resources) {
  // --rate-limit=off: not even checked against the flags' counts.
  RateLimiterConfig off;
  off.resources = {{"R", 1, kEveryDevice}};
  TwoModels t(off, {{"R", false, 5}});
  CHECK(submit_bytes(t.core, t.a, 1, "a"));
  CHECK(submit_bytes(t.core, t.b, 2, "b"));
  t.core.flush();
  uint64_t batch_a = t.wa->take();
  uint64_t batch_b = t.wb->take();
  CHECK(batch_a != 0 && batch_b != 0);  // both run at once
  t.end(*t.wa, batch_a);
  t.end(*t.wb, batch_b);
  CHECK(collect(t.core, 2).size() == 2);
}

TEST(core_rate_limit_refuses_an_instance_with_tritons_message) {
  Core core(1 << 22, nullptr, false);
  core.configure_rate_limiter(execution_count({{"R", 1, kEveryDevice}}));
  ModelHandle a = core.add_model(batching(1, false));
  ArenaStats baseline = core.arena().stats();
  std::string message;
  try {
    core.add_instance(a, needs({{"R", false, 2}}));
  } catch (const std::invalid_argument& refused) {
    message = refused.what();
  }
  CHECK(message.find("Resource count for \"R\" is limited to 1") == 0);
  CHECK(core.arena().stats().blocks_in_use == baseline.blocks_in_use);  // no channel left
  bool late = false;
  try {
    core.add_instance(a);
    core.configure_rate_limiter(RateLimiterConfig{});
  } catch (const std::logic_error&) {
    late = true;
  }
  CHECK(late);
}

TEST(core_rate_limit_worker_death_gives_resources_back_and_staged_batches_run) {
  TwoModels t(execution_count(), {{"G", true, 1}});
  CHECK(submit_bytes(t.core, t.a, 1, "a"));
  CHECK(submit_bytes(t.core, t.b, 2, "b"));
  t.core.flush();
  CHECK(t.wa->take() != 0);
  CHECK(t.core.rate_limit_available("G", kGlobalResource) == 0);
  t.wa.reset();
  std::vector<Completion> failed = t.core.instance_down(t.ia);  // died mid-batch
  CHECK(failed.size() == 1 && failed[0].status == kCompletionInstanceDied);
  uint64_t batch_b = t.wb->take();  // B's staged batch ran once G came back
  CHECK(batch_b != 0);
  // A staged batch of a dead worker fails too, and never holds anything.
  CHECK(submit_bytes(t.core, t.b, 3, "b2"));
  t.core.instance_up(t.ia);
  CHECK(submit_bytes(t.core, t.a, 4, "a2"));
  t.core.flush();
  CHECK(t.core.rate_limit_staged() == 1);
  failed = t.core.instance_down(t.ia);
  CHECK(failed.size() == 1 && failed[0].request_ids == std::vector<uint64_t>{4});
  CHECK(t.core.rate_limit_staged() == 0);
  t.end(*t.wb, batch_b);
  CHECK(t.core.poll().size() == 1);
  uint64_t batch_b2 = t.wb->take();
  CHECK(batch_b2 != 0);
  t.end(*t.wb, batch_b2);
  CHECK(t.core.poll().size() == 1);
  CHECK(t.core.rate_limit_available("G", kGlobalResource) == 1);
  CHECK(t.core.in_flight() == 0);
  CHECK(t.core.arena().stats().blocks_in_use == t.baseline.blocks_in_use);
}

TEST(core_rate_limit_cancel_and_remove_drop_staged_batches) {
  TwoModels t(execution_count(), kOneR);
  CHECK(submit_bytes(t.core, t.a, 1, "a"));
  CHECK(submit_bytes(t.core, t.b, 2, "b"));
  t.core.flush();
  uint64_t batch_a = t.wa->take();
  CHECK(batch_a != 0 && t.core.rate_limit_staged() == 1);
  CHECK(t.core.cancel(2) == CancelResult::kDropped);  // staged: it never runs
  CHECK(t.core.rate_limit_staged() == 0);
  std::vector<Completion> done = t.core.poll();
  CHECK(done.size() == 1 && done[0].status == kCompletionCancelled);
  CHECK(submit_bytes(t.core, t.b, 3, "b"));
  t.core.flush();
  CHECK(t.core.rate_limit_staged() == 1);
  CHECK(t.core.remove_model(t.b));  // its staged batch fails as its queued requests do
  done = t.core.poll();
  CHECK(done.size() == 1 && done[0].status == kCompletionModelGone);
  CHECK(t.core.rate_limit_staged() == 0);
  t.end(*t.wa, batch_a);
  CHECK(t.core.poll().size() == 1);
  CHECK(t.core.rate_limit_available("R", 0) == 1);
}

TEST(core_rate_limit_staged_batch_grows_with_requests_that_arrive_meanwhile) {
  // B batches up to 4 rows (no preferred sizes, no queue delay): its batch of one waits
  // for R while A runs, takes the requests that arrive meanwhile up to 4 rows, and the
  // rest forms the next batch, as Triton's staged payload does.
  TwoModels t(execution_count(), kOneR, 0, 0, batching(4, true));
  CHECK(submit_bytes(t.core, t.a, 1, "a"));
  CHECK(submit_bytes(t.core, t.b, 2, "b"));
  t.core.flush();
  uint64_t batch_a = t.wa->take();
  CHECK(batch_a != 0 && t.core.rate_limit_staged() == 1);
  CHECK(submit_bytes(t.core, t.b, 3, "b"));
  t.core.flush();
  CHECK(submit_bytes(t.core, t.b, 4, "b", 2));  // two rows: the batch is full at 4
  CHECK(submit_bytes(t.core, t.b, 5, "b"));
  t.core.flush();
  CHECK(t.wb->take() == 0 && t.core.rate_limit_staged() == 1);
  t.end(*t.wa, batch_a);
  std::vector<Completion> done = t.core.poll();
  CHECK(done.size() == 1 && done[0].request_ids == std::vector<uint64_t>{1});
  uint64_t batch_b = t.wb->take();
  CHECK(batch_b != 0);
  t.end(*t.wb, batch_b);
  done = t.core.poll();
  CHECK(done.size() == 1 && (done[0].request_ids == std::vector<uint64_t>{2, 3, 4}));
  uint64_t batch_b2 = t.wb->take();  // request 5: the next batch, R free again
  CHECK(batch_b2 != 0);
  t.end(*t.wb, batch_b2);
  done = t.core.poll();
  CHECK(done.size() == 1 && done[0].request_ids == std::vector<uint64_t>{5});
  CHECK(t.core.rate_limit_available("R", 0) == 1);
  CHECK(t.core.in_flight() == 0);
  CHECK(t.core.arena().stats().blocks_in_use == t.baseline.blocks_in_use);
}

namespace {

// Runs `rounds` executions, one at a time, ending each; how many each worker ran.
std::pair<int, int> take_turns(Core& core, ManualWorker& first, ManualWorker& second, int rounds,
                               const std::function<void()>& before_each) {
  int runs_first = 0, runs_second = 0;
  for (int i = 0; i < rounds; ++i) {
    before_each();
    uint64_t batch_first = first.take();
    uint64_t batch_second = second.take();
    CHECK((batch_first != 0) != (batch_second != 0));  // exactly one runs
    ManualWorker& ran = batch_first != 0 ? first : second;
    ++(batch_first != 0 ? runs_first : runs_second);
    ran.endpoint->complete(batch_first != 0 ? batch_first : batch_second, 0, 0, kCompletionOk);
    core.poll();
  }
  return {runs_first, runs_second};
}

}  // namespace

TEST(core_rate_limit_priority_weights_models_and_instances) {
  TwoModels t(execution_count(), kOneR, 1, 2);
  uint64_t id = 1;
  for (int i = 0; i < 40; ++i) {
    CHECK(submit_bytes(t.core, t.a, id++, "a"));
    CHECK(submit_bytes(t.core, t.b, id++, "b"));
  }
  t.core.flush();
  CHECK((take_turns(t.core, *t.wa, *t.wb, 30, [] {}) == std::pair<int, int>{20, 10}));

  // Two instances of one model without resources: the one of priority 1 takes two of
  // every three batches when requests come one at a time.
  ModelHandle c = t.core.add_model(batching(1, false));
  uint32_t c1 = t.core.add_instance(c, needs({}, 1));
  uint32_t c2 = t.core.add_instance(c, needs({}, 2));
  ManualWorker w1(t.core, c1), w2(t.core, c2);
  t.core.remove_model(t.a);
  t.core.remove_model(t.b);
  t.core.instance_up(c1);
  t.core.instance_up(c2);
  auto one_request = [&] {
    CHECK(submit_bytes(t.core, c, id++, "c"));
    t.core.flush();
  };
  CHECK((take_turns(t.core, w1, w2, 30, one_request) == std::pair<int, int>{20, 10}));
}

namespace {

// A worker thread that records how many executions of its group run at once.
class SharedResourceWorker {
 public:
  SharedResourceWorker(Core& core, uint32_t instance, std::atomic<int>* running,
                       std::atomic<int>* most)
      : running_(running), most_(most) {
    InstanceEndpoint ep = core.endpoint(instance);
    endpoint_ = std::make_unique<WorkerEndpoint>(dup(core.arena().fd()), ep.channel_offset,
                                                 dup(ep.wake_fd), dup(core.notify_fd()));
    thread_ = std::thread([this] { run(); });
  }
  ~SharedResourceWorker() { thread_.join(); }

 private:
  void run() {
    for (;;) {
      BatchMessage message = endpoint_->next();
      if (message.kind == MessageKind::kStop) return;
      const int now = running_->fetch_add(1) + 1;
      int seen = most_->load();
      while (now > seen && !most_->compare_exchange_weak(seen, now)) {
      }
      ::usleep(200);
      // The request ids as the result, as FakeWorker answers.
      auto* records =
          endpoint_->arena().at<BatchRequest>(message.desc_offset + batch_requests_offset());
      const uint64_t size = sizeof(uint64_t) * message.n_requests;
      const uint64_t result = endpoint_->arena().alloc(size, message.batch_id);
      auto* ids = endpoint_->arena().at<uint64_t>(result);
      for (uint32_t i = 0; i < message.n_requests; ++i) ids[i] = records[i].request_id;
      running_->fetch_sub(1);  // before the core can learn the batch is done
      endpoint_->complete(message.batch_id, result, size, kCompletionOk);
    }
  }
  std::atomic<int>* running_;
  std::atomic<int>* most_;
  std::unique_ptr<WorkerEndpoint> endpoint_;
  std::thread thread_;
};

}  // namespace

TEST(core_rate_limit_holds_concurrent_workers_to_the_resource) {
  for (bool limited : {true, false}) {
    Core core(1 << 22);
    RateLimiterConfig config;
    config.execution_count = limited;
    core.configure_rate_limiter(config);
    std::atomic<int> running{0}, most{0};
    std::vector<ModelHandle> models;
    std::vector<uint32_t> instances;
    for (int m = 0; m < 2; ++m) {
      models.push_back(core.add_model(batching(1, false)));
      for (int i = 0; i < 2; ++i) {
        instances.push_back(core.add_instance(models.back(), needs({{"R", true, 1}})));
      }
    }
    ArenaStats baseline = core.arena().stats();
    {
      std::vector<std::unique_ptr<SharedResourceWorker>> workers;
      for (uint32_t instance : instances) {
        workers.push_back(std::make_unique<SharedResourceWorker>(core, instance, &running, &most));
        core.instance_up(instance);
      }
      for (uint64_t id = 1; id <= 80; ++id) {
        CHECK(submit_bytes(core, models[id % 2], id, "x"));
        if (id % 8 == 0) core.flush();
      }
      core.flush();
      size_t answered = 0;
      for (const Completion& c : collect(core, 80)) {
        if (c.status == kCompletionOk) answered += c.request_ids.size();
      }
      CHECK(answered == 80);
      for (uint32_t instance : instances) core.stop_instance(instance);
    }
    CHECK(limited ? most.load() == 1 : most.load() > 1);
    CHECK(core.in_flight() == 0);
    CHECK(core.rate_limit_staged() == 0);
    if (limited) CHECK(core.rate_limit_available("R", kGlobalResource) == 1);
    CHECK(core.arena().stats().blocks_in_use == baseline.blocks_in_use);
  }
}
