// The BLS path: a worker submits a request to the core (channel.h to_core ring), the
// core queues it on the target model like any other, and routes that request's
// responses back to the submitting worker (kResponse), never to the frontend.
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/core.h"
#include "core/sequence_batch_scheduler.h"
#include "ipc/channel.h"
#include "ipc/ipc_schema.h"
#include "ipc/response_block.h"
#include "ipc/worker_endpoint.h"
#include "testing.h"

using namespace naiad;

namespace {

const uint64_t kTimings[4] = {1, 2, 3, 4};

struct TwoModels {
  TwoModels() : core(1 << 22, nullptr, false) {
    BatcherConfig config;
    config.dynamic_batching = true;
    config.max_batch_size = 4;
    caller = core.add_model(config);
    target = core.add_model(config);
    caller_instance = core.add_instance(caller);
    target_instance = core.add_instance(target);
    caller_worker = attach(caller_instance);
    target_worker = attach(target_instance);
  }
  std::unique_ptr<WorkerEndpoint> attach(uint32_t instance) {
    InstanceEndpoint ep = core.endpoint(instance);
    return std::make_unique<WorkerEndpoint>(dup(core.arena().fd()), ep.channel_offset,
                                            dup(ep.wake_fd), dup(core.notify_fd()));
  }
  SubmitRequest request(uint64_t id, const std::string& input) {
    SubmitRequest r;
    r.request_id = id;
    r.metadata = "{\"id\":\"bls\"}";
    InputSource source;
    source.data = input.data();
    source.size = input.size();
    r.inputs.push_back(source);
    return r;
  }
  // Both instances up and a request of the caller's running: the batch its worker
  // took (the caller's execute() in progress, from which it calls the target).
  BatchMessage caller_running(const std::string& input) {
    core.instance_up(caller_instance);
    core.instance_up(target_instance);
    CHECK(core.submit(caller, request(1, input)) == SubmitResult::kOk);
    core.flush();
    return caller_worker->next();
  }
  Core core;
  ModelHandle caller, target;
  uint32_t caller_instance = 0, target_instance = 0;
  std::unique_ptr<WorkerEndpoint> caller_worker, target_worker;
};

// The bytes of input 0 of request `index` of a batch, as a worker reads them.
std::string input_of(WorkerEndpoint& worker, const BatchMessage& message, uint32_t index) {
  Arena& arena = worker.arena();
  const auto* records = arena.at<BatchRequest>(message.desc_offset + batch_requests_offset());
  const auto* slots = arena.at<InputSlot>(records[index].block_offset + sizeof(RequestHeader));
  return std::string(reinterpret_cast<const char*>(arena.base() + slots[0].offset), slots[0].size);
}

// The request block header of request `index` of a batch, as a worker reads it.
const RequestHeader& header_of(WorkerEndpoint& worker, const BatchMessage& message,
                               uint32_t index) {
  Arena& arena = worker.arena();
  const auto* records = arena.at<BatchRequest>(message.desc_offset + batch_requests_offset());
  return *arena.at<RequestHeader>(records[index].block_offset);
}

// What poll() leaves for the frontend to answer: the statistics of routed requests
// (kCompletionRouted, kCompletionRoutedRefused) left out.
std::vector<Completion> answers(std::vector<Completion> all) {
  std::vector<Completion> out;
  for (Completion& c : all) {
    if (c.status != kCompletionRouted && c.status != kCompletionRoutedRefused) {
      out.push_back(std::move(c));
    }
  }
  return out;
}

ResponseEntry answer(uint32_t index, const std::string& output, bool final = true) {
  ResponseEntry entry;
  entry.request_index = index;
  entry.flags = final ? kResponseFinal : 0;
  entry.json = "{\"outputs\":[[\"OUT\",\"UINT8\",[3]]]}";
  entry.outputs.push_back(OutputBytes{output.data(), output.size()});
  return entry;
}

}  // namespace

