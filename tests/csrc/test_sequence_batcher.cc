// The sequence batcher (sequence_batch_scheduler.h): slots, the backlog, both
// strategies, idle release and Triton's refusals, with the clock passed in by the
// tests; and once through the core, with its injected clock and a fake worker.
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "codec/kserve_json.h"
#include "core/core.h"
#include "core/sequence_batch_scheduler.h"
#include "fake_worker.h"
#include "ipc/ipc_schema.h"
#include "testing.h"

using namespace naiad;
using namespace naiad_testing;

namespace {

constexpr uint64_t kMs = 1000000;

struct Harness {
  SequenceBatchScheduler scheduler;
  uint64_t next_id = 1;
  explicit Harness(const SequenceConfig& config) : scheduler(config) {}

  EnqueueResult send(uint64_t corrid, uint32_t flags, uint64_t now, uint64_t* id = nullptr,
                     const std::string& key = "", uint32_t batch_size = 1, uint64_t shape_key = 0) {
    QueuedRequest request{next_id, 0, 0, batch_size, shape_key, 0, 0};
    SubmitOptions options;
    options.sequence_id = corrid;
    options.sequence_key = key;
    options.sequence_flags = flags;
    options.batch_size = batch_size;
    if (id != nullptr) *id = next_id;
    ++next_id;
    return scheduler.enqueue(request, options, now);
  }
  // A request with the `timeout` parameter (microseconds).
  EnqueueResult send_timed(uint64_t corrid, uint32_t flags, uint64_t now, uint64_t timeout_us,
                           uint64_t* id = nullptr) {
    QueuedRequest request{next_id, 0, 0, 1, 0, 0, 0};
    SubmitOptions options;
    options.sequence_id = corrid;
    options.sequence_flags = flags;
    options.timeout_us = timeout_us;
    if (id != nullptr) *id = next_id;
    ++next_id;
    return scheduler.enqueue(request, options, now);
  }
  // The batches for the idle instances; `hold` gets what schedule() returned, `rejected`
  // the requests it rejected.
  std::vector<Placement> run(uint64_t now, const std::vector<uint32_t>& idle,
                             uint64_t* hold = nullptr, bool arrivals = true,
                             std::vector<QueuedRequest>* rejected = nullptr) {
    std::vector<Placement> placements;
    std::vector<QueuedRequest> dropped;
    uint64_t wait = scheduler.schedule(now, idle, arrivals, &placements, &dropped);
    if (hold != nullptr) *hold = wait;
    if (rejected != nullptr) *rejected = dropped;
    return placements;
  }
};

uint32_t slot_of(const QueuedRequest& r) { return static_cast<uint32_t>(r.sequence); }

SequenceConfig direct(uint32_t max_batch, uint64_t idle_us = 1000000) {
  SequenceConfig config;
  config.max_batch_size = max_batch;
  config.max_sequence_idle_us = idle_us;
  return config;
}

// A one-input request of sequence `corrid` (flags: START 1, END 2) through the core.
SubmitResult submit_sequence(Core& core, ModelHandle model, uint64_t id, uint64_t corrid,
                             uint32_t flags, uint64_t timeout_us = 0) {
  SubmitRequest request;
  request.request_id = id;
  InputSource input;
  input.data = "abcd";
  input.size = 4;
  request.inputs.push_back(input);
  request.options.sequence_id = corrid;
  request.options.sequence_flags = flags;
  request.options.timeout_us = timeout_us;
  return core.submit(model, request);
}

}  // namespace

TEST(sequence_refuses_what_triton_refuses) {
  Harness h(direct(2));
  CHECK(h.send(0, 1, 0) == EnqueueResult::kNoSequenceId);
  CHECK(h.send(0, 1, 0, nullptr, "") == EnqueueResult::kNoSequenceId);
  CHECK(h.send(7, 0, 0) == EnqueueResult::kSequenceNotStarted);
  CHECK(h.send(7, 1, 0, nullptr, "", 2) == EnqueueResult::kSequenceBatchSize);
  CHECK(h.scheduler.empty());
  CHECK(h.send(7, 1, 0) == EnqueueResult::kOk);
  CHECK(h.send(7, 2, 0) == EnqueueResult::kOk);  // END: the id is forgotten at once
  CHECK(h.send(7, 0, 0) == EnqueueResult::kSequenceNotStarted);
  // A string id is another id than any number.
  CHECK(h.send(0, 0, 0, nullptr, "seven") == EnqueueResult::kSequenceNotStarted);
  CHECK(h.send(0, 1, 0, nullptr, "seven") == EnqueueResult::kOk);
  CHECK(h.send(0, 0, 0, nullptr, "seven") == EnqueueResult::kOk);
}

