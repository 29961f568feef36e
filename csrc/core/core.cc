#include "core/core.h"

#include <errno.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

#include "core/dynamic_batch_scheduler.h"
#include "ipc/ipc_schema.h"
#include "ipc/request_block.h"
#include "ipc/response_block.h"
#include "util/scratch_array.h"

namespace naiad {

uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

namespace {
// The calling thread's innermost open Turn (of any core), null when none.
thread_local Core::Turn* current_turn = nullptr;
// Room a turn makes for its staged submits at its first: a batch's worth.
constexpr size_t kTurnStaged = 64;
}  // namespace

Core::Core(uint64_t arena_bytes, Clock clock, bool timer_thread)
    : clock_(clock ? std::move(clock) : Clock(monotonic_ns)),
      arena_(Arena::create(arena_bytes)),
      assembler_(arena_) {
  notify_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (notify_fd_ < 0) throw std::runtime_error(std::string("eventfd: ") + std::strerror(errno));
  if (timer_thread) {
    timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
    if (timer_fd_ < 0) {
      const int error = errno;
      ::close(notify_fd_);
      throw std::runtime_error(std::string("timerfd_create: ") + std::strerror(error));
    }
    timer_ = std::thread([this] { timer_loop(); });
  }
}

Core::~Core() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    if (timer_fd_ >= 0) {
      // Due at once: the thread's read returns and it sees stopping_.
      itimerspec now{};
      now.it_value.tv_nsec = 1;
      timerfd_settime(timer_fd_, 0, &now, nullptr);
    }
  }
  if (timer_.joinable()) timer_.join();
  if (timer_fd_ >= 0) ::close(timer_fd_);
  for (auto& entry : instances_) {
    if (entry.second.wake_fd >= 0) ::close(entry.second.wake_fd);
  }
  if (notify_fd_ >= 0) ::close(notify_fd_);
}

// --- the registry ---

ModelHandle Core::add_model(std::unique_ptr<Scheduler> scheduler) {
  auto model = std::make_unique<Model>();
  model->scheduler = std::move(scheduler);
  Locked lock(*this);
  const uint32_t max_rows = model->scheduler->max_batch_rows();
  const ModelHandle handle = models_.add(std::move(model));
  // Batching models stage their inputs batch-major; the others need no slab. Keyed by
  // the handle's value, so a later model in this slot never sees this one's slabs.
  assembler_.add_model(handle.value, max_rows);
  return handle;
}

ModelHandle Core::add_model(const BatcherConfig& config) {
  return add_model(std::make_unique<DynamicBatchScheduler>(config));
}

void Core::set_batch_tensors(ModelHandle handle, bool batch_tensors) {
  Locked lock(*this);
  Model* model = find_locked(handle);
  if (model != nullptr) model->batch_tensors = batch_tensors;
}

ModelHandle Core::add_ensemble() {
  const ModelHandle handle = add_model(std::make_unique<EnsembleQueue>());
  Locked lock(*this);
  find_locked(handle)->ensemble = true;
  return handle;
}

bool Core::set_ensemble_graph(ModelHandle handle, std::shared_ptr<const EnsembleGraph> graph) {
  Locked lock(*this);
  Model* model = find_locked(handle);
  if (model == nullptr || !model->ensemble) return false;
  ensembles_.set_graph(handle.value, std::move(graph));
  return true;
}

Core::Model* Core::find_locked(ModelHandle handle) { return models_.find(handle); }

Core::Instance* Core::find_instance_locked(uint32_t instance_id) {
  auto it = instances_.find(instance_id);
  return it == instances_.end() ? nullptr : &it->second;
}

bool Core::remove_model(ModelHandle handle) {
  bool left = false;
  {
    Locked lock(*this);
    Model* model = find_locked(handle);
    if (model == nullptr) return false;
    // This thread's turns looked the handle up as live: its next submits must fail.
    for (Turn* turn = current_turn; turn != nullptr; turn = turn->outer_) {
      if (&turn->core_ == this) turn->models_.clear();
    }
    if (model->ensemble) ensembles_.remove(handle.value);  // its running requests finish
    // Queued requests fail as model-gone; their rows and blocks are released with them
    // (reject_locked), then the model's open slab closes: it is freed once the rows of
    // its batches still in flight are released too.
    std::vector<QueuedRequest> queued = model->scheduler->drain();
    if (!queued.empty()) {
      reject_locked(queued, kCompletionModelGone);
      left = true;
    }
    assembler_.close_model(handle.value);
    // Completions held for an earlier batch leave now, in dispatch order; the
    // model's batches still in flight are delivered as they finish.
    for (uint64_t batch_id : model->order) {
      auto it = model->held.find(batch_id);
      if (it == model->held.end()) continue;
      for (Completion& c : it->second.completions) {
        done_.push_back(std::move(c));
        left = true;
      }
    }
    for (Instance* instance : model->instances) {
      if (instance->staged) {
        drop_staged_locked(*instance, kCompletionModelGone);  // it never ran: as queued
        left = true;
      }
      if (instance->running) {
        instance->model = ModelHandle{};
        stop_locked(*instance);
      } else {
        free_instance_locked(*instance);
      }
    }
    models_.remove(handle);
    // Its staged batches and instances are gone: others may go first now.
    left |= run_staged_locked();
  }
  if (left) notify_frontend();
  return true;
}

