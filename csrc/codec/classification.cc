#include "codec/classification.h"

#include <algorithm>
#include <cstring>
#include <numeric>

namespace naiad {

namespace {

void append_entry(const std::string& text, std::string* out) {
  uint32_t length = static_cast<uint32_t>(text.size());
  char prefix[4];
  std::memcpy(prefix, &length, sizeof(length));  // little-endian hosts, as the wire
  out->append(prefix, sizeof(prefix));
  out->append(text);
}

// One batch item of `elements` values at `base` (maybe unaligned: copied out first).
template <typename T>
void top_k(const uint8_t* base, size_t elements, uint64_t count,
           const std::vector<std::string>& labels, std::string* out) {
  std::vector<T> values(elements);
  if (elements != 0) std::memcpy(values.data(), base, elements * sizeof(T));
  std::vector<size_t> order(elements);
  std::iota(order.begin(), order.end(), 0);
  // The same algorithm and comparison as Triton's: equal values come out in the order
  // std::sort leaves them, which is what a client compares against.
  std::sort(order.begin(), order.end(),
            [&values](size_t a, size_t b) { return values[a] > values[b]; });
  const size_t k = std::min<uint64_t>(elements, count);
  for (size_t i = 0; i < k; ++i) {
    size_t index = order[i];
    std::string text = std::to_string(values[index]) + ":" + std::to_string(index);
    if (index < labels.size() && !labels[index].empty()) {
      text += ":";
      text += labels[index];
    }
    append_entry(text, out);
  }
}

using TopK = void (*)(const uint8_t*, size_t, uint64_t, const std::vector<std::string>&,
                      std::string*);

struct Kind {
  std::string_view name;
  size_t size;
  TopK top_k;
};

// UINT8 and INT8 print as numbers: std::to_string takes them as int.
constexpr Kind kKinds[] = {
    {"UINT8", 1, top_k<uint8_t>},   {"UINT16", 2, top_k<uint16_t>}, {"UINT32", 4, top_k<uint32_t>},
    {"UINT64", 8, top_k<uint64_t>}, {"INT8", 1, top_k<int8_t>},     {"INT16", 2, top_k<int16_t>},
    {"INT32", 4, top_k<int32_t>},   {"INT64", 8, top_k<int64_t>},   {"FP32", 4, top_k<float>},
    {"FP64", 8, top_k<double>},
};

}  // namespace

bool classify(std::string_view datatype, const uint8_t* data, size_t size,
              const std::vector<int64_t>& shape, bool batching, uint64_t count,
              const std::vector<std::string>& labels, Classification* out, std::string* error) {
  const Kind* kind = nullptr;
  for (const Kind& candidate : kKinds) {
    if (candidate.name == datatype) kind = &candidate;
  }
  if (kind == nullptr) {
    *error = "class result not available for output due to unsupported type '" +
             std::string(datatype) + "'";
    return false;
  }
  const bool batched = batching && !shape.empty();
  const size_t batch = batched ? static_cast<size_t>(std::max<int64_t>(shape[0], 0)) : 0;
  size_t item_elements = 1;
  for (size_t i = batched ? 1 : 0; i < shape.size(); ++i) {
    item_elements *= static_cast<size_t>(std::max<int64_t>(shape[i], 0));
  }
  const size_t item_bytes = item_elements * kind->size;
  out->data.clear();
  size_t offset = 0;
  for (size_t item = 0; item < std::max<size_t>(batch, 1); ++item) {
    // An item past the data has no values (Triton reads it as empty too).
    size_t elements = offset + item_bytes > size ? 0 : item_elements;
    kind->top_k(data + offset, elements, count, labels, &out->data);
    offset += item_bytes;
  }
  out->shape.clear();
  if (batched) out->shape.push_back(static_cast<int64_t>(batch));
  out->shape.push_back(static_cast<int64_t>(std::min<uint64_t>(count, item_elements)));
  return true;
}

}  // namespace naiad
