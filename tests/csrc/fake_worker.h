// What the core's C++ tests share: a worker played by a thread, and short ways to
// submit, configure and collect.
#pragma once

#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "core/core.h"
#include "ipc/ipc_schema.h"
#include "ipc/worker_endpoint.h"

namespace naiad_testing {

using namespace naiad;

// A worker played by a thread: answers each batch with a result block holding the
// request ids, as a real worker would write its outputs.
class FakeWorker {
 public:
  FakeWorker(Core& core, uint32_t instance_id) {
    InstanceEndpoint ep = core.endpoint(instance_id);
    endpoint_ = new WorkerEndpoint(dup(core.arena().fd()), ep.channel_offset, dup(ep.wake_fd),
                                   dup(core.notify_fd()));
    thread_ = std::thread([this] { run(); });
  }
  ~FakeWorker() {
    thread_.join();
    delete endpoint_;
  }
  std::atomic<int> batches{0};
  std::atomic<int> max_batch{0};

 private:
  void run() {
    for (;;) {
      BatchMessage message = endpoint_->next();
      if (message.kind == MessageKind::kStop) return;
      auto* records =
          endpoint_->arena().at<BatchRequest>(message.desc_offset + batch_requests_offset());
      uint64_t size = sizeof(uint64_t) * message.n_requests;
      uint64_t result = endpoint_->arena().alloc(size, message.batch_id);
      auto* ids = endpoint_->arena().at<uint64_t>(result);
      for (uint32_t i = 0; i < message.n_requests; ++i) ids[i] = records[i].request_id;
      batches++;
      if (static_cast<int>(message.n_requests) > max_batch) max_batch = message.n_requests;
      endpoint_->complete(message.batch_id, result, size, kCompletionOk);
    }
  }
  WorkerEndpoint* endpoint_;
  std::thread thread_;
};

// Polls until `count` requests completed or a deadline passes; frees result blocks.
inline std::vector<Completion> collect(Core& core, size_t count) {
  std::vector<Completion> all;
  size_t requests = 0;
  for (int spin = 0; spin < 20000 && requests < count; ++spin) {
    pollfd p{core.notify_fd(), POLLIN, 0};
    ::poll(&p, 1, 1);
    for (Completion& c : core.poll()) {
      requests += c.request_ids.size();
      if (c.result_offset != 0) core.arena().free(c.result_offset);
      all.push_back(std::move(c));
    }
  }
  return all;
}

inline bool submit_bytes(Core& core, ModelHandle model, uint64_t id, const std::string& payload,
                         uint32_t batch_size = 1) {
  SubmitRequest request;
  request.request_id = id;
  request.metadata = "{}";
  InputSource input;
  input.data = payload.data();
  input.size = payload.size();
  request.inputs.push_back(input);
  request.options.batch_size = batch_size;
  return core.submit(model, request) == SubmitResult::kOk;
}

inline BatcherConfig batching(uint32_t max_batch_size, bool dynamic) {
  BatcherConfig config;
  config.max_batch_size = max_batch_size;
  config.dynamic_batching = dynamic;
  return config;
}

}  // namespace naiad_testing