TEST(sequence_iterative_takes_a_request_without_an_id_as_a_sequence_of_its_own) {
  SequenceConfig config = direct(2);
  config.iterative = true;
  Harness h(config);
  uint64_t first, second;
  CHECK(h.send(0, 0, 0, &first) == EnqueueResult::kOk);
  CHECK(h.send(0, 0, 0, &second) == EnqueueResult::kOk);
  CHECK(h.scheduler.active_sequences() == 0);  // each ended as it came
  std::vector<Placement> batches = h.run(0, {5});
  CHECK(batches.size() == 1 && batches[0].requests.size() == 2);
  for (const QueuedRequest& r : batches[0].requests) {
    CHECK((r.sequence & kSequenceStartBit) != 0 && (r.sequence & kSequenceEndBit) != 0);
  }
  CHECK(slot_of(batches[0].requests[0]) != slot_of(batches[0].requests[1]));
  // Their slots are free again; a client's own sequence still needs its START.
  CHECK(h.send(9, 0, 1) == EnqueueResult::kSequenceNotStarted);
  CHECK(h.send(9, 1, 1) == EnqueueResult::kOk);
  CHECK(h.run(1, {5}).size() == 1);
  CHECK(h.scheduler.empty());
}

TEST(sequence_direct_keeps_each_sequence_on_its_slot_in_order) {
  Harness h(direct(2));
  // Four sequences, two instances with two slots each: the lowest slot first, the
  // instances in turn.
  for (uint64_t corrid = 1; corrid <= 4; ++corrid)
    CHECK(h.send(corrid, 1, 0) == EnqueueResult::kOk);
  std::vector<Placement> batches = h.run(0, {10, 11});
  CHECK(batches.size() == 2);
  std::map<uint64_t, std::pair<uint32_t, uint32_t>> where;  // request id -> (instance, slot)
  for (const Placement& p : batches) {
    CHECK(p.requests.size() == 2);
    for (size_t i = 0; i < p.requests.size(); ++i) {
      CHECK(slot_of(p.requests[i]) == i);  // slot i at position i
      CHECK((p.requests[i].sequence & kSequenceValid) != 0);
      CHECK((p.requests[i].sequence & kSequenceStartBit) != 0);
      where[p.requests[i].id] = {p.instance, slot_of(p.requests[i])};
    }
  }
  // Requests 1 and 2 (corrids 1, 2) took slot 0 of each instance.
  CHECK(where[1].second == 0 && where[2].second == 0 && where[1].first != where[2].first);
  // The next requests of each sequence follow their sequence, whatever instance is idle.
  uint64_t ids[5];
  for (uint64_t corrid = 1; corrid <= 4; ++corrid) {
    CHECK(h.send(corrid, corrid == 3 ? 2 : 0, 1, &ids[corrid]) == EnqueueResult::kOk);
  }
  batches = h.run(1, {11});  // only instance 11 idle
  CHECK(batches.size() == 1 && batches[0].instance == 11);
  for (const QueuedRequest& r : batches[0].requests) {
    bool known = false;
    for (uint64_t corrid = 1; corrid <= 4; ++corrid) {
      if (ids[corrid] == r.id) {
        known = true;
        uint64_t first = corrid;  // the START request's id was `corrid`
        CHECK(where[first].first == 11 && where[first].second == slot_of(r));
      }
    }
    CHECK(known);
  }
  batches = h.run(2, {10});
  CHECK(batches.size() == 1 && batches[0].requests.size() == 2);
  CHECK(h.scheduler.empty());
  CHECK(h.scheduler.active_sequences() == 3);  // corrid 3 ended
}

TEST(sequence_direct_leaves_gaps_for_empty_slots) {
  Harness h(direct(3));
  for (uint64_t corrid = 1; corrid <= 3; ++corrid)
    CHECK(h.send(corrid, 1, 0) == EnqueueResult::kOk);
  CHECK(h.run(0, {5}).size() == 1);
  uint64_t id3;
  CHECK(h.send(3, 0, 1, &id3) == EnqueueResult::kOk);  // only slot 2 has a request
  std::vector<Placement> batches = h.run(1, {5});
  CHECK(batches.size() == 1 && batches[0].requests.size() == 1);
  CHECK(batches[0].requests[0].id == id3 && slot_of(batches[0].requests[0]) == 2);
}

