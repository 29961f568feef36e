// Ensembles orchestrated in the core (ensemble_scheduler.h): a request for an ensemble
// queues its first step on the step model's own scheduler; each step's response
// queues the steps it completes; the ensemble's response reaches the frontend (or the
// worker that called it) as one final response, and the arena is left as it was.
// The graph here is tests/pipeline_models/ensemble_add_sub's: add_sub twice.
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "client_request.h"
#include "codec/request_validator.h"
#include "core/core.h"
#include "core/ensemble_graph.h"
#include "core/sequence_batch_scheduler.h"
#include "ipc/ipc_schema.h"
#include "ipc/request_block.h"
#include "ipc/response_block.h"
#include "ipc/result_block.h"
#include "ipc/worker_endpoint.h"
#include "testing.h"

using namespace naiad;

namespace {

const uint64_t kTimings[4] = {1, 2, 3, 4};

struct Ensemble {
  // `sequence`: add_sub under the sequence batcher (direct, one slot) instead.
  explicit Ensemble(bool set_graph = true, bool sequence = false, Clock clock = nullptr)
      : core(1 << 22, std::move(clock), false) {
    BatcherConfig config;
    config.dynamic_batching = true;
    config.max_batch_size = 8;
    if (sequence) {
      add_sub = core.add_model(std::make_unique<SequenceBatchScheduler>(SequenceConfig{}));
    } else {
      add_sub = core.add_model(config);
    }
    add_sub_instance = core.add_instance(add_sub);
    InstanceEndpoint ep = core.endpoint(add_sub_instance);
    worker = std::make_unique<WorkerEndpoint>(dup(core.arena().fd()), ep.channel_offset,
                                              dup(ep.wake_fd), dup(core.notify_fd()));
    ensemble = core.add_ensemble();
    ensemble_spec = fp32_spec("ensemble_add_sub", {"INPUT0", "INPUT1"}, {"OUTPUT0", "OUTPUT1"});
    if (set_graph) CHECK(core.set_ensemble_graph(ensemble, graph(add_sub)));
    core.instance_up(add_sub_instance);
  }
  std::shared_ptr<const EnsembleGraph> graph(ModelHandle step_model) {
    auto graph = std::make_shared<EnsembleGraph>();
    graph->name = "ensemble_add_sub";
    graph->outputs = {"OUTPUT0", "OUTPUT1"};
    EnsembleStep first;
    first.model = step_model;
    first.spec = fp32_spec("add_sub", {"INPUT0", "INPUT1"}, {"OUTPUT0", "OUTPUT1"});
    first.inputs = {{"INPUT0", "INPUT0"}, {"INPUT1", "INPUT1"}};
    first.outputs = {{"OUTPUT0", "sum"}, {"OUTPUT1", "difference"}};
    EnsembleStep second = first;
    second.inputs = {{"INPUT0", "sum"}, {"INPUT1", "difference"}};
    second.outputs = {{"OUTPUT0", "OUTPUT0"}, {"OUTPUT1", "OUTPUT1"}};
    graph->steps = {first, second};
    return graph;
  }
  // A client's request for the ensemble, laid out as the codec lays it out.
  SubmitRequest request(uint64_t id, const float* a, const float* b,
                        const std::vector<std::string_view>& outputs = {}) {
    ParsedRequest parsed;
    parsed.id = "client";
    parsed.inputs.resize(2);
    const float* data[2] = {a, b};
    for (int i = 0; i < 2; ++i) {
      parsed.inputs[i].name = i == 0 ? "INPUT0" : "INPUT1";
      parsed.inputs[i].datatype = "FP32";
      parsed.inputs[i].shape = {1, 4};
      parsed.inputs[i].data = reinterpret_cast<const uint8_t*>(data[i]);
      parsed.inputs[i].size = 16;
    }
    parsed.output_names = outputs;
    return laid_out_request(ensemble_spec, &parsed, id, &laid);
  }
  // Plays add_sub for one batch: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1,
  // or an error for every request when `error` is set. Returns the batch's size.
  // `sequence` (when set) gets the first request's RequestHeader::sequence.
  // `parameters` (when set): the response parameters every response gives.
  uint32_t serve(const char* error = nullptr, uint64_t* sequence = nullptr,
                 const char* parameters = nullptr) {
    BatchMessage batch = worker->next();
    CHECK(batch.kind == MessageKind::kBatch);
    Arena& arena = worker->arena();
    const auto* records = arena.at<BatchRequest>(batch.desc_offset + batch_requests_offset());
    if (sequence != nullptr) *sequence = arena.at<RequestHeader>(records[0].block_offset)->sequence;
    std::vector<std::vector<float>> outputs(batch.n_requests * 2, std::vector<float>(4));
    std::vector<ResponseEntry> entries;
    const std::string json =
        "{\"outputs\":[[\"OUTPUT0\",\"FP32\",[1,4]],[\"OUTPUT1\",\"FP32\",[1,4]]]" +
        (parameters == nullptr ? std::string() : std::string(",\"parameters\":") + parameters) +
        "}";
    const std::string failed = error == nullptr ? "" : std::string("{\"error\":\"") + error + "\"}";
    for (uint32_t r = 0; r < batch.n_requests; ++r) {
      const auto* slots = arena.at<InputSlot>(records[r].block_offset + sizeof(RequestHeader));
      const auto* a = reinterpret_cast<const float*>(arena.base() + slots[0].offset);
      const auto* b = reinterpret_cast<const float*>(arena.base() + slots[1].offset);
      for (int k = 0; k < 4; ++k) {
        outputs[2 * r][k] = a[k] + b[k];
        outputs[2 * r + 1][k] = a[k] - b[k];
      }
      ResponseEntry entry;
      entry.request_index = r;
      if (error != nullptr) {
        entry.flags = kResponseFinal | kResponseError;
        entry.error_code = 3;
        entry.json = failed;
      } else {
        entry.json = json;
        entry.outputs = {{outputs[2 * r].data(), 16}, {outputs[2 * r + 1].data(), 16}};
      }
      entries.push_back(entry);
    }
    CHECK(worker->respond(batch.batch_id, entries, kTimings, true));
    return batch.n_requests;
  }
  // Completions for the frontend, routed statistics counted apart.
  std::vector<Completion> poll(int* routed = nullptr) {
    std::vector<Completion> out;
    for (Completion& c : core.poll()) {
      if (c.status == kCompletionRouted) {
        if (routed != nullptr) *routed += static_cast<int>(c.request_ids[kRoutedCount]);
        continue;
      }
      out.push_back(std::move(c));
    }
    return out;
  }
  // Runs two submitted requests through both steps (each step one batch of two) and
  // frees their answers.
  void run_two_requests() {
    core.flush();
    CHECK(serve() == 2);
    poll();
    CHECK(serve() == 2);
    std::vector<Completion> done = poll();
    CHECK(done.size() == 1 && done[0].request_ids.size() == 2);  // answered together
    core.arena().free(done[0].result_offset);
  }

