// A decoupled ensemble (ensemble_scheduler.h, as Triton 2.51's ensemble scheduler):
// every response of its decoupled step "repeat" runs the step after it ("double",
// Y = 2 * X), the ensemble answers once per Y produced (flagged final when nothing
// runs any more), a stream that ends with a final flag alone ends with the final flag
// alone, and one that fails mid-stream ends with the error; the arena is left as it was.
// The graph is tests/pipeline_models/ens_decoupled's (repeat, then int_double).
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "client_request.h"
#include "codec/request_validator.h"
#include "core/core.h"
#include "core/ensemble_graph.h"
#include "ipc/ipc_schema.h"
#include "ipc/request_block.h"
#include "ipc/response_block.h"
#include "ipc/result_block.h"
#include "ipc/worker_endpoint.h"
#include "testing.h"

using namespace naiad;

namespace {

const uint64_t kTimings[4] = {1, 2, 3, 4};
const char* const kValueJson = "{\"outputs\":[[\"OUT\",\"FP32\",[1,4]]]}";
const char* const kDoubleJson = "{\"outputs\":[[\"Y\",\"FP32\",[1,4]]]}";

struct Answer {
  bool final = false;
  bool error = false;
  bool flags_only = false;  // {"empty":true}: the final flag alone
  std::string message;
  std::vector<float> y;  // output Y
};

struct DecoupledEnsemble {
  DecoupledEnsemble() : core(1 << 22, nullptr, false) {
    BatcherConfig config;
    config.dynamic_batching = true;
    config.max_batch_size = 8;
    repeat = core.add_model(config);
    doubler = core.add_model(config);
    repeat_worker = worker_of(repeat);
    double_worker = worker_of(doubler);
    ensemble = core.add_ensemble();
    ensemble_spec = fp32_spec("ens_decoupled", {"N"}, {"Y"});
    auto graph = std::make_shared<EnsembleGraph>();
    graph->name = "ens_decoupled";
    graph->outputs = {"Y"};
    graph->decoupled = true;
    EnsembleStep first;
    first.model = repeat;
    first.spec = fp32_spec("repeat", {"N"}, {"OUT"});
    first.inputs = {{"N", "N"}};
    first.outputs = {{"OUT", "values"}};
    EnsembleStep second;
    second.model = doubler;
    second.spec = fp32_spec("int_double", {"X"}, {"Y"});
    second.inputs = {{"X", "values"}};
    second.outputs = {{"Y", "Y"}};
    graph->steps = {first, second};
    CHECK(core.set_ensemble_graph(ensemble, graph));
    baseline = core.arena().stats();
  }
  std::unique_ptr<WorkerEndpoint> worker_of(ModelHandle model) {
    const uint32_t instance = core.add_instance(model);
    InstanceEndpoint ep = core.endpoint(instance);
    auto worker = std::make_unique<WorkerEndpoint>(dup(core.arena().fd()), ep.channel_offset,
                                                   dup(ep.wake_fd), dup(core.notify_fd()));
    core.instance_up(instance);
    return worker;
  }
  // Submits the ensemble request; repeat's batch is dispatched, kept open.
  void start(uint64_t id) {
    const float n[4] = {1, 2, 3, 4};
    ParsedRequest parsed;
    parsed.id = "client";
    parsed.inputs.resize(1);
    parsed.inputs[0].name = "N";
    parsed.inputs[0].datatype = "FP32";
    parsed.inputs[0].shape = {1, 4};
    parsed.inputs[0].data = reinterpret_cast<const uint8_t*>(n);
    parsed.inputs[0].size = 16;
    CHECK(core.submit(ensemble, laid_out_request(ensemble_spec, &parsed, id, &laid)) ==
          SubmitResult::kOk);
    core.flush();  // starts the ensemble: repeat's step is dispatched
    repeat_batch = repeat_worker->next();
    CHECK(repeat_batch.kind == MessageKind::kBatch);
    repeat_worker->end_batch(repeat_batch.batch_id, true);  // answered later, as a thread does
  }
  // repeat sends OUT = {v, v, v, v} (`final`: flagged final).
  void send(float v, bool final) {
    const float out[4] = {v, v, v, v};
    ResponseEntry entry;
    entry.flags = final ? kResponseFinal : 0;
    entry.json = kValueJson;
    entry.outputs = {{out, 16}};
    CHECK(repeat_worker->respond(repeat_batch.batch_id, {entry}, kTimings, false));
  }
  void send_final_alone() {
    ResponseEntry entry;
    entry.json = "{\"empty\":true}";
    CHECK(repeat_worker->respond(repeat_batch.batch_id, {entry}, kTimings, false));
  }
  void send_error() {
    ResponseEntry entry;
    entry.flags = kResponseFinal | kResponseError;
    entry.error_code = 1;
    entry.json = "{\"error\":\"bad things\"}";
    CHECK(repeat_worker->respond(repeat_batch.batch_id, {entry}, kTimings, false));
  }
  // Plays int_double for one batch; returns its size.
  uint32_t serve_double() {
    BatchMessage batch = double_worker->next();
    CHECK(batch.kind == MessageKind::kBatch);
    Arena& arena = double_worker->arena();
    const auto* records = arena.at<BatchRequest>(batch.desc_offset + batch_requests_offset());
    std::vector<std::vector<float>> outputs(batch.n_requests, std::vector<float>(4));
    std::vector<ResponseEntry> entries;
    for (uint32_t r = 0; r < batch.n_requests; ++r) {
      const auto* slots = arena.at<InputSlot>(records[r].block_offset + sizeof(RequestHeader));
      const auto* x = reinterpret_cast<const float*>(arena.base() + slots[0].offset);
      for (int k = 0; k < 4; ++k) outputs[r][k] = 2 * x[k];
      ResponseEntry entry;
      entry.request_index = r;
      entry.json = kDoubleJson;
      entry.outputs = {{outputs[r].data(), 16}};
      entries.push_back(entry);
    }
    CHECK(double_worker->respond(batch.batch_id, entries, kTimings, true));
    return batch.n_requests;
  }
  // The frontend's answers since the last call (their blocks freed), in order.
  std::vector<Answer> answers(uint64_t id) {
    std::vector<Answer> out;
    for (Completion& c : core.poll()) {
      if (c.status == kCompletionRouted) continue;
      CHECK(c.status == kCompletionOk);
      CHECK(c.request_ids == std::vector<uint64_t>{id});
      ResultBlock result;
      CHECK(parse_result_block(core.arena().base() + c.result_offset, c.result_size, &result));
      CHECK(result.outcomes.size() == 1);
      const ResultOutcome& outcome = result.outcomes[0];
      Answer answer;
      answer.final = outcome.final;
      answer.error = outcome.error;
      answer.message = std::string(outcome.message);
      // The response's timings: zero before the last and on an error (no execution
      // is counted for them), set on the last of a request that succeeded.
      CHECK((result.timings[0] != 0) == (outcome.final && !outcome.error));
      const ResponseBlockView view = view_of(c);
      answer.flags_only = entry_of(view, 0).json == "{\"empty\":true}";
      for (size_t o = 0; o < outcome.output_count; ++o) {
        const ResultOutput& output = result.outputs[outcome.first_output + o];
        CHECK(std::string(output.name) == "Y");
        answer.y.resize(output.size / 4);
        std::memcpy(answer.y.data(), core.arena().base() + c.result_offset + output.offset,
                    output.size);
      }
      core.arena().free(c.result_offset);
      out.push_back(answer);
    }
    return out;
  }
  ResponseBlockView view_of(const Completion& c) {
    ResponseBlockView view;
    CHECK(view_response_block(core.arena().base() + c.result_offset, c.result_size, &view));
    return view;
  }
  bool settled() {
    return core.in_flight() == 0 && core.arena().stats().blocks_in_use == baseline.blocks_in_use;
  }

