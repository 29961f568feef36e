// Damaged-input fuzzing of the HTTP/2 + gRPC connection and the HPACK decoder: valid
// client sessions with random bytes changed, inserted or dropped, fed in random pieces,
// with the server answering what it is asked. Run under ASan/UBSan by `make test`
// (test-core-sanitize); a fixed seed and a fixed count keep it bounded and repeatable.
// Checks: nothing crashes or reads out of bounds, the output is always well-formed
// frames, streams stay within the advertised limit, queued bytes stay bounded.
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "add_sub_model.h"
#include "core/core.h"
#include "h2_client.h"
#include "http1/http_framer.h"
#include "http2/grpc_connection.h"
#include "http2/grpc_contents.h"
#include "http2/grpc_infer_message.h"
#include "http2/grpc_lane.h"
#include "http2/hpack.h"
#include "testing.h"

using namespace h2test;

namespace {

std::string valid_session(std::mt19937& rng) {
  std::string s = hello({{0x4, 1 + rng() % 70000}, {0x1, rng() % 8192}});
  uint32_t id = 1;
  int calls = 1 + rng() % 6;
  for (int c = 0; c < calls; ++c, id += 2) {
    std::string block = request_block("/inference.GRPCInferenceService/ModelInfer",
                                      {{"grpc-timeout", std::to_string(rng() % 100) + "m"}});
    if (rng() % 3 == 0) {
      s += frame(0x1, 0, id, block.substr(0, block.size() / 2));
      s += frame(0x9, 0x4, id, block.substr(block.size() / 2));
    } else {
      s += headers(id, block);
    }
    std::string msg = grpc_message(std::string(rng() % 300, 'm'));
    size_t cut = msg.size() / 2;
    s += data(id, msg.substr(0, cut), false);
    s += data(id, msg.substr(cut), true);
    switch (rng() % 4) {
      case 0:
        s += rst(id, 8);
        break;
      case 1:
        s += window_update(id, 1 + rng() % 100000);
        break;
      case 2:
        s += frame(0x6, 0, 0, "pingpong");
        break;
      default:
        s += window_update(0, 1 + rng() % 100000);
    }
  }
  return s;
}

void damage(std::string* s, std::mt19937& rng) {
  int edits = 1 + rng() % 4;
  for (int i = 0; i < edits && !s->empty(); ++i) {
    size_t at = rng() % s->size();
    switch (rng() % 4) {
      case 0:
        (*s)[at] = static_cast<char>(rng());
        break;
      case 1:
        s->insert(at, 1, static_cast<char>(rng()));
        break;
      case 2:
        s->erase(at, 1 + rng() % 8);
        break;
      default:
        (*s)[at] ^= static_cast<char>(1 << (rng() % 8));
    }
  }
}

}  // namespace

TEST(grpc_connection_fuzz_damaged_sessions) {
  std::mt19937 rng(20261130);
  naiad::h2::Limits limits;
  limits.max_concurrent_streams = 4;
  limits.max_message_size = 4096;
  int closed = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string input = valid_session(rng);
    if (round % 10 != 0) damage(&input, rng);  // every tenth session stays valid
    naiad::h2::GrpcConnection conn(limits);
    Reader reader;
    std::vector<naiad::h2::Event> events;
    std::set<uint32_t> calls;
    bool frames_ok = true;
    size_t pos = 0;
    while (pos < input.size()) {
      size_t n = std::min<size_t>(input.size() - pos, 1 + rng() % 200);
      events.clear();
      conn.receive(input.data() + pos, n, &events);
      pos += n;
      for (auto& e : events) {
        if (e.kind == naiad::h2::EventKind::kCall) calls.insert(e.stream_id);
        if (e.kind == naiad::h2::EventKind::kCancel) calls.erase(e.stream_id);
        if (e.kind == naiad::h2::EventKind::kHalfClose && calls.count(e.stream_id)) {
          conn.send_message(e.stream_id, std::string(rng() % 100000, 'r'));
          if (rng() % 5 == 0) {
            conn.reset(e.stream_id, 8);
          } else {
            conn.finish(e.stream_id, static_cast<int>(rng() % 17), "m\n%");
          }
          calls.erase(e.stream_id);
        }
      }
      CHECK(conn.open_streams() <= limits.max_concurrent_streams);
      // Never more than the answers we queued, 100 kB each, per open stream.
      CHECK(conn.queued_bytes() <= 100005u * limits.max_concurrent_streams);
      std::string out = conn.take_output();
      size_t before = reader.pending.size() + out.size();
      auto frames = reader.read(out);
      size_t framed = 0;
      for (auto& f : frames) framed += 9 + f.payload.size();
      frames_ok = frames_ok && framed <= before;
    }
    CHECK(frames_ok);
    CHECK(reader.pending.empty());  // the server never leaves half a frame
    closed += conn.closed();
  }
  CHECK(closed > 100);  // damage does trip the checks
  CHECK(closed < 3000);
}