void Core::configure_rate_limiter(const RateLimiterConfig& config) {
  Locked lock(*this);
  if (!instances_.empty()) throw std::logic_error("rate limiter configured after instances");
  rate_limiter_ = RateLimiter(config);
}

uint32_t Core::add_instance(ModelHandle handle, const InstanceRateLimit& limits) {
  Locked lock(*this);
  Model* model = find_locked(handle);
  if (model == nullptr) throw std::out_of_range("unknown model");
  const uint32_t id = next_instance_id_;
  if (rate_limiter_.enabled()) {
    std::string refused = rate_limiter_.add_instance(id, limits);
    if (!refused.empty()) throw std::invalid_argument(refused);
  }
  uint64_t offset = arena_.alloc(sizeof(Channel));
  int wake_fd = offset == 0 ? -1 : eventfd(0, EFD_CLOEXEC);
  if (wake_fd < 0) {
    const int error = errno;
    rate_limiter_.remove_instance(id);
    if (offset == 0) throw std::runtime_error("arena has no room for an instance channel");
    arena_.free(offset);
    throw std::runtime_error(std::string("eventfd: ") + std::strerror(error));
  }
  arena_.at<Channel>(offset)->reset();
  ++next_instance_id_;
  Instance& instance = instances_[id];
  instance.id = id;
  instance.model = handle;
  instance.channel_offset = offset;
  instance.wake_fd = wake_fd;
  model->instances.push_back(&instance);
  return id;
}

void Core::free_instance_locked(Instance& instance) {
  rate_limiter_.remove_instance(instance.id);
  if (instance.wake_fd >= 0) ::close(instance.wake_fd);
  arena_.free(instance.channel_offset);
  instances_.erase(instance.id);
}

InstanceEndpoint Core::endpoint(uint32_t instance_id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const Instance& instance = instances_.at(instance_id);
  return InstanceEndpoint{instance.channel_offset, instance.wake_fd};
}

// --- the data path ---

Core::Turn::Turn(Core& core) : core_(core), outer_(current_turn) { current_turn = this; }

Core::Turn::~Turn() {
  if (!staged_.empty()) {
    Core::Locked lock(core_);  // queues staged_
  }
  current_turn = outer_;
}

void Core::take_turn_locked() {
  Turn* turn = current_turn;
  if (turn == nullptr || &turn->core_ != this || turn->staged_.empty()) return;
  std::vector<QueuedRequest> gone;
  for (Turn::Staged& staged : turn->staged_) {
    Model* model = find_locked(staged.model);
    if (model == nullptr) {
      gone.push_back(staged.request);
      continue;
    }
    // Cannot refuse (always_accepts, fixed for the model's life).
    model->scheduler->enqueue(staged.request, staged.options, turn->now_);
  }
  turn->staged_.clear();
  if (!gone.empty()) {
    reject_locked(gone, kCompletionModelGone);
    notify_frontend();
  }
}

Core::Turn::Lookup Core::turn_lookup(Turn& turn, ModelHandle handle) {
  for (const auto& known : turn.models_) {
    if (known.first == handle.value) return known.second;
  }
  Turn::Lookup lookup;
  {
    Locked lock(*this);
    const Model* model = find_locked(handle);
    if (model == nullptr) {
      lookup = Turn::Lookup::kGone;
    } else if (!model->ensemble && model->scheduler->always_accepts()) {
      lookup = Turn::Lookup::kStaged;
    } else {
      lookup = Turn::Lookup::kLocked;
    }
  }
  turn.models_.emplace_back(handle.value, lookup);
  return lookup;
}

SubmitResult Core::submit(ModelHandle handle, const SubmitRequest& request) {
  // Tracing off: one predictable branch here and one under the lock.
  const uint64_t request_start_ns = request.options.traced ? clock_() : 0;
  // Where each input's bytes are: inline, or a region the registry maps.
  ScratchArray<const uint8_t*> sources(request.inputs.size());
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    const InputSource& input = request.inputs[i];
    if (input.kind == InputKind::kInline) {
      sources[i] = static_cast<const uint8_t*>(input.data);
    } else if (input.kind == InputKind::kSystemShm && regions_ != nullptr &&
               regions_->host_range(input.region, input.offset, input.size)) {
      // Left in the client's region: copied at dispatch if the request shares its
      // batch, read in place by the worker if it runs alone (batch_assembler.h).
      sources[i] = nullptr;
      continue;
    } else if (input.kind == InputKind::kCudaIpc && regions_ != nullptr &&
               regions_->device_range(input.region, input.offset, input.size)) {
      sources[i] = nullptr;  // room only: the worker owning the device fills it
      continue;
    } else {
      // CUDA IPC bytes never come to the frontend: the worker owning the device opens
      // the handle. That path arrives with the shared-memory issue.
      sources[i] = nullptr;
    }
    if (sources[i] == nullptr && input.size != 0) return SubmitResult::kUnsupportedInput;
  }
  // The one copy of the inputs, before taking the lock: the rows are ours alone
  // until queued (batch_assembler.h). A model removed meanwhile closed its slab; the
  // rows are released below and the slab goes with its last request.
  uint64_t offset = assembler_.place(handle.value, request, sources.data());
  if (offset == 0) return SubmitResult::kArenaFull;
  return queue_block(handle, request.request_id, request.options, offset, request_start_ns, true);
}

