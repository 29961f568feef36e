// Responses as messages (channel.h, ipc_schema.h): a worker posts 0..N responses per
// request, each request's last flagged final, in as many response blocks as it likes,
// then ends the batch; requests left without a final response fail. The ring between
// them never drops a message, however many a batch produces.
#include <poll.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "codec/kserve_codec.h"
#include "core/core.h"
#include "ipc/response_block.h"
#include "ipc/worker_endpoint.h"
#include "testing.h"

using namespace naiad;

namespace {

struct Fixture {
  explicit Fixture(uint32_t max_batch_size, bool preserve_ordering = false, int instances = 1)
      : core(1 << 22, nullptr, false) {
    BatcherConfig config;
    config.dynamic_batching = true;
    config.max_batch_size = max_batch_size;
    config.preserve_ordering = preserve_ordering;
    model = core.add_model(config);
    for (int i = 0; i < instances; ++i) {
      uint32_t instance = core.add_instance(model);
      InstanceEndpoint ep = core.endpoint(instance);
      workers.push_back(std::make_unique<WorkerEndpoint>(dup(core.arena().fd()), ep.channel_offset,
                                                         dup(ep.wake_fd), dup(core.notify_fd())));
      ids.push_back(instance);
    }
  }
  void submit(uint64_t id) {
    SubmitRequest request;
    request.request_id = id;
    request.metadata = "{}";
    CHECK(core.submit(model, request) == SubmitResult::kOk);
  }
  Core core;
  ModelHandle model;
  std::vector<uint32_t> ids;
  std::vector<std::unique_ptr<WorkerEndpoint>> workers;
};

const uint64_t kTimings[4] = {1, 2, 3, 4};

ResponseEntry response(uint32_t index, bool final, std::string_view json) {
  ResponseEntry entry;
  entry.request_index = index;
  entry.flags = final ? kResponseFinal : 0;
  entry.json = json;
  return entry;
}

// Requests 1 and 2 submitted and dispatched as one batch to the first worker: its message.
BatchMessage batch_of_two(Fixture& f) {
  f.submit(1);
  f.submit(2);
  f.core.instance_up(f.ids[0]);
  f.core.flush();
  BatchMessage message = f.workers[0]->next();
  CHECK(message.n_requests == 2);
  return message;
}

}  // namespace

TEST(a_request_gets_any_number_of_responses_then_the_batch_ends) {
  Fixture f(4);
  BatchMessage message = batch_of_two(f);
  WorkerEndpoint& worker = *f.workers[0];
  const std::string partial = "{\"outputs\":[]}";
  // Request 0: three responses (two partial, one final); request 1: one final.
  CHECK(worker.respond(message.batch_id, {response(0, false, partial)}, kTimings, false));
  CHECK(worker.respond(message.batch_id, {response(0, false, partial), response(1, true, partial)},
                       kTimings, false));
  std::vector<Completion> first = f.core.poll();
  CHECK(first.size() == 2);
  CHECK(f.core.in_flight() == 1);  // the instance still runs the batch
  CHECK(worker.respond(message.batch_id, {response(0, true, partial)}, kTimings, true));
  std::vector<Completion> last = f.core.poll();
  CHECK(last.size() == 1);
  CHECK(f.core.in_flight() == 0);
  for (const std::vector<Completion>* batch : {&first, &last}) {
    for (const Completion& c : *batch) {
      CHECK(c.status == kCompletionOk && c.result_offset != 0);
      CHECK((c.request_ids == std::vector<uint64_t>{1, 2}));  // indices map into these
      ResponseBlockView view;
      CHECK(view_response_block(f.core.arena().base() + c.result_offset, c.result_size, &view));
      f.core.arena().free(c.result_offset);
    }
  }
  CHECK(f.core.assembler().slabs() == 0);
}

