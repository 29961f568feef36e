// GrpcConnection as a pure function of bytes: the HTTP/2 rules of RFC 9113 and gRPC's
// framing, each case driven by hand-built client frames.
#include <sys/uio.h>

#include <memory>
#include <string>
#include <vector>

#include "h2_client.h"
#include "http2/grpc_connection.h"
#include "http2/grpc_wire.h"
#include "inflate_support.h"
#include "testing.h"

using naiad::inflated;
using naiad::h2::ErrorCode;
using naiad::h2::Event;
using naiad::h2::EventKind;
using naiad::h2::GrpcConnection;
using naiad::h2::Limits;
using namespace h2test;

namespace {

struct Session {
  GrpcConnection conn;
  Reader reader;
  std::vector<Event> events;
  std::vector<Frame> frames;

  explicit Session(const Limits& limits = Limits()) : conn(limits) {}

  void send(const std::string& bytes) {
    conn.receive(bytes.data(), bytes.size(), &events);
    auto got = reader.read(conn.take_output());
    frames.insert(frames.end(), got.begin(), got.end());
  }
  void flush() {
    auto got = reader.read(conn.take_output());
    frames.insert(frames.end(), got.begin(), got.end());
  }
  const Frame* last(uint8_t type) const {
    for (auto it = frames.rbegin(); it != frames.rend(); ++it) {
      if (it->type == type) return &*it;
    }
    return nullptr;
  }
  int count(uint8_t type) const {
    int n = 0;
    for (auto& f : frames) n += f.type == type;
    return n;
  }
  uint32_t goaway_code() const {
    const Frame* g = last(0x7);
    return g ? u32(g->payload, 4) : 0xffffffff;
  }
};

}  // namespace

TEST(h2_server_preface_is_settings_and_window) {
  Session s;
  s.flush();
  CHECK(s.frames.size() == 2);
  CHECK(s.frames[0].type == 0x4 && s.frames[0].flags == 0);
  CHECK(s.frames[0].payload.size() % 6 == 0);
  CHECK(s.frames[1].type == 0x8 && s.frames[1].stream == 0);
}

TEST(h2_settings_acked_and_ping_answered) {
  Session s;
  s.send(hello({{0x4, 100000}}));
  CHECK(s.last(0x4) && (s.last(0x4)->flags & 1));  // ACK
  s.send(frame(0x6, 0, 0, "12345678"));
  const Frame* ping = s.last(0x6);
  CHECK(ping && ping->flags == 1 && ping->payload == "12345678");
  CHECK(!s.conn.closed());
}

TEST(h2_garbage_preface_is_protocol_error) {
  Session s;
  s.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK(s.conn.closed());
  CHECK(s.goaway_code() == ErrorCode::kProtocolError);
}

TEST(h2_first_frame_must_be_settings) {
  Session s;
  s.send(kPreface + frame(0x6, 0, 0, "12345678"));
  CHECK(s.conn.closed());
  CHECK(s.goaway_code() == ErrorCode::kProtocolError);
}

TEST(h2_unary_call_round_trip) {
  Session s;
  s.send(hello());
  s.send(headers(1, request_block("/inference.GRPCInferenceService/ServerLive",
                                  {{"grpc-timeout", "250m"}, {"x-meta", "v"}})) +
         data(1, grpc_message("abc")));
  CHECK(s.events.size() == 3);
  CHECK(s.events[0].kind == EventKind::kCall);
  CHECK(s.events[0].path == "/inference.GRPCInferenceService/ServerLive");
  CHECK(s.events[0].timeout_us == 250000);
  bool meta = false;
  for (auto& h : s.events[0].metadata) meta = meta || (h.name == "x-meta" && h.value == "v");
  CHECK(meta);
  CHECK(s.events[1].kind == EventKind::kMessage && s.events[1].message == "abc");
  CHECK(s.events[2].kind == EventKind::kHalfClose);
  CHECK(s.conn.send_message(1, "reply"));
  CHECK(s.conn.finish(1, 0, ""));
  s.flush();
  CHECK(s.conn.open_streams() == 0);
  const Frame* d = s.last(0x0);
  CHECK(d && d->stream == 1 && d->payload == grpc_message("reply"));
  const Frame* t = s.last(0x1);
  CHECK(t && (t->flags & 1) && header_value(*t, "grpc-status") == "0");
  CHECK(!s.conn.send_message(1, "late"));  // the stream is gone
}