uint64_t Core::place(ModelHandle handle, const SubmitRequest& request) {
  // Every source null: rows kept, nothing copied (the caller fills them).
  ScratchArray<const uint8_t*> sources(request.inputs.size());
  for (size_t i = 0; i < request.inputs.size(); ++i) sources[i] = nullptr;
  return assembler_.place(handle.value, request, sources.data());
}

SubmitResult Core::queue_placed(ModelHandle handle, uint64_t request_id,
                                const SubmitOptions& options, uint64_t offset) {
  return queue_block(handle, request_id, options, offset, options.traced ? clock_() : 0, false);
}

SubmitResult Core::queue_block(ModelHandle handle, uint64_t request_id,
                               const SubmitOptions& options, uint64_t offset,
                               uint64_t request_start_ns, bool release) {
  QueuedRequest queued{request_id, offset, 0, options.batch_size, options.shape_key, 0, 0};
  SpanContext span{};
  if (options.traced && traces_.span_ids()) {
    // Its model's view of its trace, written while the block is still ours alone.
    span = traces_.new_span(options.trace_id_high, options.trace_id_low, options.trace_flags);
    arena_.at<RequestHeader>(offset)->span = span;
  }
  Turn* turn = current_turn;
  if (turn != nullptr && &turn->core_ == this && !options.traced) {
    switch (turn_lookup(*turn, handle)) {
      case Turn::Lookup::kStaged: {
        // One clock read for what the turn stages until it is next queued: those
        // requests arrived together (one pass over the ready sockets).
        if (turn->staged_.empty()) {
          turn->staged_.reserve(kTurnStaged);
          turn->now_ = clock_();
        }
        Turn::Staged staged{handle, queued, options};
        staged.options.sequence_key = {};
        turn->staged_.push_back(staged);
        return SubmitResult::kOk;
      }
      case Turn::Lookup::kGone:
        if (release) assembler_.release(offset);
        return SubmitResult::kModelGone;
      case Turn::Lookup::kLocked:
        break;
    }
  }
  SubmitResult result = SubmitResult::kOk;
  {
    Locked lock(*this);
    Model* model = find_locked(handle);
    if (model == nullptr) {
      result = SubmitResult::kModelGone;
    } else if (model->ensemble) {
      ensembles_.queue(handle.value, queued, {}, ensemble_options(options));
      if (options.traced) {
        traces_.start_root(request_id, TraceStamps{request_start_ns, clock_(), span},
                           options.trace_tensors);
      }
    } else {
      const uint64_t now = clock_();
      result = submit_result_of(model->scheduler->enqueue(queued, options, now));
      if (options.traced && result == SubmitResult::kOk) {
        traces_.start_root(request_id, TraceStamps{request_start_ns, now, span},
                           options.trace_tensors);
      }
    }
  }
  if (result != SubmitResult::kOk && release) assembler_.release(offset);
  return result;
}

bool Core::take_trace_stamps(uint64_t request_id, TraceStamps* stamps) {
  Locked lock(*this);
  return traces_.take_stamps(request_id, stamps);
}

std::vector<ChildTrace> Core::take_trace_children(uint64_t root) {
  Locked lock(*this);
  return traces_.take_children(root);
}

bool Core::dispatch_locked(Model& model, uint64_t now, bool arrivals_possible) {
  std::vector<QueuedRequest> rejected;
  bool left = false;  // completions for poll(): requests that failed here
  const bool limited = rate_limiter_.enabled();
  // A batch staged for an instance waiting on its resources takes the requests that
  // arrived meanwhile, as Triton's staged payload does, before any new batch forms.
  if (limited) {
    for (Instance* instance : model.instances) {
      if (instance->staged) model.scheduler->grow(now, &instance->staged_requests, &rejected);
    }
  }
  idle_.clear();
  for (const Instance* instance : model.instances) {
    if (instance->up && instance->busy == 0) idle_.push_back(instance->id);
  }
  // Rate limiting: the idle instance that ran least (weighted by priority) goes first.
  if (limited) rate_limiter_.order(idle_.begin(), idle_.end());
  // Then the instances waiting on their own requests (BLS): they take batches nested
  // in that wait, so no caller waits for its own instance.
  for (const Instance* instance : model.instances) {
    if (instance->up && instance->busy != 0 && takes_batch_locked(*instance)) {
      idle_.push_back(instance->id);
    }
  }
  placements_.clear();
  const uint64_t deadline_before = model.deadline_ns;
  model.deadline_ns =
      model.scheduler->schedule(now, idle_, arrivals_possible, &placements_, &rejected);
  size_t placed = 0;
  for (const Placement& placement : placements_) placed += placement.requests.empty() ? 0 : 1;
  model.held_for_idle = model.deadline_ns != 0 && placed < idle_.size();
  bool staged = false;
  for (Placement& placement : placements_) {
    if (placement.requests.empty()) continue;
    Instance* instance = nullptr;
    for (Instance* candidate : model.instances) {
      if (candidate->id == placement.instance) instance = candidate;
    }
    if (instance == nullptr || !instance->up || !takes_batch_locked(*instance)) {
      // A scheduler bug must not wedge two batches on one channel: fail them.
      reject_locked(placement.requests, kCompletionWorkerFailed, &model);
      left = true;
      continue;
    }
    if (limited && instance->busy == 0) {
      // It waits for its resources; a nested batch runs under those already held.
      instance->staged = true;
      instance->staged_requests = std::move(placement.requests);
      ++instance->busy;
      rate_limiter_.stage(instance->id);
      staged = true;
      continue;
    }
    left |= start_batch_locked(model, *instance, placement.requests, now, false);
  }
  if (staged) left |= run_staged_locked();
  if (!rejected.empty()) {
    const bool sequence = model.scheduler->reject_reason() == RejectReason::kSequenceTimeout;
    reject_locked(rejected, sequence ? kCompletionSequenceTimedOut : kCompletionTimedOut, &model);
    left = true;
  }
  follow_deadline_locked(model, deadline_before);
  return left;
}

