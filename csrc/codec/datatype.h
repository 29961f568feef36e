// The one table of Triton's tensor datatypes: each wire name ("FP32") with its
// TRITONSERVER_DataType value, model-config name, element size and kind of element.
// Every C++ reader and writer of tensor values looks a datatype up here; Python reads
// the same rows through _core (naiad/datatypes.py). Constant data; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace naiad {

enum class ElementKind : uint8_t {
  kBool,      // one byte, 0 or 1
  kUnsigned,  // little-endian unsigned integer of `size` bytes
  kSigned,    // little-endian two's complement integer of `size` bytes
  kFloat,     // IEEE 754 binary32 or binary64
  kFloat16,   // IEEE 754 binary16 (FP16): no C++ arithmetic type here, no text form
  kBFloat16,  // bfloat16 (BF16): as kFloat16, and no numpy type either
  kBytes,     // BYTES: per element a u32 little-endian length, then the bytes
};

struct Datatype {
  std::string_view name;         // wire name, as the KServe protocol spells it
  std::string_view config_name;  // model_config.proto DataType name
  uint8_t triton_type;           // TRITONSERVER_DataType value
  uint32_t size;                 // bytes per element; 0 for BYTES, whose elements vary
  ElementKind kind;
};

inline constexpr Datatype kDatatypes[] = {
    {"BOOL", "TYPE_BOOL", 1, 1, ElementKind::kBool},
    {"UINT8", "TYPE_UINT8", 2, 1, ElementKind::kUnsigned},
    {"UINT16", "TYPE_UINT16", 3, 2, ElementKind::kUnsigned},
    {"UINT32", "TYPE_UINT32", 4, 4, ElementKind::kUnsigned},
    {"UINT64", "TYPE_UINT64", 5, 8, ElementKind::kUnsigned},
    {"INT8", "TYPE_INT8", 6, 1, ElementKind::kSigned},
    {"INT16", "TYPE_INT16", 7, 2, ElementKind::kSigned},
    {"INT32", "TYPE_INT32", 8, 4, ElementKind::kSigned},
    {"INT64", "TYPE_INT64", 9, 8, ElementKind::kSigned},
    {"FP16", "TYPE_FP16", 10, 2, ElementKind::kFloat16},
    {"FP32", "TYPE_FP32", 11, 4, ElementKind::kFloat},
    {"FP64", "TYPE_FP64", 12, 8, ElementKind::kFloat},
    {"BYTES", "TYPE_STRING", 13, 0, ElementKind::kBytes},
    {"BF16", "TYPE_BF16", 14, 2, ElementKind::kBFloat16},
};

inline constexpr size_t kDatatypeCount = sizeof(kDatatypes) / sizeof(kDatatypes[0]);

// The kind's name as Python's naiad/datatypes.py spells it.
constexpr std::string_view element_kind_name(ElementKind kind) {
  switch (kind) {
    case ElementKind::kBool:
      return "bool";
    case ElementKind::kUnsigned:
      return "unsigned";
    case ElementKind::kSigned:
      return "signed";
    case ElementKind::kFloat:
      return "float";
    case ElementKind::kFloat16:
      return "float16";
    case ElementKind::kBFloat16:
      return "bfloat16";
    default:
      return "bytes";
  }
}

// The row of wire name `name`; nullptr for a name that is no Triton datatype.
constexpr const Datatype* find_datatype(std::string_view name) {
  for (const Datatype& type : kDatatypes) {
    if (type.name == name) return &type;
  }
  return nullptr;
}

// Calls `visit(T{})` with the C++ type of the elements of an integer or kFloat
// datatype and returns true; false (no call) for BOOL, FP16, BF16 and BYTES.
template <typename Visit>
bool visit_number_type(const Datatype& type, Visit&& visit) {
  switch (type.kind) {
    case ElementKind::kUnsigned:
      switch (type.size) {
        case 1:
          visit(uint8_t{});
          return true;
        case 2:
          visit(uint16_t{});
          return true;
        case 4:
          visit(uint32_t{});
          return true;
        default:
          visit(uint64_t{});
          return true;
      }
    case ElementKind::kSigned:
      switch (type.size) {
        case 1:
          visit(int8_t{});
          return true;
        case 2:
          visit(int16_t{});
          return true;
        case 4:
          visit(int32_t{});
          return true;
        default:
          visit(int64_t{});
          return true;
      }
    case ElementKind::kFloat:
      if (type.size == 4) {
        visit(float{});
      } else {
        visit(double{});
      }
      return true;
    default:
      return false;
  }
}

}  // namespace naiad