TEST(h2_trailers_only_error_with_percent_encoded_message) {
  Session s;
  s.send(hello());
  s.send(headers(1, request_block("/x/y"), true));
  CHECK(s.conn.finish(1, 12, "unknown 100% \xe2\x9c\x93"));
  s.flush();
  const Frame* t = s.last(0x1);
  CHECK(t && (t->flags & 1));
  CHECK(header_value(*t, ":status") == "200");
  CHECK(header_value(*t, "grpc-status") == "12");
  CHECK(header_value(*t, "grpc-message") == "unknown 100%25 %E2%9C%93");
}

TEST(h2_messages_split_across_frames_and_many_per_frame) {
  Session s;
  s.send(hello());
  std::string two = grpc_message("first") + grpc_message("second");
  s.send(headers(1, request_block("/s/m")));
  s.send(data(1, two.substr(0, 3), false));
  s.send(data(1, two.substr(3, 9), false));
  s.send(data(1, two.substr(12), true));
  int messages = 0;
  for (auto& e : s.events) {
    if (e.kind == EventKind::kMessage) {
      CHECK(e.message == (messages == 0 ? "first" : "second"));
      ++messages;
    }
  }
  CHECK(messages == 2);
  CHECK(s.events.back().kind == EventKind::kHalfClose);
}

TEST(h2_byte_by_byte_input) {
  Session s;
  std::string all = hello() + headers(1, request_block("/s/m")) + data(1, grpc_message("xyz"));
  for (char c : all) s.send(std::string(1, c));
  CHECK(s.events.size() == 3);
  CHECK(s.events[1].message == "xyz");
}

TEST(h2_large_response_waits_for_window) {
  Session s;
  s.send(hello());
  s.send(headers(1, request_block("/s/m"), true));
  std::string big(200000, 'z');
  CHECK(s.conn.send_message(1, big));
  CHECK(s.conn.finish(1, 0, ""));
  s.flush();
  size_t sent = 0;
  for (auto& f : s.frames) sent += f.type == 0x0 ? f.payload.size() : 0;
  CHECK(sent == 65535);  // the default windows, no more
  CHECK(s.conn.queued_bytes() == big.size() + 5 - 65535);
  CHECK(s.count(0x1) == 1);  // trailers wait behind the data
  s.send(window_update(0, 1 << 20));
  s.send(window_update(1, 1 << 20));
  sent = 0;
  for (auto& f : s.frames) {
    sent += f.type == 0x0 ? f.payload.size() : 0;
    CHECK(f.type != 0x0 || f.payload.size() <= 16384);
  }
  CHECK(sent == big.size() + 5);
  CHECK(s.conn.queued_bytes() == 0);
  const Frame* t = s.last(0x1);
  CHECK(t && header_value(*t, "grpc-status") == "0");
  CHECK(s.conn.open_streams() == 0);
}

TEST(h2_initial_window_setting_applies_to_open_streams) {
  Session s;
  s.send(hello({{0x4, 10}}));
  s.send(headers(1, request_block("/s/m"), true));
  CHECK(s.conn.send_message(1, std::string(100, 'a')));
  s.flush();
  CHECK(s.last(0x0) && s.last(0x0)->payload.size() == 10);
  s.send(settings({{0x4, 50}}));  // +40 for the open stream
  size_t sent = 0;
  for (auto& f : s.frames) sent += f.type == 0x0 ? f.payload.size() : 0;
  CHECK(sent == 50);
}

TEST(h2_data_beyond_our_window_is_flow_control_error) {
  Limits limits;
  limits.stream_window = 16384;
  limits.connection_window = 16384 * 2;
  Session s(limits);
  s.send(hello());
  s.send(headers(1, request_block("/s/m")));
  s.send(data(1, std::string(16384, 'a'), false));
  s.send(data(1, std::string(100, 'a'), false));  // the window was 16384, now 8192 after
  // half the window was acknowledged: the stream may take 8192 more, not beyond.
  CHECK(!s.conn.closed());
  s.send(data(1, std::string(16384, 'a'), false));
  const Frame* r = s.last(0x3);
  CHECK(r && r->stream == 1 && u32(r->payload) == ErrorCode::kFlowControlError);
}

