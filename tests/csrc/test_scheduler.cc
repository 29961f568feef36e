// A scheduler other than the dynamic batcher plugs into the core without touching
// it: here one that keeps every request of a key on one instance, as a sequence
// batcher keeps a sequence (the key standing in for its correlation id). Test only.
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <unordered_map>
#include <vector>

#include "core/core.h"
#include "core/scheduler.h"
#include "fake_worker.h"
#include "testing.h"

using namespace naiad;
using namespace naiad_testing;

namespace {

// Requests with the same shape_key run on the instance that took the key's first
// request; each batch takes up to `max_batch` requests of the keys it owns, FIFO.
class AffinityScheduler final : public Scheduler {
 public:
  explicit AffinityScheduler(size_t max_batch) : max_batch_(max_batch) {}

  EnqueueResult enqueue(const QueuedRequest& request, const SubmitOptions&, uint64_t) override {
    queue_.push_back(request);
    return EnqueueResult::kOk;
  }
  uint64_t schedule(uint64_t, const std::vector<uint32_t>& idle, bool,
                    std::vector<Placement>* placements, std::vector<QueuedRequest>*) override {
    for (uint32_t instance : idle) {
      Placement placement{instance, {}};
      for (auto it = queue_.begin();
           it != queue_.end() && placement.requests.size() < max_batch_;) {
        auto owner = owners_.emplace(it->shape_key, instance).first;  // first sight claims
        if (owner->second != instance) {
          ++it;
          continue;
        }
        placement.requests.push_back(*it);
        it = queue_.erase(it);
      }
      if (!placement.requests.empty()) placements->push_back(std::move(placement));
    }
    return 0;
  }
  bool empty() const override { return queue_.empty(); }
  size_t queued() const override { return queue_.size(); }
  bool preserve_ordering() const override { return false; }
  std::vector<QueuedRequest> drain() override {
    std::vector<QueuedRequest> all(queue_.begin(), queue_.end());
    queue_.clear();
    return all;
  }

 private:
  size_t max_batch_;
  std::deque<QueuedRequest> queue_;
  std::unordered_map<uint64_t, uint32_t> owners_;  // key -> its instance
};

bool submit_keyed(Core& core, ModelHandle model, uint64_t id, uint64_t key) {
  SubmitRequest request;
  request.request_id = id;
  InputSource input;
  input.data = "k";
  input.size = 1;
  request.inputs.push_back(input);
  request.options.shape_key = key;
  return core.submit(model, request) == SubmitResult::kOk;
}

TEST(scheduler_chooses_the_instance_a_key_sticks_to) {
  Core core(1 << 22);
  ModelHandle model = core.add_model(std::make_unique<AffinityScheduler>(1));
  uint32_t a = core.add_instance(model);
  uint32_t b = core.add_instance(model);
  core.instance_up(a);
  core.instance_up(b);
  FakeWorker wa(core, a);
  FakeWorker wb(core, b);
  std::map<uint64_t, uint64_t> key_of;  // request id -> key
  uint64_t id = 0;
  for (int round = 0; round < 10; ++round) {
    for (uint64_t key = 1; key <= 4; ++key) {
      key_of[++id] = key;
      CHECK(submit_keyed(core, model, id, key));
    }
    core.flush();
  }
  std::vector<Completion> done = collect(core, key_of.size());
  std::map<uint64_t, std::set<uint32_t>> instances_of;  // key -> instances it ran on
  size_t ran = 0;
  for (const Completion& c : done) {
    CHECK(c.status == kCompletionOk);
    for (uint64_t request : c.request_ids) instances_of[key_of[request]].insert(c.instance_id);
    ran += c.request_ids.size();
  }
  CHECK(ran == key_of.size());
  std::set<uint32_t> used;
  for (const auto& entry : instances_of) {
    CHECK(entry.second.size() == 1);
    used.insert(entry.second.begin(), entry.second.end());
  }
  CHECK(used.size() == 2);  // the first two keys met two idle instances
  core.stop_instance(a);
  core.stop_instance(b);
}

// A scheduler that places a batch on an instance it was not offered.
class MisplacingScheduler final : public Scheduler {
 public:
  EnqueueResult enqueue(const QueuedRequest& request, const SubmitOptions&, uint64_t) override {
    queue_.push_back(request);
    return EnqueueResult::kOk;
  }
  uint64_t schedule(uint64_t, const std::vector<uint32_t>&, bool,
                    std::vector<Placement>* placements, std::vector<QueuedRequest>*) override {
    placements->push_back(Placement{12345, std::move(queue_)});
    queue_.clear();
    return 0;
  }
  bool empty() const override { return queue_.empty(); }
  size_t queued() const override { return queue_.size(); }
  bool preserve_ordering() const override { return false; }
  std::vector<QueuedRequest> drain() override { return std::move(queue_); }

 private:
  std::vector<QueuedRequest> queue_;
};

TEST(scheduler_placing_on_an_instance_not_offered_fails_the_batch) {
  Core core(1 << 20, nullptr, false);
  ModelHandle model = core.add_model(std::make_unique<MisplacingScheduler>());
  core.add_instance(model);
  CHECK(submit_keyed(core, model, 1, 0));
  core.flush();
  std::vector<Completion> done = core.poll();
  CHECK(done.size() == 1 && done[0].status == kCompletionWorkerFailed);
  CHECK(core.arena().stats().blocks_in_use == 1);  // only the channel
  CHECK(core.in_flight() == 0);
}

}  // namespace
