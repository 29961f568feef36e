// HPACK against RFC 7541 Appendix C, plus the limits a hostile encoder tests.
#include <string>
#include <vector>

#include "http2/hpack.h"
#include "testing.h"

using naiad::hpack::Decoder;
using naiad::hpack::Header;

namespace {

std::string unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

bool same(const std::vector<Header>& got, const std::vector<Header>& want) {
  if (got.size() != want.size()) return false;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i].name != want[i].name || got[i].value != want[i].value) return false;
  }
  return true;
}

const std::vector<Header> kRequest1 = {
    {":method", "GET"}, {":scheme", "http"}, {":path", "/"}, {":authority", "www.example.com"}};
const std::vector<Header> kRequest2 = {{":method", "GET"},
                                       {":scheme", "http"},
                                       {":path", "/"},
                                       {":authority", "www.example.com"},
                                       {"cache-control", "no-cache"}};
const std::vector<Header> kRequest3 = {{":method", "GET"},
                                       {":scheme", "https"},
                                       {":path", "/index.html"},
                                       {":authority", "www.example.com"},
                                       {"custom-key", "custom-value"}};
const std::vector<Header> kResponse1 = {{":status", "302"},
                                        {"cache-control", "private"},
                                        {"date", "Mon, 21 Oct 2013 20:13:21 GMT"},
                                        {"location", "https://www.example.com"}};
const std::vector<Header> kResponse2 = {{":status", "307"},
                                        {"cache-control", "private"},
                                        {"date", "Mon, 21 Oct 2013 20:13:21 GMT"},
                                        {"location", "https://www.example.com"}};
const std::vector<Header> kResponse3 = {
    {":status", "200"},
    {"cache-control", "private"},
    {"date", "Mon, 21 Oct 2013 20:13:22 GMT"},
    {"location", "https://www.example.com"},
    {"content-encoding", "gzip"},
    {"set-cookie", "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"}};

void check_sequence(uint32_t table, const std::vector<std::string>& blocks,
                    const std::vector<std::vector<Header>>& lists,
                    const std::vector<size_t>& sizes) {
  Decoder d(table);
  for (size_t i = 0; i < blocks.size(); ++i) {
    std::vector<Header> out;
    CHECK(d.decode(unhex(blocks[i]), 1 << 20, &out) == Decoder::Result::kOk);
    CHECK(same(out, lists[i]));
    CHECK(d.table_size() == sizes[i]);
  }
}

}  // namespace

TEST(hpack_c2_literal_fields) {
  Decoder d;
  std::vector<Header> out;
  // C.2.1 literal with indexing; C.2.2 without; C.2.3 never indexed; C.2.4 indexed.
  CHECK(d.decode(unhex("400a637573746f6d2d6b65790d637573746f6d2d686561646572"), 4096, &out) ==
        Decoder::Result::kOk);
  CHECK(same(out, {{"custom-key", "custom-header"}}));
  CHECK(d.table_size() == 55);
  CHECK(d.decode(unhex("040c2f73616d706c652f70617468"), 4096, &out) == Decoder::Result::kOk);
  CHECK(same(out, {{":path", "/sample/path"}}));
  CHECK(d.decode(unhex("100870617373776f726406736563726574"), 4096, &out) == Decoder::Result::kOk);
  CHECK(same(out, {{"password", "secret"}}));
  CHECK(d.decode(unhex("82"), 4096, &out) == Decoder::Result::kOk);
  CHECK(same(out, {{":method", "GET"}}));
  CHECK(d.table_entries() == 1);
}

TEST(hpack_c3_requests_without_huffman) {
  check_sequence(4096,
                 {"828684410f7777772e6578616d706c652e636f6d", "828684be58086e6f2d6361636865",
                  "828785bf400a637573746f6d2d6b65790c637573746f6d2d76616c7565"},
                 {kRequest1, kRequest2, kRequest3}, {57, 110, 164});
}

TEST(hpack_c4_requests_with_huffman) {
  check_sequence(4096,
                 {"828684418cf1e3c2e5f23a6ba0ab90f4ff", "828684be5886a8eb10649cbf",
                  "828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf"},
                 {kRequest1, kRequest2, kRequest3}, {57, 110, 164});
}

TEST(hpack_c5_responses_with_eviction) {
  check_sequence(
      256,
      {"4803333032580770726976617465611d4d6f6e2c203231204f637420323031332032303a31333a32312047"
       "4d546e1768747470733a2f2f7777772e6578616d706c652e636f6d",
       "4803333037c1c0bf",
       "88c1611d4d6f6e2c203231204f637420323031332032303a31333a323220474d54c05a04677a69707738666f"
       "6f3d4153444a4b48514b425a584f5157454f50495541585157454f49553b206d61782d6167653d33363030"
       "3b2076657273696f6e3d31"},
      {kResponse1, kResponse2, kResponse3}, {222, 222, 215});
}