TEST(a_worker_submits_a_request_and_gets_its_responses) {
  TwoModels m;
  ArenaStats baseline = m.core.arena().stats();
  m.core.instance_up(m.caller_instance);
  m.core.instance_up(m.target_instance);
  const std::string client_input = "cli";
  CHECK(m.core.submit(m.caller, m.request(1, client_input)) == SubmitResult::kOk);
  // A frontend request for the target too: it may share the BLS request's batch.
  CHECK(m.core.submit(m.target, m.request(2, "fe!")) == SubmitResult::kOk);
  m.core.flush();
  BatchMessage caller_batch = m.caller_worker->next();
  CHECK(caller_batch.kind == MessageKind::kBatch);
  BatchMessage first_target = m.target_worker->next();  // request 2 alone
  CHECK(first_target.n_requests == 1);

  // The caller's model calls the target model with its own request.
  const std::string bls_input = "bls";
  CHECK(m.caller_worker->submit(m.target.value, 77, m.request(0, bls_input)) == SubmitResult::kOk);
  CHECK(answers(m.core.poll()).empty());  // queued on the target, whose instance is busy
  const std::string fe_out = "FE!", bls_out = "BLS";
  CHECK(m.target_worker->respond(first_target.batch_id, {answer(0, fe_out)}, kTimings, true));
  std::vector<Completion> frontend = answers(m.core.poll());  // also dispatches the BLS request
  CHECK(frontend.size() == 1 && frontend[0].request_ids == std::vector<uint64_t>{2});
  for (const Completion& c : frontend) m.core.arena().free(c.result_offset);

  BatchMessage second_target = m.target_worker->next();
  CHECK(second_target.kind == MessageKind::kBatch && second_target.n_requests == 1);
  CHECK(input_of(*m.target_worker, second_target, 0) == "bls");
  // Two responses: a partial then the final; neither reaches the frontend.
  CHECK(m.target_worker->respond(second_target.batch_id, {answer(0, bls_out, false)}, kTimings,
                                 false));
  CHECK(m.target_worker->respond(second_target.batch_id, {answer(0, bls_out)}, kTimings, true));
  // Nothing to answer; the target's statistics count the routed request (and its batch).
  std::vector<Completion> stats = m.core.poll();
  CHECK(stats.size() == 1 && stats[0].status == kCompletionRouted);
  CHECK(stats[0].request_ids.size() == kRoutedStatsSize);
  CHECK(stats[0].request_ids[kRoutedCount] == 1 && stats[0].request_ids[kRoutedRows] == 1);
  CHECK(stats[0].request_ids[kRoutedWholeBatch] == 1);
  CHECK(stats[0].request_ids[kRoutedComputeInferNs] == kTimings[2]);

  for (int k = 0; k < 2; ++k) {
    BatchMessage response = m.caller_worker->next();
    CHECK(response.kind == MessageKind::kResponse && response.batch_id == 77);
    ResponseBlockView view;
    CHECK(view_response_block(m.caller_worker->arena().base() + response.desc_offset, response.size,
                              &view));
    CHECK(view.header->n_responses == 1 && view.records[0].n_outputs == 1);
    CHECK((view.records[0].flags & kResponseFinal) == (k == 1 ? kResponseFinal : 0u));
    CHECK(std::memcmp(view.block + view.outputs[0].offset, "BLS", 3) == 0);
    m.caller_worker->arena().free(response.desc_offset);
  }
  // The caller answers its client.
  CHECK(m.caller_worker->respond(caller_batch.batch_id, {answer(0, bls_out)}, kTimings, true));
  std::vector<Completion> done = answers(m.core.poll());
  CHECK(done.size() == 1 && done[0].request_ids == std::vector<uint64_t>{1});
  for (const Completion& c : done) m.core.arena().free(c.result_offset);
  CHECK(m.core.in_flight() == 0);
  CHECK(m.core.arena().stats().blocks_in_use == baseline.blocks_in_use);
}

TEST(a_worker_request_that_cannot_be_served_is_refused_not_lost) {
  TwoModels m;
  const std::string input = "abc";
  BatchMessage caller_batch = m.caller_running(input);
  // An unknown model (no such handle): refused at once, as gone.
  CHECK(m.caller_worker->submit(99, 5, m.request(0, input)) == SubmitResult::kOk);
  answers(m.core.poll());
  BatchMessage refused = m.caller_worker->next();
  CHECK(refused.kind == MessageKind::kRefused && refused.batch_id == 5);
  CHECK(refused.n_requests == static_cast<uint32_t>(SubmitResult::kModelGone));
  // A target that ends its batch without a final response: the submitter hears it.
  CHECK(m.caller_worker->submit(m.target.value, 6, m.request(0, input)) == SubmitResult::kOk);
  answers(m.core.poll());
  BatchMessage target_batch = m.target_worker->next();
  m.target_worker->complete(target_batch.batch_id, 0, 0, kCompletionOk);
  CHECK(answers(m.core.poll()).empty());
  BatchMessage failed = m.caller_worker->next();
  CHECK(failed.kind == MessageKind::kRefused && failed.batch_id == 6);
  CHECK(failed.n_requests == (kRefusedQueued | static_cast<uint32_t>(kCompletionWorkerFailed)));
  m.caller_worker->complete(caller_batch.batch_id, 0, 0, kCompletionWorkerFailed);
  CHECK(answers(m.core.poll()).size() == 1);
}

TEST(a_dead_submitter_leaves_nothing_behind) {
  TwoModels m;
  ArenaStats baseline = m.core.arena().stats();
  m.core.instance_up(m.caller_instance);
  const std::string input = "abc";
  CHECK(m.core.submit(m.caller, m.request(1, input)) == SubmitResult::kOk);
  m.core.flush();
  m.caller_worker->next();
  // Submitted, never picked up: the worker dies first.
  CHECK(m.caller_worker->submit(m.target.value, 8, m.request(0, input)) == SubmitResult::kOk);
  std::vector<Completion> failed = m.core.instance_down(m.caller_instance);
  CHECK(failed.size() == 1 && failed[0].status == kCompletionInstanceDied);
  CHECK(m.core.arena().stats().blocks_in_use == baseline.blocks_in_use);
}

