#include "core.h"

#include <errno.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>

namespace naiad {

uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

Core::Core(uint64_t arena_bytes) : arena_(Arena::create(arena_bytes)) {
  notify_fd_ = eventfd(0, EFD_NONBLOCK);
  if (notify_fd_ < 0) throw std::runtime_error(std::string("eventfd: ") + std::strerror(errno));
}

Core::~Core() {
  for (Instance& instance : instances_) {
    if (instance.wake_fd >= 0) ::close(instance.wake_fd);
  }
  if (notify_fd_ >= 0) ::close(notify_fd_);
}

uint32_t Core::add_model(uint32_t max_batch_size, bool dynamic_batching) {
  std::lock_guard<std::mutex> lock(mutex_);
  models_.push_back(Model{max_batch_size, dynamic_batching, {}, {}});
  return static_cast<uint32_t>(models_.size() - 1);
}

uint32_t Core::add_instance(uint32_t model_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (model_id >= models_.size()) throw std::out_of_range("unknown model id");
  uint64_t offset = arena_.alloc(sizeof(Channel));
  if (offset == 0) throw std::runtime_error("arena has no room for an instance channel");
  Channel* ch = arena_.at<Channel>(offset);
  ch->reset();
  int wake_fd = eventfd(0, 0);
  if (wake_fd < 0) {
    arena_.free(offset);
    throw std::runtime_error(std::string("eventfd: ") + std::strerror(errno));
  }
  instances_.push_back(Instance{model_id, offset, wake_fd});
  uint32_t id = static_cast<uint32_t>(instances_.size() - 1);
  models_[model_id].instances.push_back(id);
  return id;
}

InstanceEndpoint Core::endpoint(uint32_t instance_id) const {
  const Instance& instance = instances_.at(instance_id);
  return InstanceEndpoint{instance.channel_offset, instance.wake_fd};
}

bool Core::submit(uint32_t model_id, uint64_t request_id, uint64_t block_size,
                  const std::vector<SubmitPart>& parts, uint32_t batch_size) {
  // The copy happens before taking the lock: the block is ours alone until queued.
  uint64_t offset = arena_.alloc(block_size);
  if (offset == 0) return false;
  uint8_t* block = arena_.base() + offset;
  for (const SubmitPart& part : parts) {
    if (part.offset + part.size > block_size) {
      arena_.free(offset);
      throw std::out_of_range("submit part outside its request block");
    }
    std::memcpy(block + part.offset, part.data, part.size);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  models_.at(model_id).queue.push_back(Request{request_id, offset, block_size, batch_size});
  return true;
}

void Core::flush() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (uint32_t model_id = 0; model_id < models_.size(); ++model_id) {
    if (!models_[model_id].queue.empty()) dispatch_locked(model_id);
  }
}

void Core::dispatch_locked(uint32_t model_id) {
  Model& model = models_[model_id];
  for (uint32_t instance_id : model.instances) {
    if (model.queue.empty()) return;
    Instance& instance = instances_[instance_id];
    if (!instance.up || instance.busy) continue;

    Batch batch;
    batch.id = next_batch_id_++;
    batch.instance_id = instance_id;
    uint32_t total = 0;
    do {
      const Request& next = model.queue.front();
      if (!batch.requests.empty() && total + next.batch_size > model.max_batch_size) break;
      total += next.batch_size;
      batch.requests.push_back(next);
      model.queue.pop_front();
    } while (model.dynamic_batching && !model.queue.empty());

    batch.desc_offset = arena_.alloc(sizeof(RequestRecord) * batch.requests.size(), batch.id);
    if (batch.desc_offset == 0) {
      // No room for even the descriptor: put the requests back and wait for frees.
      for (auto it = batch.requests.rbegin(); it != batch.requests.rend(); ++it) {
        model.queue.push_front(*it);
      }
      return;
    }
    auto* records = arena_.at<RequestRecord>(batch.desc_offset);
    for (size_t i = 0; i < batch.requests.size(); ++i) {
      const Request& r = batch.requests[i];
      records[i] = RequestRecord{r.id, r.offset, r.size, r.batch_size, 0};
    }
    Channel* ch = channel(instance);
    BatchMessage message{batch.id, batch.desc_offset, static_cast<uint32_t>(batch.requests.size()),
                         MessageKind::kBatch};
    // One batch in flight per instance, so the ring always has room.
    ch->to_worker.push(message);
    instance.busy = true;
    batch.dispatch_ns = monotonic_ns();
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (ch->worker_sleeping.load(std::memory_order_seq_cst) != 0) signal_eventfd(instance.wake_fd);
    in_flight_.emplace(batch.id, std::move(batch));
  }
}

Completion Core::finish_locked(Batch& batch, int32_t status, uint64_t result_offset,
                               uint64_t result_size) {
  Completion done{batch.id,          status, batch.instance_id, result_offset, result_size,
                  batch.dispatch_ns, {}};
  done.request_ids.reserve(batch.requests.size());
  for (const Request& r : batch.requests) {
    done.request_ids.push_back(r.id);
    arena_.free(r.offset);
  }
  arena_.free(batch.desc_offset);
  return done;
}

std::vector<Completion> Core::poll() {
  // Clear the flag before draining: a completion posted after this point will
  // signal again, so none is left behind unannounced.
  arena_.header()->notify_pending.store(0, std::memory_order_seq_cst);
  drain_eventfd(notify_fd_);
  std::vector<Completion> done;
  std::lock_guard<std::mutex> lock(mutex_);
  for (uint32_t id = 0; id < instances_.size(); ++id) {
    Instance& instance = instances_[id];
    // A stopping instance (up == false, running) may still post its last result.
    if (!instance.up && !instance.running) continue;
    CompletionMessage message;
    while (channel(instance)->to_frontend.pop(&message)) {
      auto it = in_flight_.find(message.batch_id);
      if (it == in_flight_.end()) continue;  // already failed by instance_down
      done.push_back(
          finish_locked(it->second, message.status, message.result_offset, message.result_size));
      in_flight_.erase(it);
      instance.busy = false;
    }
  }
  for (uint32_t model_id = 0; model_id < models_.size(); ++model_id) {
    if (!models_[model_id].queue.empty()) dispatch_locked(model_id);
  }
  return done;
}

std::vector<Completion> Core::instance_down(uint32_t instance_id) {
  std::vector<Completion> done;
  std::lock_guard<std::mutex> lock(mutex_);
  Instance& instance = instances_.at(instance_id);
  Channel* ch = channel(instance);
  // Completions the worker posted before it died are real results.
  CompletionMessage message;
  while (ch->to_frontend.pop(&message)) {
    auto it = in_flight_.find(message.batch_id);
    if (it == in_flight_.end()) continue;
    done.push_back(
        finish_locked(it->second, message.status, message.result_offset, message.result_size));
    in_flight_.erase(it);
  }
  for (auto it = in_flight_.begin(); it != in_flight_.end();) {
    if (it->second.instance_id != instance_id) {
      ++it;
      continue;
    }
    // Blocks the worker allocated for this batch (its result) carry the batch id.
    arena_.free_tagged(it->first);
    it->second.desc_offset = 0;  // freed by free_tagged above
    done.push_back(finish_locked(it->second, kCompletionInstanceDied, 0, 0));
    it = in_flight_.erase(it);
  }
  instance.up = false;
  instance.running = false;
  instance.busy = false;
  ch->reset();
  return done;
}

void Core::instance_up(uint32_t instance_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  Instance& instance = instances_.at(instance_id);
  if (instance.up) return;
  channel(instance)->reset();
  instance.up = true;
  instance.running = true;
  instance.busy = false;
  dispatch_locked(instance.model_id);
}

void Core::stop_instance(uint32_t instance_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  Instance& instance = instances_.at(instance_id);
  Channel* ch = channel(instance);
  BatchMessage message{0, 0, 0, MessageKind::kStop};
  ch->to_worker.push(message);
  instance.up = false;  // takes no new batches
  signal_eventfd(instance.wake_fd);
}

size_t Core::queued(uint32_t model_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  return models_.at(model_id).queue.size();
}

size_t Core::in_flight() {
  std::lock_guard<std::mutex> lock(mutex_);
  return in_flight_.size();
}

}  // namespace naiad
