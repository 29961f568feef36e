#include "core/ensemble_host.h"

#include <cstddef>
#include <utility>

#include "core/core.h"
#include "ipc/ipc_schema.h"
#include "util/scratch_array.h"

namespace naiad {

Arena& CoreEnsembleHost::ensemble_arena() { return core_.arena_; }
uint64_t CoreEnsembleHost::ensemble_now() { return core_.clock_(); }
uint64_t CoreEnsembleHost::new_step_id() { return core_.bls_.new_id(); }
bool CoreEnsembleHost::traced(uint64_t request_id) { return core_.traces_.tracks(request_id); }
void CoreEnsembleHost::cancel_step(uint64_t step_id) { core_.cancel_locked(step_id); }

bool CoreEnsembleHost::cancel(uint64_t request_id) {
  for (size_t i = 0; i < starts_.size(); ++i) {
    if (starts_[i].request.id != request_id) continue;
    const Start start = starts_[i];
    starts_.erase(starts_.begin() + static_cast<std::ptrdiff_t>(i));
    const uint64_t none[4] = {0, 0, 0, 0};
    answer_ensemble(start.model, start.request, start.origin, {}, none, kCompletionCancelled);
    release_request(start.request);
    return true;
  }
  return scheduler_.cancel(request_id);
}

bool CoreEnsembleHost::start_waiting() {
  const size_t before = core_.done_.size();
  std::vector<Start> starts;
  starts.swap(starts_);
  for (const Start& start : starts) {
    const uint64_t none[4] = {0, 0, 0, 0};
    // The scheduler reads the block's inputs from the arena: those submit left in a
    // client's region come in first (a batch would copy them at dispatch).
    if (!core_.assembler_.fill_from_regions(start.request.offset)) {
      answer_ensemble(start.model, start.request, start.origin, {}, none,
                      kCompletionWorkerFailed);  // cannot happen: the submitter holds it
      release_request(start.request);
      continue;
    }
    const SubmitResult result =
        scheduler_.start(start.model, start.request, start.origin, start.options);
    if (result == SubmitResult::kOk) continue;
    // No graph: the ensemble is not served (removed, or its graph not set yet).
    answer_ensemble(start.model, start.request, start.origin, {}, none, kCompletionModelGone);
    release_request(start.request);
  }
  return core_.done_.size() != before;
}

SubmitResult CoreEnsembleHost::queue_step(ModelHandle handle, const SubmitRequest& request,
                                          uint64_t trace_parent) {
  Core::Model* model = core_.find_locked(handle);
  if (model == nullptr) return SubmitResult::kModelGone;
  const uint64_t request_start_ns = trace_parent != 0 ? core_.clock_() : 0;
  ScratchArray<const uint8_t*> sources(request.inputs.size());
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    sources[i] = static_cast<const uint8_t*>(request.inputs[i].data);
  }
  // The one copy of the step's inputs (from the ensemble's request or an earlier
  // step's response) into its request block; the assembler's lock nests in ours.
  const uint64_t offset = core_.assembler_.place(handle.value, request, sources.data());
  if (offset == 0) return SubmitResult::kArenaFull;
  const SubmitOptions& options = request.options;
  QueuedRequest queued{request.request_id, offset, 0, options.batch_size, options.shape_key, 0, 0};
  if (model->ensemble) {  // an ensemble as a step: started from the next dispatch's top
    queue(handle.value, queued, {EnsembleOrigin::kStep, request.request_id},
          ensemble_options(options));
    if (trace_parent != 0) {
      core_.traces_.start_child(trace_parent, request.request_id, handle.value, request.metadata,
                                request_start_ns, core_.clock_(), offset);
    }
    return SubmitResult::kOk;
  }
  const uint64_t queue_start_ns = core_.clock_();
  const SubmitResult result =
      submit_result_of(model->scheduler->enqueue(queued, options, queue_start_ns));
  if (result != SubmitResult::kOk) {
    core_.assembler_.release(offset);
    return result;
  }
  core_.bls_.add(request.request_id, {BlsRouter::kEnsembleRoute, 0});
  if (trace_parent != 0) {
    core_.traces_.start_child(trace_parent, request.request_id, handle.value, request.metadata,
                              request_start_ns, queue_start_ns, offset);
  }
  return result;
}

void CoreEnsembleHost::release_request(const QueuedRequest& request) {
  std::vector<QueuedRequest> done{request};
  core_.assembler_.release(done);
}