TEST(responses_beyond_the_ring_wait_for_the_submitter_and_are_not_lost) {
  TwoModels m;
  const std::string input = "abc";
  BatchMessage caller_batch = m.caller_running(input);
  CHECK(m.caller_worker->submit(m.target.value, 9, m.request(0, input)) == SubmitResult::kOk);
  answers(m.core.poll());
  BatchMessage target_batch = m.target_worker->next();
  // Twice the ring's capacity of responses, while the caller reads none of them.
  const int total = 2 * static_cast<int>(kRingCapacity);
  std::thread target([&] {
    for (int k = 0; k < total; ++k) {
      m.target_worker->respond(target_batch.batch_id, {answer(0, input, k == total - 1)}, kTimings,
                               k == total - 1);
    }
  });
  int received = 0;
  bool final = false;
  for (int spin = 0; spin < 100000 && !final; ++spin) {
    answers(m.core.poll());  // routes responses, and sends what waited behind a full ring
    BatchMessage response;
    if (!m.caller_worker->try_next(&response)) {
      if (spin % 2 == 1) std::this_thread::yield();  // let the target post
      continue;
    }
    CHECK(response.kind == MessageKind::kResponse && response.batch_id == 9);
    ResponseBlockView view;
    if (view_response_block(m.caller_worker->arena().base() + response.desc_offset, response.size,
                            &view)) {
      final = (view.records[0].flags & kResponseFinal) != 0;
    }
    m.caller_worker->arena().free(response.desc_offset);
    ++received;
  }
  target.join();
  CHECK(received == total);
  m.caller_worker->complete(caller_batch.batch_id, 0, 0, kCompletionWorkerFailed);
  CHECK(answers(m.core.poll()).size() == 1);
}

TEST(a_model_that_calls_itself_gets_the_call_nested_on_its_busy_instance) {
  TwoModels m;
  ArenaStats baseline = m.core.arena().stats();
  m.core.instance_up(m.caller_instance);
  const std::string input = "abc";
  CHECK(m.core.submit(m.caller, m.request(1, input)) == SubmitResult::kOk);
  m.core.flush();
  BatchMessage outer = m.caller_worker->next();
  CHECK(outer.kind == MessageKind::kBatch);
  // Its only instance is busy with `outer`, which waits for this request: the core
  // hands it to the same instance, nested.
  CHECK(m.caller_worker->submit(m.caller.value, 11, m.request(0, input)) == SubmitResult::kOk);
  CHECK(answers(m.core.poll()).empty());
  BatchMessage inner = m.caller_worker->next();
  CHECK(inner.kind == MessageKind::kBatch && inner.batch_id != outer.batch_id);
  CHECK(input_of(*m.caller_worker, inner, 0) == "abc");
  CHECK(m.core.in_flight() == 2);
  // The inner batch answers: its response goes to the outer one's wait.
  const std::string out = "IN!";
  CHECK(m.caller_worker->respond(inner.batch_id, {answer(0, out)}, kTimings, true));
  CHECK(answers(m.core.poll()).empty());
  BatchMessage response = m.caller_worker->next();
  CHECK(response.kind == MessageKind::kResponse && response.batch_id == 11);
  m.caller_worker->arena().free(response.desc_offset);
  // No request of its own in flight: a busy instance takes nothing more.
  CHECK(m.core.submit(m.caller, m.request(2, input)) == SubmitResult::kOk);
  m.core.flush();
  BatchMessage none;
  CHECK(!m.caller_worker->try_next(&none));
  CHECK(m.caller_worker->respond(outer.batch_id, {answer(0, out)}, kTimings, true));
  std::vector<Completion> done = answers(m.core.poll());  // answers 1, dispatches 2
  CHECK(done.size() == 1 && done[0].request_ids == std::vector<uint64_t>{1});
  for (const Completion& c : done) m.core.arena().free(c.result_offset);
  BatchMessage next = m.caller_worker->next();
  CHECK(next.kind == MessageKind::kBatch && input_of(*m.caller_worker, next, 0) == "abc");
  CHECK(m.caller_worker->respond(next.batch_id, {answer(0, out)}, kTimings, true));
  done = answers(m.core.poll());
  CHECK(done.size() == 1 && done[0].request_ids == std::vector<uint64_t>{2});
  for (const Completion& c : done) m.core.arena().free(c.result_offset);
  CHECK(m.core.in_flight() == 0);
  CHECK(m.core.arena().stats().blocks_in_use == baseline.blocks_in_use);
}