TEST(h2_window_updates_replenish_what_we_took) {
  Limits limits;
  limits.stream_window = 65536;
  limits.connection_window = 65536;
  Session s(limits);
  s.send(hello());
  s.send(headers(1, request_block("/s/m")));
  for (int i = 0; i < 40; ++i) s.send(data(1, std::string(16000, 'a'), false));
  CHECK(!s.conn.closed());  // 640 kB through 64 KiB windows
  CHECK(s.count(0x8) > 10);
}

TEST(h2_rst_stream_cancels_that_stream_only) {
  Session s;
  s.send(hello());
  s.send(headers(1, request_block("/s/a")) + headers(3, request_block("/s/b")));
  s.send(rst(1, ErrorCode::kCancel));
  CHECK(s.events.back().kind == EventKind::kCancel && s.events.back().stream_id == 1);
  CHECK(!s.conn.finish(1, 0, ""));
  CHECK(s.conn.finish(3, 0, ""));
  CHECK(!s.conn.closed());
}

TEST(h2_max_concurrent_streams_enforced) {
  Limits limits;
  limits.max_concurrent_streams = 2;
  Session s(limits);
  s.send(hello());
  s.send(headers(1, request_block("/s/a"), true) + headers(3, request_block("/s/a"), true) +
         headers(5, request_block("/s/a"), true));
  const Frame* r = s.last(0x3);
  CHECK(r && r->stream == 5 && u32(r->payload) == ErrorCode::kRefusedStream);
  CHECK(s.conn.open_streams() == 2);
  CHECK(s.conn.finish(1, 0, ""));
  s.send(headers(7, request_block("/s/a"), true));  // room again
  CHECK(s.conn.open_streams() == 2);
}

TEST(h2_continuation_joins_and_flood_is_refused) {
  Session s;
  s.send(hello());
  std::string block = request_block("/s/m");
  s.send(frame(0x1, 0, 1, block.substr(0, 10)) + frame(0x9, 0, 1, block.substr(10, 10)) +
         frame(0x9, 0x4, 1, block.substr(20)));
  CHECK(!s.events.empty() && s.events[0].path == "/s/m");
  Session flood;
  flood.send(hello());
  flood.send(frame(0x1, 0, 1, block));
  for (int i = 0; i < 100 && !flood.conn.closed(); ++i) flood.send(frame(0x9, 0, 1, "\x00"));
  CHECK(flood.conn.closed());
  CHECK(flood.goaway_code() == ErrorCode::kEnhanceYourCalm);
}

TEST(h2_frame_inside_header_block_is_protocol_error) {
  Session s;
  s.send(hello());
  s.send(frame(0x1, 0, 1, request_block("/s/m")) + frame(0x6, 0, 0, "12345678"));
  CHECK(s.goaway_code() == ErrorCode::kProtocolError);
}

TEST(h2_hpack_table_size_bomb_is_compression_error) {
  Session s;
  s.send(hello());
  std::string block;
  naiad::hpack::encode_integer(1u << 30, 5, 0x20, &block);
  s.send(headers(1, block + request_block("/s/m")));
  CHECK(s.goaway_code() == ErrorCode::kCompressionError);
}

TEST(h2_oversized_header_list_gets_431) {
  Limits limits;
  limits.max_header_list_size = 1024;
  Session s(limits);
  s.send(hello());
  s.send(headers(1, request_block("/s/m", {{"big", std::string(2000, 'b')}}), true));
  const Frame* h = s.last(0x1);
  CHECK(h && header_value(*h, ":status") == "431");
  CHECK(s.events.empty());
  CHECK(!s.conn.closed());
}