void Core::follow_deadline_locked(const Model& model, uint64_t before) {
  const uint64_t after = model.deadline_ns;
  if (timer_fd_ < 0 || after == before) return;
  if (after != 0 && (timer_due_ == 0 || after < timer_due_)) {
    due_locked(after);
  } else if (before == timer_due_) {
    // The deadline the timer waits for moved later or went away (the batch left
    // before it): wait for the next one instead, or for none, rather than wake for
    // nothing.
    uint64_t next = 0;
    models_.for_each([&next](const Model& model) {
      const uint64_t due = model.deadline_ns;
      if (due != 0 && (next == 0 || due < next)) next = due;
    });
    due_locked(next);
  }
}

void Core::due_locked(uint64_t deadline) {
  timer_due_ = deadline;
  due_hint_.store(deadline, std::memory_order_relaxed);
  if (timer_deferrals_ == 0) set_timer_locked();
}

void Core::set_timer_locked() {
  if (timer_fd_ < 0 || timer_set_ == timer_due_) return;
  timer_set_ = timer_due_;
  ++timer_settings_;
  itimerspec when{};  // all zero: disarmed
  if (timer_due_ != 0) {
    // Relative to clock_ (an injected clock need not be CLOCK_MONOTONIC); at least
    // 1 ns, as zero would disarm.
    const uint64_t now = clock_();
    const uint64_t wait = timer_due_ > now ? timer_due_ - now : 1;
    when.it_value.tv_sec = static_cast<time_t>(wait / 1000000000ULL);
    when.it_value.tv_nsec = static_cast<long>(wait % 1000000000ULL);
  }
  timerfd_settime(timer_fd_, 0, &when, nullptr);
}

void Core::defer_timer() {
  Locked lock(*this);
  ++timer_deferrals_;
}

void Core::settle_timer() {
  bool left = false;
  {
    Locked lock(*this);
    // A deadline that passed during the turn is met here rather than by a timer set
    // to expire at once (a timer to program, then the thread to wake).
    if (timer_due_ != 0) {
      const uint64_t now = clock_();
      if (timer_due_ <= now) left = dispatch_due_locked(now);
    }
    if (--timer_deferrals_ == 0) set_timer_locked();
  }
  if (left) notify_frontend();
}

void Core::dispatch_due() {
  // The look without the lock; what is due is then dispatched as tick() does.
  const uint64_t due = due_hint_.load(std::memory_order_relaxed);
  if (due == 0 || clock_() < due) return;
  tick();
}

uint64_t Core::held_for_idle() {
  Locked lock(*this);
  uint64_t earliest = 0;
  models_.for_each([&earliest](const Model& model) {
    if (!model.held_for_idle || model.deadline_ns == 0) return;
    if (earliest == 0 || model.deadline_ns < earliest) earliest = model.deadline_ns;
  });
  return earliest;
}

bool Core::start_batch_locked(Model& model, Instance& instance,
                              std::vector<QueuedRequest>& requests, uint64_t now, bool counted) {
  Batch batch;
  batch.requests = std::move(requests);
  batch.id = next_batch_id_++;
  batch.model = instance.model;
  batch.instance_id = instance.id;
  // The descriptor, with the batch tensors (gathered here when not contiguous).
  batch.desc_offset = assembler_.describe(batch.id, batch.requests, model.batch_tensors);
  if (batch.desc_offset == 0) {
    // Not even room for the descriptor: the requests fail rather than wait forever.
    reject_locked(batch.requests, kCompletionWorkerFailed, &model);
    if (counted) {
      // Only run_staged_locked starts counted batches: its loop tries the next one.
      instance.busy = 0;
      rate_limiter_.release(instance.id);
    }
    return true;
  }
  BatchMessage message{batch.id, batch.desc_offset, static_cast<uint32_t>(batch.requests.size()),
                       MessageKind::kBatch, 0};
  // One batch in flight per instance, but the ring may also hold responses to the
  // worker's own requests: a full ring queues the batch behind them, never drops it.
  send_to_worker_locked(instance, message);
  if (!counted) ++instance.busy;
  batch.dispatch_ns = now;
  batch.answered.assign(batch.requests.size(), false);
  batch.routed = !bls_.empty();
  for (const QueuedRequest& r : batch.requests) batch.routed &= bls_.routed(r.id);
  if (model.scheduler->preserve_ordering()) model.order.push_back(batch.id);
  in_flight_.emplace(batch.id, std::move(batch));
  return false;
}

