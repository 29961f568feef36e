#include "http2/hpack.h"

#include <array>
#include <utility>

#include "http2/hpack_huffman_table.h"

namespace naiad::hpack {

namespace {

struct StaticEntry {
  const char* name;
  const char* value;
};

// RFC 7541 Appendix A.
constexpr StaticEntry kStaticTable[61] = {
    {":authority", ""},
    {":method", "GET"},
    {":method", "POST"},
    {":path", "/"},
    {":path", "/index.html"},
    {":scheme", "http"},
    {":scheme", "https"},
    {":status", "200"},
    {":status", "204"},
    {":status", "206"},
    {":status", "304"},
    {":status", "400"},
    {":status", "404"},
    {":status", "500"},
    {"accept-charset", ""},
    {"accept-encoding", "gzip, deflate"},
    {"accept-language", ""},
    {"accept-ranges", ""},
    {"accept", ""},
    {"access-control-allow-origin", ""},
    {"age", ""},
    {"allow", ""},
    {"authorization", ""},
    {"cache-control", ""},
    {"content-disposition", ""},
    {"content-encoding", ""},
    {"content-language", ""},
    {"content-length", ""},
    {"content-location", ""},
    {"content-range", ""},
    {"content-type", ""},
    {"cookie", ""},
    {"date", ""},
    {"etag", ""},
    {"expect", ""},
    {"expires", ""},
    {"from", ""},
    {"host", ""},
    {"if-match", ""},
    {"if-modified-since", ""},
    {"if-none-match", ""},
    {"if-range", ""},
    {"if-unmodified-since", ""},
    {"last-modified", ""},
    {"link", ""},
    {"location", ""},
    {"max-forwards", ""},
    {"proxy-authenticate", ""},
    {"proxy-authorization", ""},
    {"range", ""},
    {"referer", ""},
    {"refresh", ""},
    {"retry-after", ""},
    {"server", ""},
    {"set-cookie", ""},
    {"strict-transport-security", ""},
    {"transfer-encoding", ""},
    {"user-agent", ""},
    {"vary", ""},
    {"via", ""},
    {"www-authenticate", ""},
};
constexpr uint64_t kStaticCount = 61;

// The Huffman decoding tree, built once from the code table: node i has children
// child[i][0] / child[i][1]; a negative child -1 - s is the leaf of symbol s.
struct HuffmanTree {
  std::vector<std::array<int32_t, 2>> child;
  HuffmanTree() {
    child.push_back({0, 0});
    for (int symbol = 0; symbol < 257; ++symbol) {
      const HuffmanCode& c = kHuffmanCodes[symbol];
      int32_t node = 0;
      for (int bit = c.bits - 1; bit >= 0; --bit) {
        int b = (c.code >> bit) & 1;
        if (bit == 0) {
          child[node][b] = -1 - symbol;
        } else {
          if (child[node][b] == 0) {
            child.push_back({0, 0});
            child[node][b] = static_cast<int32_t>(child.size() - 1);
          }
          node = child[node][b];
        }
      }
    }
  }
};

const HuffmanTree& tree() {
  static const HuffmanTree instance;
  return instance;
}

// Reads an HPACK integer with an N-bit prefix (RFC 7541 §5.1). Values are capped well
// below overflow: nothing we accept needs more than 2^32.
bool decode_integer(std::string_view in, size_t* pos, int prefix_bits, uint64_t* value) {
  if (*pos >= in.size()) return false;
  uint64_t mask = (1u << prefix_bits) - 1;
  uint64_t v = static_cast<uint8_t>(in[*pos]) & mask;
  ++*pos;
  if (v < mask) {
    *value = v;
    return true;
  }
  int shift = 0;
  while (true) {
    if (*pos >= in.size()) return false;
    uint8_t b = static_cast<uint8_t>(in[*pos]);
    ++*pos;
    if (shift > 28) return false;  // more than 5 continuation bytes: beyond 2^35
    v += static_cast<uint64_t>(b & 0x7f) << shift;
    shift += 7;
    if ((b & 0x80) == 0) break;
  }
  if (v > 0xffffffffu) return false;
  *value = v;
  return true;
}

}  // namespace

bool huffman_decode(std::string_view in, std::string* out) {
  const HuffmanTree& t = tree();
  int32_t node = 0;
  int depth = 0;         // bits consumed since the last symbol
  bool all_ones = true;  // those bits were all 1 (a valid EOS-prefix padding)
  for (char ch : in) {
    uint8_t byte = static_cast<uint8_t>(ch);
    for (int bit = 7; bit >= 0; --bit) {
      int b = (byte >> bit) & 1;
      int32_t next = t.child[node][b];
      ++depth;
      all_ones = all_ones && b == 1;
      if (next < 0) {
        int symbol = -1 - next;
        if (symbol == 256) return false;  // §5.2: EOS in a string is an error
        out->push_back(static_cast<char>(symbol));
        node = 0;
        depth = 0;
        all_ones = true;
      } else if (next == 0) {
        return false;  // cannot happen with a complete code; kept as a guard
      } else {
        node = next;
      }
    }
  }
  // §5.2: padding is the most significant bits of EOS (all ones), shorter than 8 bits.
  return depth <= 7 && all_ones;
}

std::string huffman_encode(std::string_view in) {
  std::string out;
  uint64_t acc = 0;
  int bits = 0;
  for (char ch : in) {
    const HuffmanCode& c = kHuffmanCodes[static_cast<uint8_t>(ch)];
    acc = (acc << c.bits) | c.code;
    bits += c.bits;
    while (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  if (bits > 0) {
    acc = (acc << (8 - bits)) | ((1u << (8 - bits)) - 1);  // pad with EOS's leading ones
    out.push_back(static_cast<char>(acc & 0xff));
  }
  return out;
}

Decoder::Decoder(uint32_t max_table_size)
    : max_table_size_(max_table_size), table_limit_(max_table_size) {}

bool Decoder::fail(std::string message) {
  error_ = std::move(message);
  return false;
}

bool Decoder::lookup(uint64_t index, const Header** found) {
  static const std::vector<Header> statics = [] {
    std::vector<Header> v;
    for (const StaticEntry& e : kStaticTable) v.push_back({e.name, e.value});
    return v;
  }();
  if (index == 0) return fail("header index 0");
  if (index <= kStaticCount) {
    *found = &statics[index - 1];
    return true;
  }
  uint64_t dynamic = index - kStaticCount - 1;
  if (dynamic >= table_.size()) {
    return fail("header index " + std::to_string(index) + " beyond the table (" +
                std::to_string(kStaticCount + table_.size()) + " entries)");
  }
  *found = &table_[dynamic];
  return true;
}

void Decoder::evict_to(size_t limit) {
  while (table_bytes_ > limit && !table_.empty()) {
    table_bytes_ -= field_size(table_.back());
    table_.pop_back();
  }
}

void Decoder::insert(Header header) {
  size_t size = field_size(header);
  // §4.4: an entry larger than the table empties it and is not added.
  evict_to(size > table_limit_ ? 0 : table_limit_ - size);
  if (size > table_limit_) return;
  table_bytes_ += size;
  table_.push_front(std::move(header));
}

Decoder::Result Decoder::decode(std::string_view in, size_t max_list_size,
                                std::vector<Header>* out) {
  out->clear();
  size_t pos = 0;
  size_t list_size = 0;
  bool too_large = false;
  bool fields_seen = false;

  auto read_string = [&](std::string* s) -> bool {
    if (pos >= in.size()) return fail("truncated string");
    bool huffman = (static_cast<uint8_t>(in[pos]) & 0x80) != 0;
    uint64_t length;
    if (!decode_integer(in, &pos, 7, &length)) return fail("bad string length");
    if (length > in.size() - pos) return fail("string length beyond the block");
    std::string_view raw = in.substr(pos, length);
    pos += length;
    s->clear();
    if (!huffman) {
      s->assign(raw);
      return true;
    }
    if (!huffman_decode(raw, s)) return fail("invalid Huffman code");
    return true;
  };
  auto emit = [&](Header h) {
    list_size += field_size(h);
    if (list_size > max_list_size) too_large = true;
    if (!too_large) out->push_back(std::move(h));
  };

  while (pos < in.size()) {
    uint8_t b = static_cast<uint8_t>(in[pos]);
    if (b & 0x80) {  // §6.1 indexed header field
      uint64_t index;
      if (!decode_integer(in, &pos, 7, &index)) return (fail("bad index"), Result::kError);
      const Header* h;
      if (!lookup(index, &h)) return Result::kError;
      emit(*h);
      fields_seen = true;
    } else if ((b & 0xe0) == 0x20) {  // §6.3 dynamic table size update
      // §4.2: only at the start of a block.
      if (fields_seen) return (fail("table size update after a header field"), Result::kError);
      uint64_t size;
      if (!decode_integer(in, &pos, 5, &size)) return (fail("bad table size"), Result::kError);
      if (size > max_table_size_) {
        fail("table size update to " + std::to_string(size) + " above the advertised " +
             std::to_string(max_table_size_));
        return Result::kError;
      }
      table_limit_ = size;
      evict_to(table_limit_);
    } else {
      // §6.2: literal with incremental indexing (01), without (0000), never (0001).
      bool indexing = (b & 0xc0) == 0x40;
      int prefix = indexing ? 6 : 4;
      uint64_t name_index;
      if (!decode_integer(in, &pos, prefix, &name_index)) {
        return (fail("bad name index"), Result::kError);
      }
      Header h;
      if (name_index == 0) {
        if (!read_string(&h.name)) return Result::kError;
      } else {
        const Header* named;
        if (!lookup(name_index, &named)) return Result::kError;
        h.name = named->name;
      }
      if (!read_string(&h.value)) return Result::kError;
      if (indexing) insert(h);
      emit(std::move(h));
      fields_seen = true;
    }
  }
  return too_large ? Result::kTooLarge : Result::kOk;
}

void encode_integer(uint64_t value, int prefix_bits, uint8_t first, std::string* out) {
  uint64_t mask = (1u << prefix_bits) - 1;
  if (value < mask) {
    out->push_back(static_cast<char>(first | value));
    return;
  }
  out->push_back(static_cast<char>(first | mask));
  value -= mask;
  while (value >= 128) {
    out->push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

namespace {

void encode_string(std::string_view s, std::string* out) {
  // Huffman only when it saves space: grpc-message text usually shrinks, binary
  // values do not.
  std::string h = huffman_encode(s);
  if (h.size() < s.size()) {
    encode_integer(h.size(), 7, 0x80, out);
    out->append(h);
  } else {
    encode_integer(s.size(), 7, 0x00, out);
    out->append(s);
  }
}

}  // namespace

void encode_header(std::string_view name, std::string_view value, std::string* out) {
  uint64_t name_index = 0;
  for (uint64_t i = 0; i < kStaticCount; ++i) {
    if (name == kStaticTable[i].name) {
      name_index = i + 1;
      break;
    }
  }
  encode_integer(name_index, 4, 0x00, out);  // §6.2.2: literal without indexing
  if (name_index == 0) encode_string(name, out);
  encode_string(value, out);
}

}  // namespace naiad::hpack
