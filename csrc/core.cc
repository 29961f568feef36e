#include "core.h"

#include <errno.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

#include "dynamic_batch_scheduler.h"

namespace naiad {

uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

Core::Core(uint64_t arena_bytes, Clock clock, bool timer_thread)
    : clock_(clock ? std::move(clock) : Clock(monotonic_ns)), arena_(Arena::create(arena_bytes)) {
  notify_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (notify_fd_ < 0) throw std::runtime_error(std::string("eventfd: ") + std::strerror(errno));
  if (timer_thread) timer_ = std::thread([this] { timer_loop(); });
}

Core::~Core() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  timer_cv_.notify_all();
  if (timer_.joinable()) timer_.join();
  for (auto& entry : instances_) {
    if (entry.second.wake_fd >= 0) ::close(entry.second.wake_fd);
  }
  if (notify_fd_ >= 0) ::close(notify_fd_);
}

// --- the registry ---

ModelHandle Core::add_model(std::unique_ptr<Scheduler> scheduler) {
  auto model = std::make_unique<Model>();
  model->scheduler = std::move(scheduler);
  std::lock_guard<std::mutex> lock(mutex_);
  uint32_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slot = static_cast<uint32_t>(models_.size());
    models_.emplace_back();
  }
  models_[slot].model = std::move(model);
  return ModelHandle::of(slot, models_[slot].generation);
}

ModelHandle Core::add_model(const BatcherConfig& config) {
  return add_model(std::make_unique<DynamicBatchScheduler>(config));
}

Core::Model* Core::find_locked(ModelHandle handle) {
  uint32_t slot = handle.slot();
  if (slot >= models_.size()) return nullptr;
  ModelSlot& entry = models_[slot];
  return entry.generation == handle.generation() ? entry.model.get() : nullptr;
}

Core::Instance* Core::find_instance_locked(uint32_t instance_id) {
  auto it = instances_.find(instance_id);
  return it == instances_.end() ? nullptr : &it->second;
}

bool Core::remove_model(ModelHandle handle) {
  bool left = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Model* model = find_locked(handle);
    if (model == nullptr) return false;
    std::vector<QueuedRequest> queued = model->scheduler->drain();
    if (!queued.empty()) {
      reject_locked(queued, kCompletionModelGone);
      left = true;
    }
    // Completions held for an earlier batch leave now, in dispatch order; the
    // model's batches still in flight are delivered as they finish.
    for (uint64_t batch_id : model->order) {
      auto it = model->held.find(batch_id);
      if (it == model->held.end()) continue;
      done_.push_back(std::move(it->second));
      left = true;
    }
    for (Instance* instance : model->instances) {
      if (instance->running) {
        instance->model = ModelHandle{};
        stop_locked(*instance);
      } else {
        free_instance_locked(*instance);
      }
    }
    ModelSlot& slot = models_[handle.slot()];
    slot.model.reset();
    if (++slot.generation == 0) slot.generation = 1;  // 0 would make a null handle valid
    free_slots_.push_back(handle.slot());
  }
  if (left) notify_frontend();
  return true;
}

uint32_t Core::add_instance(ModelHandle handle) {
  std::lock_guard<std::mutex> lock(mutex_);
  Model* model = find_locked(handle);
  if (model == nullptr) throw std::out_of_range("unknown model");
  uint64_t offset = arena_.alloc(sizeof(Channel));
  if (offset == 0) throw std::runtime_error("arena has no room for an instance channel");
  arena_.at<Channel>(offset)->reset();
  int wake_fd = eventfd(0, EFD_CLOEXEC);
  if (wake_fd < 0) {
    arena_.free(offset);
    throw std::runtime_error(std::string("eventfd: ") + std::strerror(errno));
  }
  uint32_t id = next_instance_id_++;
  Instance& instance = instances_[id];
  instance = Instance{id, handle, offset, wake_fd};
  model->instances.push_back(&instance);
  return id;
}

void Core::free_instance_locked(Instance& instance) {
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

SubmitResult Core::submit(ModelHandle handle, uint64_t request_id, uint64_t block_size,
                          const std::vector<SubmitPart>& parts, const SubmitOptions& options) {
  // The copy happens before taking the lock: the block is ours alone until queued.
  uint64_t offset = arena_.alloc(block_size);
  if (offset == 0) return SubmitResult::kArenaFull;
  uint8_t* block = arena_.base() + offset;
  for (const SubmitPart& part : parts) {
    if (part.offset + part.size > block_size) {
      arena_.free(offset);
      throw std::out_of_range("submit part outside its request block");
    }
    std::memcpy(block + part.offset, part.data, part.size);
  }
  QueuedRequest request{request_id,        offset, block_size, options.batch_size,
                        options.shape_key, 0,      0};
  SubmitResult result = SubmitResult::kOk;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Model* model = find_locked(handle);
    if (model == nullptr) {
      result = SubmitResult::kModelGone;
    } else if (model->scheduler->enqueue(request, options, clock_()) == EnqueueResult::kQueueFull) {
      result = SubmitResult::kQueueFull;
    }
  }
  if (result != SubmitResult::kOk) arena_.free(offset);
  return result;
}

