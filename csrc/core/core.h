// The frontend side of the data path: a registry of models, each with its scheduler
// (scheduler.h; Triton's dynamic batcher by default) and its worker instances, the
// batches in flight on those instances, and completions back to the frontend.
//
// Who calls what: the frontend's event loop submits requests, then calls flush()
// once per loop turn (requests that arrive together leave together, with one wake-up
// of the worker) and poll() when the notify eventfd fires. Those calls dispatch
// inline, on the caller's thread with the GIL released. A batch the policy holds back
// (queue delay, queue timeouts) is dispatched by the core's timer thread at its
// deadline, precisely, which an event loop's millisecond timers could not do. That
// thread sleeps on a timerfd which dispatch arms to the earliest deadline and disarms
// when the batch left before it: moving the deadline is a syscall, not a wake-up of the
// thread. Programming a near timer is still costly (a VM exit in a virtual machine:
// about 4 us to arm and 4 to disarm), so an I/O loop that is about to poll for the
// arrivals a held batch waits for defers it (defer_timer / settle_timer): when they
// come during its turn, no timer was set at all.
//
// Rate limiting (rate_limiter.h, tritonserver's --rate-limit=execution_count): one
// RateLimiter for every model, guarded by mutex_ like the schedulers. A batch the
// scheduler formed for an idle instance is staged there (the instance counts as busy,
// the batch is not yet described in the arena) until the limiter allocates the
// instance's resources; it is then sent. The resources come back when the instance
// has no batch left (its batch ended, failed, or its worker died), and staged batches
// are tried again. Batches nested in a BLS wait run under the resources the instance
// already holds. Off (the default), none of this runs: one flag on the dispatch path.
//
// Locking: one mutex (mutex_) guards the registry, the schedulers, the rate limiter,
// the instances and the batches in flight; every public method takes it, so any thread
// may call any method. Today the frontend calls them from its event-loop thread, the
// timer thread dispatches held batches, and the C++ tests and perf/core_threads_bench
// call them from several submitting threads, as N I/O threads will. Work that needs
// no shared state (copying a request into its rows) happens before the lock is taken,
// under the assembler's own lock for the row reservation (batch_assembler.h). A
// submitting thread's loop turn (Turn) takes mutex_ about twice, whatever it submits:
// its submits are staged and queued under its flush's acquisition, and poll() takes
// every completion the workers posted under one. Lock order: mutex_, then the
// assembler's, then the arena's (process-shared).
//
// Models come and go while serving: add_model() returns a ModelHandle, and after
// remove_model() that handle fails cleanly (kModelGone) even when a new model takes
// its slot.
//
// Core is the façade: it owns mutex_, the registry, submit, dispatch and the timer,
// the rings and the instances' lifecycle, and hands three jobs to parts of its own,
// each called with mutex_ held: BlsRouter (bls_router.h: what workers submit, and
// routing responses back to them), CoreEnsembleHost (ensemble_host.h: ensembles) and
// TraceTable (trace_table.h: traced requests and their child traces).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "codec/trace_tensor.h"
#include "core/batch_assembler.h"
#include "core/bls_router.h"
#include "core/dynamic_batcher.h"
#include "core/ensemble_host.h"
#include "core/ensemble_scheduler.h"
#include "core/input_regions.h"
#include "core/model_slots.h"
#include "core/rate_limiter.h"
#include "core/scheduler.h"
#include "core/submit_request.h"
#include "core/trace_context.h"
#include "core/trace_table.h"
#include "ipc/arena.h"
#include "ipc/channel.h"
#include "ipc/response_block.h"

