// Inputs in client system-shm regions (batch_assembler.h): left in the region at
// submit, read in place by the worker when the request runs alone (no copy), copied
// once at dispatch when it shares a batch (into its rows, or straight into the
// gathered tensor) unless the model reads each request apart, and refused at submit
// when the range is outside the region.
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "batching_config.h"
#include "core/core.h"
#include "ipc/ipc_schema.h"
#include "ipc/worker_endpoint.h"
#include "testing.h"

using namespace naiad;

namespace {

// One host region (id 7) over a buffer, counting the copies map() hands out.
struct FakeRegions : InputRegions {
  std::string bytes;
  uint64_t copies = 0;
  const uint8_t* map(InputKind kind, uint64_t region, uint64_t offset, uint64_t size) override {
    if (kind != InputKind::kSystemShm || !host_range(region, offset, size)) return nullptr;
    ++copies;
    return reinterpret_cast<const uint8_t*>(bytes.data()) + offset;
  }
  bool host_range(uint64_t region, uint64_t offset, uint64_t size) override {
    return region == 7 && offset <= bytes.size() && size <= bytes.size() - offset;
  }
};

struct Fixture {
  explicit Fixture(BatcherConfig config) : core(1 << 24, nullptr, false) {
    regions.bytes.resize(4096);
    for (size_t i = 0; i < regions.bytes.size(); ++i) regions.bytes[i] = static_cast<char>(i % 251);
    core.set_input_regions(&regions);
    model = core.add_model(config);
    instance = core.add_instance(model);
    InstanceEndpoint ep = core.endpoint(instance);
    worker = std::make_unique<WorkerEndpoint>(dup(core.arena().fd()), ep.channel_offset,
                                              dup(ep.wake_fd), dup(core.notify_fd()));
  }
  // One input of 16 bytes at `offset` of region 7 (or of `region`).
  SubmitResult submit(uint64_t id, uint64_t offset, uint32_t priority = 0, uint64_t region = 7) {
    SubmitRequest request;
    request.request_id = id;
    request.metadata = "{\"id\":\"r\"}";
    InputSource source;
    source.kind = InputKind::kSystemShm;
    source.region = region;
    source.offset = offset;
    source.size = 16;
    request.inputs.push_back(source);
    uint32_t order[] = {0};
    request.options.input_order = input_order_key(order, 1);
    request.options.priority = priority;
    return core.submit(model, request);
  }
  std::string region_bytes(uint64_t offset) const { return regions.bytes.substr(offset, 16); }
  // The next batch's slots and tensors as a worker reads them; completed at once.
  struct Seen {
    BatchHeader header{};
    std::vector<InputSlot> slots;  // one input per request
    std::vector<BatchTensor> tensors;
  };
  Seen next_batch() {
    core.flush();
    BatchMessage message = worker->next();
    Arena& arena = core.arena();
    Seen seen;
    seen.header = *arena.at<BatchHeader>(message.desc_offset);
    const auto* requests = arena.at<BatchRequest>(message.desc_offset + batch_requests_offset());
    for (uint32_t k = 0; k < seen.header.n_requests; ++k) {
      seen.slots.push_back(*arena.at<InputSlot>(requests[k].block_offset + sizeof(RequestHeader)));
    }
    const auto* tensors =
        arena.at<BatchTensor>(message.desc_offset + batch_tensors_offset(seen.header.n_requests));
    seen.tensors.assign(tensors, tensors + seen.header.n_tensors);
    worker->complete(message.batch_id, 0, 0, kCompletionOk);
    return seen;
  }
  std::string arena_bytes(uint64_t offset, uint64_t size) {
    return std::string(reinterpret_cast<const char*>(core.arena().base() + offset), size);
  }
  FakeRegions regions;
  Core core;
  ModelHandle model;
  uint32_t instance = 0;
  std::unique_ptr<WorkerEndpoint> worker;
};

using naiad_testing::batching;

}  // namespace

TEST(region_input_of_a_request_alone_is_left_in_place) {
  Fixture f(batching(4));
  CHECK(f.submit(1, 256) == SubmitResult::kOk);
  f.core.instance_up(f.instance);
  Fixture::Seen seen = f.next_batch();
  CHECK(seen.header.n_requests == 1 && seen.slots.size() == 1);
  CHECK(seen.slots[0].region == 7 && seen.slots[0].region_offset == 256);
  CHECK(seen.slots[0].size == 16);
  CHECK(seen.tensors.size() == 1 && seen.tensors[0].region == 7);
  CHECK(seen.tensors[0].region_offset == 256);
  CHECK(f.regions.copies == 0);
  CHECK(f.core.assembler().placed_bytes() == 0);
  CHECK(f.core.assembler().in_place_inputs() == 1);
  f.core.poll();
}

