// Protobuf's wire format, read by hand: a bounds-checked cursor over one message's bytes
// (varints of at most 10 bytes, lengths within the message, wire types 3/4 and field 0
// refused), shared by the readers of gRPC messages (grpc_infer_message.h,
// grpc_contents.h). A failed read leaves its reason in `error`.
//
// Pure functions over caller-owned bytes; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace naiad::grpc::wire {

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLength = 2, kFixed32 = 5 };

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
      if (shift == 63 && b > 1) return fail("varint beyond 64 bits");
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

  bool fixed(size_t n, uint64_t* out) {
    if (static_cast<size_t>(end - p) < n) return fail("truncated fixed-width field");
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
    p += n;
    *out = v;
    return true;
  }

  bool skip(uint32_t wire) {
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
      default:
        return fail("unsupported wire type");  // groups (3, 4) and 6, 7
    }
  }
};

inline Reader sub(std::string_view bytes, std::string* error) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(bytes.data());
  return Reader{p, p + bytes.size(), error};
}

inline bool expect(Reader& r, uint32_t wire, uint32_t want) {
  return wire == want || r.fail("field with an unexpected wire type");
}

}  // namespace naiad::grpc::wire