  Core core;
  ModelHandle add_sub, ensemble;
  uint32_t add_sub_instance = 0;
  ModelSpec ensemble_spec;
  RequestBlock laid;
  std::unique_ptr<WorkerEndpoint> worker;
};

const float kA[4] = {1, 2, 3, 4};
const float kB[4] = {10, 10, 10, 10};

// The outputs of a completion's one response, by name.
std::vector<std::pair<std::string, std::vector<float>>> outputs_of(Core& core, const Completion& c,
                                                                   ResultOutcome* outcome) {
  ResultBlock result;
  std::vector<std::pair<std::string, std::vector<float>>> out;
  CHECK(parse_result_block(core.arena().base() + c.result_offset, c.result_size, &result));
  CHECK(result.outcomes.size() == 1);
  *outcome = result.outcomes[0];
  for (size_t o = 0; o < outcome->output_count; ++o) {
    const ResultOutput& output = result.outputs[outcome->first_output + o];
    std::vector<float> values(output.size / 4);
    std::memcpy(values.data(), core.arena().base() + c.result_offset + output.offset, output.size);
    out.emplace_back(std::string(output.name), values);
  }
  return out;
}

struct Failure {
  int64_t code = 0;
  std::string message;
};

// Submits `request` to the ensemble, which must fail before any step runs; its error.
Failure failure_of(Ensemble& e, const SubmitRequest& request) {
  CHECK(e.core.submit(e.ensemble, request) == SubmitResult::kOk);
  e.core.flush();
  std::vector<Completion> done = e.poll();
  CHECK(done.size() == 1);
  ResultOutcome outcome;
  outputs_of(e.core, done[0], &outcome);
  CHECK(outcome.error);
  Failure failure{outcome.code, std::string(outcome.message)};
  e.core.arena().free(done[0].result_offset);
  return failure;
}

}  // namespace

