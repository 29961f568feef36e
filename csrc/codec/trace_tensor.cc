#include "codec/trace_tensor.h"

#include <cstdio>
#include <cstring>
#include <type_traits>

#include "codec/datatype.h"
#include "codec/json_reader.h"
#include "ipc/ipc_schema.h"
#include "util/unaligned.h"

namespace naiad {

namespace {

// The elements of a fixed-size type, each written by `put`, comma separated.
template <typename T, typename Put>
void append_values(std::string* out, const uint8_t* data, uint64_t size, uint64_t count, Put put) {
  const uint64_t fit = data == nullptr ? 0 : size / sizeof(T);
  if (count > fit) count = fit;
  for (uint64_t e = 0; e < count; ++e) {
    if (e) out->push_back(',');
    put(out, load_unaligned<T>(data + e * sizeof(T)));
  }
}

void put_integer(std::string* out, long long value) { *out += std::to_string(value); }
void put_unsigned(std::string* out, unsigned long long value) { *out += std::to_string(value); }

// std::ostream's default for a float or double: %g with 6 significant digits.
void put_real(std::string* out, double value) {
  char text[32];
  int length = std::snprintf(text, sizeof(text), "%g", value);
  if (length > 0) out->append(text, static_cast<size_t>(length));
}

void append_bytes(std::string* out, const uint8_t* data, uint64_t size, uint64_t count) {
  uint64_t offset = 0;
  for (uint64_t e = 0; e < count && data != nullptr; ++e) {
    if (offset + 4 > size) return;
    const uint32_t length = load_unaligned<uint32_t>(data + offset);
    offset += 4;
    if (offset + length > size) return;
    *out += "\\\"";
    out->append(reinterpret_cast<const char*>(data + offset), length);
    *out += "\\\"";
    offset += length;
    if (e + 1 < count) out->push_back(',');
  }
}

void append_data(std::string* out, std::string_view dtype, const uint8_t* data, uint64_t size,
                 uint64_t count) {
  const Datatype* type = find_datatype(dtype);
  if (type == nullptr) return;
  switch (type->kind) {
    case ElementKind::kBool:
      append_values<uint8_t>(out, data, size, count,
                             [](std::string* o, uint8_t v) { o->push_back(v == 0 ? '0' : '1'); });
      return;
    case ElementKind::kBytes:
      append_bytes(out, data, size, count);
      return;
    default:
      break;
  }
  // FP16 and BF16 have no number type: Triton writes no values ("binary blobs").
  visit_number_type(*type, [&](auto zero) {
    using T = decltype(zero);
    if constexpr (sizeof(T) == 1) {  // UINT8, INT8: the byte itself, as Triton prints them
      append_values<T>(out, data, size, count,
                       [](std::string* o, T v) { o->push_back(static_cast<char>(v)); });
    } else if constexpr (std::is_floating_point_v<T>) {
      append_values<T>(out, data, size, count, put_real);
    } else if constexpr (std::is_signed_v<T>) {
      append_values<T>(out, data, size, count, put_integer);
    } else {
      append_values<T>(out, data, size, count, put_unsigned);
    }
  });
}

}  // namespace

const char* tensor_activity_name(TensorActivity activity) {
  return activity == TensorActivity::kQueueInput ? "TENSOR_QUEUE_INPUT" : "TENSOR_BACKEND_OUTPUT";
}

void append_trace_tensor(std::string* out, std::string_view name, std::string_view datatype,
                         const int64_t* shape, size_t dims, const uint8_t* data, uint64_t size) {
  uint64_t count = 1;
  for (size_t i = 0; i < dims; ++i) count *= shape[i] < 0 ? 0 : static_cast<uint64_t>(shape[i]);
  *out += "{\"name\":\"";
  out->append(name.data(), name.size());
  *out += "\",\"data\":\"";
  append_data(out, datatype, data, size, count);
  *out += "\",\"shape\":\"";
  for (size_t i = 0; i < dims; ++i) {
    if (i) out->push_back(',');
    *out += std::to_string(shape[i]);
  }
  *out += "\",\"dtype\":\"";
  out->append(datatype.data(), datatype.size());
  *out += "\"}";
}

std::vector<int64_t> shape_dims(std::string_view text) {
  std::vector<int64_t> dims;
  int64_t value = 0;
  bool in_number = false;
  for (char c : text) {
    if (c >= '0' && c <= '9') {
      value = value * 10 + (c - '0');
      in_number = true;
    } else if (in_number) {
      dims.push_back(value);
      value = 0;
      in_number = false;
    }
  }
  if (in_number) dims.push_back(value);
  return dims;
}

namespace {

void append_record(TensorRecords* out, TensorActivity activity, std::string_view name,
                   std::string_view datatype, std::string_view shape, const uint8_t* data,
                   uint64_t size) {
  std::vector<int64_t> dims = shape_dims(shape);
  out->emplace_back(activity, std::string());
  append_trace_tensor(&out->back().second, name, datatype, dims.data(), dims.size(), data, size);
}

}  // namespace

bool append_request_tensors(TensorRecords* out, const uint8_t* base, uint64_t arena_size,
                            uint64_t block) {
  RequestHeader header;
  std::memcpy(&header, base + block, sizeof header);
  const auto* metadata =
      reinterpret_cast<const char*>(base + block) + request_metadata_offset(header.n_inputs);
  JsonReader reader(metadata, header.metadata_size);
  TensorRecords records;
  uint32_t index = 0;
  const bool read = reader.object([&](std::string_view key) {
    if (key != "inputs") return reader.skip_value();
    return reader.array([&] {
      std::string_view name, datatype, shape;
      if (index >= header.n_inputs || !read_tensor_entry(reader, &name, &datatype, &shape)) {
        return false;
      }
      InputSlot slot;
      std::memcpy(&slot, base + block + sizeof(RequestHeader) + uint64_t{index++} * sizeof slot,
                  sizeof slot);
      if (slot.region == 0 && slot.offset <= arena_size && slot.size <= arena_size - slot.offset) {
        append_record(&records, TensorActivity::kQueueInput, name, datatype, shape,
                      base + slot.offset, slot.size);
      }
      return true;
    });
  });
  if (!read) return false;
  for (auto& record : records) out->push_back(std::move(record));
  return true;
}

bool append_response_tensors(TensorRecords* out, std::string_view json,
                             const std::vector<OutputBytes>& outputs) {
  JsonReader reader(json.data(), json.size());
  TensorRecords records;
  size_t index = 0;
  const bool read = reader.object([&](std::string_view key) {
    if (key != "outputs") return reader.skip_value();
    return reader.array([&] {
      std::string_view name, datatype, shape;
      if (index >= outputs.size() || !read_tensor_entry(reader, &name, &datatype, &shape)) {
        return false;
      }
      const OutputBytes& bytes = outputs[index++];
      append_record(&records, TensorActivity::kBackendOutput, name, datatype, shape,
                    static_cast<const uint8_t*>(bytes.data), bytes.size);
      return true;
    });
  });
  if (!read) return false;
  for (auto& record : records) out->push_back(std::move(record));
  return true;
}

}  // namespace naiad