bool Core::dispatch_locked(Model& model, uint64_t now, bool arrivals_possible) {
  std::vector<QueuedRequest> rejected;
  bool left = false;  // completions for poll(): requests that failed here
  idle_.clear();
  for (const Instance* instance : model.instances) {
    if (instance->up && !instance->busy) idle_.push_back(instance->id);
  }
  placements_.clear();
  model.deadline_ns =
      model.scheduler->schedule(now, idle_, arrivals_possible, &placements_, &rejected);
  for (Placement& placement : placements_) {
    if (placement.requests.empty()) continue;
    Instance* instance = nullptr;
    for (Instance* candidate : model.instances) {
      if (candidate->id == placement.instance) instance = candidate;
    }
    if (instance == nullptr || !instance->up || instance->busy) {
      // A scheduler bug must not wedge two batches on one channel: fail them.
      reject_locked(placement.requests, kCompletionWorkerFailed);
      left = true;
      continue;
    }
    Batch batch;
    batch.requests = std::move(placement.requests);
    batch.id = next_batch_id_++;
    batch.model = instance->model;
    batch.instance_id = instance->id;
    batch.desc_offset = arena_.alloc(sizeof(RequestRecord) * batch.requests.size(), batch.id);
    if (batch.desc_offset == 0) {
      // Not even room for the descriptor: the requests fail rather than wait forever.
      reject_locked(batch.requests, kCompletionWorkerFailed);
      left = true;
      continue;
    }
    auto* records = arena_.at<RequestRecord>(batch.desc_offset);
    for (size_t i = 0; i < batch.requests.size(); ++i) {
      const QueuedRequest& r = batch.requests[i];
      records[i] = RequestRecord{r.id, r.offset, r.size, r.batch_size, 0};
    }
    Channel* ch = channel(*instance);
    BatchMessage message{batch.id, batch.desc_offset, static_cast<uint32_t>(batch.requests.size()),
                         MessageKind::kBatch};
    // One batch in flight per instance, so the ring always has room.
    ch->to_worker.push(message);
    instance->busy = true;
    batch.dispatch_ns = now;
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (ch->worker_sleeping.load(std::memory_order_seq_cst) != 0) signal_eventfd(instance->wake_fd);
    if (model.scheduler->preserve_ordering()) model.order.push_back(batch.id);
    in_flight_.emplace(batch.id, std::move(batch));
  }
  if (!rejected.empty()) {
    reject_locked(rejected, kCompletionTimedOut);
    left = true;
  }
  if (model.deadline_ns != 0 && (timer_deadline_ == 0 || model.deadline_ns < timer_deadline_)) {
    timer_deadline_ = model.deadline_ns;
    timer_cv_.notify_one();
  }
  return left;
}

bool Core::dispatch_all_locked(bool arrivals_possible) {
  uint64_t now = clock_();
  bool left = false;
  for (ModelSlot& slot : models_) {
    if (slot.model && !slot.model->scheduler->empty()) {
      left |= dispatch_locked(*slot.model, now, arrivals_possible);
    }
  }
  return left;
}

void Core::reject_locked(std::vector<QueuedRequest>& rejected, int32_t status) {
  Completion done{0, status, std::numeric_limits<uint32_t>::max(), 0, 0, 0, {}};
  for (const QueuedRequest& r : rejected) {
    done.request_ids.push_back(r.id);
    arena_.free(r.offset);
  }
  rejected.clear();
  done_.push_back(std::move(done));
}

void Core::notify_frontend() {
  if (arena_.header()->notify_pending.exchange(1, std::memory_order_seq_cst) == 0) {
    signal_eventfd(notify_fd_);
  }
}

void Core::flush(bool arrivals_possible) {
  bool left;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    left = dispatch_all_locked(arrivals_possible);
  }
  if (left) notify_frontend();
}

bool Core::dispatch_due_locked(uint64_t now) {
  bool left = false;
  for (ModelSlot& slot : models_) {
    if (!slot.model) continue;
    uint64_t due = slot.model->deadline_ns;
    if (due != 0 && due <= now) left |= dispatch_locked(*slot.model, now);
  }
  return left;
}

void Core::tick() {
  bool left;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    left = dispatch_due_locked(clock_());
  }
  if (left) notify_frontend();
}

void Core::timer_loop() {
  // The default 50 us timer slack would stretch a 100 us queue delay by half.
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    if (timer_deadline_ == 0) {
      timer_cv_.wait(lock);
      continue;
    }
    uint64_t now = clock_();
    if (now < timer_deadline_) {
      timer_cv_.wait_for(lock, std::chrono::nanoseconds(timer_deadline_ - now));
      continue;
    }
    timer_deadline_ = 0;
    bool left = dispatch_due_locked(now);
    uint64_t next = 0;
    for (const ModelSlot& slot : models_) {
      if (!slot.model) continue;
      uint64_t due = slot.model->deadline_ns;
      if (due != 0 && (next == 0 || due < next)) next = due;
    }
    timer_deadline_ = next;
    if (left) notify_frontend();
  }
}