TEST(sequence_backlog_waits_for_a_slot_and_takes_the_first_freed) {
  Harness h(direct(1));
  CHECK(h.send(1, 1, 0) == EnqueueResult::kOk);
  CHECK(h.send(2, 1, 0) == EnqueueResult::kOk);  // no slot: backlog
  CHECK(h.send(2, 0, 0) == EnqueueResult::kOk);  // joins its backlog entry
  CHECK(h.send(3, 3, 0) == EnqueueResult::kOk);  // START|END, whole in the backlog
  std::vector<Placement> batches = h.run(0, {0});
  CHECK(batches.size() == 1 && batches[0].requests.size() == 1 && batches[0].requests[0].id == 1);
  CHECK(h.scheduler.backlog_sequences() == 2);
  uint64_t end1;
  CHECK(h.send(1, 2, 1, &end1) == EnqueueResult::kOk);
  batches = h.run(1, {0});
  CHECK(batches[0].requests.size() == 1 && batches[0].requests[0].id == end1);
  // Sequence 1 ended: sequence 2 has its slot, then 3.
  batches = h.run(2, {0});
  CHECK(batches[0].requests[0].id == 2);
  batches = h.run(3, {0});
  CHECK(batches[0].requests[0].id == 3);
  uint64_t end2;
  CHECK(h.send(2, 2, 4, &end2) == EnqueueResult::kOk);
  batches = h.run(4, {0});
  CHECK(batches[0].requests[0].id == end2);
  batches = h.run(5, {0});
  CHECK(batches.size() == 1 && batches[0].requests[0].id == 4);  // corrid 3's START|END
  CHECK(h.scheduler.empty() && h.scheduler.backlog_sequences() == 0);
  CHECK(h.scheduler.active_sequences() == 0);
}

// Triton 2.51: a backlogged sequence whose request timeout passes fails whole (503
// "timeout of the corresponding sequence has been expired"), its id is forgotten, and
// the sequences behind it keep their place.
TEST(sequence_backlog_timeout_rejects_the_whole_sequence) {
  Harness h(direct(1, 10000000));
  const uint64_t kUs = 1000;
  uint64_t b1, b2, c1;
  CHECK(h.send(1, 1, 0) == EnqueueResult::kOk);                   // the only slot
  CHECK(h.send_timed(2, 1, 0, 2000, &b1) == EnqueueResult::kOk);  // backlog, 2 ms
  CHECK(h.send_timed(2, 0, kMs, 0, &b2) == EnqueueResult::kOk);   // joins it, no timeout
  CHECK(h.send_timed(3, 1, kMs, 0, &c1) == EnqueueResult::kOk);   // backlog, no timeout
  CHECK(h.send_timed(4, 1, kMs, 5000) == EnqueueResult::kOk);     // backlog, 6 ms
  uint64_t hold = 0;
  std::vector<QueuedRequest> rejected;
  std::vector<Placement> batches = h.run(kMs, {0}, &hold, true, &rejected);
  CHECK(batches.size() == 1 && batches[0].requests[0].id == 1 && rejected.empty());
  CHECK(hold == 2 * kMs);  // the earliest deadline: the timer looks then
  batches = h.run(2 * kMs - kUs, {}, &hold, true, &rejected);
  CHECK(rejected.empty() && h.scheduler.backlog_sequences() == 3);
  batches = h.run(2 * kMs, {}, &hold, true, &rejected);
  CHECK(rejected.size() == 2 && rejected[0].id == b1 && rejected[1].id == b2);
  CHECK(h.scheduler.backlog_sequences() == 2 && hold == 6 * kMs);
  CHECK(h.send(2, 0, 3 * kMs) == EnqueueResult::kSequenceNotStarted);
  // Sequence 1 ends: sequence 3 gets the slot (it had no deadline), then 4 is on time.
  CHECK(h.send(1, 2, 3 * kMs) == EnqueueResult::kOk);
  batches = h.run(3 * kMs, {0}, &hold, true, &rejected);
  CHECK(rejected.empty() && batches.size() == 1);
  batches = h.run(3 * kMs, {0}, &hold, true, &rejected);
  CHECK(batches.size() == 1 && batches[0].requests[0].id == c1);
  CHECK(h.scheduler.backlog_sequences() == 1);
  // A sequence holding a slot has no deadline: 3 keeps it; 4 expires in the backlog.
  batches = h.run(7 * kMs, {0}, &hold, true, &rejected);
  CHECK(rejected.size() == 1 && h.scheduler.backlog_sequences() == 0 && h.scheduler.empty());
  CHECK(h.send(3, 2, 7 * kMs) == EnqueueResult::kOk);
}

