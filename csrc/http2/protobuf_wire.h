// Protobuf's wire format, read by hand as protobuf's C++ parser reads it: a bounds-checked
// cursor over one message's bytes (varints of at most 10 bytes, bits past 64 dropped;
// lengths within the message; field 0 and wire types 6/7 refused; groups skipped whole,
// their end matching their start), shared by the readers of gRPC messages
// (grpc_infer_message.h, grpc_contents.h). A known field sent with another wire type is
// an unknown field to protobuf (the readers skip it); proto3 `string` fields must be UTF-8
// (`string`). A failed read leaves its reason in `error`.
//
// Pure functions over caller-owned bytes; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace naiad::grpc::wire {

enum WireType : uint32_t {
  kVarint = 0,
  kFixed64 = 1,
  kLength = 2,
  kStartGroup = 3,
  kEndGroup = 4,
  kFixed32 = 5
};

// Nested groups skipped at most (protobuf's default recursion limit).
constexpr int kMaxGroupDepth = 100;

// True when `text` is well-formed UTF-8 (no overlong forms, surrogates or code points
// past U+10FFFF), as protobuf requires of a proto3 string.
inline bool valid_utf8(std::string_view text) {
  const auto* p = reinterpret_cast<const uint8_t*>(text.data());
  const auto* end = p + text.size();
  while (p < end) {
    const uint8_t c = *p++;
    if (c < 0x80) continue;
    size_t more;
    uint8_t low = 0x80, high = 0xbf;  // the range of the byte after the first
    if (c >= 0xc2 && c <= 0xdf) {
      more = 1;
    } else if (c >= 0xe0 && c <= 0xef) {
      more = 2;
      if (c == 0xe0) low = 0xa0;   // overlong
      if (c == 0xed) high = 0x9f;  // surrogates
    } else if (c >= 0xf0 && c <= 0xf4) {
      more = 3;
      if (c == 0xf0) low = 0x90;   // overlong
      if (c == 0xf4) high = 0x8f;  // past U+10FFFF
    } else {
      return false;
    }
    if (static_cast<size_t>(end - p) < more || *p < low || *p > high) return false;
    ++p;
    for (size_t i = 1; i < more; ++i, ++p) {
      if (*p < 0x80 || *p > 0xbf) return false;
    }
  }
  return true;
}

struct Reader {
  const uint8_t* p;
  const uint8_t* end;
  std::string* error;

  bool fail(const char* what) {
    if (error->empty()) *error = what;
    return false;
  }
  bool done() const { return p == end; }

  bool varint(uint64_t* value) {
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      if (p == end) return fail("truncated varint");
      uint8_t b = *p++;
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) {
        *value = v;
        return true;
      }
    }
    return fail("varint longer than 10 bytes");
  }

  bool tag(uint32_t* field, uint32_t* wire) {
    uint64_t t;
    if (!varint(&t)) return false;
    *field = static_cast<uint32_t>(t >> 3);
    *wire = static_cast<uint32_t>(t & 7);
    if (*field == 0 || (t >> 3) > 0x1fffffff) return fail("invalid field number");
    return true;
  }

  bool bytes(std::string_view* out) {
    uint64_t n;
    if (!varint(&n)) return false;
    if (n > static_cast<uint64_t>(end - p)) return fail("length beyond the message");
    *out = std::string_view(reinterpret_cast<const char*>(p), n);
    p += n;
    return true;
  }

  // A proto3 string: bytes that must be UTF-8.
  bool string(std::string_view* out) {
    if (!bytes(out)) return false;
    return valid_utf8(*out) || fail("a string field that is not UTF-8");
  }

  bool fixed(size_t n, uint64_t* out) {
    if (static_cast<size_t>(end - p) < n) return fail("truncated fixed-width field");
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
    p += n;
    *out = v;
    return true;
  }

  // Skips the value of a field of wire type `wire` (a group up to its matching end):
  // an unknown field, or a known one sent with another wire type than its own.
  bool skip(uint32_t wire, uint32_t field = 0, int depth = 0) {
    uint64_t ignored;
    std::string_view view;
    switch (wire) {
      case kVarint:
        return varint(&ignored);
      case kFixed64:
        return fixed(8, &ignored);
      case kLength:
        return bytes(&view);
      case kFixed32:
        return fixed(4, &ignored);
      case kStartGroup:
        if (depth >= kMaxGroupDepth) return fail("groups nested too deep");
        for (;;) {
          uint32_t inner_field, inner_wire;
          if (!tag(&inner_field, &inner_wire)) return false;
          if (inner_wire == kEndGroup) {
            return inner_field == field || fail("a group ended by another field's end");
          }
          if (!skip(inner_wire, inner_field, depth + 1)) return false;
        }
      case kEndGroup:
        return fail("a group's end without its start");
      default:
        return fail("unsupported wire type");  // 6, 7
    }
  }
};

inline Reader sub(std::string_view bytes, std::string* error) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(bytes.data());
  return Reader{p, p + bytes.size(), error};
}

}  // namespace naiad::grpc::wire