// A worker's block whose slots or metadata lie outside the arena is refused unread: the
// core batches nothing of it and no worker is handed bytes past the arena's end.
TEST(a_worker_request_block_reaching_outside_the_arena_is_refused) {
  TwoModels m;
  m.core.instance_up(m.caller_instance);
  m.core.instance_up(m.target_instance);
  CHECK(m.core.submit(m.caller, m.request(1, "abc")) == SubmitResult::kOk);
  m.core.flush();
  BatchMessage caller_batch = m.caller_worker->next();
  Arena& arena = m.caller_worker->arena();
  Channel* channel = arena.at<Channel>(m.core.endpoint(m.caller_instance).channel_offset);
  const InputSlot past_end{arena.size() - 8, 4096, 0, 0};
  const RequestHeader bad[] = {
      RequestHeader{kRequestMagic, 1, 0, 1, 0, 0, 0, SpanContext{}},  // its slot: past the end
      RequestHeader{kRequestMagic, 0x10000000, 0, 1, 0, 0, 0, SpanContext{}},  // slots past the end
      RequestHeader{kRequestMagic, 0, 0xFFFFFFFF, 1, 0, 0, 0,
                    SpanContext{}},  // metadata past the end
  };
  uint64_t tag = 10;
  for (const RequestHeader& header : bad) {
    const uint64_t block = arena.alloc(256, 0);
    CHECK(block != 0);
    *arena.at<RequestHeader>(block) = header;
    *arena.at<InputSlot>(block + sizeof(RequestHeader)) = past_end;
    SubmitMessage message{};
    message.tag = tag;
    message.block_offset = block;
    message.model = m.target.value;
    CHECK(channel->to_core.push(message));
    answers(m.core.poll());
    BatchMessage refused = m.caller_worker->next();
    CHECK(refused.kind == MessageKind::kRefused && refused.batch_id == tag);
    CHECK(refused.n_requests == static_cast<uint32_t>(SubmitResult::kUnsupportedInput));
    arena.free(block);
    ++tag;
  }
  BatchMessage none;
  CHECK(!m.target_worker->try_next(&none));  // nothing reached the target
  m.caller_worker->complete(caller_batch.batch_id, 0, 0, kCompletionOk);
  CHECK(answers(m.core.poll()).size() == 1);
}

namespace {

// A sequence model (direct, one slot) next to TwoModels', its instance up.
ModelHandle add_sequence_target(TwoModels& m, uint32_t* instance,
                                std::unique_ptr<WorkerEndpoint>* worker) {
  ModelHandle handle = m.core.add_model(std::make_unique<SequenceBatchScheduler>(SequenceConfig{}));
  *instance = m.core.add_instance(handle);
  *worker = m.attach(*instance);
  m.core.instance_up(*instance);
  return handle;
}

// The sequence word the batcher set in request `index` of a batch.
uint64_t sequence_word_of(WorkerEndpoint& worker, const BatchMessage& message, uint32_t index) {
  Arena& arena = worker.arena();
  const auto* records = arena.at<BatchRequest>(message.desc_offset + batch_requests_offset());
  return arena.at<RequestHeader>(records[index].block_offset)->sequence;
}

}  // namespace

