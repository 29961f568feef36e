// The frontend side of the data path: per-model queues under Triton's dynamic
// batching policy (dynamic_batcher.h), batches in flight on worker instances, and
// completions back to the frontend.
//
// Who calls what: the frontend's event loop submits requests, then calls flush()
// once per loop turn (requests that arrive together leave together, with one wake-up
// of the worker) and poll() when the notify eventfd fires. Those calls dispatch
// inline, on the caller's thread with the GIL released. A batch the policy holds back
// (queue delay, queue timeouts) is dispatched by the core's timer thread at its
// deadline, precisely, which an event loop's millisecond timers could not do.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "arena.h"
#include "batch_assembler.h"
#include "channel.h"
#include "dynamic_batcher.h"
#include "input_regions.h"
#include "response_block.h"
#include "submit_request.h"

namespace naiad {

uint64_t monotonic_ns();
using Clock = std::function<uint64_t()>;

// Completion statuses beyond channel.h's, for requests that never ran.
constexpr int32_t kCompletionTimedOut = 3;  // queue timeout under REJECT

struct Completion {
  uint64_t batch_id;  // 0 for requests that never ran
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
  // `clock` is injectable for tests; `timer_thread` false leaves held batches to
  // explicit tick() calls (deterministic tests).
  explicit Core(uint64_t arena_bytes, Clock clock = nullptr, bool timer_thread = true);
  ~Core();
  Core(const Core&) = delete;
  Core& operator=(const Core&) = delete;

  Arena& arena() { return arena_; }
  BatchAssembler& assembler() { return assembler_; }
  // Workers and the timer thread signal this eventfd (non-blocking) when they leave
  // something for poll().
  int notify_fd() const { return notify_fd_; }

  uint32_t add_model(const BatcherConfig& config);
  // Creates an instance's channel; it takes batches once instance_up() is called.
  uint32_t add_instance(uint32_t model_id);
  InstanceEndpoint endpoint(uint32_t instance_id) const;

  // Lays the request out in the arena (its metadata and the one copy of its inputs,
  // ipc_schema.h) and queues it; it is dispatched by the next flush() or poll().
  SubmitResult submit(uint32_t model_id, const SubmitRequest& request);
  // Where region inputs (kSystemShm, kCudaIpc) are found; null: none are served.
  // Set before serving; the registry must outlive the core.
  void set_input_regions(InputRegions* regions) { regions_ = regions; }

  // Dispatches what the policy lets go to idle instances. `arrivals_possible` is the
  // frontend's word on whether any client could still send a request now (see
  // DynamicBatcher::next_batch); poll() takes it too.
  void flush(bool arrivals_possible = true);
  // Runs the policy as the timer thread would at this moment (tests without it).
  void tick();

  // Returns what finished since the last call: completed batches (their input
  // blocks already freed; the caller frees result blocks) and requests rejected in
  // the queue. Dispatches to instances that became idle.
  std::vector<Completion> poll(bool arrivals_possible = true);

  // The instance's process is gone: its batches in flight complete with
  // kCompletionInstanceDied and what they held in the arena is freed.
  std::vector<Completion> instance_down(uint32_t instance_id);
  // A (re)started worker is ready: reset its channel and let it take batches.
  void instance_up(uint32_t instance_id);
  // Asks the worker to finalize and exit after the batch it is running.
  void stop_instance(uint32_t instance_id);

  size_t queued(uint32_t model_id);
  size_t in_flight();

 private:
  struct Batch {
    uint64_t id;
    uint32_t model_id;
    uint32_t instance_id;
    uint64_t desc_offset;
    uint64_t dispatch_ns;
    std::vector<QueuedRequest> requests;
    std::vector<bool> answered;  // a final response was posted for request i
  };
  struct Instance {
    uint32_t model_id;
    uint64_t channel_offset;
    int wake_fd;
    bool up = false;       // takes new batches
    bool running = false;  // its process is alive (it may be stopping)
    bool busy = false;
    // Messages for the worker that found its ring full (responses to its own
    // requests): sent first in the next poll(); nothing is dropped.
    std::deque<BatchMessage> backlog;
  };
  // Where the responses of a request a worker submitted (BLS) go.
  struct Route {
    uint32_t instance_id;
    uint64_t tag;  // the worker's name for the request
  };
  struct Model {
    std::unique_ptr<DynamicBatcher> batcher;
    std::vector<uint32_t> instances;
    uint64_t deadline_ns = 0;  // when the held batch or a queue timeout is due
    // preserve_ordering: batch ids in dispatch order, and completions waiting for
    // an earlier batch to finish.
    std::vector<uint64_t> order;
    struct Held {
      std::vector<Completion> completions;
      bool over = false;  // the batch is done: nothing more comes for it
    };
    std::unordered_map<uint64_t, Held> held;
  };

  Channel* channel(const Instance& instance) { return arena_.at<Channel>(instance.channel_offset); }
  // Dispatches for one model; returns true if it left anything for poll().
  bool dispatch_locked(uint32_t model_id, uint64_t now, bool arrivals_possible = true);
  bool dispatch_all_locked(bool arrivals_possible);
  // Dispatches the models whose held batch or queue timeout is due at `now`.
  bool dispatch_due_locked(uint64_t now);
  // A message a worker posted (responses, batch done) for one of its batches.
  void take_message_locked(uint32_t instance_id, const CompletionMessage& message);
  // Queues the requests the worker submitted (BLS) on their target models.
  void take_submits_locked(uint32_t instance_id);
  // Sends the routed requests' responses in the block to their submitters; false when
  // no request the block answers is the frontend's (nothing to deliver).
  bool route_responses_locked(Batch& batch, const ResponseBlockView* view);
  // Tells the submitter of routed request `request_id` it failed (kRefused).
  void refuse_routed_locked(uint64_t request_id, uint32_t status);
  void send_to_worker_locked(uint32_t instance_id, const BatchMessage& message);
  // The batch is over: its inputs and descriptor go, and its requests that got no
  // final response fail with `status` (kCompletionWorkerFailed when it ran).
  void finish_locked(Batch& batch, int32_t status);
  void deliver_locked(uint32_t model_id, uint64_t batch_id, Completion* done, bool batch_over);
  void reject_locked(std::vector<QueuedRequest>& rejected, int32_t status);
  void notify_frontend();
  void timer_loop();

  Clock clock_;
  std::mutex mutex_;
  std::condition_variable timer_cv_;
  bool stopping_ = false;
  uint64_t timer_deadline_ = 0;  // what the timer thread sleeps towards, 0 = none
  std::thread timer_;
  Arena arena_;
  BatchAssembler assembler_;  // request and batch layout in the arena
  InputRegions* regions_ = nullptr;
  int notify_fd_ = -1;
  uint64_t next_batch_id_ = 1;
  std::vector<Model> models_;
  std::vector<Instance> instances_;
  std::unordered_map<uint64_t, Batch> in_flight_;
  std::unordered_map<uint64_t, Route> routes_;  // by request id
  // Ids of requests workers submit: a range of their own, apart from the frontend's.
  uint64_t next_routed_id_ = uint64_t{1} << 62;
  std::vector<Completion> done_;  // left for poll() by dispatch and the timer thread
};

}  // namespace naiad