TEST(sequence_idle_sequence_is_released_and_refused) {
  Harness h(direct(1, 1000));  // 1 ms
  CHECK(h.send(1, 1, 0) == EnqueueResult::kOk);
  CHECK(h.send(2, 1, 0) == EnqueueResult::kOk);  // backlog behind 1
  uint64_t hold = 0;
  std::vector<Placement> batches = h.run(0, {0}, &hold);
  CHECK(batches.size() == 1 && hold == kMs);  // the reaper's next look
  batches = h.run(kMs / 2, {0}, &hold);
  CHECK(batches.empty());
  CHECK(h.send(1, 0, kMs / 2) == EnqueueResult::kOk);  // still live
  batches = h.run(kMs / 2, {0});
  CHECK(batches.size() == 1);
  // Idle for the full time: released, its slot goes to sequence 2.
  batches = h.run(kMs / 2 + kMs, {0}, &hold);
  CHECK(h.send(1, 0, kMs / 2 + kMs) == EnqueueResult::kSequenceNotStarted);
  CHECK(batches.size() == 1 && batches[0].requests[0].id == 2);
  // A new START with the old id is a new sequence.
  CHECK(h.send(1, 1, 2 * kMs) == EnqueueResult::kOk);
  CHECK(h.scheduler.backlog_sequences() == 1);
}

// The reaper's look may come late (a busy timer thread, a loaded host): a request that
// comes after the idle time finds its sequence gone all the same.
TEST(sequence_idle_past_the_limit_is_released_before_the_reaper_looks) {
  Harness h(direct(1, 1000));  // 1 ms
  CHECK(h.send(1, 1, 0) == EnqueueResult::kOk);
  std::vector<Placement> batches = h.run(0, {0});
  CHECK(batches.size() == 1);
  CHECK(h.send(1, 0, kMs - 1) == EnqueueResult::kOk);  // 1 ns before the limit: live
  batches = h.run(kMs - 1, {0});
  CHECK(batches.size() == 1);
  // No run() (no reaper) since: idle from kMs - 1 on, gone at 2 * kMs - 1.
  CHECK(h.send(1, 0, 2 * kMs - 1) == EnqueueResult::kSequenceNotStarted);
  CHECK(h.scheduler.active_sequences() == 0);
  // A START with the id is a new sequence, on the slot the old one gave up.
  CHECK(h.send(1, 1, 2 * kMs) == EnqueueResult::kOk);
  batches = h.run(2 * kMs, {0});
  CHECK(batches.size() == 1 && batches[0].requests.size() == 1);
}

TEST(sequence_idle_release_waits_for_queued_requests) {
  Harness h(direct(1, 1000));
  CHECK(h.send(1, 1, 0) == EnqueueResult::kOk);
  CHECK(h.send(1, 0, 0) == EnqueueResult::kOk);
  CHECK(h.send(2, 1, 0) == EnqueueResult::kOk);
  // The instance was busy the whole time: sequence 1 idles out with a request queued.
  std::vector<Placement> batches = h.run(2 * kMs, {0});
  CHECK(batches.size() == 1 && batches[0].requests[0].id == 1);
  CHECK(h.send(1, 0, 2 * kMs) == EnqueueResult::kSequenceNotStarted);
  batches = h.run(2 * kMs, {0});  // the request queued before the release still runs
  CHECK(batches.size() == 1 && batches[0].requests[0].id == 2);
  batches = h.run(2 * kMs, {0});  // then the slot is sequence 2's
  CHECK(batches.size() == 1 && batches[0].requests[0].id == 3);
}