Completion Core::finish_locked(Batch& batch, int32_t status, uint64_t result_offset,
                               uint64_t result_size) {
  Completion done{batch.id,          status, batch.instance_id, result_offset, result_size,
                  batch.dispatch_ns, {}};
  done.request_ids.reserve(batch.requests.size());
  for (const QueuedRequest& r : batch.requests) {
    done.request_ids.push_back(r.id);
    arena_.free(r.offset);
  }
  arena_.free(batch.desc_offset);
  return done;
}

void Core::deliver_locked(ModelHandle handle, Completion done) {
  Model* model = find_locked(handle);
  // A removed model's batches leave as they finish: nothing is held for them.
  if (model == nullptr || !model->scheduler->preserve_ordering()) {
    done_.push_back(std::move(done));
    return;
  }
  // Responses leave in the order their batches were dispatched.
  model->held.emplace(done.batch_id, std::move(done));
  while (!model->order.empty()) {
    auto it = model->held.find(model->order.front());
    if (it == model->held.end()) break;
    done_.push_back(std::move(it->second));
    model->held.erase(it);
    model->order.erase(model->order.begin());
  }
}

std::vector<Completion> Core::poll(bool arrivals_possible) {
  // Clear the flag before draining: anything left after this point signals again,
  // so nothing is left behind unannounced.
  arena_.header()->notify_pending.store(0, std::memory_order_seq_cst);
  drain_eventfd(notify_fd_);
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& entry : instances_) {
    Instance& instance = entry.second;
    // A stopping instance (up == false, running) may still post its last result.
    if (!instance.up && !instance.running) continue;
    CompletionMessage message;
    while (channel(instance)->to_frontend.pop(&message)) {
      auto it = in_flight_.find(message.batch_id);
      if (it == in_flight_.end()) continue;  // already failed by instance_down
      ModelHandle model = it->second.model;
      Completion done =
          finish_locked(it->second, message.status, message.result_offset, message.result_size);
      in_flight_.erase(it);
      instance.busy = false;
      deliver_locked(model, std::move(done));
    }
  }
  dispatch_all_locked(arrivals_possible);
  std::vector<Completion> out;
  out.swap(done_);
  return out;
}

// --- worker processes ---

void Core::instance_starting(uint32_t instance_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  Instance* instance = find_instance_locked(instance_id);
  if (instance != nullptr) instance->running = true;
}

std::vector<Completion> Core::instance_down(uint32_t instance_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  Instance* found = find_instance_locked(instance_id);
  if (found == nullptr) return {};
  Instance& instance = *found;
  Channel* ch = channel(instance);
  // Completions the worker posted before it died are real results.
  CompletionMessage message;
  while (ch->to_frontend.pop(&message)) {
    auto it = in_flight_.find(message.batch_id);
    if (it == in_flight_.end()) continue;
    ModelHandle model = it->second.model;
    Completion done =
        finish_locked(it->second, message.status, message.result_offset, message.result_size);
    in_flight_.erase(it);
    deliver_locked(model, std::move(done));
  }
  for (auto it = in_flight_.begin(); it != in_flight_.end();) {
    if (it->second.instance_id != instance_id) {
      ++it;
      continue;
    }
    // Blocks the worker allocated for this batch (its result) and the batch's
    // descriptor carry the batch id.
    arena_.free_tagged(it->first);
    it->second.desc_offset = 0;
    ModelHandle model = it->second.model;
    Completion done = finish_locked(it->second, kCompletionInstanceDied, 0, 0);
    it = in_flight_.erase(it);
    deliver_locked(model, std::move(done));
  }
  if (find_locked(instance.model) == nullptr) {
    // Its model was removed and no process uses the channel any more.
    free_instance_locked(instance);
  } else {
    instance.up = false;
    instance.running = false;
    instance.busy = false;
    ch->reset();
  }
  std::vector<Completion> out;
  out.swap(done_);
  return out;
}

void Core::instance_up(uint32_t instance_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  Instance* instance = find_instance_locked(instance_id);
  if (instance == nullptr || instance->up) return;
  Model* model = find_locked(instance->model);
  if (model == nullptr) return;  // its model was removed: the worker has its stop message
  // No channel reset here: the worker is already waiting on it and may have set
  // worker_sleeping, which a reset would clear and so lose its wake-up. The channel
  // was reset when created and when the previous worker died (instance_down).
  instance->up = true;
  instance->running = true;
  instance->busy = false;
  if (dispatch_locked(*model, clock_())) notify_frontend();
}

void Core::stop_instance(uint32_t instance_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  Instance* instance = find_instance_locked(instance_id);
  if (instance != nullptr) stop_locked(*instance);
}

void Core::stop_locked(Instance& instance) {
  BatchMessage message{0, 0, 0, MessageKind::kStop};
  channel(instance)->to_worker.push(message);
  instance.up = false;  // takes no new batches
  signal_eventfd(instance.wake_fd);
}

size_t Core::in_flight() {
  std::lock_guard<std::mutex> lock(mutex_);
  return in_flight_.size();
}

}  // namespace naiad
