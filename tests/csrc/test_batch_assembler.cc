// Batch-major assembly (batch_assembler.h): the inputs of a formed batch are one
// contiguous tensor per input, reached with one copy in the FIFO case and two
// (a gather at dispatch) otherwise; per-request slots always point inside them.
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "batching_config.h"
#include "core/core.h"
#include "ipc/ipc_schema.h"
#include "ipc/response_block.h"
#include "ipc/worker_endpoint.h"
#include "testing.h"

using namespace naiad;

namespace {

// A batch as a worker reads it.
struct SeenBatch {
  BatchHeader header{};
  std::vector<BatchRequest> requests;
  std::vector<std::string> tensors;                 // bytes of each batch tensor
  std::vector<std::vector<std::string>> rows;       // [request][input] slot bytes
  std::vector<std::vector<uint64_t>> slot_offsets;  // [request][input]
  std::vector<BatchTensor> places;
};

SeenBatch read_batch(Arena& arena, const BatchMessage& message) {
  SeenBatch seen;
  const uint8_t* base = arena.base();
  seen.header = *arena.at<BatchHeader>(message.desc_offset);
  const auto* requests = arena.at<BatchRequest>(message.desc_offset + batch_requests_offset());
  seen.requests.assign(requests, requests + seen.header.n_requests);
  const auto* tensors =
      arena.at<BatchTensor>(message.desc_offset + batch_tensors_offset(seen.header.n_requests));
  for (uint32_t i = 0; i < seen.header.n_tensors; ++i) {
    seen.places.push_back(tensors[i]);
    seen.tensors.emplace_back(reinterpret_cast<const char*>(base + tensors[i].offset),
                              tensors[i].size);
  }
  for (const BatchRequest& r : seen.requests) {
    const auto& header = *arena.at<RequestHeader>(r.block_offset);
    const auto* slots = arena.at<InputSlot>(r.block_offset + sizeof(RequestHeader));
    std::vector<std::string> row;
    std::vector<uint64_t> offsets;
    for (uint32_t i = 0; i < header.n_inputs; ++i) {
      row.emplace_back(reinterpret_cast<const char*>(base + slots[i].offset), slots[i].size);
      offsets.push_back(slots[i].offset);
    }
    seen.rows.push_back(row);
    seen.slot_offsets.push_back(offsets);
  }
  return seen;
}

struct Fixture {
  explicit Fixture(BatcherConfig config) : core(1 << 24, nullptr, false) {
    model = core.add_model(config);
    instance = core.add_instance(model);
    InstanceEndpoint ep = core.endpoint(instance);
    worker = std::make_unique<WorkerEndpoint>(dup(core.arena().fd()), ep.channel_offset,
                                              dup(ep.wake_fd), dup(core.notify_fd()));
  }
  // Two inputs per request: "a<id>" and "bb<id>" padded to fixed sizes.
  SubmitResult submit(uint64_t id, uint32_t priority = 0, bool swapped = false) {
    first = std::string(8, static_cast<char>('a' + id % 26));
    second = std::string(12, static_cast<char>('A' + id % 26));
    SubmitRequest request;
    request.request_id = id;
    request.metadata = "{\"id\":\"r\"}";
    for (const std::string* bytes : {&first, &second}) {
      InputSource source;
      source.data = bytes->data();
      source.size = bytes->size();
      request.inputs.push_back(source);
    }
    uint32_t order[] = {0, 1};
    if (swapped) std::swap(order[0], order[1]);
    request.options.input_order = input_order_key(order, 2);
    request.options.priority = priority;
    return core.submit(model, request);
  }
  // Dispatches one batch and reads it; the worker completes it at once.
  SeenBatch next_batch() {
    core.flush();
    BatchMessage message = worker->next();
    SeenBatch seen = read_batch(core.arena(), message);
    worker->complete(message.batch_id, 0, 0, kCompletionOk);
    return seen;
  }
  Core core;
  ModelHandle model;
  uint32_t instance = 0;
  std::unique_ptr<WorkerEndpoint> worker;
  std::string first, second;
};

using naiad_testing::batching;

std::string expected_tensor(const std::vector<uint64_t>& ids, size_t input) {
  std::string out;
  for (uint64_t id : ids) {
    out += input == 0 ? std::string(8, static_cast<char>('a' + id % 26))
                      : std::string(12, static_cast<char>('A' + id % 26));
  }
  return out;
}

// Every request's slots lie inside the batch tensors, row after row.
bool slots_inside_tensors(const SeenBatch& seen) {
  for (size_t i = 0; i < seen.places.size(); ++i) {
    uint64_t cursor = seen.places[i].offset;
    for (size_t k = 0; k < seen.requests.size(); ++k) {
      if (seen.slot_offsets[k][i] != cursor) return false;
      cursor += seen.rows[k][i].size();
    }
    if (cursor != seen.places[i].offset + seen.places[i].size) return false;
  }
  return true;
}

}  // namespace