TEST(hpack_c6_responses_with_huffman) {
  check_sequence(
      256,
      {"488264025885aec3771a4b6196d07abe941054d444a8200595040b8166e082a62d1bff6e919d29ad171863"
       "c78f0b97c8e9ae82ae43d3",
       "4883640effc1c0bf",
       "88c16196d07abe941054d444a8200595040b8166e084a62d1bffc05a839bd9ab77ad94e7821dd7f2e6c7b3"
       "35dfdfcd5b3960d5af27087f3672c1ab270fb5291f9587316065c003ed4ee5b1063d5007"},
      {kResponse1, kResponse2, kResponse3}, {222, 222, 215});
}

TEST(hpack_huffman_round_trip_every_byte) {
  std::string all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<char>(i));
  std::string decoded;
  CHECK(naiad::hpack::huffman_decode(naiad::hpack::huffman_encode(all), &decoded));
  CHECK(decoded == all);
  // C.4.1's www.example.com encodes to the RFC's bytes.
  CHECK(naiad::hpack::huffman_encode("www.example.com") == unhex("f1e3c2e5f23a6ba0ab90f4ff"));
}

TEST(hpack_huffman_rejects_bad_padding_and_eos) {
  std::string out;
  // 'a' is 00011 (5 bits); padding with zeros instead of ones is an error.
  CHECK(!naiad::hpack::huffman_decode(std::string(1, '\x18'), &out));
  // Eight bits of padding (a whole 0xff byte after a complete symbol) is too long.
  std::string a = naiad::hpack::huffman_encode("a");
  CHECK(!naiad::hpack::huffman_decode(a + "\xff", &out));
  // EOS (30 ones) inside a string.
  CHECK(!naiad::hpack::huffman_decode(std::string("\xff\xff\xff\xff", 4), &out));
}

TEST(hpack_encoder_output_decodes) {
  std::string block;
  naiad::hpack::encode_header(":status", "200", &block);
  naiad::hpack::encode_header("content-type", "application/grpc", &block);
  naiad::hpack::encode_header("grpc-message", std::string(300, 'x'), &block);
  Decoder d;
  std::vector<Header> out;
  CHECK(d.decode(block, 1 << 20, &out) == Decoder::Result::kOk);
  CHECK(same(out, {{":status", "200"},
                   {"content-type", "application/grpc"},
                   {"grpc-message", std::string(300, 'x')}}));
  CHECK(d.table_entries() == 0);  // the encoder never indexes
}

TEST(hpack_rejects_table_size_above_advertised) {
  Decoder d(4096);
  std::vector<Header> out;
  std::string block;
  naiad::hpack::encode_integer(1 << 20, 5, 0x20, &block);  // size update to 1 MiB
  CHECK(d.decode(block, 4096, &out) == Decoder::Result::kError);
  CHECK(d.error().find("above the advertised") != std::string::npos);
}

TEST(hpack_rejects_bad_index_and_truncation) {
  Decoder d;
  std::vector<Header> out;
  CHECK(d.decode(unhex("80"), 4096, &out) == Decoder::Result::kError);        // index 0
  CHECK(d.decode(unhex("be"), 4096, &out) == Decoder::Result::kError);        // 62: empty table
  CHECK(d.decode(unhex("400a6375"), 4096, &out) == Decoder::Result::kError);  // cut string
  CHECK(d.decode(unhex("ff"), 4096, &out) == Decoder::Result::kError);        // cut integer
  // Integer with too many continuation bytes.
  CHECK(d.decode(unhex("ffffffffffffffff7f"), 4096, &out) == Decoder::Result::kError);
  // A size update after a field.
  CHECK(d.decode(unhex("8220"), 4096, &out) == Decoder::Result::kError);
}

TEST(hpack_table_bomb_stays_bounded) {
  // One 4000-byte value inserted, then referenced many times: the table stays within
  // its 4096 bytes and the decoded list stops at the list limit.
  Decoder d(4096);
  std::string block;
  naiad::hpack::encode_integer(0, 6, 0x40, &block);
  naiad::hpack::encode_integer(1, 7, 0, &block);
  block += "x";
  naiad::hpack::encode_integer(4000, 7, 0, &block);
  block += std::string(4000, 'y');
  for (int i = 0; i < 10000; ++i) block.push_back(static_cast<char>(0x80 | 62));
  std::vector<Header> out;
  CHECK(d.decode(block, 16384, &out) == Decoder::Result::kTooLarge);
  CHECK(out.size() <= 4);
  CHECK(d.table_size() <= 4096);
  // Inserting more evicts: the table never passes its limit.
  std::string more;
  for (int i = 0; i < 100; ++i) {
    naiad::hpack::encode_integer(0, 6, 0x40, &more);
    naiad::hpack::encode_integer(2, 7, 0, &more);
    more += "k" + std::to_string(i % 10);
    naiad::hpack::encode_integer(100, 7, 0, &more);
    more += std::string(100, 'v');
  }
  CHECK(d.decode(more, 1 << 20, &out) == Decoder::Result::kOk);
  CHECK(d.table_size() <= 4096);
  CHECK(out.size() == 100);
}
