// Trace extension: the order Triton 2.51 writes the traces of one tree (a traced
// request and its child traces: ensemble steps, BLS calls made with trace=) in.
// Triton keeps each trace's records in a std::unordered_map keyed by trace id,
// inserted as each trace reports its first activity, and writes the map in its
// iteration order when the tree is released (server src/tracer.cc,
// TraceSetting::WriteTrace). The same container gives the same order: newest first
// while the tree fits the map's first buckets, then as its rehashing leaves it.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

namespace naiad {

// `ids`: the tree's trace ids in the order their traces started.
inline std::vector<uint64_t> trace_tree_order(const std::vector<uint64_t>& ids) {
  std::unordered_map<uint64_t, bool> streams;
  for (uint64_t id : ids) streams.emplace(id, true);
  std::vector<uint64_t> order;
  order.reserve(streams.size());
  for (const auto& stream : streams) order.push_back(stream.first);
  return order;
}

}  // namespace naiad
