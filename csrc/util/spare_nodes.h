// Spare nodes of a std::unordered_map whose entries come and go once per request (the
// codec's recipes, the HTTP loop's requests in flight): an erased entry's node is kept
// and the next insert reuses it, so that a request on the lane allocates no node.
// Single-threaded, as the map it serves.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace naiad {

template <typename Map>
class SpareNodes {
 public:
  explicit SpareNodes(size_t most) : most_(most) {}

  // The entry for `key`, in a spare node if there is one. An entry already there is
  // returned as it is (as operator[] does; request ids are unique, so never).
  typename Map::mapped_type& insert(Map& map, const typename Map::key_type& key) {
    if (spare_.empty()) return map[key];
    typename Map::node_type node = std::move(spare_.back());
    spare_.pop_back();
    node.key() = key;
    auto inserted = map.insert(std::move(node));
    if (!inserted.inserted) spare_.push_back(std::move(inserted.node));
    return inserted.position->second;
  }

  // Erases the entry at `at`. Its node is kept (at most `most`), its value first
  // passed to `reset`, which must leave it as a new one (its room may stay).
  template <typename Reset>
  void erase(Map& map, typename Map::iterator at, Reset reset) {
    typename Map::node_type node = map.extract(at);
    if (spare_.size() >= most_) return;  // freed with `node`
    reset(node.mapped());
    spare_.push_back(std::move(node));
  }

  size_t spare() const { return spare_.size(); }

 private:
  size_t most_;
  std::vector<typename Map::node_type> spare_;
};

}  // namespace naiad