TEST(hpack_decoder_fuzz_random_blocks) {
  std::mt19937 rng(7541);
  naiad::hpack::Decoder decoder(4096);
  std::vector<naiad::hpack::Header> out;
  int ok = 0;
  for (int round = 0; round < 20000; ++round) {
    std::string block;
    size_t n = rng() % 64;
    for (size_t i = 0; i < n; ++i) block.push_back(static_cast<char>(rng()));
    if (round % 2 == 0) {
      std::string valid;
      naiad::hpack::encode_header("k" + std::to_string(rng() % 5), std::string(rng() % 50, 'v'),
                                  &valid);
      block = valid + block.substr(0, rng() % 4);
    }
    auto result = decoder.decode(block, 8192, &out);
    ok += result == naiad::hpack::Decoder::Result::kOk;
    CHECK(decoder.table_size() <= 4096);
    size_t list = 0;
    for (auto& h : out) list += naiad::hpack::field_size(h);
    CHECK(list <= 8192);
  }
  CHECK(ok > 1000);
}

TEST(grpc_infer_request_reader_fuzz) {
  // Valid requests with bytes changed: the reader accepts or refuses, never reads out of
  // bounds; the views it returns lie inside the message.
  std::mt19937 rng(125);
  std::string base;
  auto field = [&base](uint8_t key, const std::string& payload) {
    base.push_back(static_cast<char>(key));
    base.push_back(static_cast<char>(payload.size()));
    base += payload;
  };
  field(0x0a, "add_sub");
  field(0x1a, "id-1");
  std::string input;
  input += std::string(
      "\x0a\x06INPUT0\x12\x04"
      "FP32\x1a\x02\x01\x10",
      18);
  field(0x2a, input);
  field(0x32, std::string("\x0a\x07OUTPUT0", 9));
  field(0x3a, std::string(64, 'd'));
  int accepted = 0;
  for (int round = 0; round < 20000; ++round) {
    std::string message = base;
    damage(&message, rng);
    naiad::grpc::InferRequestView r;
    std::string error;
    if (naiad::grpc::read_infer_request(message, &r, &error)) {
      ++accepted;
      const char* lo = message.data();
      const char* hi = lo + message.size();
      for (auto& raw : r.raw_input_contents) {
        CHECK(raw.empty() || (raw.data() >= lo && raw.data() + raw.size() <= hi));
      }
    } else {
      CHECK(!error.empty());
    }
  }
  CHECK(accepted > 100);
  CHECK(accepted < 20000);
}

TEST(grpc_typed_contents_fuzz) {
  // A request with typed contents and parameters, bytes changed: the reader accepts or
  // refuses; what it accepts the lane queues or refuses with a message, and each input's
  // contents convert to whole elements or are refused with one.
  std::mt19937 rng(40);
  auto put = [](std::string* out, uint8_t key, const std::string& payload) {
    out->push_back(static_cast<char>(key));
    out->push_back(static_cast<char>(payload.size()));
    *out += payload;
  };
  std::string floats;
  for (int i = 0; i < 16; ++i) floats += std::string("\x00\x00\x80\x3f", 4);
  std::string contents;
  put(&contents, 0x32, floats);  // fp32_contents, packed
  std::string base;
  put(&base, 0x0a, "add_sub");
  put(&base, 0x1a, "id\"1");
  put(&base, 0x22, std::string("\x0a\x08priority\x12\x02\x10\x01", 14));
  for (const char* name : {"INPUT0", "INPUT1"}) {
    std::string input;
    put(&input, 0x0a, name);
    put(&input, 0x12, "FP32");
    put(&input, 0x1a, std::string("\x01\x10", 2));
    put(&input, 0x2a, contents);
    put(&base, 0x2a, input);
  }
  naiad::Core core(1 << 20, nullptr, false);
  naiad::HttpLane http(core);
  naiad::GrpcLane lane(http.codec());
  naiad::BatcherConfig config;
  config.max_batch_size = 8;
  naiad::ModelSpec model = naiad::add_sub_model();
  model.core_model_id = core.add_model(config);
  lane.set_model("add_sub", {{1, true, http.codec().add_model(model)}});
  int queued = 0, refused = 0;
  for (int round = 0; round < 20000; ++round) {
    std::string message = base;
    damage(&message, rng);
    naiad::grpc::InferRequestView r;
    std::string error;
    if (!naiad::grpc::read_infer_request(message, &r, &error)) continue;
    for (const auto& in : r.inputs) {
      std::vector<uint8_t> wire;
      std::string refusal;
      if (naiad::grpc::contents_to_wire(in.contents, in.datatype, in.name, r.model_name, &wire,
                                        &refusal)) {
        CHECK(in.datatype != "FP32" || wire.size() % 4 == 0);
      } else {
        CHECK(!refusal.empty());
      }
    }
    naiad::GrpcLane::Taken taken;
    if (!lane.submit(message, 0, &taken)) continue;
    if (taken.request_id != 0) {
      ++queued;
      http.codec().forget(taken.request_id);
    } else {
      ++refused;
      CHECK(!taken.error.empty());
    }
  }
  CHECK(queued > 100 && refused > 100);
  CHECK(http.codec().in_flight() == 0);
}
