// Ensembles (`platform: "ensemble"`) orchestrated in the core. An ensemble has no
// instances: when one of its requests arrives (from a client, or from a worker's BLS
// call), the core hands it to the EnsembleScheduler, which queues every step whose
// inputs exist as a request of its own on that step's model (through the model's own
// Scheduler, so steps batch with direct traffic). When a step's response comes back
// the scheduler maps its outputs to ensemble tensors and queues the steps now
// complete; once nothing runs, it gives the host the ensemble's response, and the core
// answers the original request through the completion path the lanes already read
// (or routes it to the worker that called); a client's requests that end together
// share one response block (EnsembleHost::finish_ensemble). Tensors never leave the arena: a step's
// response is kept in a block of the request's own (one copy out of the batch's
// shared response block), the next step's inputs are copied once from there into its
// request block (Core's assembler), and the ensemble's outputs once into its response.
//
// Decoupled steps, as Triton 2.51's ensemble scheduler runs them: every ensemble
// tensor holds numbered values (iterations: an ensemble input has one, numbered 0; a
// step's output gets the next number of that tensor each time a response of the step
// carries it), and a step runs once per iteration for which all its inputs have a
// value, so each response of a decoupled step starts its own run of the steps that
// consume its outputs. A decoupled ensemble (EnsembleGraph::decoupled) streams: each
// time a step's response completes a set of the requested outputs of one iteration, it
// answers with them (flagged final when no step runs any more), and a request whose
// last step ends without completing one ends with the final flag alone
// ({"empty":true}, as a decoupled model's worker sends it). A step's error fails the
// request (no response after it); it ends once its running steps have. A non-decoupled
// ensemble answers once, when nothing runs, with each output's last value.
//
// The graph was checked at load, with Triton's messages, by the control plane
// (scheduling/ensemble.py), which also resolves each step's model and version to a
// core handle and the validator's spec, and sets them again whenever the served
// models change (a reload gives a new handle; an unloaded model leaves a stale one,
// and the step then fails as Triton's does for a model not ready).
//
// Threads: the core calls every method with its mutex held (core.h); the scheduler
// calls back into the core only through EnsembleHost, whose methods expect that lock
// held. No lock of its own.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/scheduler.h"
#include "core/submit_request.h"
#include "ipc/arena.h"
#include "ipc/response_block.h"