namespace naiad {

uint64_t monotonic_ns();
using Clock = std::function<uint64_t()>;

// Completion statuses beyond channel.h's, for requests that never ran.
constexpr int32_t kCompletionTimedOut = 3;   // queue timeout under REJECT
constexpr int32_t kCompletionModelGone = 4;  // queued when its model was removed
constexpr int32_t kCompletionCancelled = 6;  // cancelled (Core::cancel) before it ran
// Its sequence waited in the sequence batcher's backlog past a request's `timeout`.
constexpr int32_t kCompletionSequenceTimedOut = 8;  // 7 is channel.h's kCompletionArenaFull

// What Core::cancel found.
enum class CancelResult : int32_t {
  kUnknown = 0,  // not queued nor running: finished, or never submitted
  kDropped = 1,  // was queued: removed, its completion (kCompletionCancelled) left for poll()
  kFlagged = 2,  // is running: its block is flagged (request_cancelled) for the worker
};

// Statistics only, for the frontend: requests workers submitted (BLS, ensemble steps)
// that got their final response from instance `instance_id`. Nothing to answer or
// free; `request_ids` carries kRoutedStatsSize numbers (RoutedStats order). A worker's
// request to an ensemble, answered by the core: `instance_id` is kNoInstance and
// `batch_id` the ensemble's ModelHandle value.
constexpr int32_t kCompletionRouted = 5;
enum RoutedStats : uint32_t {
  kRoutedCount = 0,           // requests that succeeded
  kRoutedRows = 1,            // their batch items
  kRoutedQueueNs = 2,         // summed time from queued to dispatched
  kRoutedRequestNs = 3,       // summed time from queued to their final response
  kRoutedComputeInputNs = 4,  // the batch's worker timings (ResponseHeader)
  kRoutedComputeInferNs = 5,
  kRoutedComputeOutputNs = 6,
  kRoutedWholeBatch = 7,  // 1: every request of the batch was routed (an execution)
  // Requests whose final response was an error (the called model failed them), their
  // batch items and summed time from queued to that response: the model's failures.
  kRoutedFailed = 8,
  kRoutedFailedRows = 9,
  kRoutedFailedNs = 10,
  kRoutedStatsSize = 11,
};

// Statistics only, for the frontend: requests workers submitted (BLS calls) that their
// called model refused from its queue (a queue timeout, a cancellation, a batch that
// could not start). `instance_id` is one of that model's instances (the frontend's key
// to the model); `request_ids` carries kRefusedStatsSize numbers (RefusedStats order).
// The submitter gets its refusal as before (kRefused).
constexpr int32_t kCompletionRoutedRefused = 10;
enum RefusedStats : uint32_t {
  kRefusedStatus = 0,  // the completion status it was refused with (kCompletionTimedOut...)
  kRefusedCount = 1,
  kRefusedNs = 2,  // summed time from queued to refused
  kRefusedStatsSize = 3,
};

constexpr uint32_t kNoInstance = 0xffffffffu;  // a Completion's instance_id: none ran it

// A worker's model-control request (channel.h SubmitKind::kControl), for the frontend:
// `batch_id` is the worker's tag, `instance_id` its instance, `result_offset` /
// `result_size` its control block (ipc_schema.h ControlHeader), the frontend's to read
// and free; it answers with Core::reply_control.
constexpr int32_t kCompletionControl = 9;

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

// A batch on an instance, from dispatch until its last final response.
struct CoreBatch {
  uint64_t id;
  ModelHandle model;
  uint32_t instance_id;
  uint64_t desc_offset;
  uint64_t dispatch_ns;
  std::vector<QueuedRequest> requests;
  std::vector<bool> answered;  // a final response was posted for request i
  // The worker ended the batch (its instance is free) but kept requests open
  // (kPostKeepOpen): the batch lives on until each request got its final response.
  bool ended = false;
  // Every request is a worker's or an ensemble step (BlsRouter): a block posted after
  // their routes went (a decoupled batch's end) is nobody's, not the frontend's.
  bool routed = false;
};

// A model instance: its channel, its worker's state, the batches on it.
struct CoreInstance {
  uint32_t id;
  ModelHandle model;  // stale once the model is removed: the instance is stopping
  uint64_t channel_offset;
  int wake_fd;
  bool up = false;       // takes new batches
  bool running = false;  // a worker process may use the channel (it may be stopping)
  // Batches on it: one, or more while its worker waits for responses to its own
  // requests (BLS, ensemble steps) and takes batches nested in that wait
  // (takes_batch_locked), so a model that calls itself, or a caller whose only
  // instance is busy, cannot deadlock.
  uint32_t busy = 0;
  uint32_t routed = 0;  // its own requests (BlsRouter) not finished yet
  // Rate limiting: a batch formed for it that waits for its resources (rate_limiter_
  // has it staged; `busy` counts it, so no scheduler offers the instance again).
  bool staged = false;
  std::vector<QueuedRequest> staged_requests;
  // Messages for the worker that found its ring full (responses to its own
  // requests): sent first in the next poll(); nothing is dropped.
  std::deque<BatchMessage> backlog;
};

// The façade over its parts (BlsRouter, CoreEnsembleHost, TraceTable: see above).
class Core {
 public:
  // `clock` is injectable for tests; `timer_thread` false leaves held batches to
  // explicit tick() calls (deterministic tests).
  explicit Core(uint64_t arena_bytes, Clock clock = nullptr, bool timer_thread = true);
  ~Core();
  Core(const Core&) = delete;
  Core& operator=(const Core&) = delete;