bool Core::run_staged_locked() {
  bool left = false;
  uint32_t id = 0;
  while (rate_limiter_.next(&id)) {
    Instance* instance = find_instance_locked(id);
    if (instance == nullptr || !instance->staged) {  // cannot be: staged ones are dropped
      rate_limiter_.release(id);
      continue;
    }
    instance->staged = false;
    std::vector<QueuedRequest> requests = std::move(instance->staged_requests);
    instance->staged_requests.clear();
    Model* model = find_locked(instance->model);
    if (model == nullptr) {  // cannot be either: remove_model drops its staged batches
      reject_locked(requests, kCompletionModelGone);
      instance->busy = 0;
      rate_limiter_.release(id);
      left = true;
      continue;
    }
    left |= start_batch_locked(*model, *instance, requests, clock_(), true);
  }
  return left;
}

void Core::drop_staged_locked(Instance& instance, int32_t status) {
  if (!instance.staged) return;
  reject_locked(instance.staged_requests, status, find_locked(instance.model));
  instance.staged = false;
  instance.busy = 0;
  rate_limiter_.unstage(instance.id);
}

bool Core::instance_idle_locked(Instance& instance) {
  if (!rate_limiter_.holds(instance.id)) return false;
  rate_limiter_.release(instance.id);
  // As Triton's release: the instance is staged again at once when its model has
  // work, so it contends with its new rank rather than letting every waiting
  // instance go first (what makes priority 2 get half the executions).
  Model* model = find_locked(instance.model);
  bool left = false;
  if (model != nullptr && instance.up && !model->scheduler->empty()) {
    left = dispatch_locked(*model, clock_());
  }
  return run_staged_locked() || left;
}

bool Core::dispatch_all_locked(bool arrivals_possible) {
  // Starting an ensemble may start another (a step that is an ensemble: queue_step
  // leaves it waiting): until none is left, or it would wait for the next
  // request to arrive.
  bool left = false;
  while (ensembles_.waiting()) left |= ensembles_.start_waiting();
  uint64_t now = clock_();
  models_.for_each([&](Model& model) {
    if (!model.scheduler->empty()) left |= dispatch_locked(model, now, arrivals_possible);
  });
  return left;
}

void Core::reject_locked(std::vector<QueuedRequest>& rejected, int32_t status, const Model* model) {
  Completion done{0, status, std::numeric_limits<uint32_t>::max(), 0, 0, 0, {}};
  uint64_t routed = 0, routed_ns = 0;
  const uint64_t now = bls_.empty() ? 0 : clock_();
  for (const QueuedRequest& r : rejected) {
    // A worker's own request (BLS) is refused to its submitter, not to the frontend;
    // the called model's statistics count it as a client's (the frontend's part). An
    // ensemble's step is its ensemble's to count.
    const BlsRouter::Route* route = bls_.empty() ? nullptr : bls_.find(r.id);
    if (route != nullptr) {
      if (route->instance_id != BlsRouter::kEnsembleRoute) {
        ++routed;
        routed_ns += now > r.enqueue_ns ? now - r.enqueue_ns : 0;
      }
      bls_.refuse(r.id, static_cast<uint32_t>(status));
    } else {
      done.request_ids.push_back(r.id);
    }
  }
  assembler_.release(rejected);
  rejected.clear();
  if (!done.request_ids.empty()) done_.push_back(std::move(done));
  if (routed != 0 && model != nullptr && !model->instances.empty()) {
    Completion counted{0, kCompletionRoutedRefused, model->instances.front()->id, 0, 0, 0, {}};
    counted.request_ids.assign(kRefusedStatsSize, 0);
    counted.request_ids[kRefusedStatus] = static_cast<uint32_t>(status);
    counted.request_ids[kRefusedCount] = routed;
    counted.request_ids[kRefusedNs] = routed_ns;
    done_.push_back(std::move(counted));
  }
}

void Core::notify_frontend() {
  if (arena_.header()->notify_pending.exchange(1, std::memory_order_seq_cst) == 0) {
    signal_eventfd(notify_fd_);
  }
}

void Core::flush(bool arrivals_possible) {
  bool left;
  {
    Locked lock(*this);
    left = dispatch_all_locked(arrivals_possible);
  }
  if (left) notify_frontend();
}

bool Core::dispatch_due_locked(uint64_t now) {
  bool left = false;
  models_.for_each([&](Model& model) {
    if (model.deadline_ns != 0 && model.deadline_ns <= now) left |= dispatch_locked(model, now);
  });
  return left;
}

void Core::tick() {
  bool left;
  {
    Locked lock(*this);
    left = dispatch_due_locked(clock_());
  }
  if (left) notify_frontend();
}