TEST(an_ensemble_request_runs_its_steps_in_the_core_and_is_answered_once) {
  Ensemble e;
  const ArenaStats baseline = e.core.arena().stats();
  CHECK(e.core.submit(e.ensemble, e.request(1, kA, kB)) == SubmitResult::kOk);
  e.core.flush();  // starts the ensemble: its first step goes to add_sub's queue
  CHECK(e.serve() == 1);
  int routed = 0;
  CHECK(e.poll(&routed).empty());  // the first step answered: the second is queued
  CHECK(routed == 1);              // add_sub's statistics count the step
  CHECK(e.serve() == 1);
  std::vector<Completion> done = e.poll(&routed);
  CHECK(routed == 2);
  CHECK(done.size() == 1 && done[0].status == kCompletionOk);
  CHECK(done[0].request_ids == std::vector<uint64_t>{1});
  ResultOutcome outcome;
  auto outputs = outputs_of(e.core, done[0], &outcome);
  CHECK(!outcome.error && outcome.final);
  CHECK(outputs.size() == 2 && outputs[0].first == "OUTPUT0" && outputs[1].first == "OUTPUT1");
  for (int k = 0; k < 4; ++k) {
    CHECK(outputs[0].second[k] == 2 * kA[k]);  // (a + b) + (a - b)
    CHECK(outputs[1].second[k] == 2 * kB[k]);  // (a + b) - (a - b)
  }
  e.core.arena().free(done[0].result_offset);
  CHECK(e.core.arena().stats().blocks_in_use == baseline.blocks_in_use);
}

TEST(ensemble_steps_batch_together_and_with_direct_traffic) {
  Ensemble e;
  const ArenaStats baseline = e.core.arena().stats();
  for (uint64_t id = 1; id <= 3; ++id) {
    CHECK(e.core.submit(e.ensemble, e.request(id, kA, kB)) == SubmitResult::kOk);
  }
  e.core.flush();
  CHECK(e.serve() == 3);  // the three first steps in one add_sub batch
  CHECK(e.poll().empty());
  CHECK(e.serve() == 3);
  std::vector<Completion> done = e.poll();
  CHECK(done.size() == 1 && done[0].request_ids.size() == 3);  // ended together: one answer
  e.core.arena().free(done[0].result_offset);
  CHECK(e.core.arena().stats().blocks_in_use == baseline.blocks_in_use);
}