  // Any thread, no lock: the arena is fixed for the core's life.
  Arena& arena() { return arena_; }
  BatchAssembler& assembler() { return assembler_; }
  // Outputs of the response blocks workers posted: written in place by the model
  // (kResponseOutputsInPlace) or copied in from its own buffers (statistics).
  uint64_t outputs_in_place() const { return outputs_in_place_.load(std::memory_order_relaxed); }
  uint64_t outputs_copied() const { return outputs_copied_.load(std::memory_order_relaxed); }
  // Workers and the timer thread signal this eventfd (non-blocking) when they leave
  // something for poll(). Any thread, no lock: fixed for the core's life.
  int notify_fd() const { return notify_fd_; }
  // Request ids, unique across every entry point (the fast lane, the general path).
  // Any thread, no lock. They stay below 2^62: requests workers submit (BLS) take
  // ids from 2^62 up (BlsRouter::new_id), so the two never meet. `owner` (1 to
  // kMaxOwner; 0: none) is the I/O loop whose connection sent it (io_group.h), kept in
  // bits 56-61 so that whichever thread polls a completion knows where each of its
  // requests is answered without a shared table; the count below stays dense.
  static constexpr uint32_t kMaxOwner = 63;
  uint64_t new_request_id(uint32_t owner = 0) {
    return (uint64_t(owner) << kOwnerShift) |
           next_request_id_.fetch_add(1, std::memory_order_relaxed);
  }
  // The owner new_request_id tagged `request_id` with; 0 for a worker's (BLS) request.
  static uint32_t request_owner(uint64_t request_id) {
    if (request_id >> 62) return 0;
    return uint32_t(request_id >> kOwnerShift) & kMaxOwner;
  }
  static constexpr int kOwnerShift = 56;

  // --- the registry (frontend thread: model load and unload) ---
  // A model scheduled by `scheduler` (a sequence batcher, an ensemble, ...).
  ModelHandle add_model(std::unique_ptr<Scheduler> scheduler);
  // A model under Triton's dynamic batching policy (DynamicBatchScheduler).
  ModelHandle add_model(const BatcherConfig& config);
  // False: the model's workers read each request's inputs apart (the Python backend),
  // never the batch-major tensors, so inputs in client regions are read in place in
  // batches of any size (batch_assembler.h). Default true (framework backends).
  void set_batch_tensors(ModelHandle model, bool batch_tensors);
  // An ensemble (ensemble_scheduler.h): no instances; its requests, from clients or
  // workers, are orchestrated by the core's EnsembleScheduler once its graph is set.
  // Until then they fail as for a removed model.
  ModelHandle add_ensemble();
  // The ensemble's graph, its steps resolved to handles and specs; set again when the
  // served models change. False: the handle is stale or not an ensemble.
  bool set_ensemble_graph(ModelHandle model, std::shared_ptr<const EnsembleGraph> graph);
  // Removes the model: from now on its handle's submits return kModelGone. Its
  // queued requests complete with kCompletionModelGone, left for poll(). Its batches
  // in flight still complete through poll() (ordering is kept only among those
  // already finished). Each instance is asked to stop after the batch it runs and is
  // freed (channel, eventfd) once no worker process can use it: at once if none was
  // started on it (instance_starting()), else at its instance_down(). False: the
  // handle was already stale.
  bool remove_model(ModelHandle model);
  // Sets --rate-limit and --rate-limit-resource; before any instance is added
  // (std::logic_error after).
  void configure_rate_limiter(const RateLimiterConfig& config);
  // Creates an instance's channel; it takes batches once instance_up() is called.
  // Throws std::out_of_range for a stale handle, and std::invalid_argument with
  // Triton's message when rate limiting is on and `limits` cannot be met (its
  // resources exceed what --rate-limit-resource gives, or a name is both global and
  // per device); `limits` is ignored when rate limiting is off.
  uint32_t add_instance(ModelHandle model, const InstanceRateLimit& limits = {});
  // Throws std::out_of_range for an instance that was freed.
  InstanceEndpoint endpoint(uint32_t instance_id) const;