TEST(requests_without_a_final_response_fail_when_the_batch_ends) {
  Fixture f(4);
  for (uint64_t id = 1; id <= 3; ++id) f.submit(id);
  f.core.instance_up(f.ids[0]);
  f.core.flush();
  WorkerEndpoint& worker = *f.workers[0];
  BatchMessage message = worker.next();
  CHECK(worker.respond(message.batch_id, {response(1, true, "{}")}, kTimings, false));
  worker.complete(message.batch_id, 0, 0, kCompletionOk);  // 0 and 2 never answered
  std::vector<Completion> done = f.core.poll();
  CHECK(done.size() == 2);
  if (done.size() == 2) {
    CHECK(done[0].status == kCompletionOk);
    f.core.arena().free(done[0].result_offset);
    CHECK(done[1].status == kCompletionWorkerFailed);
    CHECK((done[1].request_ids == std::vector<uint64_t>{1, 3}));
  }
}

TEST(an_instance_dying_mid_stream_fails_only_the_unanswered_and_keeps_posted_blocks) {
  Fixture f(4);
  ArenaStats baseline = f.core.arena().stats();
  f.submit(1);
  f.submit(2);
  f.core.instance_up(f.ids[0]);
  f.core.flush();
  WorkerEndpoint& worker = *f.workers[0];
  BatchMessage message = worker.next();
  CHECK(worker.respond(message.batch_id, {response(0, true, "{}")}, kTimings, false));
  std::vector<Completion> posted = f.core.poll();
  CHECK(posted.size() == 1);
  CHECK(worker.arena().alloc(64, message.batch_id) != 0);  // half-written, never posted
  std::vector<Completion> failed = f.core.instance_down(f.ids[0]);
  CHECK(failed.size() == 1 && failed[0].status == kCompletionInstanceDied);
  CHECK(failed.size() == 1 && (failed[0].request_ids == std::vector<uint64_t>{2}));
  // The posted block is the frontend's: still readable, freed by it.
  ResponseBlockView view;
  CHECK(posted.size() == 1 && view_response_block(f.core.arena().base() + posted[0].result_offset,
                                                  posted[0].result_size, &view));
  if (posted.size() == 1) f.core.arena().free(posted[0].result_offset);
  CHECK(f.core.arena().stats().blocks_in_use == baseline.blocks_in_use);
}

TEST(preserve_ordering_streams_responses_in_dispatch_order) {
  Fixture f(1, true, 2);
  f.submit(1);
  f.submit(2);
  f.core.instance_up(f.ids[0]);
  f.core.instance_up(f.ids[1]);
  f.core.flush();
  BatchMessage first = f.workers[0]->next();
  BatchMessage second = f.workers[1]->next();
  CHECK(f.workers[1]->respond(second.batch_id, {response(0, true, "{}")}, kTimings, true));
  CHECK(f.core.poll().empty());  // held behind the earlier batch
  CHECK(f.workers[0]->respond(first.batch_id, {response(0, false, "{}")}, kTimings, false));
  std::vector<Completion> partial = f.core.poll();
  CHECK(partial.size() == 1 && partial[0].request_ids[0] == 1);
  CHECK(f.workers[0]->respond(first.batch_id, {response(0, true, "{}")}, kTimings, true));
  std::vector<Completion> rest = f.core.poll();
  CHECK(rest.size() == 2);
  CHECK(rest.size() == 2 && rest[0].request_ids[0] == 1 && rest[1].request_ids[0] == 2);
  for (const std::vector<Completion>* list : {&partial, &rest}) {
    for (const Completion& c : *list) f.core.arena().free(c.result_offset);
  }
}

