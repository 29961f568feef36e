// HPACK (RFC 7541): header compression for HTTP/2.
//
// Decoder: the full format (indexed fields, literals with and without indexing, never
// indexed, dynamic table size updates, Huffman-coded strings), with limits so that a
// peer cannot make it allocate without bound: the dynamic table never exceeds the size
// we advertised in SETTINGS_HEADER_TABLE_SIZE, and a decoded header list that passes
// `max_list_size` (RFC 7541 §4.1 accounting: name + value + 32 per field) is reported
// as too large while the block is still decoded to the end, so the dynamic table stays
// in step with the peer's encoder.
//
// Encoder: stateless on purpose. It never inserts into its dynamic table (literal
// without indexing, with static-table names where one exists), so the peer's
// SETTINGS_HEADER_TABLE_SIZE never matters and responses can be encoded by any code
// that holds no connection state.
//
// Threads: a Decoder belongs to one connection and is called by the thread that owns
// that connection (the event loop thread); it has no locks. encode_* are pure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

namespace naiad::hpack {

struct Header {
  std::string name;
  std::string value;
};

// RFC 7541 §4.1: the size a field counts for in the dynamic table and in list limits.
inline size_t field_size(const Header& h) { return h.name.size() + h.value.size() + 32; }

// Decodes a Huffman-coded string (RFC 7541 §5.2, Appendix B). False on an invalid
// code: EOS inside the string, padding longer than 7 bits or not all ones.
bool huffman_decode(std::string_view in, std::string* out);
// The Huffman-coded form of `in` (used by tests and by the encoder when shorter).
std::string huffman_encode(std::string_view in);

class Decoder {
 public:
  // `max_table_size`: the SETTINGS_HEADER_TABLE_SIZE we advertise; a peer's dynamic
  // table size update above it is a decoding error.
  explicit Decoder(uint32_t max_table_size = 4096);

  enum class Result { kOk, kTooLarge, kError };
  // Decodes one complete header block into `out` (cleared first). kTooLarge: the block
  // was valid but its list exceeds `max_list_size` (out holds a prefix only); kError:
  // a COMPRESSION_ERROR, the connection cannot go on; error() says what was wrong.
  Result decode(std::string_view block, size_t max_list_size, std::vector<Header>* out);

  const std::string& error() const { return error_; }
  size_t table_size() const { return table_bytes_; }
  size_t table_entries() const { return table_.size(); }

 private:
  bool lookup(uint64_t index, const Header** found);
  void insert(Header header);
  void evict_to(size_t limit);
  bool fail(std::string message);

  uint32_t max_table_size_;  // the bound we advertised
  size_t table_limit_;       // the current maximum, as last set by the peer
  size_t table_bytes_ = 0;
  std::deque<Header> table_;  // front: newest (index 62)
  std::string error_;
};

// Appends the HPACK integer `value` with an `prefix_bits`-bit prefix; `first` holds the
// bits above the prefix in the first byte (RFC 7541 §5.1).
void encode_integer(uint64_t value, int prefix_bits, uint8_t first, std::string* out);
// Appends a literal header field without indexing (RFC 7541 §6.2.2), the name taken
// from the static table when it is there.
void encode_header(std::string_view name, std::string_view value, std::string* out);

}  // namespace naiad::hpack