TEST(h2_rapid_reset_is_enhance_your_calm) {
  Session s;
  s.send(hello());
  uint32_t id = 1;
  for (; id < 1000 && !s.conn.closed(); id += 2) {
    s.send(headers(id, request_block("/s/m")) + rst(id, ErrorCode::kCancel));
  }
  CHECK(s.conn.closed());
  CHECK(s.goaway_code() == ErrorCode::kEnhanceYourCalm);
  CHECK(id < 300);
}

TEST(h2_frame_errors) {
  struct Case {
    std::string bytes;
    uint32_t code;
  };
  std::vector<Case> cases = {
      {frame(0x6, 0, 0, "1234"), ErrorCode::kFrameSizeError},          // short PING
      {frame(0x6, 0, 1, "12345678"), ErrorCode::kProtocolError},       // PING on a stream
      {frame(0x4, 0, 0, "12345"), ErrorCode::kFrameSizeError},         // SETTINGS size
      {settings({{0x5, 100}}), ErrorCode::kProtocolError},             // MAX_FRAME_SIZE
      {settings({{0x4, 0x80000000u}}), ErrorCode::kFlowControlError},  // window
      {settings({{0x2, 2}}), ErrorCode::kProtocolError},               // ENABLE_PUSH
      {frame(0x0, 0, 0, "x"), ErrorCode::kProtocolError},              // DATA on 0
      {data(9, "x"), ErrorCode::kProtocolError},                       // DATA idle
      {frame(0x5, 0x4, 1, "\0\0\0\2"), ErrorCode::kProtocolError},     // PUSH_PROMISE
      {window_update(0, 0), ErrorCode::kProtocolError},                // increment 0
      {window_update(0, 0x7fffffff), ErrorCode::kFlowControlError},    // overflow
      {frame(0x9, 0x4, 1, "x"), ErrorCode::kProtocolError},            // stray CONTINUATION
      {rst(7, 0), ErrorCode::kProtocolError},                          // RST idle
      {headers(2, request_block("/s/m")), ErrorCode::kProtocolError},  // even id
      {frame(0x1, 0x4, 0, "x"), ErrorCode::kProtocolError},            // HEADERS on 0
      {std::string("\x00\x80\x00\x00\x00\x00\x00\x00\x00", 9), ErrorCode::kFrameSizeError},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    Session s;
    s.send(hello());
    s.send(cases[i].bytes);
    if (!s.conn.closed() || s.goaway_code() != cases[i].code) {
      std::fprintf(stderr, "case %zu: closed=%d code=%u\n", i, s.conn.closed(), s.goaway_code());
    }
    CHECK(s.conn.closed());
    CHECK(s.goaway_code() == cases[i].code);
  }
}

TEST(h2_malformed_requests_answered_per_stream) {
  Session s;
  s.send(hello());
  std::string upper;
  naiad::hpack::encode_header(":method", "POST", &upper);
  naiad::hpack::encode_header(":scheme", "http", &upper);
  naiad::hpack::encode_header(":path", "/a/b", &upper);
  naiad::hpack::encode_header("Bad", "x", &upper);
  s.send(headers(1, upper, true));
  const Frame* r = s.last(0x3);
  CHECK(r && r->stream == 1 && u32(r->payload) == ErrorCode::kProtocolError);
  std::string get;
  naiad::hpack::encode_header(":method", "GET", &get);
  naiad::hpack::encode_header(":scheme", "http", &get);
  naiad::hpack::encode_header(":path", "/a/b", &get);
  s.send(headers(3, get, true));
  CHECK(header_value(*s.last(0x1), ":status") == "405");
  std::string json;
  naiad::hpack::encode_header(":method", "POST", &json);
  naiad::hpack::encode_header(":scheme", "http", &json);
  naiad::hpack::encode_header(":path", "/a/b", &json);
  naiad::hpack::encode_header("content-type", "application/json", &json);
  s.send(headers(5, json, true));
  CHECK(header_value(*s.last(0x1), ":status") == "415");
  CHECK(s.events.empty());
  CHECK(!s.conn.closed());
}

