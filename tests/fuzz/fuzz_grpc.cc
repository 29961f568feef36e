// libFuzzer target: the bytes a client sends on one HTTP/2 connection, through the gRPC
// connection (grpc_connection, hpack), the ModelInferRequest reader
// (grpc_infer_message), compressed messages inflated (grpc_inflate) and the gRPC lane
// over the codec, answered as the front end
// answers: the lane's refusal with its status (a message it cannot read: INTERNAL), a queued
// request with its response (or the model's error), anything else UNIMPLEMENTED. The input is fed
// in pieces of sizes that depend on its length only. Seeds: tests/fuzz/corpus/grpc, connections of
// tritonclient.grpc and perf_analyzer (tools/capture_traffic.py).
// The contract: the output is whole, well-formed frames whose header blocks decode; a
// call answered with an error gets trailers carrying that grpc-status; streams stay
// within the advertised limit; a connection error ends in GOAWAY.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "codec/error_status.h"
#include "fuzz_support.h"
#include "h2_client.h"
#include "http2/grpc_connection.h"
#include "http2/grpc_infer_message.h"
#include "http2/grpc_inflate.h"

using namespace naiad;

namespace {

constexpr char kInfer[] = "/inference.GRPCInferenceService/ModelInfer";

struct Call {
  std::string path;
  bool refused = false;
  std::string error;
  int status = 3;  // INVALID_ARGUMENT, or the lane's refusal's
  uint64_t request_id = 0;
  uint32_t model = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  h2::Limits limits;
  limits.max_concurrent_streams = 8;
  limits.max_message_size = 1 << 16;
  h2::GrpcConnection conn(limits);
  fuzz::Lanes lanes;
  h2test::Reader reader;
  std::map<uint32_t, Call> calls;
  std::map<uint32_t, int> error_status;  // streams we finished with an error, without data
  std::vector<h2::Event> events;
  std::vector<h2test::Frame> frames;
  uint64_t state = size * 0x9E3779B97F4A7C15ULL + 1;
  size_t pos = 0;
  while (pos < size) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    size_t n = std::min<size_t>(size - pos, 1 + state % 512);
    events.clear();
    conn.receive(reinterpret_cast<const char*>(data) + pos, n, &events);
    pos += n;
    std::vector<uint64_t> ids;
    std::vector<uint32_t> models;
    std::vector<uint32_t> streams;
    for (h2::Event& e : events) {
      switch (e.kind) {
        case h2::EventKind::kCall:
          calls[e.stream_id].path = e.path;
          break;
        case h2::EventKind::kMessage: {
          auto it = calls.find(e.stream_id);
          FUZZ_CHECK(it != calls.end());
          Call& call = it->second;
          FUZZ_CHECK(e.message.size() <= limits.max_message_size);
          if (call.path != kInfer || call.request_id != 0 || call.refused) break;
          if (e.compressed) {  // inflated in steps, as the I/O loop does
            grpc::Inflation inflation(std::move(e.message), e.encoding, limits.max_message_size);
            while (!inflation.step(4096)) {
            }
            if (inflation.status() != grpc::kOk) {
              FUZZ_CHECK(!inflation.error().empty() && inflation.message().empty());
              call.refused = true;
              call.error = inflation.error();
              break;
            }
            FUZZ_CHECK(inflation.message().size() <= limits.max_message_size);
            e.message.assign(inflation.message());
          }
          grpc::InferRequestView view;
          std::string error;
          const bool readable = grpc::read_infer_request(e.message, &view, &error);
          FUZZ_CHECK(readable || !error.empty());
          GrpcLane::Taken taken;
          if (!lanes.grpc.submit(e.message, 1, &taken)) break;
          // A message the reader cannot read is the lane's too: grpc++'s INTERNAL.
          FUZZ_CHECK(readable ||
                     (taken.request_id == 0 && taken.error_kind == ErrorKind::kInternal));
          if (taken.request_id == 0) {
            FUZZ_CHECK(!taken.error.empty());
            call.refused = true;
            call.error = taken.error;
            call.status = error_status_of(taken.error_kind).grpc_code;
          } else {
            call.request_id = taken.request_id;
            call.model = taken.model;
          }
          break;
        }
        case h2::EventKind::kHalfClose: {
          auto it = calls.find(e.stream_id);
          if (it == calls.end()) break;
          Call& call = it->second;
          if (call.request_id != 0) {
            ids.push_back(call.request_id);
            models.push_back(call.model);
            streams.push_back(e.stream_id);
            break;
          }
          const int status = call.refused ? call.status : 12;  // UNIMPLEMENTED
          if (conn.finish(e.stream_id, status, call.refused ? call.error : "not served here")) {
            error_status[e.stream_id] = status;
          }
          calls.erase(it);
          break;
        }
        case h2::EventKind::kCancel: {
          auto it = calls.find(e.stream_id);
          if (it != calls.end() && it->second.request_id != 0) {
            lanes.codec().forget(it->second.request_id);
            // A call reset after its half-close is queued for this round's answer: the
            // codec has forgotten it, so it gets none, as the front end drops it.
            for (size_t q = 0; q < streams.size(); ++q) {
              if (streams[q] != e.stream_id) continue;
              ids.erase(ids.begin() + q);
              models.erase(models.begin() + q);
              streams.erase(streams.begin() + q);
              break;
            }
          }
          if (it != calls.end()) calls.erase(it);
          error_status.erase(e.stream_id);
          break;
        }
      }
    }
    // The queued calls answered as the front end answers them.
    std::string block;
    std::vector<KServeCodec::Answer> answers = lanes.answer(ids, models, &block);
    for (size_t i = 0; i < answers.size(); ++i) {
      const InferResponse& response = answers[i].response;
      if (response.error != ErrorKind::kNone) {
        int status = error_status_of(response.error).grpc_code;
        if (conn.finish(streams[i], status, grpc_error_message(response))) {
          error_status[streams[i]] = status;
        }
      } else {
        std::string scratch;
        std::vector<std::string_view> parts;
        GrpcResponseWriter().parts(response, false, &scratch, &parts);
        conn.send_message(streams[i], parts.data(), parts.size());
        conn.finish(streams[i], 0, "");
      }
      calls.erase(streams[i]);
    }
    FUZZ_CHECK(conn.open_streams() <= limits.max_concurrent_streams);
    for (h2test::Frame& f : reader.read(conn.take_output())) frames.push_back(std::move(f));
  }
  for (h2test::Frame& f : reader.read(conn.take_output())) frames.push_back(std::move(f));
  for (auto& [stream, call] : calls) {
    if (call.request_id != 0) lanes.codec().forget(call.request_id);
  }

  FUZZ_CHECK(reader.pending.empty() && reader.block.empty());  // whole frames, whole blocks
  std::map<uint32_t, std::string> trailers;
  bool goaway = false;
  for (const h2test::Frame& f : frames) {
    FUZZ_CHECK(f.type <= 0x9 && f.type != 0x2 && f.type != 0x5);  // no PRIORITY, PUSH_PROMISE
    if (f.type == 0x7) goaway = true;
    FUZZ_CHECK(f.type != 0x0 || f.payload.size() <= (1u << 24) - 1);
    if ((f.type == 0x1 || f.type == 0x9) && (f.flags & 0x4)) {
      FUZZ_CHECK(!f.headers.empty());
      if (f.flags & 0x1) trailers[f.stream] = h2test::header_value(f, "grpc-status");
    }
  }
  FUZZ_CHECK(!conn.closed() || goaway);
  for (auto& [stream, status] : error_status) {
    FUZZ_CHECK(trailers.count(stream) && trailers[stream] == std::to_string(status));
  }
  FUZZ_CHECK(lanes.codec().in_flight() == 0);
  return 0;
}
