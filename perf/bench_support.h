// What the C++ microbenchmarks share: a core with one instance whose worker side the
// benchmark plays itself, on the same thread.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

// A non-blocking listening socket on 127.0.0.1:`port`; the program exits when it
// cannot have one.
inline int loopback_listener(int port, int backlog) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      listen(fd, backlog) != 0) {
    std::perror("bind/listen");
    std::exit(1);
  }
  return fd;
}

// Plays the worker for one message it took: a batch gets the add_sub result block for
// its size (`blocks`[n]: add_sub_result_block(n)). Other messages are left alone.
inline void answer_add_sub_batch(WorkerEndpoint& worker, const BatchMessage& message,
                                 const std::vector<std::string>& blocks) {
  if (message.kind != MessageKind::kBatch) return;
  const auto* header =
      reinterpret_cast<const BatchHeader*>(worker.arena().base() + message.desc_offset);
  const std::string& block = blocks[header->n_requests];
  uint64_t offset = worker.arena().alloc(block.size(), message.batch_id);
  std::memcpy(worker.arena().base() + offset, block.data(), block.size());
  worker.complete(message.batch_id, offset, block.size(), kCompletionOk);
}

}  // namespace naiad
