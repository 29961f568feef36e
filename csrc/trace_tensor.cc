#include "trace_tensor.h"

#include <cstdio>
#include <cstring>

#include "unaligned.h"

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
  auto as_char = [](std::string* o, auto v) { o->push_back(static_cast<char>(v)); };
  if (dtype == "BOOL") {
    append_values<uint8_t>(out, data, size, count,
                           [](std::string* o, uint8_t v) { o->push_back(v == 0 ? '0' : '1'); });
  } else if (dtype == "UINT8") {
    append_values<uint8_t>(out, data, size, count, as_char);
  } else if (dtype == "INT8") {
    append_values<int8_t>(out, data, size, count, as_char);
  } else if (dtype == "UINT16") {
    append_values<uint16_t>(out, data, size, count, put_unsigned);
  } else if (dtype == "UINT32") {
    append_values<uint32_t>(out, data, size, count, put_unsigned);
  } else if (dtype == "UINT64") {
    append_values<uint64_t>(out, data, size, count, put_unsigned);
  } else if (dtype == "INT16") {
    append_values<int16_t>(out, data, size, count, put_integer);
  } else if (dtype == "INT32") {
    append_values<int32_t>(out, data, size, count, put_integer);
  } else if (dtype == "INT64") {
    append_values<int64_t>(out, data, size, count, put_integer);
  } else if (dtype == "FP32") {
    append_values<float>(out, data, size, count, put_real);
  } else if (dtype == "FP64") {
    append_values<double>(out, data, size, count, put_real);
  } else if (dtype == "BYTES") {
    append_bytes(out, data, size, count);
  }
  // FP16 and BF16: Triton writes no values ("binary blobs").
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

}  // namespace naiad