TEST(ensemble_requests_that_end_together_share_one_block_each_with_its_own_start) {
  uint64_t now = 1000;
  Ensemble e(true, false, [&now] { return now += 10; });  // every reading a later time
  const ArenaStats baseline = e.core.arena().stats();
  const float a2[4] = {5, 6, 7, 8};
  CHECK(e.core.submit(e.ensemble, e.request(7, kA, kB)) == SubmitResult::kOk);
  CHECK(e.core.submit(e.ensemble, e.request(9, a2, kB)) == SubmitResult::kOk);
  const uint64_t before_start = now;
  e.core.flush();
  const uint64_t after_start = now;
  CHECK(e.serve() == 2);
  CHECK(e.poll().empty());
  CHECK(e.serve() == 2);
  std::vector<Completion> done = e.poll();
  CHECK(done.size() == 1 && done[0].status == kCompletionOk);
  CHECK((done[0].request_ids == std::vector<uint64_t>{7, 9}));
  ResultBlock result;
  CHECK(parse_result_block(e.core.arena().base() + done[0].result_offset, done[0].result_size,
                           &result));
  CHECK(result.outcomes.size() == 2);
  uint64_t started_sum = 0;
  for (uint32_t r = 0; r < 2; ++r) {
    const ResultOutcome& outcome = result.outcomes[r];
    CHECK(outcome.request_index == r && outcome.final && !outcome.error);
    // Each request's own start, as its queue time counts up to it (not the first's).
    CHECK(outcome.started_ns > before_start && outcome.started_ns <= after_start);
    started_sum += outcome.started_ns;
    const float* a = r == 0 ? kA : a2;
    const ResultOutput& out0 = result.outputs[outcome.first_output];
    CHECK(out0.name == "OUTPUT0" && out0.size == 16);
    const auto* values =
        reinterpret_cast<const float*>(e.core.arena().base() + done[0].result_offset + out0.offset);
    for (int k = 0; k < 4; ++k) CHECK(values[k] == 2 * a[k]);  // (a + b) + (a - b)
  }
  CHECK(result.outcomes[0].started_ns < result.outcomes[1].started_ns);  // started apart
  // The compute time is the requests' mean: the sum over both is theirs.
  CHECK(result.timings[0] == result.outcomes[0].started_ns);
  CHECK(result.timings[2] > 0 && result.timings[2] < now - started_sum / 2);
  e.core.arena().free(done[0].result_offset);
  CHECK(e.core.arena().stats().blocks_in_use == baseline.blocks_in_use);
}

TEST(an_ensemble_answers_only_the_outputs_asked_for) {
  Ensemble e;
  CHECK(e.core.submit(e.ensemble, e.request(1, kA, kB, {"OUTPUT1"})) == SubmitResult::kOk);
  e.core.flush();
  e.serve();
  e.poll();
  e.serve();
  std::vector<Completion> done = e.poll();
  CHECK(done.size() == 1);
  ResultOutcome outcome;
  auto outputs = outputs_of(e.core, done[0], &outcome);
  CHECK(outputs.size() == 1 && outputs[0].first == "OUTPUT1");
  e.core.arena().free(done[0].result_offset);
}

TEST(a_steps_error_is_the_ensemble_requests_error_with_its_code) {
  Ensemble e;
  const ArenaStats baseline = e.core.arena().stats();
  CHECK(e.core.submit(e.ensemble, e.request(1, kA, kB)) == SubmitResult::kOk);
  e.core.flush();
  e.serve("bad things");
  std::vector<Completion> done = e.poll();  // no second step: the request failed
  CHECK(done.size() == 1 && done[0].status == kCompletionOk);
  ResultOutcome outcome;
  outputs_of(e.core, done[0], &outcome);
  CHECK(outcome.error && outcome.code == 3);
  CHECK(outcome.message == "in ensemble 'ensemble_add_sub', bad things");
  e.core.arena().free(done[0].result_offset);
  CHECK(e.core.arena().stats().blocks_in_use == baseline.blocks_in_use);
}

