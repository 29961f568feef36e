#include "core/bls_router.h"

#include <cstring>
#include <string>
#include <vector>

#include "core/core.h"
#include "ipc/ipc_schema.h"
#include "ipc/request_block.h"

namespace naiad {

void BlsRouter::erase(uint64_t request_id) {
  auto route = routes_.find(request_id);
  if (route != routes_.end()) erase(route);
}

void BlsRouter::drop_instance(uint32_t instance_id) {
  for (auto route = routes_.begin(); route != routes_.end();) {
    route = route->second.instance_id == instance_id ? routes_.erase(route) : std::next(route);
  }
}

uint64_t BlsRouter::trace_parent_of(uint32_t instance_id, const SubmitMessage& message) const {
  if (message.trace_index == 0 || !core_.traces_.any()) return 0;
  auto batch = core_.in_flight_.find(message.trace_batch);
  if (batch == core_.in_flight_.end() || batch->second.instance_id != instance_id) return 0;
  const size_t index = message.trace_index - 1;
  if (index >= batch->second.requests.size()) return 0;
  const uint64_t parent = batch->second.requests[index].id;
  return core_.traces_.tracks(parent) ? parent : 0;
}

void BlsRouter::erase(Routes::iterator route) {
  CoreInstance* submitter = core_.find_instance_locked(route->second.instance_id);
  if (submitter != nullptr && submitter->routed != 0) --submitter->routed;
  routes_.erase(route);
}

void BlsRouter::refuse(uint64_t request_id, uint32_t status) {
  auto route = routes_.find(request_id);
  if (route == routes_.end()) return;
  if (core_.traces_.any()) core_.traces_.end_child(request_id, nullptr, core_.clock_());
  if (route->second.instance_id == kEnsembleRoute) {  // an ensemble's step
    routes_.erase(route);
    core_.ensembles_.step_refused(request_id, kRefusedQueued | status);
    return;
  }
  CoreInstance* submitter = core_.find_instance_locked(route->second.instance_id);
  if (submitter != nullptr) {
    core_.send_to_worker_locked(
        *submitter,
        BatchMessage{route->second.tag, 0, kRefusedQueued | status, MessageKind::kRefused, 0});
  }
  erase(route);
}

bool BlsRouter::route_responses(CoreBatch& batch, const ResponseBlockView* view) {
  bool for_frontend = false;
  if (view == nullptr) {
    for (const QueuedRequest& r : batch.requests) {
      if (routes_.count(r.id) != 0) {
        refuse(r.id, kCompletionWorkerFailed);
      } else {
        for_frontend = true;
      }
    }
    return for_frontend;
  }
  std::vector<uint64_t> stats;  // RoutedStats of the routed requests finished here
  const uint64_t now = core_.clock_();
  for (uint32_t r = 0; r < view->header->n_responses; ++r) {
    const ResponseRecord& record = view->records[r];
    if (record.request_index >= batch.requests.size()) continue;
    const QueuedRequest& queued = batch.requests[record.request_index];
    const uint64_t id = queued.id;
    auto route = routes_.find(id);
    if (route == routes_.end()) {
      for_frontend = true;
      continue;
    }
    if ((record.flags & kResponseFinal) != 0) {
      if (stats.empty()) stats.assign(kRoutedStatsSize, 0);
      const uint64_t took = now > queued.enqueue_ns ? now - queued.enqueue_ns : 0;
      if (response_counts_as_failure(record.flags)) {
        stats[kRoutedFailed] += 1;
        stats[kRoutedFailedRows] += queued.batch_size;
        stats[kRoutedFailedNs] += took;
      } else {
        stats[kRoutedCount] += 1;
        stats[kRoutedRows] += queued.batch_size;
        if (batch.dispatch_ns > queued.enqueue_ns) {
          stats[kRoutedQueueNs] += batch.dispatch_ns - queued.enqueue_ns;
        }
        stats[kRoutedRequestNs] += took;
      }
    }
    if (core_.traces_.any()) {
      if (core_.traces_.child_keeps_tensors(id))
        core_.traces_.child_outputs(id, entry_of(*view, r));
      if ((record.flags & kResponseFinal) != 0)
        core_.traces_.end_child(id, view->header->timings, core_.clock_());
    }
    if (route->second.instance_id == kEnsembleRoute) {  // an ensemble's step
      if ((record.flags & kResponseFinal) != 0) routes_.erase(route);
      core_.ensembles_.step_response(id, *view, r);
      continue;
    }
    // The submitter gets the response in a block of its own (a copy: the block is
    // shared with the batch's other requests), tagged with the batch it is running so
    // its death reclaims the block.
    CoreInstance* submitter = core_.find_instance_locked(route->second.instance_id);
    if (submitter == nullptr) {  // freed: nobody is waiting for the response
      routes_.erase(route);
      continue;
    }
    const uint64_t owner = core_.running_batch_locked(submitter->id);
    std::vector<ResponseEntry> entries{entry_of(*view, r)};
    const uint64_t size = response_block_size(entries);
    const uint64_t block = core_.arena_.alloc(size, owner);
    if (block == 0) {
      refuse(id, kCompletionWorkerFailed);
      continue;
    }
    write_response_block(core_.arena_.base() + block, entries, view->header->timings);
    core_.send_to_worker_locked(
        *submitter, BatchMessage{route->second.tag, block, 0, MessageKind::kResponse, size});
    if ((record.flags & kResponseFinal) != 0) erase(route);
  }
  if (!stats.empty()) {
    for (int t = 1; t < 4; ++t) stats[kRoutedComputeInputNs + t - 1] = view->header->timings[t];
    bool whole = stats[kRoutedCount] + stats[kRoutedFailed] == batch.requests.size();
    stats[kRoutedWholeBatch] = whole ? 1 : 0;
    core_.done_.push_back(Completion{batch.id, kCompletionRouted, batch.instance_id, 0, 0,
                                     batch.dispatch_ns, std::move(stats)});
  }
  return for_frontend;
}

void BlsRouter::take_submits(CoreInstance& instance) {
  const uint32_t instance_id = instance.id;
  Channel* ch = core_.channel(instance);
  auto block_metadata = [this](uint64_t block) {  // a traced call's, for its request id
    const RequestHeader* header = core_.arena_.at<RequestHeader>(block);
    return std::string_view(
        reinterpret_cast<const char*>(core_.arena_.base() + block +
                                      request_metadata_offset(header->n_inputs)),
        header->metadata_size);
  };
  SubmitMessage message;
  while (ch->to_core.pop(&message)) {
    if (message.kind == SubmitKind::kCancel) {
      cancel(instance_id, message.tag);
      continue;
    }
    if (message.kind == SubmitKind::kControl) {
      take_control(instance, message);
      continue;
    }
    uint32_t refused = 0;
    const uint64_t block = message.block_offset;
    const uint64_t heap_begin = core_.arena_.header()->heap_begin;
    const bool readable =
        request_block_fits(core_.arena_.base(), core_.arena_.size(), heap_begin, block);
    // A string correlation id lies in the block, after its inputs.
    const uint64_t key_offset = message.sequence_key_offset;
    const uint64_t key_size = message.sequence_key_size;
    const bool key_readable =
        key_size == 0 || (key_offset > block && key_offset <= core_.arena_.size() &&
                          key_size <= core_.arena_.size() - key_offset);
    const std::string_view key =
        key_size == 0 || !key_readable
            ? std::string_view()
            : std::string_view(reinterpret_cast<const char*>(core_.arena_.base() + key_offset),
                               key_size);
    Core::Model* model = readable ? core_.find_locked(ModelHandle{message.model}) : nullptr;
    // A call made with trace=request.trace() of a traced request: a child trace.
    const uint64_t trace_parent = readable ? trace_parent_of(instance_id, message) : 0;
    const uint64_t request_start_ns = trace_parent != 0 ? core_.clock_() : 0;
    // How the call asks to be scheduled; an ensemble's steps ask the same.
    SubmitOptions options;
    if (readable && key_readable) {
      options.batch_size = core_.arena_.at<RequestHeader>(block)->batch_size;
      options.priority = message.priority;
      options.timeout_us = message.timeout_us;
      options.shape_key = message.shape_key;
      options.sequence_id = message.sequence_id;
      options.sequence_key = key;
      options.sequence_flags = message.sequence_flags;
    }
    if (!readable) {
      refused = static_cast<uint32_t>(SubmitResult::kUnsupportedInput);
    } else if (!key_readable) {
      refused = static_cast<uint32_t>(SubmitResult::kUnsupportedInput);
      core_.arena_.free(block);
    } else if (model == nullptr) {
      refused = static_cast<uint32_t>(SubmitResult::kModelGone);
      core_.arena_.free(block);
    } else if (model->ensemble) {
      core_.arena_.set_tag(block, 0);
      const uint64_t id = next_id_++;
      QueuedRequest request{id, block, 0, options.batch_size, message.shape_key, 0, 0};
      core_.ensembles_.queue(message.model, request, {instance_id, message.tag},
                             ensemble_options(options));
      routes_[id] = Route{instance_id, message.tag};
      ++instance.routed;
      if (trace_parent != 0) {
        core_.traces_.start_child(trace_parent, id, message.model, block_metadata(block),
                                  request_start_ns, core_.clock_(), block);
      }
    } else {
      core_.arena_.set_tag(block, 0);  // the core's now, whatever happens to the submitter
      const uint64_t id = next_id_++;
      QueuedRequest request{id, block, 0, options.batch_size, message.shape_key, 0, 0};
      const uint64_t queue_start_ns = core_.clock_();
      const SubmitResult queued =
          submit_result_of(model->scheduler->enqueue(request, options, queue_start_ns));
      if (queued != SubmitResult::kOk) {
        refused = static_cast<uint32_t>(queued);
        core_.arena_.free(block);
      } else {
        routes_[id] = Route{instance_id, message.tag};
        ++instance.routed;
        if (trace_parent != 0) {
          core_.traces_.start_child(trace_parent, id, message.model, block_metadata(block),
                                    request_start_ns, queue_start_ns, block);
        }
      }
    }
    if (refused != 0) {
      core_.send_to_worker_locked(instance,
                                  BatchMessage{message.tag, 0, refused, MessageKind::kRefused, 0});
    }
  }
}

void BlsRouter::take_control(CoreInstance& instance, const SubmitMessage& message) {
  const uint64_t block = message.block_offset;
  const uint64_t size = message.block_size;
  const uint64_t heap_begin = core_.arena_.header()->heap_begin;
  // The frontend reads it: it must lie in the heap, its header inside it.
  const bool readable = block >= heap_begin && block < core_.arena_.size() &&
                        size >= sizeof(ControlHeader) && size <= core_.arena_.size() - block &&
                        core_.arena_.at<ControlHeader>(block)->magic == kControlMagic;
  if (!readable) {
    core_.send_to_worker_locked(instance,
                                BatchMessage{message.tag, 0, 0, MessageKind::kControlReply, 0});
    return;
  }
  core_.arena_.set_tag(block, 0);  // the frontend's now, whatever happens to the worker
  core_.done_.push_back(
      Completion{message.tag, kCompletionControl, instance.id, block, size, 0, {}});
}

void BlsRouter::cancel(uint32_t instance_id, uint64_t tag) {
  // Few of a worker's requests are in flight at once: a scan finds the one.
  for (const auto& route : routes_) {
    if (route.second.instance_id != instance_id || route.second.tag != tag) continue;
    core_.cancel_locked(route.first);
    return;
  }
}

bool BlsRouter::reply_control(uint32_t instance_id, uint64_t tag, std::string_view json) {
  CoreInstance* instance = core_.find_instance_locked(instance_id);
  if (instance == nullptr || !instance->running) return false;
  // Tagged with the batch it runs (if any), so the worker's death reclaims the block.
  const uint64_t owner = core_.running_batch_locked(instance_id);
  const uint64_t block = core_.arena_.alloc(json.size() == 0 ? 1 : json.size(), owner);
  if (block == 0) return false;
  if (!json.empty()) std::memcpy(core_.arena_.base() + block, json.data(), json.size());
  core_.send_to_worker_locked(*instance,
                              BatchMessage{tag, block, 0, MessageKind::kControlReply, json.size()});
  return true;
}

}  // namespace naiad