void Core::timer_loop() {
  for (;;) {
    uint64_t expirations = 0;
    const ssize_t got = ::read(timer_fd_, &expirations, sizeof expirations);
    if (got < 0 && errno != EINTR) return;  // the fd is gone: nothing can be timed
    bool left = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++timer_wakeups_;
      if (stopping_) return;
      const uint64_t now = clock_();
      uint64_t next = 0;
      models_.for_each([&](Model& model) {
        if (model.deadline_ns != 0 && model.deadline_ns <= now) {
          left |= dispatch_locked(model, now);
        }
        if (model.deadline_ns != 0 && (next == 0 || model.deadline_ns < next)) {
          next = model.deadline_ns;
        }
      });
      // The timerfd fired (or may have been set again since): whatever it holds now,
      // it is set to the earliest deadline left, or at the end of a deferred turn.
      timer_set_ = kTimerUnknown;
      due_locked(next);
    }
    if (left) notify_frontend();
  }
}

void Core::finish_locked(Batch& batch, int32_t status) {
  Completion failed{batch.id,
                    status == kCompletionOk ? kCompletionWorkerFailed : status,
                    batch.instance_id,
                    0,
                    0,
                    batch.dispatch_ns,
                    {}};
  for (size_t i = 0; i < batch.requests.size(); ++i) {
    if (batch.answered[i]) continue;
    const uint64_t id = batch.requests[i].id;
    if (bls_.routed(id)) {
      bls_.refuse(id, static_cast<uint32_t>(failed.status));
    } else {
      failed.request_ids.push_back(id);
    }
  }
  assembler_.release(batch.requests);
  arena_.free(batch.desc_offset);
  deliver_locked(batch.model, batch.id, failed.request_ids.empty() ? nullptr : &failed, true);
}

void Core::deliver_locked(ModelHandle handle, uint64_t batch_id, Completion* done,
                          bool batch_over) {
  Model* model = find_locked(handle);
  // A removed model's batches leave as they finish: nothing is held for them.
  if (model == nullptr || !model->scheduler->preserve_ordering()) {
    if (done != nullptr) done_.push_back(std::move(*done));
    return;
  }
  // Responses leave in the order their batches were dispatched.
  Model::Held& held = model->held[batch_id];
  if (done != nullptr) held.completions.push_back(std::move(*done));
  held.over |= batch_over;
  while (!model->order.empty()) {
    auto it = model->held.find(model->order.front());
    if (it == model->held.end()) break;
    for (Completion& c : it->second.completions) done_.push_back(std::move(c));
    it->second.completions.clear();
    if (!it->second.over) break;
    model->held.erase(it);
    model->order.erase(model->order.begin());
  }
}

void Core::take_message_locked(uint32_t instance_id, const CompletionMessage& message) {
  auto it = in_flight_.find(message.batch_id);
  if (it == in_flight_.end()) {
    // The batch is over: failed by instance_down (whose blocks went with it, and whose
    // channel was reset, so nothing stale arrives from there) or every request already
    // had its final response. A block posted after that answers nobody: freed.
    if ((message.flags & kPostResponses) != 0 && message.result_offset != 0) {
      arena_.free(message.result_offset);
    }
    return;
  }
  Batch& batch = it->second;
  const bool batch_over = (message.flags & kPostBatchDone) != 0;
  if ((message.flags & kPostResponses) != 0 && message.result_offset != 0) {
    ResponseBlockView view;
    const size_t n = batch.requests.size();
    const bool readable =
        view_response_block(arena_.base() + message.result_offset, message.result_size, &view);
    if (readable) {
      std::atomic<uint64_t>& outputs =
          (view.header->flags & kResponseOutputsInPlace) != 0 ? outputs_in_place_ : outputs_copied_;
      outputs.fetch_add(view.header->n_outputs, std::memory_order_relaxed);
      for (uint32_t r = 0; r < view.header->n_responses; ++r) {
        const ResponseRecord& record = view.records[r];
        if ((record.flags & kResponseFinal) != 0 && record.request_index < n) {
          batch.answered[record.request_index] = true;
        }
      }
    } else {
      // Unreadable: the frontend fails every request it names, so all are answered.
      batch.answered.assign(n, true);
    }
    const bool for_frontend =
        (bls_.empty() && !batch.routed) || bls_.route_responses(batch, readable ? &view : nullptr);
    if (!for_frontend) {
      arena_.free(message.result_offset);
    } else {
      Completion done{batch.id,
                      kCompletionOk,
                      instance_id,
                      message.result_offset,
                      message.result_size,
                      batch.dispatch_ns,
                      {}};
      done.request_ids.reserve(n);
      for (const QueuedRequest& r : batch.requests) done.request_ids.push_back(r.id);
      // The block is the frontend's now, not the batch's: a later instance_down of a
      // batch still running (or kept open) must not reclaim it.
      if (!batch_over || batch.ended || (message.flags & kPostKeepOpen) != 0) {
        arena_.set_tag(message.result_offset, 0);
      }
      deliver_locked(batch.model, batch.id, &done, false);
    }
  }
  const bool keep_open = batch_over && message.status == kCompletionOk &&
                         (message.flags & kPostKeepOpen) != 0 && !batch.ended;
  if (batch_over && !batch.ended) {
    // The instance is free for its next batch, whatever stays open.
    Instance* instance = find_instance_locked(instance_id);
    if (instance != nullptr && instance->busy != 0 && --instance->busy == 0) {
      instance_idle_locked(*instance);
    }
  }
  if (keep_open) batch.ended = true;
  bool all_answered = true;
  for (bool answered : batch.answered) all_answered &= answered;
  // A batch kept open ends with its last final response (responses posted after it
  // are not the batch's: the worker broke the contract, and they are dropped above
  // only once the batch is gone).
  if ((batch_over && !keep_open) || (batch.ended && all_answered)) {
    finish_locked(batch, batch_over && !keep_open ? message.status : kCompletionOk);
    in_flight_.erase(it);
  }
}