TEST(grpc_message_limits_and_truncation) {
  Limits limits;
  limits.max_message_size = 1000;
  Session s(limits);
  s.send(hello());
  // A length prefix beyond the limit: RESOURCE_EXHAUSTED at once.
  std::string prefix("\x00\x00\x00\x10\x00", 5);
  s.send(headers(1, request_block("/s/m")) + data(1, prefix, false));
  CHECK(header_value(*s.last(0x1), "grpc-status") == "8");
  // A prefix that promises more than the stream carries: INTERNAL at the end.
  s.send(headers(3, request_block("/s/m")) + data(3, grpc_message("abcdef").substr(0, 8)));
  const Frame* t = s.last(0x1);
  CHECK(t && t->stream == 3 && header_value(*t, "grpc-status") == "13");
  CHECK(header_value(*t, "grpc-message").find("incomplete") != std::string::npos);
  CHECK(s.events.back().kind == EventKind::kCancel);  // the caller drops the call
  CHECK(!s.conn.closed());
}

TEST(grpc_compression_flags) {
  Session s;
  s.send(hello());
  s.send(headers(1, request_block("/s/m")) + data(1, grpc_message("zz", true)));
  CHECK(header_value(*s.last(0x1), "grpc-status") == "13");  // no grpc-encoding
  s.send(headers(3, request_block("/s/m", {{"grpc-encoding", "gzip"}})) +
         data(3, grpc_message("zz", true)));
  bool compressed = false;
  for (auto& e : s.events) {
    if (e.kind == EventKind::kMessage && e.stream_id == 3) compressed = e.compressed;
  }
  CHECK(compressed);
  s.send(headers(5, request_block("/s/m", {{"grpc-encoding", "snappy"}}), true));
  CHECK(header_value(*s.last(0x1), "grpc-status") == "12");
  s.send(headers(7, request_block("/s/m", {{"grpc-timeout", "abc"}}), true));
  CHECK(header_value(*s.last(0x1), "grpc-status") == "13");
}

TEST(h2_goaway_on_shutdown_answers_open_calls) {
  Session s;
  s.send(hello());
  s.send(headers(1, request_block("/s/m"), true));
  s.conn.shutdown();
  s.flush();
  const Frame* g = s.last(0x7);
  CHECK(g && u32(g->payload) == 1 && u32(g->payload, 4) == ErrorCode::kNoError);
  s.send(headers(3, request_block("/s/m"), true));  // after GOAWAY: ignored
  CHECK(s.conn.open_streams() == 1);
  CHECK(!s.conn.done());
  CHECK(s.conn.finish(1, 0, ""));
  CHECK(s.conn.done());
}

TEST(grpc_timeout_parsing) {
  int64_t us = 0;
  CHECK(naiad::grpc::parse_timeout("1S", &us) && us == 1000000);
  CHECK(naiad::grpc::parse_timeout("2M", &us) && us == 120000000);
  CHECK(naiad::grpc::parse_timeout("1H", &us) && us == 3600000000LL);
  CHECK(naiad::grpc::parse_timeout("5u", &us) && us == 5);
  CHECK(naiad::grpc::parse_timeout("1n", &us) && us == 1);
  CHECK(naiad::grpc::parse_timeout("99999999m", &us) && us == 99999999000LL);
  CHECK(!naiad::grpc::parse_timeout("123456789m", &us));  // 9 digits
  CHECK(!naiad::grpc::parse_timeout("S", &us));
  CHECK(!naiad::grpc::parse_timeout("1x", &us));
  CHECK(!naiad::grpc::parse_timeout("-1S", &us));
}

