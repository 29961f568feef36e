#include "core/trace_table.h"

#include <cstring>
#include <utility>

#include "ipc/ipc_schema.h"
#include "ipc/request_block.h"

namespace naiad {

void TraceTable::start_root(uint64_t request_id, const TraceStamps& stamps, bool tensors) {
  stamps_[request_id] = stamps;
  Node& node = nodes_[request_id];
  node.root = request_id;
  node.tensors = tensors;
  node.trace.span = stamps.span;
}

bool TraceTable::take_stamps(uint64_t request_id, TraceStamps* stamps) {
  auto found = stamps_.find(request_id);
  if (found == stamps_.end()) return false;
  *stamps = found->second;
  stamps_.erase(found);
  return true;
}

std::vector<ChildTrace> TraceTable::take_children(uint64_t root) {
  nodes_.erase(root);
  std::vector<ChildTrace> children;
  auto found = done_.find(root);
  if (found != done_.end()) {
    children = std::move(found->second);
    done_.erase(found);
  }
  return children;
}

void TraceTable::start_child(uint64_t parent, uint64_t request_id, uint64_t model,
                             std::string_view metadata, uint64_t request_start_ns,
                             uint64_t queue_start_ns, uint64_t block) {
  auto found = nodes_.find(parent);
  if (found == nodes_.end()) return;
  const uint64_t root = found->second.root;
  auto root_node = nodes_.find(root);
  if (root_node == nodes_.end()) return;  // the root's trace is written already
  const bool tensors = root_node->second.tensors;
  const SpanContext root_span = root_node->second.trace.span;
  Node& node = nodes_[request_id];
  node.root = root;
  node.tensors = tensors;
  if (root_span.span_id != 0) {
    // A span of the root's trace. The child is not dispatched yet (its block goes to a
    // worker under Core::mutex_, later), so its model reads the context written here.
    node.trace.span =
        new_span(root_span.trace_id_high, root_span.trace_id_low, root_span.trace_flags);
    if (block != 0) arena_.at<RequestHeader>(block)->span = node.trace.span;
  }
  if (tensors && block != 0) {
    append_request_tensors(&node.trace.tensors, arena_.base(), arena_.size(), block);
  }
  node.trace.request_id = request_id;
  node.trace.parent = parent;
  node.trace.model = model;
  node.trace.id = request_id_text(metadata);
  node.trace.request_start_ns = request_start_ns;
  node.trace.queue_start_ns = queue_start_ns;
}

bool TraceTable::child_keeps_tensors(uint64_t request_id) const {
  auto found = nodes_.find(request_id);
  return found != nodes_.end() && found->second.root != request_id && found->second.tensors;
}

void TraceTable::child_outputs(uint64_t request_id, const ResponseEntry& response) {
  auto found = nodes_.find(request_id);
  if (found == nodes_.end() || found->second.root == request_id) return;
  append_response_tensors(&found->second.trace.tensors, response.json, response.outputs);
}

void TraceTable::end_child(uint64_t request_id, const uint64_t* timings, uint64_t now_ns) {
  auto found = nodes_.find(request_id);
  if (found == nodes_.end() || found->second.root == request_id) return;
  ChildTrace& trace = found->second.trace;
  if (timings != nullptr) std::memcpy(trace.timings, timings, sizeof trace.timings);
  trace.request_end_ns = now_ns;
  const uint64_t root = found->second.root;
  if (nodes_.count(root) != 0) done_[root].push_back(std::move(trace));
  nodes_.erase(found);
}

}  // namespace naiad