  // --- the data path (frontend thread) ---
  // Lays the request out in the arena (its metadata and the one copy of its inputs,
  // ipc_schema.h) and queues it; it is dispatched by the next flush() or poll().
  // The copy happens on the caller's thread before the lock is taken. In a Turn of the
  // calling thread, a request to a model whose scheduler always accepts is staged in
  // the turn instead, and queued by that thread's next call that takes mutex_.
  SubmitResult submit(ModelHandle model, const SubmitRequest& request);
  // submit() in two steps, for a framer that receives a request's tensors straight into
  // the arena (http_io.h): place() lays the block out with room for its inline inputs,
  // not copied (their `data` is not read), and returns its offset (0: no room); the
  // caller fills each input at its slot's offset (InputSlot::offset), then queue_placed()
  // queues it as submit() would (nothing else touches the block meanwhile: its rows are
  // the caller's alone; refused, the block stays the caller's), or release_placed()
  // gives it back unqueued. Not for system-shm
  // or CUDA inputs, nor traced or sequence requests.
  uint64_t place(ModelHandle model, const SubmitRequest& request);
  SubmitResult queue_placed(ModelHandle model, uint64_t request_id, const SubmitOptions& options,
                            uint64_t offset);
  void release_placed(uint64_t offset) { assembler_.release(offset); }

  // One loop turn of a submitting thread (an I/O thread), a scope on its stack. While
  // it is open, that thread's submits that cannot be refused once placed (the model's
  // Scheduler::always_accepts, not traced, not to an ensemble) take no lock: they are
  // staged here, and the thread's next call into the core that takes mutex_ (flush,
  // poll, cancel, another submit's lookup...) or the turn's end queues them all under
  // that one acquisition, in submit order, with the time the first of them was
  // submitted (they arrived together: one clock read per group, not per request). So
  // the thread itself always finds its submits queued, and N threads submitting take
  // mutex_ about twice per turn (flush, poll; and once per model a turn submits to,
  // to look it up) rather than once per request. Another
  // thread sees a staged request as not queued yet (pending_requests, cancel, a
  // dispatch): as if it had been submitted at the end of the turn. A model removed
  // meanwhile fails its staged requests with kCompletionModelGone, left for poll(), as
  // it fails those it had queued. Turns nest; each must end before its core.
  class Turn {
   public:
    explicit Turn(Core& core);
    ~Turn();
    Turn(const Turn&) = delete;
    Turn& operator=(const Turn&) = delete;

   private:
    friend class Core;
    struct Staged {
      ModelHandle model;
      QueuedRequest request;
      SubmitOptions options;  // sequence_key cleared: only the plain numbers are read
    };
    enum class Lookup { kStaged, kLocked, kGone };
    Core& core_;
    Turn* outer_;  // the thread's turn this one nests in, null when none
    std::vector<Staged> staged_;
    uint64_t now_ = 0;  // the core's clock at the first of staged_ (their queue time)
    // The models this turn submitted to, looked up once under mutex_: a stale handle
    // stays stale (generations never repeat), and a scheduler's always_accepts is
    // fixed for its model's life.
    std::vector<std::pair<uint64_t, Lookup>> models_;
  };
  // Where region inputs (kSystemShm, kCudaIpc) are found; null: none are served.
  // Set before serving; the registry must outlive the core.
  void set_input_regions(InputRegions* regions) {
    regions_ = regions;
    assembler_.set_regions(regions);
  }