  Core core;
  ModelHandle repeat, doubler, ensemble;
  std::unique_ptr<WorkerEndpoint> repeat_worker, double_worker;
  ModelSpec ensemble_spec;
  RequestBlock laid;
  BatchMessage repeat_batch;
  ArenaStats baseline;
};

bool doubled(const Answer& a, float v) {
  return !a.error && a.y == std::vector<float>{2 * v, 2 * v, 2 * v, 2 * v};
}

}  // namespace

TEST(each_response_of_a_decoupled_step_runs_the_next_step_and_is_streamed) {
  DecoupledEnsemble e;
  e.start(1);
  e.send(0, false);
  CHECK(e.answers(1).empty());  // int_double's step is queued
  CHECK(e.serve_double() == 1);
  std::vector<Answer> got = e.answers(1);
  CHECK(got.size() == 1 && doubled(got[0], 0) && !got[0].final);
  e.send(1, false);
  e.send(2, false);
  CHECK(e.answers(1).empty());
  CHECK(e.serve_double() == 2);  // two runs of the step, batched together
  got = e.answers(1);
  CHECK(got.size() == 2 && doubled(got[0], 1) && doubled(got[1], 2));
  CHECK(!got[0].final && !got[1].final);
  e.send_final_alone();  // repeat is done, nothing runs: the final flag alone
  got = e.answers(1);
  CHECK(got.size() == 1 && got[0].final && got[0].flags_only && got[0].y.empty());
  CHECK(e.settled());
}

