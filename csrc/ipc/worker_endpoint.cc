#include "ipc/worker_endpoint.h"

#include <sched.h>
#include <unistd.h>

#include <cstring>

#include "core/batch_assembler.h"
#include "core/core.h"
#include "ipc/ipc_schema.h"
#include "util/scratch_array.h"

namespace naiad {

namespace {

// The batch's compute_output runs until its response block is built (Triton's ends
// when the backend has made its responses): the block's last timing is stamped once
// the block is written, one clock read per block. A block without the batch's
// timings (a decoupled model's responses sent during execute) keeps its zeros.
void stamp_output_end(uint8_t* block, const uint64_t timings[4]) {
  if (timings[0] == 0) return;
  const uint64_t output_start = timings[0] + timings[1] + timings[2];
  const uint64_t now = monotonic_ns();
  if (now <= output_start) return;
  const uint64_t stamped[4] = {timings[0], timings[1], timings[2], now - output_start};
  set_response_timings(block, stamped);
}

}  // namespace

WorkerEndpoint::WorkerEndpoint(int arena_fd, uint64_t channel_offset, int wake_fd, int notify_fd)
    : arena_(Arena::attach(arena_fd)),
      channel_(arena_.at<Channel>(channel_offset)),
      wake_fd_(wake_fd),
      notify_fd_(notify_fd) {}

WorkerEndpoint::~WorkerEndpoint() {
  if (wake_fd_ >= 0) ::close(wake_fd_);
  if (notify_fd_ >= 0) ::close(notify_fd_);
}

BatchMessage WorkerEndpoint::next() {
  BatchMessage message = pop_next();
  if (message.kind == MessageKind::kBatch) current_batch_ = message.batch_id;
  return message;
}

bool WorkerEndpoint::try_next(BatchMessage* message) {
  if (!channel_->to_worker.pop(message)) return false;
  if (message->kind == MessageKind::kBatch) current_batch_ = message->batch_id;
  return true;
}

BatchMessage WorkerEndpoint::pop_next() {
  BatchMessage message;
  for (;;) {
    if (channel_->to_worker.pop(&message)) return message;
    // Announce the sleep, then look once more: the frontend checks the flag after
    // it pushes, so either it sees the flag and signals or we see its message.
    channel_->worker_sleeping.store(1, std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (channel_->to_worker.pop(&message)) {
      channel_->worker_sleeping.store(0, std::memory_order_relaxed);
      return message;
    }
    wait_eventfd(wake_fd_);
    channel_->worker_sleeping.store(0, std::memory_order_relaxed);
  }
}

void WorkerEndpoint::complete(uint64_t batch_id, uint64_t result_offset, uint64_t result_size,
                              int32_t status) {
  uint32_t flags = kPostBatchDone | (result_offset != 0 ? kPostResponses : 0);
  post(CompletionMessage{batch_id, result_offset, result_size, status, flags});
}

bool WorkerEndpoint::respond(uint64_t batch_id, const std::vector<ResponseEntry>& responses,
                             const uint64_t timings[4], bool batch_done, bool keep_open) {
  const uint64_t size = response_block_size(responses);
  const uint64_t offset = arena_.alloc(size, batch_id);
  if (offset == 0) return false;
  write_response_block(arena_.base() + offset, responses, timings);
  stamp_output_end(arena_.base() + offset, timings);
  uint32_t flags = kPostResponses | (batch_done ? kPostBatchDone : 0) |
                   (batch_done && keep_open ? kPostKeepOpen : 0);
  post(CompletionMessage{batch_id, offset, size, kCompletionOk, flags});
  return true;
}

uint64_t WorkerEndpoint::reserve_output_major(uint64_t batch_id,
                                              const std::vector<ResponseEntry>& responses,
                                              uint64_t* runs, uint64_t* size) {
  *size = output_major_block_size(responses);
  const uint64_t offset = arena_.alloc(*size, batch_id);
  if (offset == 0) return 0;
  layout_output_major_block(arena_.base() + offset, responses, runs);
  const size_t n_runs = responses.empty() ? 0 : responses.front().outputs.size();
  for (size_t j = 0; j < n_runs; ++j) runs[j] += offset;
  return offset;
}

void WorkerEndpoint::post_block(uint64_t batch_id, uint64_t offset, uint64_t size,
                                const uint64_t timings[4], bool batch_done) {
  set_response_timings(arena_.base() + offset, timings);
  stamp_output_end(arena_.base() + offset, timings);
  post(CompletionMessage{batch_id, offset, size, kCompletionOk,
                         kPostResponses | (batch_done ? kPostBatchDone : 0)});
}

void WorkerEndpoint::end_batch(uint64_t batch_id, bool keep_open) {
  post(CompletionMessage{batch_id, 0, 0, kCompletionOk,
                         kPostBatchDone | (keep_open ? kPostKeepOpen : 0)});
}

void WorkerEndpoint::post(const CompletionMessage& message) {
  std::lock_guard<std::mutex> lock(post_mutex_);
  while (!channel_->to_frontend.push(message)) {
    // Full: the frontend has been woken for what is there; wait for it to drain.
    wake_frontend();
    usleep(50);
  }
  wake_frontend();
}

SubmitResult WorkerEndpoint::submit(uint64_t model, uint64_t tag, const SubmitRequest& request,
                                    bool wake, uint64_t trace_batch, uint32_t trace_index) {
  ScratchArray<const uint8_t*> sources(request.inputs.size());
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    if (request.inputs[i].kind != InputKind::kInline) return SubmitResult::kUnsupportedInput;
    sources[i] = static_cast<const uint8_t*>(request.inputs[i].data);
  }
  // Tagged with the running batch until the core takes it: if this worker dies
  // first, Core::instance_down reclaims it with the batch.
  const SubmitOptions& options = request.options;
  uint64_t key_offset = 0;
  const uint64_t block = place_standalone(arena_, request, sources.data(), current_batch_,
                                          options.sequence_key, &key_offset);
  if (block == 0) return SubmitResult::kArenaFull;
  SubmitMessage message{tag,
                        block,
                        model,
                        options.priority,
                        options.sequence_flags,
                        options.timeout_us,
                        options.shape_key,
                        options.sequence_id,
                        options.sequence_key.empty() ? 0 : key_offset,
                        static_cast<uint32_t>(options.sequence_key.size()),
                        SubmitKind::kSubmit,
                        trace_index,
                        trace_batch,
                        0};
  push_to_core(message);
  if (wake) wake_frontend();
  return SubmitResult::kOk;
}

void WorkerEndpoint::cancel(uint64_t tag) {
  SubmitMessage message{};
  message.tag = tag;
  message.kind = SubmitKind::kCancel;
  push_to_core(message);
  wake_frontend();
}

bool WorkerEndpoint::control(uint64_t tag, std::string_view json,
                             const std::vector<std::string_view>& files) {
  const uint32_t n_files = static_cast<uint32_t>(files.size());
  uint64_t size = control_json_offset(n_files) + json.size();
  for (const auto& file : files) size += file.size();
  const uint64_t block = arena_.alloc(size, current_batch_);
  if (block == 0) return false;
  uint8_t* base = arena_.base() + block;
  ControlHeader header{kControlMagic, n_files, json.size()};
  std::memcpy(base, &header, sizeof(header));
  uint64_t at = sizeof(ControlHeader);
  for (const auto& file : files) {
    const uint64_t file_size = file.size();
    std::memcpy(base + at, &file_size, sizeof(file_size));
    at += sizeof(file_size);
  }
  std::memcpy(base + at, json.data(), json.size());
  at += json.size();
  for (const auto& file : files) {
    if (!file.empty()) std::memcpy(base + at, file.data(), file.size());
    at += file.size();
  }
  SubmitMessage message{};
  message.tag = tag;
  message.block_offset = block;
  message.block_size = size;
  message.kind = SubmitKind::kControl;
  push_to_core(message);
  wake_frontend();
  return true;
}

void WorkerEndpoint::push_to_core(const SubmitMessage& message) {
  // to_core has one producer: a model's threads (a decoupled model's sender threads
  // may call other models too) take turns.
  std::lock_guard<std::mutex> lock(submit_mutex_);
  while (!channel_->to_core.push(message)) {
    wake_frontend();
    usleep(50);
  }
}

bool WorkerEndpoint::yield_to_frontend() {
  if (arena_.header()->notify_pending.load(std::memory_order_seq_cst) == 0) return false;
  sched_yield();
  return true;
}

void WorkerEndpoint::wake_frontend() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (arena_.header()->notify_pending.exchange(1, std::memory_order_seq_cst) == 0) {
    signal_eventfd(notify_fd_);
  }
}

}  // namespace naiad