  // Dispatches what the schedulers let go to idle instances. `arrivals_possible` is
  // the frontend's word on whether any client could still send a request now (see
  // Scheduler::schedule); poll() takes it too.
  void flush(bool arrivals_possible = true);
  // Runs the policy as the timer thread would at this moment (tests without it).
  // Any thread.
  void tick();
  // The frontend's I/O loop, around one turn (http_io.cc): from defer_timer until
  // settle_timer the timerfd is left as it is, and settle_timer dispatches what is due
  // by then and sets it to the earliest deadline left (none, when the held batches
  // left meanwhile). Dispatch by other threads meanwhile is deferred the same way: the
  // turn is short.
  void defer_timer();
  void settle_timer();
  // What the timer thread would dispatch now, dispatched on the caller's thread: the
  // I/O loop calls it between the events and writes of a deferred turn, so that a
  // deadline that passes while it is busy costs no timer interrupt, no wake-up of the
  // timer thread and no preemption of the loop (about 30 us of a core in a virtual
  // machine). Nothing is due, the common case, costs one atomic load (and a clock read
  // while a batch is held). Any thread; a no-op without the timer thread.
  void dispatch_due();
  // The earliest deadline of a batch that the policy holds back although an instance
  // is idle (queue delay), 0 when none: what arrivals could release now.
  uint64_t held_for_idle();
  // The core's clock (monotonic ns, or the tests' own).
  uint64_t now() const { return clock_(); }

  // Returns what finished since the last call: completed batches (their input
  // blocks already freed; the caller frees result blocks) and requests that never
  // ran (queue timeouts, removed models). Dispatches to instances that became idle.
  // With `left_unowned` (an I/O loop that hands Python nothing itself, io_group.h), only
  // the completions whose requests all have an owner loop (new_request_id) are taken:
  // the others stay, in order, for the poll of the loop that hands them to Python, so
  // that they reach Python in the order they were done (a decoupled request's
  // responses); *left_unowned says whether any stayed (that loop must then be woken:
  // the notify eventfd was drained here).
  std::vector<Completion> poll(bool arrivals_possible = true, bool* left_unowned = nullptr);

  // --- worker processes (frontend thread: process start, readiness, exit) ---
  // A worker process is being started on the instance's channel: the core keeps the
  // channel and eventfd for it until instance_down() says it is gone.
  void instance_starting(uint32_t instance_id);
  // The instance's process is gone: its batches in flight complete with
  // kCompletionInstanceDied and what they held in the arena is freed. An instance
  // of a removed model is freed. An unknown id returns nothing.
  std::vector<Completion> instance_down(uint32_t instance_id);
  // A (re)started worker is ready: let it take batches. Ignored for an instance of a
  // removed model (it is being stopped) or an unknown id.
  void instance_up(uint32_t instance_id);
  // Asks the worker to finalize and exit after the batch it is running.
  void stop_instance(uint32_t instance_id);
  // Answers the control request `tag` of instance `instance_id` (a kCompletionControl
  // completion): `json` goes to the worker in a block of its own (kControlReply).
  // False when the worker is gone (nobody waits) or the arena has no room.
  bool reply_control(uint32_t instance_id, uint64_t tag, std::string_view json);

  // Batches on instances now, and batches whose worker ended them with requests kept
  // open (kPostKeepOpen) that still wait for final responses. Any thread (tests,
  // statistics).
  size_t in_flight();
  // How many times the timer thread woke (a deadline came, or the core stopped), and
  // how many times the timerfd was set: tests check that a batch leaving before its
  // deadline costs the thread no wake-up, and one released in a deferred turn no
  // timer at all.
  uint64_t timer_wakeups();
  uint64_t timer_settings();
  // Rate limiting, for tests and statistics: copies of resource `name` free on
  // `device` (kGlobalResource for a global one), and batches waiting for resources.
  uint32_t rate_limit_available(const std::string& name, int32_t device);
  size_t rate_limit_staged();
  // Requests of `model` accepted and not yet executing: queued in its scheduler, or in a
  // batch staged for the rate limiter (Triton's nv_inference_pending_request_count).
  // 0 for a removed model. Any thread.
  size_t pending_requests(ModelHandle model);
  // When the oldest batch the instance is still running was dispatched (now_ns()'s
  // clock), 0 when it runs none: the frontend's execution timeout
  // (scheduling/instance.py) kills a worker whose execute() does not return. Batches
  // the worker ended with requests kept open (decoupled) are not running.
  uint64_t running_since(uint32_t instance_id);

  // --- cancellation (frontend thread: a client went away) ---
  // A queued request is removed from its scheduler and completes with
  // kCompletionCancelled; a running one (or one kept open after its batch) is flagged
  // in its request block so the worker sees it (request.is_cancelled()); its answer
  // still comes from the worker.
  CancelResult cancel(uint64_t request_id);