TEST(a_worker_request_carries_its_correlation_id_and_flags_to_the_sequence_batcher) {
  TwoModels m;
  m.core.instance_up(m.caller_instance);
  uint32_t seq_instance = 0;
  std::unique_ptr<WorkerEndpoint> seq_worker;
  ModelHandle seq = add_sequence_target(m, &seq_instance, &seq_worker);
  const std::string input = "abc";
  CHECK(m.core.submit(m.caller, m.request(1, input)) == SubmitResult::kOk);
  m.core.flush();
  BatchMessage caller_batch = m.caller_worker->next();
  // No correlation id, then one that does not start: refused as the batcher refuses.
  CHECK(m.caller_worker->submit(seq.value, 1, m.request(0, input)) == SubmitResult::kOk);
  answers(m.core.poll());
  BatchMessage refused = m.caller_worker->next();
  CHECK(refused.kind == MessageKind::kRefused && refused.batch_id == 1);
  CHECK(refused.n_requests == static_cast<uint32_t>(SubmitResult::kNoSequenceId));
  SubmitRequest later = m.request(0, input);
  later.options.sequence_key = "a string id";
  CHECK(m.caller_worker->submit(seq.value, 2, later) == SubmitResult::kOk);
  answers(m.core.poll());
  refused = m.caller_worker->next();
  CHECK(refused.n_requests == static_cast<uint32_t>(SubmitResult::kSequenceNotStarted));
  // A string id with START, then the same id with END: one sequence, on its slot.
  // Strings that outlive the submits: a request holds a pointer to its input bytes.
  const std::string flags_of[2] = {"start", "end"};
  for (uint32_t k = 0; k < 2; ++k) {
    SubmitRequest step = m.request(0, flags_of[k]);
    step.options.sequence_key = "a string id";
    step.options.sequence_flags = k == 0 ? kSequenceFlagStart : kSequenceFlagEnd;
    CHECK(m.caller_worker->submit(seq.value, 10 + k, step) == SubmitResult::kOk);
    answers(m.core.poll());
    BatchMessage batch = seq_worker->next();
    CHECK(batch.kind == MessageKind::kBatch && batch.n_requests == 1);
    CHECK(input_of(*seq_worker, batch, 0) == flags_of[k]);
    const uint64_t word = sequence_word_of(*seq_worker, batch, 0);
    CHECK((word & kSequenceValid) != 0);
    CHECK(((word & kSequenceStartBit) != 0) == (k == 0));
    CHECK(((word & kSequenceEndBit) != 0) == (k == 1));
    CHECK(seq_worker->respond(batch.batch_id, {answer(0, "OUT")}, kTimings, true));
    answers(m.core.poll());
    BatchMessage response = m.caller_worker->next();
    CHECK(response.kind == MessageKind::kResponse && response.batch_id == 10 + k);
    m.caller_worker->arena().free(response.desc_offset);
  }
  // A numeric id reaches it too.
  SubmitRequest numeric = m.request(0, input);
  numeric.options.sequence_id = 42;
  numeric.options.sequence_flags = kSequenceFlagStart | kSequenceFlagEnd;
  CHECK(m.caller_worker->submit(seq.value, 20, numeric) == SubmitResult::kOk);
  answers(m.core.poll());
  BatchMessage batch = seq_worker->next();
  CHECK(batch.kind == MessageKind::kBatch);
  CHECK(seq_worker->respond(batch.batch_id, {answer(0, "OUT")}, kTimings, true));
  answers(m.core.poll());
  BatchMessage response = m.caller_worker->next();
  CHECK(response.kind == MessageKind::kResponse && response.batch_id == 20);
  m.caller_worker->arena().free(response.desc_offset);
  m.caller_worker->complete(caller_batch.batch_id, 0, 0, kCompletionWorkerFailed);
  CHECK(answers(m.core.poll()).size() == 1);
}

TEST(a_worker_cancels_its_request_queued_or_running) {
  TwoModels m;
  ArenaStats baseline = m.core.arena().stats();
  m.core.instance_up(m.caller_instance);
  m.core.instance_up(m.target_instance);
  const std::string input = "abc";
  CHECK(m.core.submit(m.caller, m.request(1, input)) == SubmitResult::kOk);
  CHECK(m.core.submit(m.target, m.request(2, input)) == SubmitResult::kOk);  // keeps it busy
  m.core.flush();
  BatchMessage caller_batch = m.caller_worker->next();
  BatchMessage busy = m.target_worker->next();
  // Queued behind the busy instance: cancelled, it is dropped and refused as cancelled.
  CHECK(m.caller_worker->submit(m.target.value, 7, m.request(0, input)) == SubmitResult::kOk);
  answers(m.core.poll());
  m.caller_worker->cancel(7);
  // The target's statistics count it (CANCELED), keyed by one of its instances.
  std::vector<Completion> counted = m.core.poll();
  CHECK(counted.size() == 1 && counted[0].status == kCompletionRoutedRefused);
  CHECK(counted[0].instance_id == m.target_instance);
  CHECK(counted[0].request_ids.size() == kRefusedStatsSize);
  CHECK(counted[0].request_ids[kRefusedStatus] == static_cast<uint64_t>(kCompletionCancelled));
  CHECK(counted[0].request_ids[kRefusedCount] == 1);
  BatchMessage refused = m.caller_worker->next();
  CHECK(refused.kind == MessageKind::kRefused && refused.batch_id == 7);
  CHECK(refused.n_requests == (kRefusedQueued | static_cast<uint32_t>(kCompletionCancelled)));
  CHECK(m.target_worker->respond(busy.batch_id, {answer(0, "OUT")}, kTimings, true));
  for (const Completion& c : answers(m.core.poll())) m.core.arena().free(c.result_offset);
  // Running: its block is flagged for request.is_cancelled(); its answer still comes.
  CHECK(m.caller_worker->submit(m.target.value, 8, m.request(0, input)) == SubmitResult::kOk);
  answers(m.core.poll());
  BatchMessage running = m.target_worker->next();
  CHECK(running.kind == MessageKind::kBatch);
  Arena& arena = m.target_worker->arena();
  const auto* records = arena.at<BatchRequest>(running.desc_offset + batch_requests_offset());
  const auto* header = arena.at<RequestHeader>(records[0].block_offset);
  CHECK(!request_cancelled(header));
  m.caller_worker->cancel(8);
  answers(m.core.poll());
  CHECK(request_cancelled(header));
  m.caller_worker->cancel(99);  // no such request: ignored
  answers(m.core.poll());
  CHECK(m.target_worker->respond(running.batch_id, {answer(0, "OUT")}, kTimings, true));
  answers(m.core.poll());
  BatchMessage response = m.caller_worker->next();
  CHECK(response.kind == MessageKind::kResponse && response.batch_id == 8);
  m.caller_worker->arena().free(response.desc_offset);
  m.caller_worker->complete(caller_batch.batch_id, 0, 0, kCompletionWorkerFailed);
  for (const Completion& c : answers(m.core.poll())) m.core.arena().free(c.result_offset);
  CHECK(m.core.arena().stats().blocks_in_use == baseline.blocks_in_use);
}