TEST(a_step_whose_model_is_gone_fails_the_request_as_not_ready) {
  Ensemble e;
  const ArenaStats baseline = e.core.arena().stats();
  CHECK(e.core.remove_model(e.add_sub));
  const Failure failure = failure_of(e, e.request(1, kA, kB));
  CHECK(failure.code == 1);
  CHECK(failure.message ==
        "in ensemble 'ensemble_add_sub', Model add_sub - Error when running inference: Failed "
        "for execute the inference request. Model 'add_sub' is not ready.");
  e.core.instance_down(e.add_sub_instance);
  CHECK(e.core.arena().stats().blocks_in_use == baseline.blocks_in_use - 1);  // its channel
}

TEST(an_ensemble_without_a_graph_fails_as_a_model_gone) {
  Ensemble e(false);
  CHECK(e.core.submit(e.ensemble, e.request(1, kA, kB)) == SubmitResult::kOk);
  e.core.flush();
  std::vector<Completion> done = e.poll();
  CHECK(done.size() == 1 && done[0].status == kCompletionModelGone && done[0].result_offset == 0);
}

TEST(a_step_of_a_shape_the_step_model_refuses_fails_with_the_validators_message) {
  Ensemble e;
  auto graph = std::make_shared<EnsembleGraph>(*e.graph(e.add_sub));
  graph->steps[1].spec.inputs[0].dims = {8};  // the second step wants [-1, 8]
  CHECK(e.core.set_ensemble_graph(e.ensemble, graph));
  CHECK(e.core.submit(e.ensemble, e.request(1, kA, kB)) == SubmitResult::kOk);
  e.core.flush();
  e.serve();
  std::vector<Completion> done = e.poll();
  CHECK(done.size() == 1);
  ResultOutcome outcome;
  outputs_of(e.core, done[0], &outcome);
  CHECK(outcome.error && outcome.code == 3);
  CHECK(std::string(outcome.message).find("in ensemble 'ensemble_add_sub', ") == 0);
  CHECK(std::string(outcome.message).find("INPUT0") != std::string::npos);
  e.core.arena().free(done[0].result_offset);
}

TEST(cancelling_an_ensemble_request_drops_its_queued_step) {
  Ensemble e;
  const ArenaStats baseline = e.core.arena().stats();
  // add_sub's only instance is busy with a direct request, so the step waits.
  SubmitRequest direct = e.request(9, kA, kB);
  CHECK(e.core.submit(e.add_sub, direct) == SubmitResult::kOk);
  e.core.flush();
  CHECK(e.core.submit(e.ensemble, e.request(1, kA, kB)) == SubmitResult::kOk);
  e.core.flush();
  CHECK(e.core.cancel(1) == CancelResult::kDropped);
  std::vector<Completion> done = e.poll();
  CHECK(done.size() == 1 && done[0].status == kCompletionCancelled);
  CHECK(done[0].request_ids == std::vector<uint64_t>{1});
  CHECK(e.serve() == 1);  // the direct request alone
  done = e.poll();
  CHECK(done.size() == 1 && done[0].request_ids == std::vector<uint64_t>{9});
  e.core.arena().free(done[0].result_offset);
  CHECK(e.core.in_flight() == 0);
  CHECK(e.core.arena().stats().blocks_in_use == baseline.blocks_in_use);
}