TEST(h2_stream_that_does_not_read_gets_no_more_window) {
  Limits limits;
  limits.stream_window = 65536;
  limits.max_stream_backlog = 200000;
  Session s(limits);
  s.send(hello({{0x4, 0}}));  // the client grants us no window at all
  s.send(headers(1, request_block("/inference.GRPCInferenceService/ModelStreamInfer")));
  auto stream_updates = [&s] {
    int n = 0;
    for (auto& f : s.frames) n += f.type == 0x8 && f.stream == 1;
    return n;
  };
  // Each request message is answered with 60 kB the client cannot receive.
  for (int i = 0; i < 4; ++i) {
    s.send(data_frames(1, grpc_message(std::string(32000, 'q')), false));
    CHECK(s.conn.send_message(1, std::string(60000, 'a')));
  }
  s.flush();
  CHECK(s.conn.queued_bytes() > limits.max_stream_backlog);
  int before = stream_updates();
  // 128 kB more of requests: the window we granted is not reopened, so the client
  // cannot send them; the part beyond the window is a flow-control error.
  s.send(data_frames(1, grpc_message(std::string(32000, 'q')), false));
  s.send(data_frames(1, grpc_message(std::string(32000, 'q')), false));
  CHECK(stream_updates() == before);
  s.send(data_frames(1, grpc_message(std::string(40000, 'q')), false));
  const Frame* r = s.last(0x3);
  CHECK(r && r->stream == 1 && u32(r->payload) == ErrorCode::kFlowControlError);
}

TEST(h2_window_reopens_once_answers_drain) {
  Limits limits;
  limits.stream_window = 65536;
  limits.max_stream_backlog = 200000;
  Session s(limits);
  s.send(hello({{0x4, 0}}));
  s.send(headers(1, request_block("/s/stream")));
  for (int i = 0; i < 4; ++i) {
    s.send(data_frames(1, grpc_message(std::string(32000, 'q')), false));
    CHECK(s.conn.send_message(1, std::string(60000, 'a')));
  }
  // One more request uses the window up; it stays shut while 240 kB wait.
  s.send(data_frames(1, grpc_message(std::string(32000, 'q')), false));
  int before = 0;
  for (auto& f : s.frames) before += f.type == 0x8 && f.stream == 1;
  s.send(window_update(0, 1 << 20));
  s.send(settings({{0x4, 1 << 20}}));  // now the client reads everything
  CHECK(s.conn.queued_bytes() == 0);
  int after = 0;
  for (auto& f : s.frames) after += f.type == 0x8 && f.stream == 1;
  CHECK(after > before);
  CHECK(!s.conn.closed());
}

TEST(h2_message_split_inside_its_prefix_arrives_whole) {
  // A 3-byte window cuts the 5-byte gRPC prefix: the rest must follow in order.
  for (uint32_t window : {0u, 3u, 5u, 7u}) {
    Session s;
    s.send(hello({{0x4, window}}));
    s.send(headers(1, request_block("/s/m"), true));
    CHECK(s.conn.send_message(1, "hello world"));
    CHECK(s.conn.send_message(1, "again"));
    CHECK(s.conn.finish(1, 0, ""));
    s.flush();
    s.send(window_update(1, 100));
    std::string sent;
    for (auto& f : s.frames) sent += f.type == 0x0 ? f.payload : "";
    CHECK(sent == grpc_message("hello world") + grpc_message("again"));
    CHECK(s.conn.queued_bytes() == 0 && s.conn.open_streams() == 0);
  }
}

// The copies of a large message's bytes inside the connection, counted: in, one (its
// DATA frames put together into the message the caller gets); out, one (the caller's
// pieces straight into DATA frames) while the windows allow, and a second only for what
// has to wait in the stream's queue.
TEST(grpc_large_messages_copied_once_each_way) {
  Session s;
  s.send(hello({{0x4, 4u << 20}}));  // INITIAL_WINDOW_SIZE: room for the whole answer
  s.send(window_update(0, 4u << 20));
  std::string big(602112, 'q');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
  s.send(headers(1, request_block("/s/m")) + data_frames(1, grpc_message(big), true));
  CHECK(s.events.size() == 3 && s.events[1].message == big);
  CHECK(s.conn.copied_in() == big.size() + 5);
  // The answer as pieces (a head, the tensor, a tail), as a result block gives them.
  std::string head = "head", tail = "tail";
  std::string_view parts[3] = {head, big, tail};
  uint64_t before = s.conn.copied_out();
  CHECK(s.conn.send_message(1, parts, 3));
  CHECK(s.conn.copied_out() - before == 5 + head.size() + big.size() + tail.size());
  CHECK(s.conn.queued_bytes() == 0);
  CHECK(s.conn.finish(1, 0, ""));
  s.flush();
  std::string got;
  for (auto& f : s.frames) {
    if (f.type == 0x0 && f.stream == 1) got += f.payload;
  }
  CHECK(got == grpc_message(head + big + tail));
  // Split by the window: what waits is copied a second time, and only that.
  Session w;
  w.send(hello());  // default windows: 65535
  w.send(headers(1, request_block("/s/m"), true));
  before = w.conn.copied_out();
  CHECK(w.conn.send_message(1, parts, 3));
  size_t total = 5 + head.size() + big.size() + tail.size();
  CHECK(w.conn.queued_bytes() == total - 65535);
  CHECK(w.conn.finish(1, 0, ""));
  w.send(window_update(0, 1 << 20));
  w.send(window_update(1, 1 << 20));
  CHECK(w.conn.queued_bytes() == 0);
  CHECK(w.conn.copied_out() - before == total + (total - 65535));
  got.clear();
  for (auto& f : w.frames) {
    if (f.type == 0x0 && f.stream == 1) got += f.payload;
  }
  CHECK(got == grpc_message(head + big + tail));
}

