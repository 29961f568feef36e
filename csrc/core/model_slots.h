#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/submit_request.h"

namespace naiad {

// The core's model registry: each model in a slot, named by a ModelHandle (slot and
// generation). Removing a model moves its slot's generation on, so a handle kept past
// the removal finds nothing rather than the slot's next model; freed slots are reused
// first. No lock of its own: Core calls every method under Core::mutex_.
template <typename Model>
class ModelSlots {
 public:
  ModelHandle add(std::unique_ptr<Model> model) {
    uint32_t slot;
    if (!free_.empty()) {
      slot = free_.back();
      free_.pop_back();
    } else {
      slot = static_cast<uint32_t>(slots_.size());
      slots_.emplace_back();
    }
    slots_[slot].model = std::move(model);
    return ModelHandle::of(slot, slots_[slot].generation);
  }

  // The handle's model, or null when it was removed (or never added).
  Model* find(ModelHandle handle) const {
    const uint32_t slot = handle.slot();
    if (slot >= slots_.size()) return nullptr;
    const Slot& entry = slots_[slot];
    return entry.generation == handle.generation() ? entry.model.get() : nullptr;
  }

  // Frees the handle's slot; false when the handle finds no model.
  bool remove(ModelHandle handle) {
    if (find(handle) == nullptr) return false;
    Slot& entry = slots_[handle.slot()];
    entry.model.reset();
    if (++entry.generation == 0) entry.generation = 1;  // 0 would make a null handle valid
    free_.push_back(handle.slot());
    return true;
  }

  // Calls `visit(Model&)` for each model, in slot order, until one returns true (then
  // true). Models must not be added or removed meanwhile.
  template <typename Visit>
  bool any_of(Visit&& visit) const {
    for (const Slot& entry : slots_) {
      if (entry.model && visit(*entry.model)) return true;
    }
    return false;
  }
  // Calls `visit(Model&)` for each model, in slot order (no adding or removing).
  template <typename Visit>
  void for_each(Visit&& visit) const {
    for (const Slot& entry : slots_) {
      if (entry.model) visit(*entry.model);
    }
  }

 private:
  struct Slot {
    uint32_t generation = 1;
    std::unique_ptr<Model> model;  // null while the slot is free
  };
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_;  // slots of removed models
};

}  // namespace naiad