TEST(a_worker_calling_an_ensemble_gets_its_response_on_its_ring) {
  Ensemble e;
  BatcherConfig config;
  ModelHandle bls = e.core.add_model(config);
  const uint32_t bls_instance = e.core.add_instance(bls);
  InstanceEndpoint ep = e.core.endpoint(bls_instance);
  WorkerEndpoint caller(dup(e.core.arena().fd()), ep.channel_offset, dup(ep.wake_fd),
                        dup(e.core.notify_fd()));
  e.core.instance_up(bls_instance);
  const ArenaStats baseline = e.core.arena().stats();
  SubmitRequest client;
  client.request_id = 5;
  client.metadata = "{}";
  CHECK(e.core.submit(bls, client) == SubmitResult::kOk);
  e.core.flush();
  BatchMessage batch = caller.next();
  CHECK(batch.kind == MessageKind::kBatch);
  CHECK(caller.submit(e.ensemble.value, 42, e.request(0, kA, kB)) == SubmitResult::kOk);
  int routed = 0;
  CHECK(e.poll(&routed).empty());  // the ensemble starts, its first step is dispatched
  e.serve();
  CHECK(e.poll(&routed).empty());
  e.serve();
  CHECK(e.poll(&routed).empty());  // nothing for the frontend: the caller gets it
  CHECK(routed == 3);              // two steps on add_sub, and the ensemble's request
  BatchMessage response = caller.next();
  CHECK(response.kind == MessageKind::kResponse && response.batch_id == 42);
  ResultBlock result;
  CHECK(parse_result_block(caller.arena().base() + response.desc_offset, response.size, &result));
  CHECK(result.outcomes.size() == 1 && !result.outcomes[0].error && result.outputs.size() == 2);
  caller.arena().free(response.desc_offset);
  ResponseEntry reply;
  reply.json = "{}";
  CHECK(caller.respond(batch.batch_id, {reply}, kTimings, true));
  std::vector<Completion> done = e.poll();
  CHECK(done.size() == 1 && done[0].request_ids == std::vector<uint64_t>{5});
  e.core.arena().free(done[0].result_offset);
  CHECK(e.core.arena().stats().blocks_in_use == baseline.blocks_in_use);
}

TEST(an_ensemble_request_carries_its_correlation_id_and_flags_to_a_sequence_step) {
  Ensemble e(true, true);
  const ArenaStats baseline = e.core.arena().stats();
  // Without a correlation id the sequence batcher refuses the step, in its words.
  Failure failure = failure_of(e, e.request(1, kA, kB));
  CHECK(failure.code == 3);
  CHECK(failure.message ==
        "in ensemble 'ensemble_add_sub', inference request to model 'add_sub' must specify a "
        "non-zero or non-empty correlation ID");
  // Sequence 7, one request from START to END: each step (both on add_sub here) is
  // a sequence of its own from START to END, the request's flags on both.
  const uint32_t flags = kSequenceFlagStart | kSequenceFlagEnd;
  SubmitRequest request = e.request(2, kA, kB);
  request.options.sequence_id = 7;
  request.options.sequence_flags = flags;
  CHECK(e.core.submit(e.ensemble, request) == SubmitResult::kOk);
  e.core.flush();
  std::vector<Completion> done;
  for (int step = 0; step < 2; ++step) {
    uint64_t sequence = 0;
    CHECK(e.serve(nullptr, &sequence) == 1);
    CHECK((sequence & kSequenceValid) != 0);
    CHECK((sequence & kSequenceStartBit) != 0 && (sequence & kSequenceEndBit) != 0);
    done = e.poll();
    CHECK(done.size() == static_cast<size_t>(step));
  }
  ResultOutcome outcome;
  outputs_of(e.core, done[0], &outcome);
  CHECK(!outcome.error);
  e.core.arena().free(done[0].result_offset);
  // A request of sequence 8 that does not start it: refused in the batcher's words.
  request = e.request(3, kA, kB);
  request.options.sequence_id = 8;
  request.options.sequence_flags = 0;
  failure = failure_of(e, request);
  CHECK(failure.message ==
        "in ensemble 'ensemble_add_sub', inference request for sequence 8 to model 'add_sub' "
        "must specify the START flag on the first request of the sequence");
  CHECK(e.core.arena().stats().blocks_in_use == baseline.blocks_in_use);
}