bool Core::takes_batch_locked(const Instance& instance) {
  return instance.busy == 0 ||
         (instance.routed != 0 && !instance.staged && instance.busy < kMaxNestedBatches);
}

void Core::send_to_worker_locked(Instance& instance, const BatchMessage& message) {
  Channel* ch = channel(instance);
  if (!instance.backlog.empty() || !ch->to_worker.push(message)) {
    instance.backlog.push_back(message);
    return;
  }
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (ch->worker_sleeping.load(std::memory_order_seq_cst) != 0) signal_eventfd(instance.wake_fd);
}

bool Core::reply_control(uint32_t instance_id, uint64_t tag, std::string_view json) {
  Locked lock(*this);
  return bls_.reply_control(instance_id, tag, json);
}

uint64_t Core::running_batch_locked(uint32_t instance_id) const {
  uint64_t batch = 0;
  for (const auto& flight : in_flight_) {
    if (flight.second.instance_id == instance_id) batch = flight.first;
  }
  return batch;
}

std::vector<Completion> Core::poll(bool arrivals_possible, bool* left_unowned) {
  // Drain the eventfd, then re-arm the flag, then read the rings. A post whose
  // exchange came before the re-arm is in the rings read below; one after it finds the
  // flag 0 and signals again. Re-arming first would lose a wake-up: a post between the
  // re-arm and the drain signals, the drain eats it, and the flag stays 1 with the
  // eventfd empty, so no post ever signals again (tests/csrc/test_wakeups.cc).
  drain_eventfd(notify_fd_);
  arena_.header()->notify_pending.store(0, std::memory_order_seq_cst);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  Locked lock(*this);
  for (auto& entry : instances_) {
    Instance& instance = entry.second;
    // A stopping instance (up == false, running) may still post its last result.
    if (!instance.up && !instance.running) continue;
    Channel* ch = channel(instance);
    while (!instance.backlog.empty() && ch->to_worker.push(instance.backlog.front())) {
      instance.backlog.pop_front();
      std::atomic_thread_fence(std::memory_order_seq_cst);
      if (ch->worker_sleeping.load(std::memory_order_seq_cst) != 0) {
        signal_eventfd(instance.wake_fd);
      }
    }
    CompletionMessage message;
    while (ch->to_frontend.pop(&message)) take_message_locked(instance.id, message);
    bls_.take_submits(instance);
  }
  dispatch_all_locked(arrivals_possible);
  ensembles_.write_gathered();
  std::vector<Completion> out;
  if (left_unowned == nullptr) {
    out.swap(done_);
    return out;
  }
  // The owned ones out, the others kept in their order (write_gathered filled every
  // ensemble completion's ids above: none is partial here).
  size_t kept = 0;
  for (Completion& done : done_) {
    bool owned = !done.request_ids.empty();
    for (uint64_t id : done.request_ids) owned = owned && request_owner(id) != 0;
    if (owned) {
      out.push_back(std::move(done));
    } else {
      if (&done_[kept] != &done) done_[kept] = std::move(done);
      ++kept;
    }
  }
  done_.erase(done_.begin() + static_cast<std::ptrdiff_t>(kept), done_.end());
  *left_unowned = kept != 0;
  return out;
}

// --- worker processes ---

void Core::instance_starting(uint32_t instance_id) {
  Locked lock(*this);
  Instance* instance = find_instance_locked(instance_id);
  if (instance != nullptr) instance->running = true;
}

std::vector<Completion> Core::instance_down(uint32_t instance_id) {
  Locked lock(*this);
  Instance* found = find_instance_locked(instance_id);
  if (found == nullptr) return {};
  Instance& instance = *found;
  Channel* ch = channel(instance);
  // Completions the worker posted before it died are real results.
  CompletionMessage message;
  while (ch->to_frontend.pop(&message)) take_message_locked(instance_id, message);
  // A batch waiting for resources never reached the worker: it fails with the others.
  drop_staged_locked(instance, kCompletionInstanceDied);
  for (auto it = in_flight_.begin(); it != in_flight_.end();) {
    if (it->second.instance_id != instance_id) {
      ++it;
      continue;
    }
    // Blocks the worker allocated for this batch (its result) and the batch's
    // descriptor carry the batch id.
    arena_.free_tagged(it->first);
    it->second.desc_offset = 0;
    finish_locked(it->second, kCompletionInstanceDied);
    it = in_flight_.erase(it);
  }
  // Its own requests still queued or running answer to no one now; blocks sent to it
  // carried its batch's tag and went with it.
  bls_.drop_instance(instance_id);
  instance.routed = 0;
  // What it held comes back (it died mid-batch); free_instance_locked forgets it too.
  rate_limiter_.release(instance_id);
  if (find_locked(instance.model) == nullptr) {
    // Its model was removed and no process uses the channel any more.
    free_instance_locked(instance);
  } else {
    instance.up = false;
    instance.running = false;
    instance.busy = 0;
    instance.backlog.clear();
    ch->reset();
  }
  run_staged_locked();
  ensembles_.write_gathered();
  std::vector<Completion> out;
  out.swap(done_);
  return out;
}

