// Decoupled models and cancellation in the core: a worker ends a batch but keeps its
// unanswered requests open (channel.h kPostKeepOpen), so the instance takes its next
// batch while responses for the earlier one keep coming, from any thread; and
// Core::cancel drops a queued request or flags a running one for the worker.
#include <poll.h>
#include <unistd.h>

#include <initializer_list>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/core.h"
#include "ipc/ipc_schema.h"
#include "ipc/response_block.h"
#include "ipc/worker_endpoint.h"
#include "testing.h"

using namespace naiad;

namespace {

struct Fixture {
  explicit Fixture(uint32_t max_batch_size, int instances = 1) : core(1 << 22, nullptr, false) {
    BatcherConfig config;
    config.dynamic_batching = max_batch_size > 1;
    config.max_batch_size = max_batch_size;
    model = core.add_model(config);
    for (int i = 0; i < instances; ++i) {
      uint32_t instance = core.add_instance(model);
      InstanceEndpoint ep = core.endpoint(instance);
      workers.push_back(std::make_unique<WorkerEndpoint>(dup(core.arena().fd()), ep.channel_offset,
                                                         dup(ep.wake_fd), dup(core.notify_fd())));
      ids.push_back(instance);
    }
  }
  // Submits requests `request_ids`, brings the first instance up and returns the batch
  // it is sent (one batch: the instance takes what the batcher formed).
  BatchMessage dispatch(std::initializer_list<uint64_t> request_ids) {
    for (uint64_t id : request_ids) submit(id);
    core.instance_up(ids[0]);
    core.flush();
    return workers[0]->next();
  }
  void submit(uint64_t id) {
    SubmitRequest request;
    request.request_id = id;
    request.metadata = "{}";
    CHECK(core.submit(model, request) == SubmitResult::kOk);
  }
  // Frees the result blocks of `done`; returns how many responses they held.
  size_t consume(const std::vector<Completion>& done) {
    size_t responses = 0;
    for (const Completion& c : done) {
      if (c.result_offset == 0) continue;
      ResponseBlockView view;
      if (view_response_block(core.arena().base() + c.result_offset, c.result_size, &view)) {
        responses += view.header->n_responses;
      }
      core.arena().free(c.result_offset);
    }
    return responses;
  }
  Core core;
  ModelHandle model;
  std::vector<uint32_t> ids;
  std::vector<std::unique_ptr<WorkerEndpoint>> workers;
};

const uint64_t kTimings[4] = {1, 2, 3, 4};

ResponseEntry response(uint32_t index, bool final, std::string_view json = "{}") {
  ResponseEntry entry;
  entry.request_index = index;
  entry.flags = final ? kResponseFinal : 0;
  entry.json = json;
  return entry;
}

}  // namespace

TEST(a_batch_kept_open_frees_its_instance_and_ends_with_its_last_final_response) {
  Fixture f(1);
  const ArenaStats baseline = f.core.arena().stats();
  WorkerEndpoint& worker = *f.workers[0];
  BatchMessage first = f.dispatch({1, 2});
  CHECK(first.n_requests == 1);
  CHECK(worker.respond(first.batch_id, {response(0, false)}, kTimings, false));
  worker.end_batch(first.batch_id, true);  // execute returned; request 1 still streams
  CHECK(f.consume(f.core.poll()) == 1);
  CHECK(f.core.in_flight() == 2);  // request 1, kept open; request 2, dispatched
  // The instance took request 2 meanwhile.
  BatchMessage second;
  CHECK(worker.try_next(&second) && second.kind == MessageKind::kBatch);
  CHECK(second.batch_id != first.batch_id);
  CHECK(worker.respond(second.batch_id, {response(0, true)}, kTimings, true));
  // Responses to request 1 after its batch ended, the last one final.
  CHECK(worker.respond(first.batch_id, {response(0, false)}, kTimings, false));
  CHECK(worker.respond(first.batch_id, {response(0, true)}, kTimings, false));
  std::vector<Completion> done = f.core.poll();
  CHECK(done.size() == 3);
  for (const Completion& c : done) CHECK(c.status == kCompletionOk && c.request_ids.size() == 1);
  CHECK(f.consume(done) == 3);
  CHECK(f.core.in_flight() == 0);
  CHECK(f.core.assembler().slabs() == 0);
  CHECK(f.core.arena().stats().blocks_in_use == baseline.blocks_in_use);
}