TEST(the_worker_never_drops_a_message_when_the_ring_is_full) {
  Fixture f(8);
  for (uint64_t id = 1; id <= 8; ++id) f.submit(id);
  f.core.instance_up(f.ids[0]);
  f.core.flush();
  WorkerEndpoint& worker = *f.workers[0];
  BatchMessage message = worker.next();
  CHECK(message.n_requests == 8);
  // 8 requests x 40 responses each: five times the ring, posted one per message.
  const int per_request = 40;
  std::thread producer([&] {
    for (int k = 0; k < per_request; ++k) {
      for (uint32_t i = 0; i < 8; ++i) {
        bool final = k == per_request - 1;
        bool last = final && i == 7;
        worker.respond(message.batch_id, {response(i, final, "{}")}, kTimings, last);
      }
    }
  });
  size_t responses = 0;
  bool over = false;
  for (int spin = 0; spin < 20000 && !over; ++spin) {
    pollfd p{f.core.notify_fd(), POLLIN, 0};
    ::poll(&p, 1, 1);
    for (Completion& c : f.core.poll()) {
      ResponseBlockView view;
      if (c.result_offset != 0 &&
          view_response_block(f.core.arena().base() + c.result_offset, c.result_size, &view)) {
        responses += view.header->n_responses;
      }
      f.core.arena().free(c.result_offset);
    }
    over = f.core.in_flight() == 0;
  }
  producer.join();
  CHECK(responses == 8u * per_request);
  CHECK(over);
}

TEST(lane_answers_each_request_from_its_final_response) {
  Fixture f(4);
  ModelSpec model;
  model.core_model_id = f.model;
  model.name = "m";
  model.name_json = "m";
  model.version = "1";
  model.max_batch_size = 4;
  model.outputs = {"OUT"};
  model.outputs_json = {"OUT"};
  KServeCodec lane(f.core);
  lane.add_model(model);
  const std::string out = "abcd";
  ResponseEntry partial = response(1, false, "{\"outputs\":[[\"OUT\",\"UINT8\",[4]]]}");
  partial.outputs.push_back(OutputBytes{out.data(), out.size()});
  ResponseEntry final = partial;
  final.flags = kResponseFinal;
  std::string block(response_block_size({partial, final}), '\0');
  write_response_block(reinterpret_cast<uint8_t*>(&block[0]), {partial, final}, kTimings);
  std::vector<KServeCodec::Answer> replies;
  uint64_t timings[4];
  // Neither request is the lane's: nothing to answer, but the block reads.
  CHECK(lane.complete(reinterpret_cast<const uint8_t*>(block.data()), block.size(), {7, 8}, 0, 0,
                      &replies, timings));
  CHECK(replies.empty());
  // A response for a request beyond the batch: unreadable.
  CHECK(!lane.complete(reinterpret_cast<const uint8_t*>(block.data()), block.size(), {7}, 0, 0,
                       &replies, timings));
}

// A model writing its batch-major outputs in place: the block is laid out first
// (reserve_output_major), each output of the whole batch one run of rows, and posted once
// written; readers find every request's rows through its slots as in any block.
TEST(an_output_major_block_is_written_in_place_and_read_as_any_block) {
  Fixture f(4);
  BatchMessage message = batch_of_two(f);
  WorkerEndpoint& worker = *f.workers[0];
  // Request 0 has 1 row, request 1 has 2; output A is 8 bytes a row, output B 4.
  const std::string json0 = "{\"outputs\":[[\"A\",\"FP32\",[1,2]],[\"B\",\"INT32\",[1]]]}";
  const std::string json1 = "{\"outputs\":[[\"A\",\"FP32\",[2,2]],[\"B\",\"INT32\",[2]]]}";
  ResponseEntry first = response(0, true, json0);
  first.outputs = {OutputBytes{nullptr, 8}, OutputBytes{nullptr, 4}};
  ResponseEntry second = response(1, true, json1);
  second.outputs = {OutputBytes{nullptr, 16}, OutputBytes{nullptr, 8}};
  uint64_t runs[2] = {0, 0};
  uint64_t size = 0;
  const uint64_t offset =
      worker.reserve_output_major(message.batch_id, {first, second}, runs, &size);
  CHECK(offset != 0 && size == output_major_block_size({first, second}));
  CHECK(runs[0] % 64 == 0 && runs[1] % 64 == 0 && runs[1] >= runs[0] + 24);
  const float a[6] = {1, 2, 3, 4, 5, 6};  // the model's [3, 2] output A
  const int32_t b[3] = {7, 8, 9};         // and its [3] output B
  std::memcpy(worker.arena().base() + runs[0], a, sizeof(a));
  std::memcpy(worker.arena().base() + runs[1], b, sizeof(b));
  worker.post_block(message.batch_id, offset, size, kTimings, true);
  std::vector<Completion> done = f.core.poll();
  CHECK(done.size() == 1 && f.core.in_flight() == 0);
  if (done.size() != 1) return;
  CHECK(done[0].result_offset == offset && done[0].result_size == size);
  ResponseBlockView view;
  CHECK(view_response_block(f.core.arena().base() + offset, size, &view));
  CHECK(view.header->n_responses == 2 && view.header->n_outputs == 4);
  // post_block() stamps compute_output to when the block was posted: past the model's 4.
  CHECK(view.header->timings[0] == 1 && view.header->timings[3] > 4);
  CHECK(view.json(view.records[1]) == json1);
  // Request 1's output A is rows 1..2 of the run, its B elements 1..2.
  const OutputSlot& a1 = view.outputs[view.records[1].first_output];
  const OutputSlot& b1 = view.outputs[view.records[1].first_output + 1];
  CHECK(a1.offset == runs[0] - offset + 8 && a1.size == 16);
  CHECK(b1.offset == runs[1] - offset + 4 && b1.size == 8);
  CHECK(std::memcmp(view.block + a1.offset, a + 2, 16) == 0);
  CHECK(std::memcmp(view.block + b1.offset, b + 1, 8) == 0);
  f.core.arena().free(offset);
  CHECK(f.core.assembler().slabs() == 0);
}