TEST(a_worker_request_the_target_fails_counts_as_its_failure) {
  TwoModels m;
  const std::string input = "abc";
  BatchMessage caller_batch = m.caller_running(input);
  CHECK(m.caller_worker->submit(m.target.value, 3, m.request(0, input)) == SubmitResult::kOk);
  answers(m.core.poll());
  BatchMessage batch = m.target_worker->next();
  ResponseEntry failed;
  failed.request_index = 0;
  failed.flags = kResponseFinal | kResponseError;
  failed.error_code = 1;
  failed.json = "{\"error\":\"it failed\"}";
  CHECK(m.target_worker->respond(batch.batch_id, {failed}, kTimings, true));
  std::vector<Completion> stats = m.core.poll();
  CHECK(stats.size() == 1 && stats[0].status == kCompletionRouted);
  CHECK(stats[0].request_ids[kRoutedCount] == 0 && stats[0].request_ids[kRoutedFailed] == 1);
  CHECK(stats[0].request_ids[kRoutedFailedRows] == 1);
  CHECK(stats[0].request_ids[kRoutedWholeBatch] == 1);  // an execution of the target
  BatchMessage response = m.caller_worker->next();
  CHECK(response.kind == MessageKind::kResponse && response.batch_id == 3);
  m.caller_worker->arena().free(response.desc_offset);
  m.caller_worker->complete(caller_batch.batch_id, 0, 0, kCompletionWorkerFailed);
  CHECK(answers(m.core.poll()).size() == 1);
}

TEST(an_error_response_the_target_model_sent_counts_as_its_success) {
  // As Triton 2.51's Python backend counts InferenceResponse(error=...): a success with
  // its queue and compute time, not a failure; the caller still gets the error.
  TwoModels m;
  const std::string input = "abc";
  BatchMessage caller_batch = m.caller_running(input);
  CHECK(m.caller_worker->submit(m.target.value, 3, m.request(0, input)) == SubmitResult::kOk);
  answers(m.core.poll());
  BatchMessage batch = m.target_worker->next();
  ResponseEntry answered;
  answered.request_index = 0;
  answered.flags = kResponseFinal | kResponseError | kResponseModelError;
  answered.error_code = 3;
  answered.json = "{\"error\":\"no such thing\"}";
  CHECK(m.target_worker->respond(batch.batch_id, {answered}, kTimings, true));
  std::vector<Completion> stats = m.core.poll();
  CHECK(stats.size() == 1 && stats[0].status == kCompletionRouted);
  CHECK(stats[0].request_ids[kRoutedCount] == 1 && stats[0].request_ids[kRoutedFailed] == 0);
  CHECK(stats[0].request_ids[kRoutedComputeInferNs] == kTimings[2]);
  BatchMessage response = m.caller_worker->next();
  CHECK(response.kind == MessageKind::kResponse && response.batch_id == 3);
  ResponseBlockView view;
  CHECK(view_response_block(m.caller_worker->arena().base() + response.desc_offset, response.size,
                            &view));
  CHECK((view.records[0].flags & kResponseError) != 0);
  m.caller_worker->arena().free(response.desc_offset);
  m.caller_worker->complete(caller_batch.batch_id, 0, 0, kCompletionWorkerFailed);
  CHECK(answers(m.core.poll()).size() == 1);
}