TEST(responses_posted_after_the_final_one_are_dropped_and_freed) {
  Fixture f(1);
  const ArenaStats baseline = f.core.arena().stats();
  WorkerEndpoint& worker = *f.workers[0];
  BatchMessage message = f.dispatch({1});
  worker.end_batch(message.batch_id, true);
  CHECK(worker.respond(message.batch_id, {response(0, true)}, kTimings, false));
  CHECK(f.consume(f.core.poll()) == 1);
  CHECK(worker.respond(message.batch_id, {response(0, false)}, kTimings, false));  // too late
  CHECK(f.core.poll().empty());
  CHECK(f.core.arena().stats().blocks_in_use == baseline.blocks_in_use);
}

TEST(a_request_that_answered_during_execute_needs_nothing_kept_open) {
  Fixture f(4);
  WorkerEndpoint& worker = *f.workers[0];
  BatchMessage message = f.dispatch({1, 2});
  CHECK(message.n_requests == 2);
  CHECK(worker.respond(message.batch_id, {response(0, true), response(1, true)}, kTimings, true,
                       true));
  CHECK(f.consume(f.core.poll()) == 2);
  CHECK(f.core.in_flight() == 0);
  CHECK(f.core.assembler().slabs() == 0);
}

TEST(an_instance_dying_fails_the_requests_it_kept_open) {
  Fixture f(1);
  const ArenaStats baseline = f.core.arena().stats();
  WorkerEndpoint& worker = *f.workers[0];
  BatchMessage message = f.dispatch({7});
  CHECK(worker.respond(message.batch_id, {response(0, false)}, kTimings, true, true));
  CHECK(f.consume(f.core.poll()) == 1);
  CHECK(worker.arena().alloc(64, message.batch_id) != 0);  // half-written, never posted
  std::vector<Completion> failed = f.core.instance_down(f.ids[0]);
  CHECK(failed.size() == 1);
  CHECK(failed[0].status == kCompletionInstanceDied);
  CHECK((failed[0].request_ids == std::vector<uint64_t>{7}));
  CHECK(f.core.in_flight() == 0);
  CHECK(f.core.arena().stats().blocks_in_use == baseline.blocks_in_use);
}

TEST(a_batch_that_failed_is_never_kept_open) {
  Fixture f(1);
  WorkerEndpoint& worker = *f.workers[0];
  BatchMessage message = f.dispatch({3});
  worker.post(CompletionMessage{message.batch_id, 0, 0, kCompletionWorkerFailed,
                                kPostBatchDone | kPostKeepOpen});
  std::vector<Completion> done = f.core.poll();
  CHECK(done.size() == 1 && done[0].status == kCompletionWorkerFailed);
  CHECK(f.core.in_flight() == 0);
}

TEST(threads_of_a_worker_stream_responses_concurrently_without_losing_one) {
  Fixture f(4);
  WorkerEndpoint& worker = *f.workers[0];
  BatchMessage message = f.dispatch({1, 2, 3, 4});
  CHECK(message.n_requests == 4);
  worker.end_batch(message.batch_id, true);
  const int per_request = 50;  // 200 messages: three times the ring
  std::vector<std::thread> senders;
  for (uint32_t i = 0; i < 4; ++i) {
    senders.emplace_back([&worker, &message, i] {
      for (int k = 0; k < per_request; ++k) {
        worker.respond(message.batch_id, {response(i, k == per_request - 1)}, kTimings, false);
      }
    });
  }
  size_t responses = 0;
  for (int spin = 0; spin < 20000 && (responses < 4u * per_request || f.core.in_flight() != 0);
       ++spin) {
    pollfd p{f.core.notify_fd(), POLLIN, 0};
    ::poll(&p, 1, 1);
    responses += f.consume(f.core.poll());
  }
  for (std::thread& t : senders) t.join();
  CHECK(responses == 4u * per_request);
  CHECK(f.core.in_flight() == 0);
  CHECK(f.core.assembler().slabs() == 0);
}

