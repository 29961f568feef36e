// The frontend side of the data path: per-model request queues, batch forming, and
// the bookkeeping of batches in flight on worker instances. Everything here runs on
// the caller's thread (the frontend releases the GIL around each call); a mutex
// keeps the state consistent should several threads call in.
//
// Scheduling policy for now: when an instance is idle, a model with dynamic
// batching takes queued requests in arrival order while the batch stays within
// max_batch_size; a model without it runs one request per execution.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "arena.h"
#include "channel.h"

namespace naiad {

uint64_t monotonic_ns();

struct SubmitPart {
  const void* data;
  uint64_t size;
  uint64_t offset;  // where in the request block the part goes
};

struct Completion {
  uint64_t batch_id;
  int32_t status;
  uint32_t instance_id;
  uint64_t result_offset;
  uint64_t result_size;
  uint64_t dispatch_ns;
  std::vector<uint64_t> request_ids;
};

struct InstanceEndpoint {
  uint64_t channel_offset;
  int wake_fd;  // the worker blocks on it; the frontend signals it
};

class Core {
 public:
  explicit Core(uint64_t arena_bytes);
  ~Core();
  Core(const Core&) = delete;
  Core& operator=(const Core&) = delete;

  Arena& arena() { return arena_; }
  // Workers signal this eventfd (non-blocking) when they post completions.
  int notify_fd() const { return notify_fd_; }

  uint32_t add_model(uint32_t max_batch_size, bool dynamic_batching);
  // Creates an instance's channel; it takes batches once instance_up() is called.
  uint32_t add_instance(uint32_t model_id);
  InstanceEndpoint endpoint(uint32_t instance_id) const;

  // Copies the parts into a new request block (the one copy of the inputs) and
  // queues it; it is dispatched by the next flush() or poll(). Returns false when
  // the arena has no room for `block_size` bytes.
  bool submit(uint32_t model_id, uint64_t request_id, uint64_t block_size,
              const std::vector<SubmitPart>& parts, uint32_t batch_size);

  // Dispatches queued requests to idle instances. The frontend calls it once per
  // event-loop turn, after all the requests that turn read were submitted: requests
  // that arrive together leave together, with one wake-up of the worker instead of
  // one per request (on a shared core each wake-up preempts the frontend).
  void flush();

  // Drains completions from every instance, frees what they held, dispatches
  // queued requests to instances that became idle, and returns the completions.
  std::vector<Completion> poll();

  // The instance's process is gone: its batches in flight complete with
  // kCompletionInstanceDied and what they held in the arena is freed.
  std::vector<Completion> instance_down(uint32_t instance_id);
  // A (re)started worker is ready: reset its channel and let it take batches.
  void instance_up(uint32_t instance_id);
  // Asks the worker to finalize and exit after the batch it is running.
  void stop_instance(uint32_t instance_id);

  // Requests queued and not yet dispatched, for a model.
  size_t queued(uint32_t model_id);
  // Batches dispatched and not yet completed, over all instances.
  size_t in_flight();

 private:
  struct Request {
    uint64_t id;
    uint64_t offset;
    uint64_t size;
    uint32_t batch_size;
  };
  struct Batch {
    uint64_t id;
    uint32_t instance_id;
    uint64_t desc_offset;
    uint64_t dispatch_ns;
    std::vector<Request> requests;
  };
  struct Instance {
    uint32_t model_id;
    uint64_t channel_offset;
    int wake_fd;
    bool up = false;       // takes new batches
    bool running = false;  // its process is alive (it may be stopping)
    bool busy = false;
  };
  struct Model {
    uint32_t max_batch_size;
    bool dynamic_batching;
    std::deque<Request> queue;
    std::vector<uint32_t> instances;
  };

  Channel* channel(const Instance& instance) { return arena_.at<Channel>(instance.channel_offset); }
  void dispatch_locked(uint32_t model_id);
  Completion finish_locked(Batch& batch, int32_t status, uint64_t result_offset,
                           uint64_t result_size);

  std::mutex mutex_;
  Arena arena_;
  int notify_fd_ = -1;
  uint64_t next_batch_id_ = 1;
  std::vector<Model> models_;
  std::vector<Instance> instances_;
  std::unordered_map<uint64_t, Batch> in_flight_;
};

}  // namespace naiad