TEST(a_call_made_with_its_requests_trace_is_a_child_trace_of_a_traced_request) {
  TwoModels m;
  m.core.instance_up(m.caller_instance);
  m.core.instance_up(m.target_instance);
  const std::string input = "cli";
  SubmitRequest traced = m.request(1, input);
  traced.options.traced = true;
  CHECK(m.core.submit(m.caller, traced) == SubmitResult::kOk);
  m.core.flush();
  BatchMessage caller_batch = m.caller_worker->next();
  CHECK(caller_batch.kind == MessageKind::kBatch && caller_batch.n_requests == 1);
  // trace=request.trace() (request 0 of the running batch), then a call without it.
  CHECK(m.caller_worker->submit(m.target.value, 5, m.request(0, "bls"), true, caller_batch.batch_id,
                                1) == SubmitResult::kOk);
  CHECK(m.caller_worker->submit(m.target.value, 6, m.request(0, "bls")) == SubmitResult::kOk);
  m.core.poll();
  BatchMessage target_batch = m.target_worker->next();
  CHECK(target_batch.n_requests == 2);
  CHECK(m.target_worker->respond(target_batch.batch_id, {answer(0, "one"), answer(1, "two")},
                                 kTimings, true));
  m.core.poll();
  for (int k = 0; k < 2; ++k) {
    BatchMessage response = m.caller_worker->next();
    CHECK(response.kind == MessageKind::kResponse);
    m.caller_worker->arena().free(response.desc_offset);
  }
  CHECK(m.caller_worker->respond(caller_batch.batch_id, {answer(0, "out")}, kTimings, true));
  for (const Completion& c : answers(m.core.poll())) m.core.arena().free(c.result_offset);
  std::vector<ChildTrace> children = m.core.take_trace_children(1);
  CHECK(children.size() == 1);  // the call made without trace= is not traced
  CHECK(children[0].parent == 1 && children[0].model == m.target.value);
  CHECK(children[0].id == "bls");
  // The worker's timings; compute_output stamped to when its block was built.
  CHECK(std::memcmp(children[0].timings, kTimings, 3 * sizeof kTimings[0]) == 0);
  CHECK(children[0].timings[3] >= kTimings[3]);
  CHECK(children[0].request_start_ns <= children[0].queue_start_ns);
  CHECK(children[0].queue_start_ns <= children[0].request_end_ns);
  CHECK(m.core.take_trace_children(1).empty());
}

TEST(in_mode_opentelemetry_a_traced_request_and_its_traced_call_carry_their_spans) {
  // The context each model is given (request.trace().get_context()): the client's
  // trace with a span of its own for the request, the same trace with another span for
  // the call made with trace=, none for the call made without it; kept for export.
  TwoModels m;
  m.core.set_span_ids(true);
  m.core.instance_up(m.caller_instance);
  m.core.instance_up(m.target_instance);
  const std::string input = "cli";
  SubmitRequest traced = m.request(1, input);
  traced.options.traced = true;
  traced.options.trace_id_high = 0x0af7651916cd43ddULL;
  traced.options.trace_id_low = 0x8448eb211c80319cULL;
  traced.options.trace_flags = 1;
  CHECK(m.core.submit(m.caller, traced) == SubmitResult::kOk);
  m.core.flush();
  BatchMessage caller_batch = m.caller_worker->next();
  const SpanContext request_span = header_of(*m.caller_worker, caller_batch, 0).span;
  CHECK(request_span.trace_id_high == 0x0af7651916cd43ddULL);
  CHECK(request_span.trace_id_low == 0x8448eb211c80319cULL);
  CHECK(request_span.span_id != 0 && request_span.trace_flags == 1);
  CHECK(m.caller_worker->submit(m.target.value, 5, m.request(0, "bls"), true, caller_batch.batch_id,
                                1) == SubmitResult::kOk);
  CHECK(m.caller_worker->submit(m.target.value, 6, m.request(0, "bls")) == SubmitResult::kOk);
  m.core.poll();
  BatchMessage target_batch = m.target_worker->next();
  CHECK(target_batch.n_requests == 2);
  const SpanContext call_span = header_of(*m.target_worker, target_batch, 0).span;
  CHECK(call_span.trace_id_high == request_span.trace_id_high);
  CHECK(call_span.trace_id_low == request_span.trace_id_low && call_span.trace_flags == 1);
  CHECK(call_span.span_id != 0 && call_span.span_id != request_span.span_id);
  const SpanContext untraced = header_of(*m.target_worker, target_batch, 1).span;
  CHECK(untraced.span_id == 0 && untraced.trace_id_high == 0 && untraced.trace_id_low == 0);
  CHECK(m.target_worker->respond(target_batch.batch_id, {answer(0, "one"), answer(1, "two")},
                                 kTimings, true));
  m.core.poll();
  for (int k = 0; k < 2; ++k) {
    BatchMessage response = m.caller_worker->next();
    m.caller_worker->arena().free(response.desc_offset);
  }
  CHECK(m.caller_worker->respond(caller_batch.batch_id, {answer(0, "out")}, kTimings, true));
  for (const Completion& c : answers(m.core.poll())) m.core.arena().free(c.result_offset);
  TraceStamps stamps;
  CHECK(m.core.take_trace_stamps(1, &stamps));
  CHECK(std::memcmp(&stamps.span, &request_span, sizeof request_span) == 0);
  std::vector<ChildTrace> children = m.core.take_trace_children(1);
  CHECK(children.size() == 1);
  CHECK(std::memcmp(&children[0].span, &call_span, sizeof call_span) == 0);

  // A request with no client trace starts one of its own; one not traced has no span.
  SubmitRequest own = m.request(2, input);
  own.options.traced = true;
  CHECK(m.core.submit(m.caller, own) == SubmitResult::kOk);
  CHECK(m.core.submit(m.caller, m.request(3, input)) == SubmitResult::kOk);
  m.core.flush();
  BatchMessage batch = m.caller_worker->next();
  CHECK(batch.n_requests == 2);
  const SpanContext own_span = header_of(*m.caller_worker, batch, 0).span;
  CHECK(own_span.span_id != 0 && own_span.trace_flags == 1);
  CHECK((own_span.trace_id_high | own_span.trace_id_low) != 0);
  CHECK(own_span.trace_id_high != request_span.trace_id_high);
  CHECK(header_of(*m.caller_worker, batch, 1).span.span_id == 0);
  CHECK(m.caller_worker->respond(batch.batch_id, {answer(0, "a"), answer(1, "b")}, kTimings, true));
  for (const Completion& c : answers(m.core.poll())) m.core.arena().free(c.result_offset);
  CHECK(m.core.take_trace_stamps(2, &stamps) && stamps.span.span_id == own_span.span_id);
}