TEST(the_last_response_is_final_when_the_decoupled_step_ended_before_it) {
  DecoupledEnsemble e;
  e.start(2);
  e.send(3, false);
  e.send(4, true);  // the final flag on its last response, as mode "inline" sends it
  CHECK(e.answers(2).empty());
  CHECK(e.serve_double() == 2);
  std::vector<Answer> got = e.answers(2);
  CHECK(got.size() == 2 && doubled(got[0], 3) && doubled(got[1], 4));
  CHECK(!got[0].final && got[1].final && !got[1].flags_only);
  CHECK(e.settled());
}

TEST(a_decoupled_step_with_no_response_ends_the_request_with_the_final_flag_alone) {
  DecoupledEnsemble e;
  e.start(3);
  e.send_final_alone();
  std::vector<Answer> got = e.answers(3);
  CHECK(got.size() == 1 && got[0].final && got[0].flags_only && !got[0].error);
  CHECK(e.settled());
}

TEST(a_decoupled_step_failing_mid_stream_ends_the_request_with_its_error) {
  DecoupledEnsemble e;
  e.start(4);
  e.send(5, false);
  CHECK(e.answers(4).empty());
  CHECK(e.serve_double() == 1);
  std::vector<Answer> got = e.answers(4);
  CHECK(got.size() == 1 && doubled(got[0], 5) && !got[0].final);
  e.send(6, false);             // runs int_double again
  e.send_error();               // fails the request: nothing more is answered but the error
  CHECK(e.answers(4).empty());  // it ends once int_double's run is done
  CHECK(e.serve_double() == 1);
  got = e.answers(4);
  CHECK(got.size() == 1 && got[0].final && got[0].error && got[0].y.empty());
  CHECK(got[0].message == "in ensemble 'ens_decoupled', bad things");
  CHECK(e.settled());
}

TEST(cancelling_a_streaming_ensemble_request_ends_it_as_cancelled) {
  DecoupledEnsemble e;
  e.start(5);
  e.send(7, false);
  CHECK(e.answers(5).empty());  // int_double's run is dispatched
  CHECK(e.core.cancel(5) != CancelResult::kUnknown);
  // Both running steps are flagged; the request ends once both have ended, answered
  // as cancelled (int_double's output is not streamed).
  e.send_final_alone();
  CHECK(e.serve_double() == 1);
  std::vector<Completion> done;
  for (Completion& c : e.core.poll()) {
    if (c.status != kCompletionRouted) done.push_back(std::move(c));
  }
  CHECK(done.size() == 1 && done[0].status == kCompletionCancelled);
  CHECK(e.settled());
}

TEST(a_long_stream_holds_only_the_step_responses_still_in_use) {
  // Each of repeat's responses is passed on to int_double, whose response is answered:
  // neither is needed after that, so the arena's use stays flat however long it goes.
  DecoupledEnsemble e;
  e.start(6);
  size_t in_use_after_first = 0;
  for (int k = 0; k < 50; ++k) {
    e.send(static_cast<float>(k), false);
    CHECK(e.answers(6).empty());  // takes repeat's response: int_double's run is queued
    CHECK(e.serve_double() == 1);
    std::vector<Answer> got = e.answers(6);
    CHECK(got.size() == 1 && doubled(got[0], static_cast<float>(k)) && !got[0].final);
    const size_t in_use = e.core.arena().stats().blocks_in_use;
    if (k == 0) in_use_after_first = in_use;
    CHECK(in_use == in_use_after_first);
  }
  e.send(50, false);
  CHECK(e.answers(6).empty());
  CHECK(e.serve_double() == 1);
  CHECK(e.answers(6).size() == 1);
  e.send_final_alone();
  std::vector<Answer> got = e.answers(6);
  CHECK(got.size() == 1 && got[0].final && got[0].flags_only);
  CHECK(e.settled());
}