TEST(sequence_direct_holds_for_slot_utilization) {
  SequenceConfig config = direct(4);
  config.max_queue_delay_us = 100;
  config.minimum_slot_utilization = 0.5;
  Harness h(config);
  CHECK(h.send(1, 1, 0) == EnqueueResult::kOk);
  uint64_t hold = 0;
  CHECK(h.run(0, {0}, &hold).empty());
  CHECK(hold > 0 && hold <= 100001);
  CHECK(h.run(0, {0}, &hold, false).size() == 1);  // no client can send: goes now
  CHECK(h.send(2, 1, 10) == EnqueueResult::kOk);
  CHECK(h.send(3, 1, 10) == EnqueueResult::kOk);
  std::vector<Placement> batches = h.run(10, {0});  // 2 of 4 slots: utilization reached
  CHECK(batches.size() == 1 && batches[0].requests.size() == 2);
  CHECK(h.send(2, 0, 20) == EnqueueResult::kOk);
  CHECK(h.run(50000, {0}).empty());
  CHECK(h.run(200000, {0}).size() == 1);  // the delay expired
}

TEST(sequence_oldest_batches_across_sequences_oldest_first) {
  SequenceConfig config;
  config.oldest = true;
  config.max_batch_size = 2;
  config.max_candidate_sequences = 4;
  config.max_queue_delay_us = 1000;
  Harness h(config);
  for (uint64_t corrid = 1; corrid <= 3; ++corrid) {
    CHECK(h.send(corrid, 1, corrid) == EnqueueResult::kOk);
  }
  // One instance, four candidate slots: the two oldest go first (max batch 2).
  std::vector<Placement> batches = h.run(10, {0});
  CHECK(batches.size() == 1 && batches[0].requests.size() == 2);
  CHECK(batches[0].requests[0].id == 1 && batches[0].requests[1].id == 2);
  // One candidate left, below max batch, no preferred size: held for the delay.
  uint64_t hold = 0;
  CHECK(h.run(20, {0}, &hold).empty());
  CHECK(hold == 3 + 1000 * 1000);
  batches = h.run(hold, {0});
  CHECK(batches.size() == 1 && batches[0].requests[0].id == 3);
  // A sequence never has two requests in one batch.
  CHECK(h.send(1, 0, 2 * kMs) == EnqueueResult::kOk);
  CHECK(h.send(1, 0, 2 * kMs) == EnqueueResult::kOk);
  batches = h.run(3 * kMs, {0});
  CHECK(batches.size() == 1 && batches[0].requests.size() == 1);
}

TEST(sequence_oldest_preferred_size_goes_without_delay) {
  SequenceConfig config;
  config.oldest = true;
  config.max_batch_size = 4;
  config.max_candidate_sequences = 4;
  config.max_queue_delay_us = 1000000;
  config.preferred_batch_sizes = {2};
  Harness h(config);
  CHECK(h.send(1, 1, 0) == EnqueueResult::kOk);
  CHECK(h.run(0, {0}).empty());
  CHECK(h.send(2, 1, 0) == EnqueueResult::kOk);
  CHECK(h.send(3, 1, 0) == EnqueueResult::kOk);
  std::vector<Placement> batches = h.run(1, {0});
  CHECK(batches.size() == 1 && batches[0].requests.size() == 2);
}

TEST(sequence_drain_returns_every_queued_request) {
  Harness h(direct(1));
  CHECK(h.send(1, 1, 0) == EnqueueResult::kOk);
  CHECK(h.send(2, 1, 0) == EnqueueResult::kOk);
  h.run(0, {0});
  CHECK(h.send(1, 0, 0) == EnqueueResult::kOk);
  CHECK(h.scheduler.drain().size() == 2);
  CHECK(h.scheduler.empty() && h.scheduler.active_sequences() == 0);
}

// Through the core: the slot word reaches the request block, the clock is the core's
// (injected), and idle release comes from tick() with nothing queued.
TEST(sequence_scheduler_in_the_core) {
  uint64_t now = 0;
  Core core(1 << 22, [&now] { return now; }, false);
  SequenceConfig config = direct(2, 1000);
  ModelHandle model = core.add_model(std::make_unique<SequenceBatchScheduler>(config));
  uint32_t a = core.add_instance(model);
  core.instance_up(a);
  auto submit = [&](uint64_t id, uint64_t corrid, uint32_t flags) {
    return submit_sequence(core, model, id, corrid, flags);
  };
  CHECK(submit(1, 0, 1) == SubmitResult::kNoSequenceId);
  CHECK(submit(2, 5, 0) == SubmitResult::kSequenceNotStarted);
  CHECK(submit(3, 5, 1) == SubmitResult::kOk);
  CHECK(submit(4, 6, 1) == SubmitResult::kOk);
  {
    FakeWorker worker(core, a);
    core.flush();
    std::vector<Completion> done = collect(core, 2);
    size_t ran = 0;
    for (const Completion& c : done) ran += c.request_ids.size();
    CHECK(ran == 2);
    core.stop_instance(a);
  }
  now = 2 * kMs;
  core.tick();  // sequence 5 and 6 idle out
  CHECK(submit(5, 5, 0) == SubmitResult::kSequenceNotStarted);
  CHECK(submit(6, 6, 2) == SubmitResult::kSequenceNotStarted);
}