TEST(in_mode_triton_a_traced_request_carries_no_span) {
  TwoModels m;                      // set_span_ids never called: mode triton
  const std::string input = "cli";  // outlives the request, which points into it
  SubmitRequest traced = m.request(1, input);
  traced.options.traced = true;
  m.core.instance_up(m.caller_instance);
  CHECK(m.core.submit(m.caller, traced) == SubmitResult::kOk);
  m.core.flush();
  BatchMessage batch = m.caller_worker->next();
  const SpanContext span = header_of(*m.caller_worker, batch, 0).span;
  CHECK(span.span_id == 0 && span.trace_id_high == 0 && span.trace_id_low == 0);
  CHECK(m.caller_worker->respond(batch.batch_id, {answer(0, "a")}, kTimings, true));
  for (const Completion& c : answers(m.core.poll())) m.core.arena().free(c.result_offset);
  TraceStamps stamps;
  CHECK(m.core.take_trace_stamps(1, &stamps) && stamps.span.span_id == 0);
}

TEST(a_call_made_with_the_trace_of_an_untraced_request_is_not_traced) {
  TwoModels m;
  const std::string input = "cli";
  BatchMessage caller_batch = m.caller_running(input);
  CHECK(m.caller_worker->submit(m.target.value, 5, m.request(0, "bls"), true, caller_batch.batch_id,
                                1) == SubmitResult::kOk);
  m.core.poll();
  BatchMessage target_batch = m.target_worker->next();
  CHECK(m.target_worker->respond(target_batch.batch_id, {answer(0, "one")}, kTimings, true));
  m.core.poll();
  BatchMessage response = m.caller_worker->next();
  m.caller_worker->arena().free(response.desc_offset);
  CHECK(m.caller_worker->respond(caller_batch.batch_id, {answer(0, "out")}, kTimings, true));
  for (const Completion& c : answers(m.core.poll())) m.core.arena().free(c.result_offset);
  CHECK(m.core.take_trace_children(1).empty());
}

TEST(a_worker_control_request_reaches_the_frontend_and_its_answer_comes_back) {
  TwoModels m;
  BatchMessage caller_batch = m.caller_running("cli");
  const std::string file = std::string("model\0bytes", 11);
  CHECK(m.caller_worker->control(9, "{\"op\":\"load\"}", {file, ""}));
  std::vector<Completion> all = m.core.poll();
  CHECK(all.size() == 1);
  const Completion& control = all[0];
  CHECK(control.status == kCompletionControl && control.batch_id == 9);
  CHECK(control.instance_id == m.caller_instance);
  const uint8_t* block = m.core.arena().base() + control.result_offset;
  const auto* header = reinterpret_cast<const ControlHeader*>(block);
  CHECK(header->magic == kControlMagic && header->n_files == 2);
  const uint64_t json_at = control_json_offset(2);
  CHECK(std::string(reinterpret_cast<const char*>(block + json_at), header->json_size) ==
        "{\"op\":\"load\"}");
  CHECK(std::string(reinterpret_cast<const char*>(block + json_at + header->json_size), 11) ==
        file);
  CHECK(control.result_size == json_at + header->json_size + 11);
  m.core.arena().free(control.result_offset);  // the frontend's, once read
  CHECK(m.core.reply_control(m.caller_instance, 9, "{}"));
  BatchMessage reply = m.caller_worker->next();
  CHECK(reply.kind == MessageKind::kControlReply && reply.batch_id == 9 && reply.size == 2);
  CHECK(std::memcmp(m.caller_worker->arena().base() + reply.desc_offset, "{}", 2) == 0);
  m.caller_worker->arena().free(reply.desc_offset);
  CHECK(m.caller_worker->respond(caller_batch.batch_id, {answer(0, "out")}, kTimings, true));
  for (const Completion& c : answers(m.core.poll())) m.core.arena().free(c.result_offset);
}