void Core::instance_up(uint32_t instance_id) {
  Locked lock(*this);
  Instance* instance = find_instance_locked(instance_id);
  if (instance == nullptr || instance->up) return;
  Model* model = find_locked(instance->model);
  if (model == nullptr) return;  // its model was removed: the worker has its stop message
  // No channel reset here: the worker is already waiting on it and may have set
  // worker_sleeping, which a reset would clear and so lose its wake-up. The channel
  // was reset when created and when the previous worker died (instance_down).
  instance->up = true;
  instance->running = true;
  instance->busy = 0;
  if (dispatch_locked(*model, clock_())) notify_frontend();
}

void Core::stop_instance(uint32_t instance_id) {
  Locked lock(*this);
  Instance* instance = find_instance_locked(instance_id);
  if (instance != nullptr) stop_locked(*instance);
}

void Core::stop_locked(Instance& instance) {
  BatchMessage message{0, 0, 0, MessageKind::kStop, 0};
  send_to_worker_locked(instance, message);
  instance.up = false;  // takes no new batches
  signal_eventfd(instance.wake_fd);
  if (instance.staged) {
    // Sent now it would follow the stop message and never run: it fails as queued
    // requests of a model going away do.
    drop_staged_locked(instance, kCompletionModelGone);
    run_staged_locked();
    notify_frontend();
  }
}

CancelResult Core::cancel(uint64_t request_id) {
  CancelResult result;
  {
    Locked lock(*this);
    const size_t before = done_.size();
    result = cancel_locked(request_id);
    if (done_.size() == before) return result;
  }
  notify_frontend();
  return result;
}

CancelResult Core::cancel_locked(uint64_t request_id) {
  CancelResult result = CancelResult::kUnknown;
  // An ensemble request: waiting to start, or running its steps.
  if (ensembles_.cancel(request_id)) return CancelResult::kDropped;
  {
    const bool dropped = models_.any_of([&](Model& model) {
      QueuedRequest queued;
      if (!model.scheduler->cancel(request_id, &queued)) return false;
      std::vector<QueuedRequest> cancelled{queued};
      reject_locked(cancelled, kCompletionCancelled, &model);
      return true;
    });
    if (dropped) result = CancelResult::kDropped;
    for (auto it = instances_.begin(); result == CancelResult::kUnknown && it != instances_.end();
         ++it) {
      Instance& instance = it->second;
      std::vector<QueuedRequest>& staged = instance.staged_requests;
      for (size_t i = 0; i < staged.size(); ++i) {
        if (staged[i].id != request_id) continue;
        std::vector<QueuedRequest> dropped{staged[i]};
        staged.erase(staged.begin() + static_cast<std::ptrdiff_t>(i));
        reject_locked(dropped, kCompletionCancelled, find_locked(instance.model));
        if (staged.empty()) {
          drop_staged_locked(instance, kCompletionCancelled);
          run_staged_locked();
        }
        result = CancelResult::kDropped;
        break;
      }
    }
    if (result == CancelResult::kUnknown) {
      for (auto& flight : in_flight_) {
        const Batch& batch = flight.second;
        for (size_t i = 0; i < batch.requests.size(); ++i) {
          if (batch.requests[i].id != request_id || batch.answered[i]) continue;
          mark_request_cancelled(arena_.at<RequestHeader>(batch.requests[i].offset));
          result = CancelResult::kFlagged;
        }
      }
    }
  }
  return result;
}

size_t Core::in_flight() {
  Locked lock(*this);
  return in_flight_.size();
}

uint64_t Core::timer_wakeups() {
  Locked lock(*this);
  return timer_wakeups_;
}

uint64_t Core::timer_settings() {
  Locked lock(*this);
  return timer_settings_;
}

uint32_t Core::rate_limit_available(const std::string& name, int32_t device) {
  Locked lock(*this);
  return rate_limiter_.available(name, device);
}

size_t Core::rate_limit_staged() {
  Locked lock(*this);
  return rate_limiter_.staged_count();
}

size_t Core::pending_requests(ModelHandle handle) {
  Locked lock(*this);
  const Model* model = find_locked(handle);
  if (model == nullptr) return 0;
  size_t pending = model->scheduler->queued();
  for (const Instance* instance : model->instances) pending += instance->staged_requests.size();
  return pending;
}

uint64_t Core::running_since(uint32_t instance_id) {
  Locked lock(*this);
  uint64_t oldest = 0;
  for (const auto& [id, batch] : in_flight_) {
    if (batch.instance_id != instance_id || batch.ended) continue;
    if (oldest == 0 || batch.dispatch_ns < oldest) oldest = batch.dispatch_ns;
  }
  return oldest;
}

}  // namespace naiad