// Through the core: a backlogged sequence's deadline comes from the core's timer
// (tick()), and its requests complete as kCompletionSequenceTimedOut.
TEST(sequence_backlog_timeout_in_the_core) {
  uint64_t now = 0;
  Core core(1 << 22, [&now] { return now; }, false);
  ModelHandle model = core.add_model(std::make_unique<SequenceBatchScheduler>(direct(1)));
  uint32_t a = core.add_instance(model);
  core.instance_up(a);
  auto submit = [&](uint64_t id, uint64_t corrid, uint64_t timeout_us) {
    return submit_sequence(core, model, id, corrid, 1, timeout_us);  // START
  };
  CHECK(submit(1, 5, 0) == SubmitResult::kOk);     // runs (no worker: it stays running)
  CHECK(submit(2, 6, 1000) == SubmitResult::kOk);  // backlog, 1 ms
  core.flush();
  now = kMs - 1;
  core.tick();
  CHECK(core.poll().empty());
  now = kMs;
  core.tick();
  std::vector<Completion> done = core.poll();
  CHECK(done.size() == 1 && done[0].status == kCompletionSequenceTimedOut);
  CHECK(done[0].request_ids == std::vector<uint64_t>{2});
  CHECK(submit(3, 6, 0) == SubmitResult::kOk);  // a START: a new sequence 6
}

// The HTTP lane's reader takes the sequence parameters for the scheduler; a value of
// another type leaves the request to the general path (which answers Triton's error).
TEST(sequence_parameters_on_the_http_lane) {
  std::string body;  // the views of `out` point into it
  auto read = [&body](const std::string& parameters, ParsedRequest* out) {
    std::string header =
        "{\"inputs\":[{\"name\":\"INPUT\",\"shape\":[1,1],\"datatype\":\"INT32\","
        "\"parameters\":{\"binary_data_size\":4}}],\"parameters\":{\"binary_data_output\":true," +
        parameters.substr(1) + "}";
    body = header + std::string(4, '\0');
    *out = ParsedRequest();
    return read_infer_header(reinterpret_cast<const uint8_t*>(body.data()), body.size(),
                             header.size(), out);
  };
  ParsedRequest request;
  CHECK(read("{\"sequence_id\":42,\"sequence_start\":true,\"sequence_end\":false}", &request));
  CHECK(request.sequence_id == 42 && request.sequence_key.empty());
  CHECK(request.sequence_flags == kSequenceFlagStart);
  CHECK(read("{\"sequence_id\":\"abc\",\"sequence_end\":true}", &request));
  CHECK(request.sequence_id == 0 && request.sequence_key == "abc");
  CHECK(request.sequence_flags == kSequenceFlagEnd);
  CHECK(!read("{\"sequence_id\":-1}", &request));
  CHECK(!read("{\"sequence_id\":1.5}", &request));
  CHECK(!read("{\"sequence_start\":1}", &request));
  CHECK(!read("{\"sequence_id\":1,\"sequence_id\":2}", &request));
}

TEST(sequence_oldest_after_the_delay_takes_everything_there) {
  SequenceConfig config;
  config.oldest = true;
  config.max_batch_size = 4;
  config.max_candidate_sequences = 4;
  config.max_queue_delay_us = 1000;
  config.preferred_batch_sizes = {2};
  Harness h(config);
  for (uint64_t corrid = 1; corrid <= 3; ++corrid)
    CHECK(h.send(corrid, 1, 0) == EnqueueResult::kOk);
  // The instance was busy past the delay: the three go together, not a preferred two.
  std::vector<Placement> batches = h.run(2 * kMs, {0});
  CHECK(batches.size() == 1 && batches[0].requests.size() == 3);
}