namespace naiad {

struct EnsembleGraph;  // ensemble_graph.h: the steps, their models and tensor maps

// Who gets an ensemble request's answer: the frontend, the worker instance that
// submitted it (under its tag; Core keeps it as a route, gone if the worker dies), or
// another ensemble it is a step of (tag: the step's request id).
struct EnsembleOrigin {
  static constexpr uint32_t kFrontend = 0xffffffffu;
  static constexpr uint32_t kStep = 0xfffffffeu;
  uint32_t instance = kFrontend;
  uint64_t tag = 0;
};

// How an ensemble request asks to be scheduled; its steps ask the same, as Triton's
// ensemble scheduler passes them on: priority, timeout, and the correlation id and
// START/END flags (a step on a sequence model joins the request's sequence).
struct EnsembleOptions {
  uint32_t priority = 0;
  uint64_t timeout_us = 0;
  uint64_t sequence_id = 0;
  std::string sequence_key;  // a string correlation id, or empty
  uint32_t sequence_flags = 0;
};

// What an ensemble request's steps are scheduled with (ensemble_scheduler.h).
inline EnsembleOptions ensemble_options(const SubmitOptions& options) {
  EnsembleOptions out;
  out.priority = options.priority;
  out.timeout_us = options.timeout_us;
  out.sequence_id = options.sequence_id;
  out.sequence_key = std::string(options.sequence_key);
  out.sequence_flags = options.sequence_flags;
  return out;
}

// What the scheduler asks of the core, with the core's mutex held.
class EnsembleHost {
 public:
  virtual ~EnsembleHost() = default;
  virtual Arena& ensemble_arena() = 0;
  virtual uint64_t ensemble_now() = 0;
  // An id for a step request, apart from the frontend's.
  virtual uint64_t new_step_id() = 0;
  // Lays out and queues `request` (its id from new_step_id) on `model`'s scheduler, its
  // responses routed to step_response / step_refused. An ensemble model's request
  // starts later (never inside this call), so the scheduler is never re-entered here.
  // `trace_parent`: the traced ensemble request it is a step of (a child trace), or 0.
  virtual SubmitResult queue_step(ModelHandle model, const SubmitRequest& request,
                                  uint64_t trace_parent) = 0;
  // Whether request `request_id` is traced (its steps then are child traces).
  virtual bool traced(uint64_t request_id) = 0;
  // Drops a queued step or flags a running one (Core::cancel).
  virtual void cancel_step(uint64_t step_id) = 0;
  // The ensemble request's block goes (it was the core's, as any queued request's).
  virtual void release_request(const QueuedRequest& request) = 0;
  // Answers ensemble request `request_id` of model `model` (`entries`: one response,
  // written into a new block by the host; a decoupled ensemble's responses before its
  // last lack kResponseFinal, their timings are zero, and the request stays running)
  // or fails it with `status` (entries empty: kCompletionCancelled,
  // kCompletionModelGone...).
  virtual void answer_ensemble(uint64_t model, const QueuedRequest& request,
                               const EnsembleOrigin& origin,
                               const std::vector<ResponseEntry>& entries, const uint64_t timings[4],
                               int32_t status) = 0;
  // A request's last answer, as answer_ensemble gives it, after which the request's
  // block and `blocks` (the step responses its outputs point into) go. The host may
  // hold them a while: it answers a client's successful requests that end in one
  // poll together (Core: one block, one completion), as a batch is answered.
  // `decoupled`: the ensemble streams, and its last answer follows its others in order.
  virtual void finish_ensemble(uint64_t model, const QueuedRequest& request,
                               const EnsembleOrigin& origin,
                               const std::vector<ResponseEntry>& entries, const uint64_t timings[4],
                               int32_t status, bool decoupled, std::vector<uint64_t> blocks) = 0;
};

// The core's Scheduler for an ensemble model: holds nothing (its requests go to the
// EnsembleScheduler at submit), so generic code (dispatch, drain, cancel) passes it by.
class EnsembleQueue : public Scheduler {
 public:
  EnqueueResult enqueue(const QueuedRequest&, const SubmitOptions&, uint64_t) override {
    return EnqueueResult::kOk;  // never called: Core::submit starts ensembles itself
  }
  uint64_t schedule(uint64_t, const std::vector<uint32_t>&, bool, std::vector<Placement>*,
                    std::vector<QueuedRequest>*) override {
    return 0;
  }
  bool empty() const override { return true; }
  size_t queued() const override { return 0; }
  bool preserve_ordering() const override { return false; }
  std::vector<QueuedRequest> drain() override { return {}; }
};

class EnsembleScheduler {
 public:
  explicit EnsembleScheduler(EnsembleHost& host) : host_(host) {}

  // The graph of ensemble model `model` (a ModelHandle value); replaces the earlier
  // one for requests that start from now on.
  void set_graph(uint64_t model, std::shared_ptr<const EnsembleGraph> graph);
  // The model is removed: new requests find no graph; those running finish.
  void remove(uint64_t model) { graphs_.erase(model); }

  // A request for ensemble `model` (its block laid out for the ensemble's spec) starts
  // its first steps; the block is the scheduler's from now on (kOk), else untouched.
  // kModelGone: no graph set (not loaded yet).
  SubmitResult start(uint64_t model, const QueuedRequest& request, const EnsembleOrigin& origin,
                     const EnsembleOptions& options);

  // A response of step request `step_id` (record `index` of `view`); `final`: its last.
  void step_response(uint64_t step_id, const ResponseBlockView& view, uint32_t index);
  // Step request `step_id` ended without a final response: refused at submit or
  // dispatch (`status`: Core's kRefusedQueued | CompletionStatus), failed, cancelled.
  void step_refused(uint64_t step_id, uint32_t status);

  // Ensemble request `request_id` is cancelled: its queued steps are dropped, its
  // running ones flagged; it then fails as cancelled. False when it is not running here.
  bool cancel(uint64_t request_id);
  size_t running() const { return runs_.size(); }

