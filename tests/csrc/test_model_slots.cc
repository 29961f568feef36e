// ModelSlots, the core's model registry table (csrc/core/model_slots.h): handles that go
// stale when their model is removed, slots reused without reviving old handles, visits
// in slot order. Core's behaviour around it is test_registry.cc's.
#include <memory>
#include <vector>

#include "core/model_slots.h"
#include "testing.h"

using namespace naiad;

namespace {

struct Entry {
  int value;
};

std::unique_ptr<Entry> entry(int value) { return std::make_unique<Entry>(Entry{value}); }

}  // namespace

TEST(model_slots_find_what_was_added) {
  ModelSlots<Entry> slots;
  const ModelHandle a = slots.add(entry(1));
  const ModelHandle b = slots.add(entry(2));
  CHECK(a.value != b.value);
  CHECK(slots.find(a) != nullptr && slots.find(a)->value == 1);
  CHECK(slots.find(b) != nullptr && slots.find(b)->value == 2);
  CHECK(slots.find(ModelHandle{}) == nullptr);  // the null handle names no model
  CHECK(slots.find(ModelHandle::of(7, 1)) == nullptr);
}

TEST(model_slots_removed_handle_stays_stale_after_its_slot_is_reused) {
  ModelSlots<Entry> slots;
  const ModelHandle old = slots.add(entry(1));
  CHECK(slots.remove(old));
  CHECK(slots.find(old) == nullptr);
  CHECK(!slots.remove(old));  // once only
  const ModelHandle reused = slots.add(entry(2));
  CHECK(reused.slot() == old.slot());  // the freed slot first
  CHECK(reused.generation() != old.generation());
  CHECK(slots.find(old) == nullptr);
  CHECK(slots.find(reused) != nullptr && slots.find(reused)->value == 2);
}

TEST(model_slots_visit_live_models_in_slot_order) {
  ModelSlots<Entry> slots;
  const ModelHandle a = slots.add(entry(1));
  slots.add(entry(2));
  slots.add(entry(3));
  slots.remove(a);
  std::vector<int> seen;
  slots.for_each([&seen](Entry& e) { seen.push_back(e.value); });
  CHECK((seen == std::vector<int>{2, 3}));
  seen.clear();
  const bool found = slots.any_of([&seen](Entry& e) {
    seen.push_back(e.value);
    return e.value == 2;
  });
  CHECK(found);
  CHECK((seen == std::vector<int>{2}));  // stopped at the first true
  CHECK(!slots.any_of([](Entry& e) { return e.value == 9; }));
}