void CoreEnsembleHost::answer_ensemble(uint64_t model, const QueuedRequest& request,
                                       const EnsembleOrigin& origin,
                                       const std::vector<ResponseEntry>& entries,
                                       const uint64_t timings[4], int32_t status) {
  // A decoupled ensemble's responses before its last leave the request running: it is
  // counted, its trace ended and its route dropped with the last.
  const bool final = entries.empty() || (entries[0].flags & kResponseFinal) != 0;
  const bool counted = final && !entries.empty() && (entries[0].flags & kResponseError) == 0;
  answer_traces(request, entries, final);
  if (origin.instance == EnsembleOrigin::kStep) {  // a step of another ensemble
    const uint64_t step_id = origin.tag;
    if (status != kCompletionOk || entries.empty()) {
      scheduler_.step_refused(step_id, kRefusedQueued | static_cast<uint32_t>(status));
      return;
    }
    if (counted) count(model, request, timings);
    const uint64_t size = response_block_size(entries);
    std::vector<uint8_t> block(size);
    write_response_block(block.data(), entries, timings);
    ResponseBlockView view;
    if (view_response_block(block.data(), size, &view)) {
      scheduler_.step_response(step_id, view, 0);
    } else {
      scheduler_.step_refused(step_id, kRefusedQueued | kCompletionWorkerFailed);
    }
    return;
  }
  const uint64_t size = entries.empty() ? 0 : response_block_size(entries);
  if (origin.instance == EnsembleOrigin::kFrontend) {
    uint64_t block = 0;
    if (status == kCompletionOk && size != 0) {
      block = core_.arena_.alloc(size, 0);
      if (block == 0) {
        status = kCompletionArenaFull;
      } else {
        write_response_block(core_.arena_.base() + block, entries, timings);
      }
    }
    core_.done_.push_back(Completion{block != 0 ? core_.next_batch_id_++ : 0,
                                     status,
                                     kNoInstance,
                                     block,
                                     block != 0 ? size : 0,
                                     timings[0],
                                     {request.id}});
    return;
  }
  // A worker's request: answered on its ring unless the worker died meanwhile.
  const BlsRouter::Route* route = core_.bls_.find(request.id);
  if (route == nullptr) return;
  const uint64_t tag = route->tag;
  Core::Instance* submitter = core_.find_instance_locked(route->instance_id);
  if (submitter == nullptr) {
    core_.bls_.erase(request.id);
    return;
  }
  const uint64_t owner = core_.running_batch_locked(submitter->id);
  const uint64_t block = status == kCompletionOk && size != 0 ? core_.arena_.alloc(size, owner) : 0;
  if (block == 0) {
    const uint32_t failed =
        status == kCompletionOk ? uint32_t{kCompletionArenaFull} : static_cast<uint32_t>(status);
    core_.send_to_worker_locked(
        *submitter, BatchMessage{tag, 0, kRefusedQueued | failed, MessageKind::kRefused, 0});
    // The caller heard the end; the ensemble's later responses find no route.
    core_.bls_.erase(request.id);
    return;
  }
  write_response_block(core_.arena_.base() + block, entries, timings);
  core_.send_to_worker_locked(*submitter,
                              BatchMessage{tag, block, 0, MessageKind::kResponse, size});
  if (counted) count(model, request, timings);
  if (final) core_.bls_.erase(request.id);
}

void CoreEnsembleHost::answer_traces(const QueuedRequest& request,
                                     const std::vector<ResponseEntry>& entries, bool final) {
  // A traced ensemble that is a step or a BLS call ends its child trace (no compute).
  if (!core_.traces_.any()) return;
  if (core_.traces_.child_keeps_tensors(request.id)) {
    for (const ResponseEntry& entry : entries) core_.traces_.child_outputs(request.id, entry);
  }
  if (final) core_.traces_.end_child(request.id, nullptr, core_.clock_());
}

void CoreEnsembleHost::finish_ensemble(uint64_t model, const QueuedRequest& request,
                                       const EnsembleOrigin& origin,
                                       const std::vector<ResponseEntry>& entries,
                                       const uint64_t timings[4], int32_t status, bool decoupled,
                                       std::vector<uint64_t> blocks) {
  const bool gather = origin.instance == EnsembleOrigin::kFrontend && !decoupled &&
                      status == kCompletionOk && entries.size() == 1 &&
                      (entries[0].flags & (kResponseFinal | kResponseError)) == kResponseFinal;
  if (!gather) {
    answer_ensemble(model, request, origin, entries, timings, status);
    for (uint64_t block : blocks) core_.arena_.free(block);
    release_request(request);
    return;
  }
  answer_traces(request, entries, true);
  Gathered& group = gathered_[model];
  if (group.requests.empty()) {
    group.done_index = core_.done_.size();
    core_.done_.push_back(Completion{0, kCompletionOk, kNoInstance, 0, 0, timings[0], {}});
  }
  ResponseEntry entry = entries[0];
  entry.request_index = static_cast<uint32_t>(group.entries.size());
  entry.json = group.jsons.emplace_back(entries[0].json);
  group.entries.push_back(std::move(entry));
  group.started.push_back(timings[0]);
  group.compute_ns += timings[2];
  group.requests.push_back(request);
  group.blocks.insert(group.blocks.end(), blocks.begin(), blocks.end());
  core_.done_[group.done_index].request_ids.push_back(request.id);
}

void CoreEnsembleHost::write_gathered() {
  for (auto& [model, group] : gathered_) {
    Completion& done = core_.done_[group.done_index];
    const size_t n = group.entries.size();
    // One request's answer is the block it always had; more carry their starts.
    const bool started_each = n > 1;
    const uint64_t timings[4] = {group.started[0], 0, group.compute_ns / n, 0};
    const uint64_t size = response_block_size(group.entries, started_each);
    const uint64_t block = core_.arena_.alloc(size, 0);
    if (block == 0) {
      done.status = kCompletionArenaFull;
    } else {
      write_response_block(core_.arena_.base() + block, group.entries, timings,
                           started_each ? group.started.data() : nullptr);
      done.batch_id = core_.next_batch_id_++;
      done.result_offset = block;
      done.result_size = size;
    }
    for (uint64_t kept : group.blocks) core_.arena_.free(kept);
    core_.assembler_.release(group.requests);
  }
  gathered_.clear();
}

void CoreEnsembleHost::count(uint64_t model, const QueuedRequest& request,
                             const uint64_t timings[4]) {
  // The ensemble's statistics count the request, as for a client's.
  const uint64_t took = core_.clock_() - timings[0];
  std::vector<uint64_t> stats(kRoutedStatsSize, 0);
  stats[kRoutedCount] = 1;
  stats[kRoutedRows] = request.batch_size;
  stats[kRoutedRequestNs] = took;
  stats[kRoutedComputeInferNs] = timings[2];
  stats[kRoutedWholeBatch] = 1;
  core_.done_.push_back(
      Completion{model, kCompletionRouted, kNoInstance, 0, 0, timings[0], std::move(stats)});
}

}  // namespace naiad
