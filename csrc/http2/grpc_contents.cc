#include "http2/grpc_contents.h"

#include <array>

#include "codec/datatype.h"
#include "http2/protobuf_wire.h"

namespace naiad::grpc {

namespace {

using wire::kFixed32;
using wire::kFixed64;
using wire::kLength;
using wire::kVarint;
using wire::Reader;
using wire::sub;

// InferTensorContents' fields, by number.
enum Field : uint32_t {
  kBool = 1,
  kInt = 2,
  kInt64 = 3,
  kUint = 4,
  kUint64 = 5,
  kFp32 = 6,
  kFp64 = 7,
  kBytes = 8,
};
constexpr uint32_t kFields = 8;

// The wire type of one element of a scalar field (kLength: bytes_contents).
uint32_t element_wire(uint32_t field) {
  if (field == kFp32) return kFixed32;
  if (field == kFp64) return kFixed64;
  if (field == kBytes) return kLength;
  return kVarint;
}

// Calls on_value(field, value, bytes) for each element of a known field in `contents`
// (value: the varint or fixed-width bits; bytes: a bytes_contents element). False when
// the bytes are not well formed.
template <typename OnValue>
bool each_value(std::string_view contents, std::string* error, OnValue&& on_value) {
  Reader r = sub(contents, error);
  while (!r.done()) {
    uint32_t field, wire;
    if (!r.tag(&field, &wire)) return false;
    if (field > kFields) {
      if (!r.skip(wire, field)) return false;
      continue;
    }
    const uint32_t one = element_wire(field);
    const size_t width = one == kFixed32 ? 4 : 8;
    uint64_t value = 0;
    std::string_view bytes;
    if (wire == one) {  // one element (bytes_contents' elements are always so)
      if (one == kLength) {
        if (!r.bytes(&bytes)) return false;
      } else if (!(one == kVarint ? r.varint(&value) : r.fixed(width, &value))) {
        return false;
      }
      on_value(field, value, bytes);
    } else if (wire == kLength) {  // packed: elements one after the other
      std::string_view packed;
      if (!r.bytes(&packed)) return false;
      Reader p = sub(packed, error);
      while (!p.done()) {
        if (!(one == kVarint ? p.varint(&value) : p.fixed(width, &value))) return false;
        on_value(field, value, bytes);
      }
    } else if (!r.skip(wire, field)) {  // another wire type: an unknown field to protobuf
      return false;
    }
  }
  return true;
}

// The datatype a field's values are for, given the input's (int_contents and
// uint_contents carry the narrower integers of their sign, as Triton reads them).
std::string_view field_datatype(uint32_t field, std::string_view datatype) {
  switch (field) {
    case kBool:
      return "BOOL";
    case kInt:
      return datatype == "INT8" || datatype == "INT16" ? datatype : "INT32";
    case kInt64:
      return "INT64";
    case kUint:
      return datatype == "UINT8" || datatype == "UINT16" ? datatype : "UINT32";
    case kUint64:
      return "UINT64";
    case kFp32:
      return "FP32";
    case kFp64:
      return "FP64";
    default:
      return "BYTES";
  }
}

void put_le(uint64_t value, size_t size, std::vector<uint8_t>* out) {
  for (size_t i = 0; i < size; ++i) out->push_back(static_cast<uint8_t>(value >> (8 * i)));
}

std::string quoted(std::string_view text) {
  std::string out = "'";
  out.append(text);
  out.push_back('\'');
  return out;
}

}  // namespace

bool contents_well_formed(std::string_view contents) {
  std::string error;
  return each_value(contents, &error, [](uint32_t, uint64_t, std::string_view) {});
}

std::string_view triton_datatype_name(std::string_view datatype) {
  const Datatype* found = find_datatype(datatype);
  return found != nullptr ? found->name : std::string_view("<invalid>");
}

bool contents_to_wire(const std::vector<std::string_view>& chunks, std::string_view datatype,
                      std::string_view input_name, std::string_view model_name,
                      std::vector<uint8_t>* out, std::string* error) {
  std::array<uint64_t, kFields + 1> counts{};
  std::string ignored;
  for (std::string_view chunk : chunks) {
    each_value(chunk, &ignored,
               [&](uint32_t field, uint64_t, std::string_view) { ++counts[field]; });
  }
  const std::string_view expected = triton_datatype_name(datatype);
  bool supplied = false;
  // Field by field in number order, as Triton: the first with values must be the
  // datatype's, and a second with values finds the data already there.
  for (uint32_t field = kBool; field <= kFields; ++field) {
    if (counts[field] == 0) continue;
    const std::string prefix = "unexpected explicit tensor data for input tensor " +
                               quoted(input_name) + " for model " + quoted(model_name);
    if (supplied) {
      *error = prefix + ", binary data was already supplied.";
      return false;
    }
    const std::string_view carried = field_datatype(field, datatype);
    if (carried != expected) {
      *error = prefix + " of type " + quoted(carried) + ", expected datatype " + quoted(expected);
      return false;
    }
    const size_t size = find_datatype(carried)->size;  // carried: a name of the table
    if (size) out->reserve(out->size() + counts[field] * size);
    for (std::string_view chunk : chunks) {
      each_value(chunk, &ignored, [&](uint32_t f, uint64_t value, std::string_view bytes) {
        if (f != field) return;
        if (field == kBytes) {
          put_le(bytes.size(), 4, out);
          out->insert(out->end(), bytes.begin(), bytes.end());
        } else {
          // bool_contents: 0 or 1; int/uint_contents: the low bytes of the 32-bit value.
          put_le(field == kBool ? (value != 0) : value, size, out);
        }
      });
    }
    supplied = true;
  }
  return true;
}

}  // namespace naiad::grpc