// With the result block given, the tensor (a page or more, in the block) goes into the
// frames the windows allow as views of the block, not copied; the head and tail (not in
// the block) and what waits for the window are copied. take_output(out, views) splices
// them back in order, and the block is held until the views are gone.
TEST(grpc_large_message_parts_in_the_block_go_out_as_views) {
  naiad::Arena arena = naiad::Arena::create(4 << 20);
  uint64_t held = 0;
  const size_t size = 602112;
  std::string head = "head", tail = "tail";
  for (bool whole_window : {true, false}) {
    const uint64_t offset = arena.alloc(size);  // a response block, freed by its hold
    for (size_t i = 0; i < size; ++i) arena.base()[offset + i] = static_cast<uint8_t>(i * 7);
    std::string_view big(reinterpret_cast<const char*>(arena.base() + offset), size);
    std::string_view parts[3] = {head, big, tail};
    const std::string expected = grpc_message(head + std::string(big) + tail);
    const size_t total = 5 + head.size() + big.size() + tail.size();
    Session s;
    if (whole_window) {
      s.send(hello({{0x4, 4u << 20}}));
      s.send(window_update(0, 4u << 20));
    } else {
      s.send(hello());  // default windows: 65535
    }
    s.send(headers(1, request_block("/s/m"), true));
    {
      auto block = std::make_shared<naiad::HeldBlock>(arena, offset, size, &held);
      CHECK(s.conn.send_message(1, parts, 3, block));
    }
    const size_t viewed = whole_window ? big.size() : 65535 - 5 - head.size();
    CHECK(s.conn.viewed_out() == viewed);
    CHECK(held == size);  // the views hold it
    std::string out = "before";
    naiad::OutViews views;
    s.conn.take_output(&out, &views);
    CHECK(views.bytes() == viewed);
    iovec iov[512];
    const int n = views.gather(out, iov, 512);
    std::string wire;
    for (int i = 0; i < n; ++i)
      wire.append(static_cast<const char*>(iov[i].iov_base), iov[i].iov_len);
    CHECK(wire.substr(0, 6) == "before");
    views.consume(&out, wire.size());
    CHECK(held == 0 && views.empty() && out.empty());
    auto frames = s.reader.read(wire.substr(6));
    CHECK(s.conn.finish(1, 0, ""));
    if (!whole_window) {
      s.send(window_update(0, 1 << 20));
      s.send(window_update(1, 1 << 20));
    }
    s.flush();
    frames.insert(frames.end(), s.frames.begin(), s.frames.end());
    std::string got;
    for (auto& f : frames) {
      if (f.type == 0x0 && f.stream == 1) got += f.payload;
    }
    CHECK(got == expected);
    CHECK(s.conn.copied_out() == total - viewed + (whole_window ? 0 : total - 65535));
  }
  CHECK(arena.stats().blocks_in_use == 0);
}