TEST(cancel_drops_a_queued_request_and_flags_a_running_one) {
  Fixture f(1);
  const ArenaStats baseline = f.core.arena().stats();
  WorkerEndpoint& worker = *f.workers[0];
  BatchMessage message = f.dispatch({1, 2, 3});  // 1 runs, 2 and 3 wait
  auto* records = worker.arena().at<BatchRequest>(message.desc_offset + batch_requests_offset());
  const RequestHeader* running = worker.arena().at<RequestHeader>(records[0].block_offset);
  CHECK(records[0].request_id == 1);
  CHECK(!request_cancelled(running));

  CHECK(f.core.cancel(2) == CancelResult::kDropped);
  std::vector<Completion> dropped = f.core.poll();
  CHECK(dropped.size() == 1);
  CHECK(dropped[0].status == kCompletionCancelled);
  CHECK((dropped[0].request_ids == std::vector<uint64_t>{2}));

  CHECK(f.core.cancel(1) == CancelResult::kFlagged);
  CHECK(request_cancelled(running));
  CHECK(f.core.cancel(99) == CancelResult::kUnknown);

  // The running request answers (CANCELLED, as a model does); then 3 runs, unflagged.
  CHECK(worker.respond(message.batch_id, {response(0, true)}, kTimings, true));
  CHECK(f.consume(f.core.poll()) == 1);
  CHECK(f.core.cancel(1) == CancelResult::kUnknown);  // answered already
  BatchMessage next;
  CHECK(worker.try_next(&next) && next.kind == MessageKind::kBatch);
  records = worker.arena().at<BatchRequest>(next.desc_offset + batch_requests_offset());
  CHECK(records[0].request_id == 3);
  CHECK(!request_cancelled(worker.arena().at<RequestHeader>(records[0].block_offset)));
  CHECK(worker.respond(next.batch_id, {response(0, true)}, kTimings, true));
  CHECK(f.consume(f.core.poll()) == 1);
  CHECK(f.core.arena().stats().blocks_in_use == baseline.blocks_in_use);
}

TEST(cancel_reaches_a_request_kept_open_after_its_batch) {
  Fixture f(1);
  WorkerEndpoint& worker = *f.workers[0];
  BatchMessage message = f.dispatch({5});
  auto* records = worker.arena().at<BatchRequest>(message.desc_offset + batch_requests_offset());
  const RequestHeader* header = worker.arena().at<RequestHeader>(records[0].block_offset);
  worker.end_batch(message.batch_id, true);
  CHECK(f.core.poll().empty());
  CHECK(f.core.cancel(5) == CancelResult::kFlagged);
  CHECK(request_cancelled(header));
  CHECK(worker.respond(message.batch_id, {response(0, true)}, kTimings, false));
  CHECK(f.consume(f.core.poll()) == 1);
  CHECK(f.core.in_flight() == 0);
}

TEST(a_streaming_worker_yields_only_while_the_frontend_has_a_wake_up_to_take) {
  Fixture f(1);
  WorkerEndpoint& worker = *f.workers[0];
  BatchMessage message = f.dispatch({1});
  f.core.poll();                       // the frontend took every wake-up so far
  CHECK(!worker.yield_to_frontend());  // nothing waits for it: this worker runs on
  CHECK(worker.respond(message.batch_id, {response(0, false)}, kTimings, false));
  CHECK(worker.yield_to_frontend());     // the response woke the frontend, not run yet
  CHECK(f.consume(f.core.poll()) == 1);  // the frontend ran and took it
  CHECK(!worker.yield_to_frontend());
  CHECK(worker.respond(message.batch_id, {response(0, true)}, kTimings, false));
  CHECK(f.consume(f.core.poll()) == 1);
  worker.end_batch(message.batch_id, true);
  f.core.poll();
  CHECK(f.core.in_flight() == 0);
}