  // --- tracing (frontend thread) ---
  // The stamps of traced request `request_id`, forgotten once read; false when it has
  // none (never traced, or read already). The frontend reads every traced request's
  // stamps once it is answered or failed, so none stay behind.
  bool take_trace_stamps(uint64_t request_id, TraceStamps* stamps);
  // Trace mode opentelemetry: each traced request, and each child trace, gets the ids
  // of its model span at submit (TraceStamps::span, ChildTrace::span), written into its
  // request block for its model (RequestHeader::span). Set once, before serving.
  void set_span_ids(bool on) { traces_.set_span_ids(on); }
  // The finished child traces of traced request `root` (its steps and traced BLS
  // calls, theirs, and so on), once, in the order they finished; the root is forgotten
  // (children still running then are dropped when they end). The frontend calls it
  // for every traced request it submitted, once it is answered.
  std::vector<ChildTrace> take_trace_children(uint64_t root);

 private:
  // submit()'s queueing of a placed block (released when refused, with `release`).
  SubmitResult queue_block(ModelHandle model, uint64_t request_id, const SubmitOptions& options,
                           uint64_t offset, uint64_t request_start_ns, bool release);
  using Batch = CoreBatch;
  using Instance = CoreInstance;
  struct Model {
    std::unique_ptr<Scheduler> scheduler;
    bool ensemble = false;             // requests go to ensembles_ (scheduler is an EnsembleQueue)
    std::vector<Instance*> instances;  // into instances_, in the order they were added
    uint64_t deadline_ns = 0;          // when the held batch or a queue timeout is due
    bool held_for_idle = false;        // deadline_ns is a batch held with an instance idle
    // preserve_ordering: batch ids in dispatch order, and completions waiting for
    // an earlier batch to finish.
    std::vector<uint64_t> order;
    struct Held {
      std::vector<Completion> completions;
      bool over = false;  // the batch is done: nothing more comes for it
    };
    std::unordered_map<uint64_t, Held> held;
    bool batch_tensors = true;  // set_batch_tensors
  };

  // mutex_, taken by a method: the calling thread's open Turn of this core is queued
  // first, so that thread observes its submits queued (see Turn).
  class Locked {
   public:
    explicit Locked(Core& core) : lock_(core.mutex_) { core.take_turn_locked(); }

   private:
    std::lock_guard<std::mutex> lock_;
  };
  // Queues what the calling thread's open Turn of this core staged (none: a no-op).
  void take_turn_locked();
  // How submits of `turn` to `model` go (Turn::Lookup), looked up once per turn.
  Turn::Lookup turn_lookup(Turn& turn, ModelHandle model);

  Channel* channel(const Instance& instance) { return arena_.at<Channel>(instance.channel_offset); }
  // The live model `handle` names, or null when it was removed.
  Model* find_locked(ModelHandle handle);
  Instance* find_instance_locked(uint32_t instance_id);
  // Dispatches for one model; returns true if it left anything for poll().
  bool dispatch_locked(Model& model, uint64_t now, bool arrivals_possible = true);
  bool dispatch_all_locked(bool arrivals_possible);
  // Describes and sends `requests` as a batch on `instance`; `counted`: its `busy`
  // already counts it (a staged batch). True if it left completions for poll().
  bool start_batch_locked(Model& model, Instance& instance, std::vector<QueuedRequest>& requests,
                          uint64_t now, bool counted);
  // Sends the staged batches the rate limiter lets run now, in its order.
  bool run_staged_locked();
  // The instance's staged batch goes (its requests fail with `status`), unstaged.
  void drop_staged_locked(Instance& instance, int32_t status);
  // The instance has no batch left: the resources it holds come back, staged batches
  // are tried again.
  bool instance_idle_locked(Instance& instance);
  // Dispatches the models whose held batch or queue timeout is due at `now`.
  bool dispatch_due_locked(uint64_t now);
  // A message a worker posted (responses, batch done) for one of its batches.
  void take_message_locked(uint32_t instance_id, const CompletionMessage& message);
  void send_to_worker_locked(Instance& instance, const BatchMessage& message);
  // Whether the instance takes a batch now: idle, or waiting for its own requests'
  // responses with fewer than kMaxNestedBatches batches on it.
  static bool takes_batch_locked(const Instance& instance);
  // The batch is over: its inputs and descriptor go, and its requests that got no
  // final response fail with `status` (kCompletionWorkerFailed when it ran).
  void finish_locked(Batch& batch, int32_t status);
  // Hands `done` (null: nothing, only the batch's end) to poll(), in dispatch order
  // when the model preserves ordering; `batch_over`: nothing more comes for the batch.
  void deliver_locked(ModelHandle model, uint64_t batch_id, Completion* done, bool batch_over);
  // `model`: the model they were queued on, whose statistics count the workers' own
  // requests among them (kCompletionRoutedRefused); null when it is going away.
  void reject_locked(std::vector<QueuedRequest>& rejected, int32_t status,
                     const Model* model = nullptr);
  void stop_locked(Instance& instance);
  // Closes the instance's eventfd, frees its channel and forgets it.
  void free_instance_locked(Instance& instance);
  void notify_frontend();
  void timer_loop();
  // Keeps timer_due_ the earliest deadline of any model after `model`'s moved from
  // `before` (see the class comment), and the timerfd set to it unless deferred.
  void follow_deadline_locked(const Model& model, uint64_t before);
  void due_locked(uint64_t deadline);
  // Sets the timerfd to timer_due_ if it holds something else.
  void set_timer_locked();
  CancelResult cancel_locked(uint64_t request_id);
  // The batch instance `instance_id` runs (one of them while it nests batches), 0 if
  // none: the tag of a block sent to it, so that its death reclaims the block.
  uint64_t running_batch_locked(uint32_t instance_id) const;