TEST(region_inputs_without_batching_are_left_in_place) {
  Fixture f(BatcherConfig{});
  CHECK(f.submit(1, 0) == SubmitResult::kOk);
  CHECK(f.submit(2, 32) == SubmitResult::kOk);
  f.core.instance_up(f.instance);
  for (uint64_t offset : {0, 32}) {
    Fixture::Seen seen = f.next_batch();
    CHECK(seen.slots.size() == 1 && seen.slots[0].region == 7);
    CHECK(seen.slots[0].region_offset == offset);
    f.core.poll();
  }
  CHECK(f.regions.copies == 0 && f.core.assembler().in_place_inputs() == 2);
}

TEST(region_inputs_of_a_shared_batch_are_copied_once_into_their_rows) {
  Fixture f(batching(4));
  for (uint64_t id = 1; id <= 3; ++id) CHECK(f.submit(id, 64 * id) == SubmitResult::kOk);
  f.core.instance_up(f.instance);
  Fixture::Seen seen = f.next_batch();
  CHECK(seen.header.n_requests == 3 && seen.header.gathered == 0);
  CHECK(seen.tensors.size() == 1 && seen.tensors[0].region == 0 && seen.tensors[0].size == 48);
  CHECK(f.arena_bytes(seen.tensors[0].offset, 48) ==
        f.region_bytes(64) + f.region_bytes(128) + f.region_bytes(192));
  for (size_t k = 0; k < seen.slots.size(); ++k) {
    CHECK(seen.slots[k].region == 0);
    CHECK(seen.slots[k].offset == seen.tensors[0].offset + 16 * k);
  }
  CHECK(f.regions.copies == 3);  // one each
  CHECK(f.core.assembler().gathered_bytes() == 0);
  CHECK(f.core.assembler().in_place_inputs() == 0);
  f.core.poll();
}

TEST(region_inputs_of_a_gathered_batch_are_still_copied_once) {
  Fixture f(batching(4, 2));
  CHECK(f.submit(1, 0, 2) == SubmitResult::kOk);
  CHECK(f.submit(2, 16, 1) == SubmitResult::kOk);  // higher priority: leaves first
  CHECK(f.submit(3, 32, 2) == SubmitResult::kOk);
  f.core.instance_up(f.instance);
  Fixture::Seen seen = f.next_batch();
  CHECK(seen.header.n_requests == 3 && seen.header.gathered == 1);
  CHECK(seen.tensors.size() == 1);
  CHECK(f.arena_bytes(seen.tensors[0].offset, 48) ==
        f.region_bytes(16) + f.region_bytes(0) + f.region_bytes(32));
  // Straight from the region into the batch tensor: no row copy before it.
  CHECK(f.regions.copies == 3);
  CHECK(f.core.assembler().gathered_bytes() == 0);
  f.core.poll();
}

TEST(region_input_outside_its_region_is_refused_at_submit) {
  Fixture f(batching(4));
  CHECK(f.submit(1, 4096 - 8) == SubmitResult::kUnsupportedInput);
  CHECK(f.submit(2, 0, 0, 9) == SubmitResult::kUnsupportedInput);  // unknown region
  CHECK(f.core.assembler().slabs() == 0);
  CHECK(f.regions.copies == 0);
}

TEST(region_inputs_of_a_model_read_apart_stay_in_place_in_any_batch) {
  Fixture f(batching(4));
  f.core.set_batch_tensors(f.model, false);  // a Python model: each request's arrays apart
  for (uint64_t id = 1; id <= 3; ++id) CHECK(f.submit(id, 64 * id) == SubmitResult::kOk);
  f.core.instance_up(f.instance);
  Fixture::Seen seen = f.next_batch();
  CHECK(seen.header.n_requests == 3 && seen.header.gathered == 0);
  CHECK(seen.header.n_tensors == 0);  // no batch tensor is built for it
  for (size_t k = 0; k < seen.slots.size(); ++k) {
    CHECK(seen.slots[k].region == 7 && seen.slots[k].region_offset == 64 * (k + 1));
  }
  CHECK(f.regions.copies == 0 && f.core.assembler().in_place_inputs() == 3);
  f.core.poll();
}