// --grpc-infer-response-compression-level: the algorithm gRPC core picks for a level
// among those the client accepts (ranked gzip, deflate), and the answer it sends.
TEST(h2_response_encoding_for_level) {
  using naiad::ResponseEncoding;
  using naiad::h2::response_encoding_for;
  const char* both = "identity, deflate, gzip";  // what grpc core clients send
  CHECK(response_encoding_for(0, both) == ResponseEncoding::kIdentity);
  CHECK(response_encoding_for(1, both) == ResponseEncoding::kGzip);
  CHECK(response_encoding_for(2, both) == ResponseEncoding::kDeflate);
  CHECK(response_encoding_for(3, both) == ResponseEncoding::kDeflate);
  CHECK(response_encoding_for(3, "gzip") == ResponseEncoding::kGzip);
  CHECK(response_encoding_for(1, " deflate ,identity") == ResponseEncoding::kDeflate);
  CHECK(response_encoding_for(3, "identity") == ResponseEncoding::kIdentity);
  CHECK(response_encoding_for(3, "") == ResponseEncoding::kIdentity);
  CHECK(response_encoding_for(3, "gzipx,deflat") == ResponseEncoding::kIdentity);
}

TEST(h2_answers_compressed_at_a_level) {
  for (int level : {0, 1, 3}) {
    Limits limits;
    limits.response_compression = level;
    Session s(limits);
    s.send(hello());
    s.send(headers(1,
                   request_block("/inference.GRPCInferenceService/ModelInfer",
                                 {{"grpc-accept-encoding", "identity, deflate, gzip"}}),
                   true));
    const std::string reply(4096, 'z');
    CHECK(s.conn.send_message(1, reply));
    CHECK(s.conn.finish(1, 0, ""));
    s.flush();
    const Frame* h = nullptr;
    for (auto& f : s.frames) {
      if (f.type == 0x1 && f.stream == 1 && !h) h = &f;
    }
    const Frame* d = s.last(0x0);
    CHECK(h && d);
    std::string payload = d->payload;
    if (level == 0) {
      CHECK(header_value(*h, "grpc-encoding").empty());
      CHECK(payload == grpc_message(reply));
      continue;
    }
    CHECK(header_value(*h, "grpc-encoding") == (level == 1 ? "gzip" : "deflate"));
    CHECK(payload.size() > 5 && payload[0] == 1);  // the compressed flag
    CHECK(payload.size() < reply.size() / 4);
    CHECK(inflated(payload.substr(5), level == 1 ? 31 : 15) == reply);
  }
}

// --grpc-keepalive-time: our PING is counted until the client's ACK of it; an ACK of
// other data (not ours) leaves it counted.
TEST(h2_keepalive_ping_counted_until_acked) {
  Session s;
  s.send(hello());
  CHECK(s.conn.pings_unacked() == 0);
  s.conn.ping();
  s.flush();
  const Frame* p = s.last(0x6);
  CHECK(p && p->stream == 0 && !(p->flags & 1) && p->payload.size() == 8);
  CHECK(s.conn.pings_unacked() == 1);
  const std::string ours = p->payload;  // `frames` grows below: p may move
  s.send(frame(0x6, 0x1, 0, "otherdat"));
  CHECK(s.conn.pings_unacked() == 1);
  s.send(frame(0x6, 0x1, 0, ours));
  CHECK(s.conn.pings_unacked() == 0);
  CHECK(!s.conn.closed());
}

// The ping policy's inputs and verdict: the client's PINGs are counted (and each
// acknowledged); too_many_pings() is GOAWAY ENHANCE_YOUR_CALM "too_many_pings".
TEST(h2_client_pings_counted_and_too_many_pings) {
  Session s;
  s.send(hello());
  s.send(frame(0x6, 0, 0, "pingpong") + frame(0x6, 0, 0, "pingpang"));
  CHECK(s.conn.pings_received() == 2);
  CHECK(s.count(0x6) == 2);  // both acknowledged
  s.send(frame(0x6, 0x1, 0, "notasked"));
  CHECK(s.conn.pings_received() == 2);  // an ACK is no PING
  s.conn.too_many_pings();
  s.flush();
  CHECK(s.conn.closed());
  CHECK(s.goaway_code() == 0xb);
  const Frame* g = s.last(0x7);
  CHECK(g && g->payload.substr(8) == "too_many_pings");
}