 private:
  // The sequence a tensor's value belongs to, as Triton's ensemble scheduler tags each
  // value (its `parameter_override_`, correlation id and flags): a step's outputs carry
  // the step request's correlation id and START/END flags, or the `sequence_id`,
  // `sequence_start`, `sequence_end` its response parameters give instead; a step takes
  // its inputs' tag (the first, where they differ), else the request's; the ensemble's
  // response gives its outputs' tag as those three response parameters. The request's
  // own inputs carry none (`set` false).
  struct SequenceTag {
    bool set = false;
    uint64_t id = 0;  // a numeric correlation id
    std::string key;  // a string one, when `string`
    bool string = false;
    uint32_t flags = 0;  // kSequenceFlagStart | kSequenceFlagEnd
    bool operator==(const SequenceTag& o) const {
      return id == o.id && key == o.key && string == o.string && flags == o.flags;
    }
  };
  struct Tensor {
    std::string datatype;
    std::string shape;    // JSON array text, "[1,16]"
    uint64_t offset = 0;  // the bytes, in the arena
    uint64_t size = 0;
    bool absent = false;  // the step's response lacked it (Triton's placeholder)
    uint64_t block = 0;   // the run's block it lives in (0: the request's own input)
    SequenceTag sequence;
  };
  // An ensemble tensor's values by iteration, and the number its next one gets.
  struct TensorValues {
    std::unordered_map<uint64_t, Tensor> by_iteration;
    uint64_t next = 0;
    // The value added, with the iteration it got.
    uint64_t add(Tensor value) {
      by_iteration[next] = std::move(value);
      return next++;
    }
  };
  using Updated = std::vector<std::pair<std::string, uint64_t>>;  // (tensor, iteration)
  struct Run {
    uint64_t model = 0;
    std::shared_ptr<const EnsembleGraph> graph;
    QueuedRequest request;
    EnsembleOrigin origin;
    EnsembleOptions options;
    uint64_t start_ns = 0;
    std::string id;                      // the client's request id, JSON string text
    std::string parameters;              // the request's parameters, a raw JSON object
    std::string trace_state;             // the client's tracestate (JSON literal), or empty
    std::vector<std::string> requested;  // requested outputs; empty: all
    std::unordered_map<std::string, TensorValues> tensors;
    std::vector<uint64_t> blocks;             // step responses kept for their tensors
    std::vector<std::vector<uint64_t>> sent;  // per step: the iterations it ran for
    std::vector<uint64_t> responded;          // a decoupled run's iterations answered
    std::vector<uint64_t> steps;              // step requests not finished
    std::string error_json;                   // {"error": ...} once failed
    int32_t error_code = 0;
    bool cancelled = false;
    bool traced = false;  // its steps are child traces (EnsembleHost::traced)
  };

  // Sends every step that `updated` makes ready (all its inputs have a value of that
  // iteration); a decoupled ensemble answers the outputs they complete; the request is
  // answered (finish) when nothing runs.
  void advance(uint64_t request_id, const Updated& updated);
  void send_step(Run& run, uint64_t request_id, size_t step, uint64_t iteration);
  void fail(Run& run, const std::string& message, int32_t code);
  void fail_raw(Run& run, std::string_view raw_message, int32_t code);
  // The iteration whose requested outputs `updated` completes (Triton's
  // CheckAndSetEnsembleOutput), or -1.
  int64_t complete_iteration(const Run& run, const Updated& updated) const;
  // The response entry of the requested outputs of `iteration` (-1: each output's last
  // value, the non-decoupled answer); false with the run failed when one is missing.
  bool output_entry(Run& run, int64_t iteration, ResponseEntry* entry, std::string* json);
  // A decoupled ensemble's response before its last (the request stays running).
  void respond(Run& run, int64_t iteration);
  // Frees a decoupled run's step responses whose values are all passed on (each step
  // that takes one has run for its iteration, each output of it has been answered),
  // so a long stream holds only the responses still in use.
  void release_spent(Run& run);
  // The last answer (`iteration`: the outputs a decoupled ensemble ends with, or -1).
  void finish(uint64_t request_id, int64_t iteration = -1);
  void forget_step(Run& run, uint64_t step_id);
  // The request's own sequence, as a tag.
  static SequenceTag request_sequence(const Run& run);
  // The tag of step `s`'s request for `iteration`: its inputs', else the request's.
  SequenceTag step_sequence(const Run& run, size_t s, uint64_t iteration) const;
  // `tag` with what a step response's parameters (a raw JSON object, or empty) say of
  // the sequence; false with `error` set (Triton's words) for a parameter of the wrong
  // type.
  static bool override_sequence(std::string_view parameters, SequenceTag* tag, std::string* error);

  EnsembleHost& host_;
  std::unordered_map<uint64_t, std::shared_ptr<const EnsembleGraph>> graphs_;
  std::unordered_map<uint64_t, Run> runs_;  // by the ensemble request's id
  struct StepRef {
    uint64_t request_id;
    uint32_t step;
    SequenceTag sequence;  // the step request's (its outputs' unless its response says)
  };
  std::unordered_map<uint64_t, StepRef> step_of_;  // step request id -> its run
};

}  // namespace naiad