TEST(fifo_batch_is_one_contiguous_tensor_per_input_with_one_copy) {
  Fixture f(batching(4));
  for (uint64_t id = 1; id <= 4; ++id) CHECK(f.submit(id) == SubmitResult::kOk);
  f.core.instance_up(f.instance);
  SeenBatch seen = f.next_batch();
  CHECK(seen.header.n_requests == 4 && seen.header.n_tensors == 2);
  CHECK(seen.header.rows == 4 && seen.header.gathered == 0);
  CHECK(seen.tensors.size() == 2 && seen.tensors[0] == expected_tensor({1, 2, 3, 4}, 0));
  CHECK(seen.tensors.size() == 2 && seen.tensors[1] == expected_tensor({1, 2, 3, 4}, 1));
  CHECK(seen.places.size() == 2 && seen.places[0].offset % kTensorAlign == 0);
  CHECK(slots_inside_tensors(seen));
  CHECK(seen.requests[3].first_row == 3);
  // One copy of every input byte (at submit), none at dispatch.
  CHECK(f.core.assembler().placed_bytes() == 4 * 20);
  CHECK(f.core.assembler().gathered_bytes() == 0);
  CHECK(f.core.assembler().contiguous_batches() == 1);
  f.core.poll();
  CHECK(f.core.assembler().slabs() == 0);  // an idle model holds no slab
}

TEST(priority_reordering_gathers_with_a_second_copy) {
  Fixture f(batching(4, 2));
  CHECK(f.submit(1, 2) == SubmitResult::kOk);
  CHECK(f.submit(2, 1) == SubmitResult::kOk);  // higher priority: leaves first
  CHECK(f.submit(3, 2) == SubmitResult::kOk);
  f.core.instance_up(f.instance);
  SeenBatch seen = f.next_batch();
  CHECK(seen.header.n_requests == 3 && seen.header.gathered == 1);
  std::vector<uint64_t> ids;
  for (const BatchRequest& r : seen.requests) ids.push_back(r.request_id);
  CHECK((ids == std::vector<uint64_t>{2, 1, 3}));
  CHECK(seen.tensors.size() == 2 && seen.tensors[0] == expected_tensor({2, 1, 3}, 0));
  CHECK(seen.tensors.size() == 2 && seen.tensors[1] == expected_tensor({2, 1, 3}, 1));
  CHECK(slots_inside_tensors(seen));
  CHECK(seen.rows[0][0] == std::string(8, 'c'));
  CHECK(f.core.assembler().gathered_bytes() == 3 * 20);
}

TEST(inputs_in_another_order_give_no_batch_tensors) {
  Fixture f(batching(4));
  CHECK(f.submit(1) == SubmitResult::kOk);
  CHECK(f.submit(2, 0, true) == SubmitResult::kOk);
  f.core.instance_up(f.instance);
  SeenBatch seen = f.next_batch();
  CHECK(seen.header.n_requests == 2 && seen.header.n_tensors == 0);
  CHECK(seen.rows.size() == 2 && seen.rows[1][0] == std::string(8, 'c'));
}

TEST(slabs_hold_several_batches_and_are_freed_when_done) {
  Fixture f(batching(2));
  f.core.instance_up(f.instance);
  uint64_t id = 0;
  size_t gathered = 0, batches = 0, requests = 0;
  auto run_one = [&] {
    f.core.flush();
    BatchMessage message = f.worker->next();
    SeenBatch seen = read_batch(f.core.arena(), message);
    std::vector<uint64_t> ids;
    for (const BatchRequest& r : seen.requests) ids.push_back(r.request_id);
    CHECK(seen.tensors.size() == 2 && seen.tensors[0] == expected_tensor(ids, 0));
    CHECK(seen.tensors.size() == 2 && seen.tensors[1] == expected_tensor(ids, 1));
    CHECK(slots_inside_tensors(seen));
    gathered += seen.header.gathered;
    ++batches;
    requests += seen.requests.size();
    f.worker->complete(message.batch_id, 0, 0, kCompletionOk);
    f.core.poll();
  };
  // Three requests in, one batch of two out per round: the queue grows, rows stay
  // taken, slabs fill and batches start mid-slab and cross into the next one.
  for (int round = 0; round < 40; ++round) {
    for (int k = 0; k < 3; ++k) CHECK(f.submit(++id) == SubmitResult::kOk);
    run_one();
  }
  // Every request was accepted: the rest leave in further batches until none is queued.
  while (requests < 120) run_one();
  CHECK(requests == 120);
  std::printf("  %zu of %zu batches gathered\n", gathered, batches);
  CHECK(gathered > 0 && gathered * 4 < batches);  // only batches that cross slabs
  CHECK(f.core.assembler().slabs() == 0);
  CHECK(f.core.in_flight() == 0);
}

