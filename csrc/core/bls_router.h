// The requests workers submit themselves (BLS calls, and a model's own load/unload
// as control requests): read from each instance's to_core ring, queued on their target
// model under a route (request id -> submitter instance and its tag), each response
// copied into a block of the submitter's own and sent on its ring, refusals and
// cancels likewise. Ensemble steps are routed here too (instance kEnsembleRoute):
// their responses go to the ensemble host (ensemble_host.h).
//
// Owned by Core, which it reaches as a friend (the registry, the batches in flight,
// the rings). Every method runs with Core::mutex_ held, on whichever thread is inside
// the Core call (poll: the frontend or an I/O loop; a dispatch that refuses a routed
// request: any of them or the timer thread); no lock of its own.
#pragma once

#include <cstdint>
#include <string_view>
#include <unordered_map>

#include "ipc/channel.h"
#include "ipc/response_block.h"

namespace naiad {

class Core;
struct CoreBatch;
struct CoreInstance;

class BlsRouter {
 public:
  // Where the responses of a routed request go.
  struct Route {
    uint32_t instance_id;  // the submitter, or kEnsembleRoute
    uint64_t tag;          // the worker's name for the request
  };
  // A step of an ensemble: its responses go to the core's ensemble host.
  static constexpr uint32_t kEnsembleRoute = 0xffffffffu;

  explicit BlsRouter(Core& core) : core_(core) {}

  // Ids of requests workers submit and of ensemble steps: a range of their own, from
  // 2^62, apart from the frontend's (Core::new_request_id).
  uint64_t new_id() { return next_id_++; }
  bool empty() const { return routes_.empty(); }
  bool routed(uint64_t request_id) const { return routes_.count(request_id) != 0; }
  // The route of `request_id`, or null.
  const Route* find(uint64_t request_id) const {
    auto found = routes_.find(request_id);
    return found == routes_.end() ? nullptr : &found->second;
  }
  void add(uint64_t request_id, Route route) { routes_[request_id] = route; }
  // Forgets a route, keeping its submitter's `routed` count.
  void erase(uint64_t request_id);
  // Forgets the routes of an instance whose worker died: nobody waits for them.
  void drop_instance(uint32_t instance_id);

  // Queues the requests the worker submitted on their target models.
  void take_submits(CoreInstance& instance);
  // Sends the routed requests' responses in the block to their submitters; false when
  // no request the block answers is the frontend's (nothing to deliver). `view` null:
  // the block was unreadable, and the routed requests fail.
  bool route_responses(CoreBatch& batch, const ResponseBlockView* view);
  // Tells the submitter of routed request `request_id` it failed (kRefused).
  void refuse(uint64_t request_id, uint32_t status);
  // Answers the control request `tag` of instance `instance_id` (Core::reply_control).
  bool reply_control(uint32_t instance_id, uint64_t tag, std::string_view json);

 private:
  using Routes = std::unordered_map<uint64_t, Route>;
  void erase(Routes::iterator route);
  // A worker's cancel of its request `tag` (SubmitKind::kCancel): the routed request
  // is cancelled as a client's is; a tag no longer routed is ignored.
  void cancel(uint32_t instance_id, uint64_t tag);
  // A worker's control request (SubmitKind::kControl): left for the frontend as a
  // kCompletionControl completion, or answered at once when its block is unreadable.
  void take_control(CoreInstance& instance, const SubmitMessage& message);
  // The traced request that BLS call message `message` continues the trace of
  // (trace=request.trace(): request `trace_index - 1` of batch `trace_batch`, running
  // on `instance_id`), or 0.
  uint64_t trace_parent_of(uint32_t instance_id, const SubmitMessage& message) const;

  Core& core_;
  Routes routes_;  // by request id
  uint64_t next_id_ = uint64_t{1} << 62;
};

}  // namespace naiad