namespace {

// Runs `request` through both steps of `e` (the steps' responses giving `first` and
// `second` as their parameters); the ensemble's answer, as its outcome's parameters
// (or its error message).
std::string answered_parameters(Ensemble& e, const SubmitRequest& request,
                                const char* first = nullptr, const char* second = nullptr) {
  CHECK(e.core.submit(e.ensemble, request) == SubmitResult::kOk);
  e.core.flush();
  CHECK(e.serve(nullptr, nullptr, first) == 1);
  std::vector<Completion> done = e.poll();
  if (done.empty()) {
    CHECK(e.serve(nullptr, nullptr, second) == 1);
    done = e.poll();
  }
  CHECK(done.size() == 1);
  ResultOutcome outcome;
  outputs_of(e.core, done[0], &outcome);
  std::string out =
      outcome.error ? "error " + std::to_string(outcome.code) + ": " + std::string(outcome.message)
                    : std::string(outcome.parameters);
  e.core.arena().free(done[0].result_offset);
  return out;
}

}  // namespace

TEST(an_ensemble_response_says_the_sequence_of_its_outputs_as_triton_does) {
  Ensemble e;
  const ArenaStats baseline = e.core.arena().stats();
  // Every response, also without a sequence; the id with the request's type.
  CHECK(answered_parameters(e, e.request(1, kA, kB)) ==
        "{\"sequence_id\":0,\"sequence_start\":false,\"sequence_end\":false}");
  SubmitRequest request = e.request(2, kA, kB);
  request.options.sequence_id = 7;
  request.options.sequence_flags = kSequenceFlagStart;
  CHECK(answered_parameters(e, request) ==
        "{\"sequence_id\":7,\"sequence_start\":true,\"sequence_end\":false}");
  request = e.request(3, kA, kB);
  request.options.sequence_key = "session \"a\"";
  request.options.sequence_flags = kSequenceFlagEnd;
  CHECK(answered_parameters(e, request) ==
        "{\"sequence_id\":\"session \\\"a\\\"\",\"sequence_start\":false,\"sequence_end\":true}");
  // A uint64 id above int64's range comes back as Triton's int64 parameter gives it.
  request = e.request(4, kA, kB);
  request.options.sequence_id = (uint64_t{1} << 63) + 5;
  CHECK(answered_parameters(e, request) ==
        "{\"sequence_id\":-9223372036854775803,\"sequence_start\":false,\"sequence_end\":false}");
  CHECK(e.core.arena().stats().blocks_in_use == baseline.blocks_in_use);
}

TEST(a_steps_response_parameters_set_the_sequence_of_what_follows_from_it) {
  Ensemble e;
  const ArenaStats baseline = e.core.arena().stats();
  SubmitRequest request = e.request(1, kA, kB);
  request.options.sequence_id = 7;
  request.options.sequence_flags = kSequenceFlagStart;
  // The first step names sequence 21 from its start: the second step's request is of
  // that sequence, and so are its outputs.
  CHECK(answered_parameters(e, request, "{\"sequence_id\":21,\"sequence_start\":true}") ==
        "{\"sequence_id\":21,\"sequence_start\":true,\"sequence_end\":false}");
  // Only END given: the id stays the step's, the flags are the response's alone.
  request = e.request(2, kA, kB);
  request.options.sequence_id = 7;
  request.options.sequence_flags = kSequenceFlagStart;
  CHECK(answered_parameters(e, request, nullptr, "{\"other\":1,\"sequence_end\":true}") ==
        "{\"sequence_id\":7,\"sequence_start\":false,\"sequence_end\":true}");
  // A string id from a step, for a request of a number: the number's type, as 0.
  request = e.request(3, kA, kB);
  request.options.sequence_id = 7;
  CHECK(answered_parameters(e, request, "{\"sequence_id\":\"s1\"}") ==
        "{\"sequence_id\":0,\"sequence_start\":false,\"sequence_end\":false}");
  // Parameters of the wrong type fail the request, in Triton's words.
  CHECK(answered_parameters(e, e.request(4, kA, kB), "{\"sequence_start\":1}") ==
        "error 3: in ensemble 'ensemble_add_sub', expect parameter 'sequence_start' to be "
        "TRITONSERVER_PARAMETER_BOOL");
  CHECK(answered_parameters(e, e.request(5, kA, kB), nullptr, "{\"sequence_id\":true}") ==
        "error 3: in ensemble 'ensemble_add_sub', expected parameter 'sequence_id' to be "
        "TRITONSERVER_PARAMETER_INT or TRITONSERVER_PARAMETER_STRING");
  CHECK(e.core.arena().stats().blocks_in_use == baseline.blocks_in_use);
}