TEST(models_without_batching_have_no_slab_and_never_gather) {
  Fixture f(BatcherConfig{});
  for (uint64_t id = 1; id <= 3; ++id) CHECK(f.submit(id) == SubmitResult::kOk);
  f.core.instance_up(f.instance);
  for (uint64_t id = 1; id <= 3; ++id) {
    SeenBatch seen = f.next_batch();
    CHECK(seen.header.n_requests == 1 && seen.header.n_tensors == 2);
    CHECK(seen.header.gathered == 0);
    CHECK(seen.tensors.size() == 2 && seen.tensors[0] == expected_tensor({id}, 0));
    f.core.poll();
  }
  CHECK(f.core.assembler().slabs() == 0);
  CHECK(f.core.assembler().gathered_bytes() == 0);
}

TEST(a_dead_worker_leaves_no_gathered_tensor_or_slab_behind) {
  Fixture f(batching(4, 2));
  ArenaStats baseline = f.core.arena().stats();
  CHECK(f.submit(1, 2) == SubmitResult::kOk);
  CHECK(f.submit(2, 1) == SubmitResult::kOk);
  f.core.instance_up(f.instance);
  f.core.flush();
  BatchMessage message = f.worker->next();
  CHECK(f.core.arena().at<BatchHeader>(message.desc_offset)->gathered == 1);
  CHECK(f.worker->arena().alloc(100, message.batch_id) != 0);  // its result, never posted
  std::vector<Completion> failed = f.core.instance_down(f.instance);
  CHECK(failed.size() == 1 && failed[0].status == kCompletionInstanceDied);
  CHECK(f.core.assembler().slabs() == 0);
  CHECK(f.core.arena().stats().blocks_in_use == baseline.blocks_in_use);
}

// Submits from two threads while the timer thread and poll() dispatch and a worker
// thread answers: under TSan, the assembler's lock and the core's must agree.
TEST(concurrent_submits_and_dispatch_keep_every_row) {
  BatcherConfig config = batching(4);
  config.max_queue_delay_us = 50;
  Core core(1 << 24);
  ModelHandle model = core.add_model(config);
  uint32_t instance = core.add_instance(model);
  core.instance_up(instance);
  InstanceEndpoint ep = core.endpoint(instance);
  WorkerEndpoint worker(dup(core.arena().fd()), ep.channel_offset, dup(ep.wake_fd),
                        dup(core.notify_fd()));
  const int per_thread = 300;
  std::atomic<int> mismatches{0};
  std::thread answering([&] {
    for (;;) {
      BatchMessage message = worker.next();
      if (message.kind == MessageKind::kStop) return;
      SeenBatch seen = read_batch(worker.arena(), message);
      std::vector<uint64_t> ids;
      for (const BatchRequest& r : seen.requests) ids.push_back(r.request_id);
      if (seen.tensors.size() != 2 || seen.tensors[0] != expected_tensor(ids, 0) ||
          seen.tensors[1] != expected_tensor(ids, 1) || !slots_inside_tensors(seen)) {
        ++mismatches;
      }
      std::vector<ResponseEntry> answers(ids.size());
      for (uint32_t i = 0; i < ids.size(); ++i) answers[i].request_index = i;
      const uint64_t timings[4] = {0, 0, 0, 0};
      worker.respond(message.batch_id, answers, timings, true);
    }
  });
  auto submitting = [&](uint64_t first) {
    for (int k = 0; k < per_thread; ++k) {
      const uint64_t id = first + static_cast<uint64_t>(k);
      const std::string a(8, static_cast<char>('a' + id % 26));
      const std::string b(12, static_cast<char>('A' + id % 26));
      SubmitRequest request;
      request.request_id = id;
      for (const std::string* bytes : {&a, &b}) {
        InputSource source;
        source.data = bytes->data();
        source.size = bytes->size();
        request.inputs.push_back(source);
      }
      uint32_t order[] = {0, 1};
      request.options.input_order = input_order_key(order, 2);
      while (core.submit(model, request) != SubmitResult::kOk) std::this_thread::yield();
    }
  };
  std::thread one(submitting, 1000), two(submitting, 5000);
  size_t answered = 0;
  for (int spin = 0; spin < 20000 && answered < 2 * per_thread; ++spin) {
    pollfd p{core.notify_fd(), POLLIN, 0};
    ::poll(&p, 1, 1);
    for (Completion& c : core.poll()) {
      answered += c.request_ids.size();
      core.arena().free(c.result_offset);
    }
  }
  one.join();
  two.join();
  core.stop_instance(instance);
  answering.join();
  CHECK(answered == 2 * per_thread);
  CHECK(mismatches.load() == 0);
}