  // Set at construction, then only read: no lock.
  Clock clock_;
  Arena arena_;
  BatchAssembler assembler_;         // request and batch layout in the arena (own lock)
  InputRegions* regions_ = nullptr;  // set before serving, then only read
  int notify_fd_ = -1;
  int timer_fd_ = -1;  // the timer thread's timerfd; -1 without that thread
  std::atomic<uint64_t> next_request_id_{1};
  std::atomic<uint64_t> outputs_in_place_{0};
  std::atomic<uint64_t> outputs_copied_{0};

  mutable std::mutex mutex_;
  // --- guarded by mutex_ ---
  bool stopping_ = false;
  // The earliest Model::deadline_ns (CLOCK_MONOTONIC, as clock_), 0 = none, and what
  // the timerfd is set to (kTimerUnknown after it fired: set it again). They differ
  // while deferred (defer_timer).
  static constexpr uint64_t kTimerUnknown = ~uint64_t(0);
  uint64_t timer_due_ = 0;
  // timer_due_ for dispatch_due()'s look without the lock: written with it, read
  // relaxed (a stale value costs one needless lock, or leaves the deadline to the next
  // look or to settle_timer).
  std::atomic<uint64_t> due_hint_{0};
  uint64_t timer_set_ = 0;
  // Turns deferring the timer now (several I/O loops' at once): the last to settle sets it.
  uint32_t timer_deferrals_ = 0;
  uint64_t timer_wakeups_ = 0;
  uint64_t timer_settings_ = 0;
  uint64_t next_batch_id_ = 1;
  ModelSlots<Model> models_;
  // Instance ids are never reused, so a stale one (a worker exiting after its model
  // was removed) finds nothing rather than another instance. The map's nodes stay
  // put, so Model::instances points into it.
  std::unordered_map<uint32_t, Instance> instances_;
  uint32_t next_instance_id_ = 0;
  std::unordered_map<uint64_t, Batch> in_flight_;
  friend class BlsRouter;
  BlsRouter bls_{*this};  // requests workers submit, ensemble steps
  // Traced requests and their child traces (its span ids are drawn without the lock).
  TraceTable traces_{arena_};
  RateLimiter rate_limiter_;  // off unless configure_rate_limiter()
  // Batches one instance may hold at once while it waits on its own requests.
  static constexpr uint32_t kMaxNestedBatches = 16;
  std::vector<Completion> done_;  // left for poll() by dispatch and the timer thread
  // Ensembles: the requests waiting to start, their orchestration and gathered answers.
  // A step request's route has instance_id BlsRouter::kEnsembleRoute (its responses go
  // to ensembles_); a worker's request to an ensemble has an ordinary route.
  friend class CoreEnsembleHost;
  CoreEnsembleHost ensembles_{*this};
  // Scratch for dispatch_locked, kept to spare allocations on the hot path.
  std::vector<uint32_t> idle_;
  std::vector<Placement> placements_;

  std::thread timer_;  // last: it starts once everything above is constructed
};

}  // namespace naiad
