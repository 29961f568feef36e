// What the C++ microbenchmarks share: a core with one instance whose worker side the
// benchmark plays itself, on the same thread.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/core.h"
#include "ipc/response_block.h"
#include "ipc/worker_endpoint.h"

namespace naiad {

// A core (no timer thread) with one model of batch size `batch` and one instance, up.
struct OneInstanceCore {
  explicit OneInstanceCore(uint32_t batch) : core(1 << 28, nullptr, false) {
    BatcherConfig config;
    config.dynamic_batching = true;
    config.max_batch_size = batch;
    model = core.add_model(config);
    uint32_t instance = core.add_instance(model);
    InstanceEndpoint ep = core.endpoint(instance);
    worker = new WorkerEndpoint(dup(core.arena().fd()), ep.channel_offset, dup(ep.wake_fd),
                                dup(core.notify_fd()));
    core.instance_up(instance);
  }
  ~OneInstanceCore() { delete worker; }
  OneInstanceCore(const OneInstanceCore&) = delete;
  OneInstanceCore& operator=(const OneInstanceCore&) = delete;

  Core core;
  ModelHandle model;
  WorkerEndpoint* worker = nullptr;
};

// An add_sub request as the lane submits it: the worker's metadata and two FP32 [1,16]
// inputs (static bytes: the request may be kept for the program's life).
inline SubmitRequest add_sub_request() {
  static const std::string metadata =
      "{\"id\":\"\",\"inputs\":[[\"INPUT0\",\"FP32\",[1,16]],[\"INPUT1\",\"FP32\",[1,16]]],"
      "\"outputs\":[\"OUTPUT0\",\"OUTPUT1\"],\"parameters\":{}}";
  static const std::string input(16 * sizeof(float), 'x');
  SubmitRequest request;
  request.metadata = metadata;
  for (int i = 0; i < 2; ++i) {
    InputSource source;
    source.data = input.data();
    source.size = input.size();
    request.inputs.push_back(source);
  }
  return request;
}

// The response block a worker writes for `batch` add_sub requests ([1,16] FP32 OUTPUT0
// and OUTPUT1 each): what the lane benchmarks complete their requests with.
inline std::string add_sub_result_block(uint32_t batch) {
  static const std::string output(64, '\x02');
  std::vector<ResponseEntry> entries(batch);
  for (uint32_t i = 0; i < batch; ++i) {
    entries[i].request_index = i;
    entries[i].json = "{\"outputs\":[[\"OUTPUT0\",\"FP32\",[1,16]],[\"OUTPUT1\",\"FP32\",[1,16]]]}";
    entries[i].outputs = {{output.data(), 64}, {output.data(), 64}};
  }
  const uint64_t timings[4] = {1, 2, 3, 4};
  std::string block(response_block_size(entries), '\0');
  write_response_block(reinterpret_cast<uint8_t*>(&block[0]), entries, timings);
  return block;
}

}  // namespace naiad
