// The datatype table (codec/datatype.h): Triton's datatypes with their config names,
// TRITONSERVER_DataType values and sizes, and the element types the readers and writers
// of values get for each.
#include <string>
#include <type_traits>

#include "codec/datatype.h"
#include "testing.h"

using naiad::Datatype;
using naiad::ElementKind;
using naiad::find_datatype;
using naiad::visit_number_type;

TEST(datatype_table_has_tritons_datatypes) {
  struct Row {
    const char* name;
    const char* config_name;
    int triton_type;
    unsigned size;
  } rows[] = {
      {"BOOL", "TYPE_BOOL", 1, 1},     {"UINT8", "TYPE_UINT8", 2, 1},
      {"UINT16", "TYPE_UINT16", 3, 2}, {"UINT32", "TYPE_UINT32", 4, 4},
      {"UINT64", "TYPE_UINT64", 5, 8}, {"INT8", "TYPE_INT8", 6, 1},
      {"INT16", "TYPE_INT16", 7, 2},   {"INT32", "TYPE_INT32", 8, 4},
      {"INT64", "TYPE_INT64", 9, 8},   {"FP16", "TYPE_FP16", 10, 2},
      {"FP32", "TYPE_FP32", 11, 4},    {"FP64", "TYPE_FP64", 12, 8},
      {"BYTES", "TYPE_STRING", 13, 0}, {"BF16", "TYPE_BF16", 14, 2},
  };
  CHECK(naiad::kDatatypeCount == sizeof(rows) / sizeof(rows[0]));
  for (const Row& row : rows) {
    const Datatype* type = find_datatype(row.name);
    CHECK(type != nullptr);
    CHECK(type->config_name == row.config_name);
    CHECK(type->triton_type == row.triton_type);
    CHECK(type->size == row.size);
  }
  CHECK(find_datatype("FP8") == nullptr);
  CHECK(find_datatype("fp32") == nullptr);  // wire names are upper case
  CHECK(find_datatype("") == nullptr);
}

TEST(datatype_number_types_match_kind_and_size) {
  int visited = 0;
  for (const Datatype& type : naiad::kDatatypes) {
    std::string seen;
    const bool number = visit_number_type(type, [&](auto zero) {
      using T = decltype(zero);
      CHECK(sizeof(T) == type.size);
      if (std::is_floating_point_v<T>) {
        seen = "float";
      } else {
        seen = std::is_signed_v<T> ? "signed" : "unsigned";
      }
    });
    if (!number) {
      // No C++ number type: BOOL, FP16, BF16 and BYTES.
      CHECK(type.kind == ElementKind::kBool || type.kind == ElementKind::kFloat16 ||
            type.kind == ElementKind::kBFloat16 || type.kind == ElementKind::kBytes);
      continue;
    }
    ++visited;
    CHECK(seen == naiad::element_kind_name(type.kind));
  }
  CHECK(visited == 10);  // UINT8..UINT64, INT8..INT64, FP32, FP64
}
