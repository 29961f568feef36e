// What the C++ microbenchmarks share: a core with one instance whose worker side the
// benchmark plays itself, on the same thread.
#pragma once

#include <unistd.h>

#include <cstdint>

#include "core.h"
#include "worker_endpoint.h"

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

}  // namespace naiad
