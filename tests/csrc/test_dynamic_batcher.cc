// The dynamic batching policy with an injected clock: every decision is
// deterministic. Times are in microseconds for readability (`us`).
#include <cstdint>
#include <vector>

#include "core/dynamic_batcher.h"
#include "testing.h"

using namespace naiad;

namespace {

constexpr uint64_t us = 1000;  // ns per microsecond

QueuedRequest req(uint64_t id, uint32_t batch_size = 1, uint64_t shape_key = 0) {
  return QueuedRequest{id, 0, 0, batch_size, shape_key, 0, 0};
}

BatcherConfig dynamic(uint32_t max_batch_size) {
  BatcherConfig config;
  config.dynamic_batching = true;
  config.max_batch_size = max_batch_size;
  return config;
}

std::vector<uint64_t> ids(const std::vector<QueuedRequest>& requests) {
  std::vector<uint64_t> out;
  for (const QueuedRequest& r : requests) out.push_back(r.id);
  return out;
}

struct Decision {
  std::vector<uint64_t> batch;
  std::vector<uint64_t> rejected;
  uint64_t wait;
};

Decision decide(DynamicBatcher& batcher, uint64_t now) {
  std::vector<QueuedRequest> batch;
  std::vector<QueuedRequest> rejected;
  uint64_t wait = batcher.next_batch(now, &batch, &rejected);
  return Decision{ids(batch), ids(rejected), wait};
}

TEST(without_delay_everything_queued_leaves_at_once) {
  DynamicBatcher batcher(dynamic(8));
  for (uint64_t id = 1; id <= 3; ++id) batcher.enqueue(req(id), 0, 0, 0);
  Decision d = decide(batcher, 0);
  CHECK((d.batch == std::vector<uint64_t>{1, 2, 3}));
  CHECK(d.wait == 0);
  CHECK(batcher.empty());
}

TEST(batch_never_exceeds_max_batch_size) {
  DynamicBatcher batcher(dynamic(4));
  batcher.enqueue(req(1, 3), 0, 0, 0);
  batcher.enqueue(req(2, 2), 0, 0, 0);
  CHECK((decide(batcher, 0).batch == std::vector<uint64_t>{1}));
  CHECK((decide(batcher, 0).batch == std::vector<uint64_t>{2}));
}

TEST(lone_request_waits_for_the_queue_delay_then_leaves) {
  BatcherConfig config = dynamic(8);
  config.max_queue_delay_us = 100;
  DynamicBatcher batcher(config);
  batcher.enqueue(req(1), 0, 0, 1000 * us);
  Decision held = decide(batcher, 1050 * us);
  CHECK(held.batch.empty());
  CHECK(held.wait == 1100 * us);  // oldest enqueue + delay
  Decision due = decide(batcher, 1100 * us);
  CHECK((due.batch == std::vector<uint64_t>{1}));
}

TEST(full_batch_leaves_before_the_delay) {
  BatcherConfig config = dynamic(4);
  config.max_queue_delay_us = 1000000;
  DynamicBatcher batcher(config);
  for (uint64_t id = 1; id <= 5; ++id) batcher.enqueue(req(id), 0, 0, 0);
  Decision d = decide(batcher, 1 * us);
  CHECK((d.batch == std::vector<uint64_t>{1, 2, 3, 4}));
  Decision rest = decide(batcher, 2 * us);
  CHECK(rest.batch.empty() && rest.wait == 1000000 * us);
}

TEST(preferred_batch_size_leaves_without_waiting) {
  BatcherConfig config = dynamic(16);
  config.preferred_batch_sizes = {2, 4};
  config.max_queue_delay_us = 500;
  DynamicBatcher batcher(config);
  batcher.enqueue(req(1), 0, 0, 0);
  CHECK(decide(batcher, 1 * us).batch.empty());  // 1 is not preferred: wait
  for (uint64_t id = 2; id <= 3; ++id) batcher.enqueue(req(id), 0, 0, 2 * us);
  // 3 queued: the largest preferred size reachable is 2.
  CHECK((decide(batcher, 3 * us).batch == std::vector<uint64_t>{1, 2}));
  batcher.enqueue(req(4), 0, 0, 4 * us);
  batcher.enqueue(req(5), 0, 0, 4 * us);
  batcher.enqueue(req(6), 0, 0, 4 * us);
  // 4 queued: the max preferred size, at once.
  CHECK((decide(batcher, 5 * us).batch == std::vector<uint64_t>{3, 4, 5, 6}));
}

TEST(preferred_sizes_without_delay_cut_at_the_best_preferred) {
  BatcherConfig config = dynamic(16);
  config.preferred_batch_sizes = {4, 8};
  DynamicBatcher batcher(config);
  for (uint64_t id = 1; id <= 6; ++id) batcher.enqueue(req(id), 0, 0, 0);
  CHECK(decide(batcher, 0).batch.size() == 4);
  CHECK(decide(batcher, 0).batch.size() == 2);  // no preferred reachable: what is there
}

TEST(delay_expiry_sends_a_non_preferred_batch) {
  BatcherConfig config = dynamic(16);
  config.preferred_batch_sizes = {4};
  config.max_queue_delay_us = 100;
  DynamicBatcher batcher(config);
  for (uint64_t id = 1; id <= 3; ++id) batcher.enqueue(req(id), 0, 0, 0);
  CHECK(decide(batcher, 99 * us).batch.empty());
  CHECK(decide(batcher, 100 * us).batch.size() == 3);
}

TEST(different_shapes_never_share_a_batch) {
  DynamicBatcher batcher(dynamic(8));
  batcher.enqueue(req(1, 1, 7), 0, 0, 0);
  batcher.enqueue(req(2, 1, 7), 0, 0, 0);
  batcher.enqueue(req(3, 1, 9), 0, 0, 0);
  batcher.enqueue(req(4, 1, 7), 0, 0, 0);
  CHECK((decide(batcher, 0).batch == std::vector<uint64_t>{1, 2}));
  CHECK((decide(batcher, 0).batch == std::vector<uint64_t>{3}));
  CHECK((decide(batcher, 0).batch == std::vector<uint64_t>{4}));
}

TEST(without_dynamic_batching_one_request_per_execution) {
  BatcherConfig config;
  config.max_batch_size = 8;
  DynamicBatcher batcher(config);
  for (uint64_t id = 1; id <= 3; ++id) batcher.enqueue(req(id), 0, 0, 0);
  CHECK((decide(batcher, 0).batch == std::vector<uint64_t>{1}));
  CHECK((decide(batcher, 0).batch == std::vector<uint64_t>{2}));
}

TEST(higher_priority_overtakes_lower) {
  BatcherConfig config = dynamic(2);
  config.priority_levels = 3;
  config.default_priority_level = 2;
  DynamicBatcher batcher(config);
  batcher.enqueue(req(1), 3, 0, 0);   // lowest
  batcher.enqueue(req(2), 0, 0, 0);   // default level 2
  batcher.enqueue(req(3), 1, 0, 0);   // highest
  batcher.enqueue(req(4), 99, 0, 0);  // out of range: default level
  CHECK((decide(batcher, 0).batch == std::vector<uint64_t>{3, 2}));
  CHECK((decide(batcher, 0).batch == std::vector<uint64_t>{4, 1}));
}

TEST(max_queue_size_rejects_at_enqueue_per_level) {
  BatcherConfig config = dynamic(8);
  config.priority_levels = 2;
  config.default_priority_level = 2;
  config.default_policy.max_queue_size = 2;
  config.level_policies.resize(2);
  config.level_has_policy = {true, false};
  config.level_policies[0].max_queue_size = 1;
  DynamicBatcher batcher(config);
  CHECK(batcher.enqueue(req(1), 2, 0, 0) == EnqueueResult::kOk);
  CHECK(batcher.enqueue(req(2), 2, 0, 0) == EnqueueResult::kOk);
  CHECK(batcher.enqueue(req(3), 2, 0, 0) == EnqueueResult::kQueueFull);
  CHECK(batcher.enqueue(req(4), 1, 0, 0) == EnqueueResult::kOk);
  CHECK(batcher.enqueue(req(5), 1, 0, 0) == EnqueueResult::kQueueFull);
  CHECK(batcher.size() == 3);
}

TEST(queue_timeout_rejects_under_reject) {
  BatcherConfig config = dynamic(8);
  config.max_queue_delay_us = 1000;
  config.default_policy.default_timeout_us = 50;
  DynamicBatcher batcher(config);
  batcher.enqueue(req(1), 0, 0, 0);
  batcher.enqueue(req(2), 0, 0, 40 * us);
  Decision first = decide(batcher, 10 * us);
  CHECK(first.batch.empty());
  CHECK(first.wait == 50 * us);  // the closest timeout comes before the delay
  Decision second = decide(batcher, 50 * us);
  CHECK((second.rejected == std::vector<uint64_t>{1}));
  CHECK(second.batch.empty() && second.wait == 90 * us);
  CHECK(batcher.size() == 1);  // the rejected one is counted out
}

TEST(timeout_override_only_when_allowed) {
  BatcherConfig config = dynamic(8);
  config.max_queue_delay_us = 1000;
  DynamicBatcher strict(config);
  strict.enqueue(req(1), 0, 10, 0);  // the request asks for 10 us: ignored
  CHECK(decide(strict, 20 * us).rejected.empty());
  config.default_policy.allow_timeout_override = true;
  DynamicBatcher lenient(config);
  lenient.enqueue(req(1), 0, 10, 0);
  CHECK((decide(lenient, 20 * us).rejected == std::vector<uint64_t>{1}));
}

TEST(queue_timeout_under_delay_moves_behind_the_others) {
  BatcherConfig config = dynamic(1);
  config.default_policy.timeout_action = TimeoutAction::kDelay;
  config.default_policy.default_timeout_us = 10;
  config.default_policy.allow_timeout_override = true;
  DynamicBatcher batcher(config);
  batcher.enqueue(req(1), 0, 0, 0);
  batcher.enqueue(req(2), 0, 1000, 0);  // overridden: times out much later
  Decision d = decide(batcher, 20 * us);
  CHECK(d.rejected.empty());
  CHECK((d.batch == std::vector<uint64_t>{2}));  // 1 timed out: delayed behind 2
  CHECK(batcher.size() == 1);                    // a delayed request still counts
  CHECK((decide(batcher, 21 * us).batch == std::vector<uint64_t>{1}));
  CHECK(batcher.empty());
}

TEST(drain_returns_every_level_and_empties_the_queue) {
  BatcherConfig config = dynamic(4);
  config.priority_levels = 2;
  DynamicBatcher batcher(config);
  batcher.enqueue(req(1), 2, 0, 0);
  batcher.enqueue(req(2), 1, 0, 0);
  CHECK(batcher.size() == 2);
  CHECK((ids(batcher.drain()) == std::vector<uint64_t>{2, 1}));  // level order
  CHECK(batcher.empty() && decide(batcher, 0).batch.empty());
}

TEST(expire_applies_timeouts_while_instances_are_busy) {
  BatcherConfig config = dynamic(8);
  config.default_policy.default_timeout_us = 5;
  DynamicBatcher batcher(config);
  batcher.enqueue(req(1), 0, 0, 0);
  std::vector<QueuedRequest> rejected;
  CHECK(batcher.expire(1 * us, &rejected) == 5 * us);
  CHECK(rejected.empty());
  CHECK(batcher.expire(5 * us, &rejected) == 0);
  CHECK(ids(rejected) == std::vector<uint64_t>{1});
}

}  // namespace

namespace {

TEST(no_possible_arrivals_ends_the_delay_early) {
  BatcherConfig config = dynamic(8);
  config.max_queue_delay_us = 1000;
  DynamicBatcher batcher(config);
  batcher.enqueue(req(1), 0, 0, 0);
  batcher.enqueue(req(2), 0, 0, 0);
  std::vector<QueuedRequest> batch;
  std::vector<QueuedRequest> rejected;
  CHECK(batcher.next_batch(1 * us, &batch, &rejected, true) == 1000 * us);
  CHECK(batch.empty());
  CHECK(batcher.next_batch(2 * us, &batch, &rejected, false) == 0);
  CHECK(ids(batch) == (std::vector<uint64_t>{1, 2}));
}

}  // namespace