TEST(an_output_major_block_needs_the_same_outputs_in_every_response) {
  ResponseEntry one = response(0, true, "{}");
  one.outputs = {OutputBytes{nullptr, 4}};
  ResponseEntry none = response(1, true, "{}");
  bool refused = false;
  try {
    output_major_block_size({one, none});
  } catch (const std::invalid_argument&) {
    refused = true;
  }
  CHECK(refused);
}

// Triton's compute_output ends once the backend has made its responses: the endpoint
// stamps the block's last timing after building it, so the batch's timings end no
// earlier than respond() was called and no later than it returned.
TEST(the_worker_stamps_compute_output_once_its_response_block_is_built) {
  Fixture f(4);
  BatchMessage message = batch_of_two(f);
  WorkerEndpoint& worker = *f.workers[0];
  const uint64_t start = monotonic_ns();
  const uint64_t timings[4] = {start, 0, 0, 0};  // what the worker sends: output not yet timed
  const std::string json = "{\"outputs\":[]}";
  const uint64_t before = monotonic_ns();
  CHECK(worker.respond(message.batch_id, {response(0, true, json), response(1, true, json)},
                       timings, true));
  const uint64_t after = monotonic_ns();
  std::vector<Completion> done = f.core.poll();
  CHECK(done.size() == 1 && done[0].result_offset != 0);
  ResponseBlockView view;
  CHECK(view_response_block(f.core.arena().base() + done[0].result_offset, done[0].result_size,
                            &view));
  const uint64_t* read = view.header->timings;
  CHECK(read[0] == start && read[1] == 0 && read[2] == 0);
  CHECK(read[3] > 0 && start + read[3] >= before && start + read[3] <= after);
  f.core.arena().free(done[0].result_offset);
}

// A block without the batch's timings (a decoupled model's response sent during
// execute) keeps its zeros: the statistics take the batch's from its last block.
TEST(a_block_without_timings_is_not_stamped) {
  Fixture f(4);
  BatchMessage message = batch_of_two(f);
  WorkerEndpoint& worker = *f.workers[0];
  const uint64_t none[4] = {0, 0, 0, 0};
  CHECK(worker.respond(message.batch_id, {response(0, false, "{\"outputs\":[]}")}, none, false));
  std::vector<Completion> done = f.core.poll();
  CHECK(done.size() == 1);
  ResponseBlockView view;
  CHECK(view_response_block(f.core.arena().base() + done[0].result_offset, done[0].result_size,
                            &view));
  for (int i = 0; i < 4; ++i) CHECK(view.header->timings[i] == 0);
  f.core.arena().free(done[0].result_offset);
  worker.end_batch(message.batch_id, false);
  f.core.poll();
}
