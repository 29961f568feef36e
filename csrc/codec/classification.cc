#include "codec/classification.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "codec/datatype.h"
#include "codec/trace_tensor.h"

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

}  // namespace

bool classify(std::string_view datatype, const uint8_t* data, size_t size,
              const std::vector<int64_t>& shape, bool batching, uint64_t count,
              const std::vector<std::string>& labels, Classification* out, std::string* error) {
  // Numbers only: BOOL, FP16, BF16 and BYTES have no order here.
  const Datatype* type = find_datatype(datatype);
  TopK rank = nullptr;
  if (type != nullptr) {
    visit_number_type(*type, [&](auto zero) { rank = top_k<decltype(zero)>; });
  }
  if (rank == nullptr) {
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
  const size_t item_bytes = item_elements * type->size;
  out->data.clear();
  size_t offset = 0;
  for (size_t item = 0; item < std::max<size_t>(batch, 1); ++item) {
    // An item past the data has no values (Triton reads it as empty too).
    size_t elements = offset + item_bytes > size ? 0 : item_elements;
    rank(data + offset, elements, count, labels, &out->data);
    offset += item_bytes;
  }
  out->shape.clear();
  if (batched) out->shape.push_back(static_cast<int64_t>(batch));
  out->shape.push_back(static_cast<int64_t>(std::min<uint64_t>(count, item_elements)));
  return true;
}

bool classify_outputs(const ModelSpec& model, const std::vector<ClassifiedOutput>& wanted,
                      InferResponse* response, std::deque<Classification>* kept,
                      std::string* error) {
  static const std::vector<std::string> kNoLabels;
  const bool batching = model.max_batch_size > 0;
  for (const ClassifiedOutput& w : wanted) {
    if (w.output >= model.outputs_json.size()) continue;
    // The result block names outputs as JSON text, as outputs_json holds them.
    const std::string& name = model.outputs_json[w.output];
    for (ResponseOutput& o : response->outputs) {
      if (o.name != name || o.in_shm) continue;
      const std::vector<std::string>& labels =
          w.output < model.output_labels.size() ? model.output_labels[w.output] : kNoLabels;
      Classification& c = kept->emplace_back();
      if (!classify(o.datatype, o.data, o.size, shape_dims(o.shape), batching, w.count, labels, &c,
                    error)) {
        return false;
      }
      c.shape_json = "[";
      for (size_t i = 0; i < c.shape.size(); ++i) {
        if (i != 0) c.shape_json.push_back(',');
        c.shape_json += std::to_string(c.shape[i]);
      }
      c.shape_json.push_back(']');
      o.datatype = "BYTES";
      o.shape = c.shape_json;
      o.data = reinterpret_cast<const uint8_t*>(c.data.data());
      o.size = c.data.size();
    }
  }
  return true;
}

}  // namespace naiad
