// The core's side of ensembles (ensemble_scheduler.h): the EnsembleHost the
// EnsembleScheduler calls back into, the ensemble requests waiting to start, and a
// client's successful ensemble answers gathered into one response block per poll.
//
// Owned by Core, which it reaches as a friend (its registry, routes, completions and
// rings). Every method runs with Core::mutex_ held, on whichever thread is inside the
// Core call (an I/O loop, the frontend, the timer thread); no lock of its own.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/ensemble_scheduler.h"
#include "core/scheduler.h"
#include "core/submit_request.h"
#include "ipc/response_block.h"

namespace naiad {

class Core;

class CoreEnsembleHost final : private EnsembleHost {
 public:
  explicit CoreEnsembleHost(Core& core) : core_(core), scheduler_(*this) {}

  void set_graph(uint64_t model, std::shared_ptr<const EnsembleGraph> graph) {
    scheduler_.set_graph(model, std::move(graph));
  }
  void remove(uint64_t model) { scheduler_.remove(model); }
  // An ensemble request (a client's, a worker's, or a step that is an ensemble) waits
  // for start_waiting, so that the scheduler is never re-entered by a start.
  void queue(uint64_t model, const QueuedRequest& request, const EnsembleOrigin& origin,
             EnsembleOptions options) {
    starts_.push_back(Start{model, request, origin, std::move(options)});
  }
  bool waiting() const { return !starts_.empty(); }
  // Starts the requests queued since the last call (from the top of a dispatch). True
  // if it left completions for poll().
  bool start_waiting();
  // A step's response or refusal (Core's routes with instance kEnsembleRoute).
  void step_response(uint64_t step_id, const ResponseBlockView& view, uint32_t index) {
    scheduler_.step_response(step_id, view, index);
  }
  void step_refused(uint64_t step_id, uint32_t status) { scheduler_.step_refused(step_id, status); }
  // An ensemble request waiting to start or running its steps is cancelled; false
  // when `request_id` is no ensemble request.
  bool cancel(uint64_t request_id);
  // Writes the answers gathered since the completions were last handed out, before
  // poll() or instance_down() hands them out.
  void write_gathered();

 private:
  // --- EnsembleHost ---
  Arena& ensemble_arena() override;
  uint64_t ensemble_now() override;
  uint64_t new_step_id() override;
  SubmitResult queue_step(ModelHandle model, const SubmitRequest& request,
                          uint64_t trace_parent) override;
  bool traced(uint64_t request_id) override;
  void cancel_step(uint64_t step_id) override;
  void release_request(const QueuedRequest& request) override;
  void answer_ensemble(uint64_t model, const QueuedRequest& request, const EnsembleOrigin& origin,
                       const std::vector<ResponseEntry>& entries, const uint64_t timings[4],
                       int32_t status) override;
  void finish_ensemble(uint64_t model, const QueuedRequest& request, const EnsembleOrigin& origin,
                       const std::vector<ResponseEntry>& entries, const uint64_t timings[4],
                       int32_t status, bool decoupled, std::vector<uint64_t> blocks) override;

  // What answering an ensemble request's responses tells its trace (a step's or a BLS
  // call's child trace keeps its outputs, and ends with the last).
  void answer_traces(const QueuedRequest& request, const std::vector<ResponseEntry>& entries,
                     bool final);
  // Statistics for an ensemble request answered to a worker or to an outer ensemble
  // (kCompletionRouted, kNoInstance): the ensemble counts it as a client's.
  void count(uint64_t model, const QueuedRequest& request, const uint64_t timings[4]);

  Core& core_;
  EnsembleScheduler scheduler_;
  struct Start {
    uint64_t model;
    QueuedRequest request;
    EnsembleOrigin origin;
    EnsembleOptions options;
  };
  std::vector<Start> starts_;
  // A client's ensemble requests that succeeded since the completions were last handed
  // out, by ensemble model: answered together, one response block and one completion
  // (its place in Core's done_ kept from the first), as a batch of a model with
  // instances is, so the frontend reads one block for them rather than one each. Each
  // response's outputs point into the step responses and request blocks kept here until
  // the block is written; the block ends with each request's start
  // (kResponseStartedEach: their queue times differ) and its compute time is their mean.
  struct Gathered {
    size_t done_index = 0;
    std::vector<ResponseEntry> entries;
    std::deque<std::string> jsons;  // the entries' JSON (a deque: views stay valid)
    std::vector<uint64_t> started;
    uint64_t compute_ns = 0;
    std::vector<QueuedRequest> requests;
    std::vector<uint64_t> blocks;
  };
  std::unordered_map<uint64_t, Gathered> gathered_;
};

}  // namespace naiad