TEST(a_traced_ensemble_requests_steps_are_its_child_traces) {
  Ensemble e;
  SubmitRequest traced = e.request(1, kA, kB);
  traced.options.traced = true;
  CHECK(e.core.submit(e.ensemble, traced) == SubmitResult::kOk);
  CHECK(e.core.submit(e.ensemble, e.request(2, kA, kB)) == SubmitResult::kOk);  // untraced
  e.run_two_requests();
  std::vector<ChildTrace> children = e.core.take_trace_children(1);
  CHECK(children.size() == 2);
  for (const ChildTrace& child : children) {
    CHECK(child.parent == 1 && child.model == e.add_sub.value);
    CHECK(child.id == "client");  // a step carries its ensemble request's id
    CHECK(child.request_start_ns <= child.queue_start_ns);
    CHECK(child.queue_start_ns <= child.request_end_ns);
    // The worker's timings; compute_output stamped to when its block was built.
    CHECK(std::memcmp(child.timings, kTimings, 3 * sizeof kTimings[0]) == 0);
    CHECK(child.timings[3] >= kTimings[3]);
  }
  CHECK(children[0].request_id != children[1].request_id);
  CHECK(children[0].request_end_ns <= children[1].request_start_ns);  // one after the other
  CHECK(e.core.take_trace_children(1).empty());                       // once
  CHECK(e.core.take_trace_children(2).empty());  // the untraced request has none
}

TEST(a_traced_ensemble_at_level_tensors_keeps_its_steps_tensors) {
  Ensemble e;
  SubmitRequest traced = e.request(1, kA, kB);
  traced.options.traced = true;
  traced.options.trace_tensors = true;
  CHECK(e.core.submit(e.ensemble, traced) == SubmitResult::kOk);
  SubmitRequest stamps_only = e.request(2, kA, kB);
  stamps_only.options.traced = true;  // level TIMESTAMPS: its steps keep no tensors
  CHECK(e.core.submit(e.ensemble, stamps_only) == SubmitResult::kOk);
  e.run_two_requests();
  std::vector<ChildTrace> children = e.core.take_trace_children(1);
  CHECK(children.size() == 2);
  auto text = [](TensorActivity activity, const char* name, const char* data) {
    return std::make_pair(activity, std::string("{\"name\":\"") + name + "\",\"data\":\"" + data +
                                        "\",\"shape\":\"1,4\",\"dtype\":\"FP32\"}");
  };
  const TensorActivity in = TensorActivity::kQueueInput, out = TensorActivity::kBackendOutput;
  // The first step: the client's inputs in, sum and difference out; the second: those
  // in (under its own input names), the ensemble's outputs out.
  CHECK((children[0].tensors ==
         TensorRecords{text(in, "INPUT0", "1,2,3,4"), text(in, "INPUT1", "10,10,10,10"),
                       text(out, "OUTPUT0", "11,12,13,14"), text(out, "OUTPUT1", "-9,-8,-7,-6")}));
  CHECK((children[1].tensors ==
         TensorRecords{text(in, "INPUT0", "11,12,13,14"), text(in, "INPUT1", "-9,-8,-7,-6"),
                       text(out, "OUTPUT0", "2,4,6,8"), text(out, "OUTPUT1", "20,20,20,20")}));
  std::vector<ChildTrace> untensored = e.core.take_trace_children(2);
  CHECK(untensored.size() == 2);
  for (const ChildTrace& child : untensored) CHECK(child.tensors.empty());
}
