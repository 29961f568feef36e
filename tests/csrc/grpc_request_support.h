// ModelInferRequest bytes built with the protobuf wire format by hand, for the C++
// tests of the gRPC lane and of the I/O loop's gRPC side.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace grpctest {

inline void key(std::string* out, uint32_t field, uint32_t wire) {
  out->push_back(static_cast<char>((field << 3) | wire));
}
inline void varint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}
inline void bytes(std::string* out, uint32_t field, const std::string& s) {
  key(out, field, 2);
  varint(out, s.size());
  *out += s;
}

inline std::string tensor(const std::string& name, const std::string& datatype,
                          std::vector<int64_t> shape, bool typed = false) {
  std::string t;
  bytes(&t, 1, name);
  bytes(&t, 2, datatype);
  std::string packed;
  for (int64_t d : shape) varint(&packed, static_cast<uint64_t>(d));
  bytes(&t, 3, packed);
  if (typed) bytes(&t, 5, std::string("\x12\x00", 2));  // contents {fp32_contents: []}
  return t;
}

inline std::string parameter(const std::string& name, uint32_t field, uint64_t value) {
  std::string v;
  key(&v, field, 0);
  varint(&v, value);
  std::string entry;
  bytes(&entry, 1, name);
  bytes(&entry, 2, v);
  return entry;
}

// add_sub with `batch` rows; raw contents unless `typed`.
inline std::string add_sub_request(int batch, const std::string& id = "", bool typed = false,
                                   const std::string& version = "") {
  std::string m;
  bytes(&m, 1, "add_sub");
  if (!version.empty()) bytes(&m, 2, version);
  if (!id.empty()) bytes(&m, 3, id);
  bytes(&m, 5, tensor("INPUT0", "FP32", {batch, 16}, typed));
  bytes(&m, 5, tensor("INPUT1", "FP32", {batch, 16}, typed));
  if (!typed) {
    bytes(&m, 7, std::string(64 * batch, '\1'));
    bytes(&m, 7, std::string(64 * batch, '\2'));
  }
  return m;
}

}  // namespace grpctest
