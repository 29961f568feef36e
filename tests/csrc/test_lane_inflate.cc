// The one inflater (http_compress.h inflate_stream, inflate_body) and compressed request
// bodies on the HTTP lane: each format and Content-Encoding, the limit, damaged and
// truncated streams with the general path's words, and the tensors a compressed request
// delivers to the worker (the same bytes as the plain request's).
#include <unistd.h>
#include <zlib.h>

#include <string>
#include <vector>

#include "add_sub_model.h"
#include "codec/http_compress.h"
#include "core/core.h"
#include "http1/http_framer.h"
#include "http1/http_scan.h"
#include "inflate_support.h"
#include "ipc/worker_endpoint.h"
#include "lane_support.h"
#include "testing.h"

using namespace naiad;

namespace {

Inflated inflate_of(StreamFormat format, const std::string& data, size_t limit, InflatedBytes* out,
                    std::string* error = nullptr) {
  std::string ignored;
  return inflate_stream(format, data, limit, out, error != nullptr ? error : &ignored);
}

const char* kTarget = "/v2/models/add_sub/infer";

std::string input_json(const char* name) {
  return std::string("{\"name\":\"") + name +
         "\",\"datatype\":\"FP32\",\"shape\":[1,16],\"parameters\":{\"binary_data_size\":64}}";
}

// add_sub's binary request whose INPUT0/INPUT1 bytes are `seed` + their position.
Body add_sub_binary(int seed) {
  Body body =
      make_body("{\"inputs\":[" + input_json("INPUT0") + "," + input_json("INPUT1") + "]}", 0);
  for (int b = 0; b < 128; ++b) body.bytes.push_back(static_cast<char>(seed * 3 + b));
  return body;
}

std::string post(const std::string& body, const std::string& headers) {
  return std::string("POST ") + kTarget + " HTTP/1.1\r\nHost: x\r\n" + headers +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

std::vector<HttpLane::Taken> take(HttpLane& lane, const std::string& received,
                                  size_t max_body = 1 << 20) {
  std::vector<HttpLane::Taken> taken;
  CHECK(lane.take_http(reinterpret_cast<const uint8_t*>(received.data()), received.size(), max_body,
                       7, &taken) == received.size());
  return taken;
}

std::string error_answer(const char* status_line, const std::string& json) {
  return std::string("HTTP/1.1 ") + status_line +
         "\r\nContent-Length: " + std::to_string(json.size()) +
         "\r\nContent-Type: application/json\r\n\r\n" + json;
}

}  // namespace

TEST(inflater_reads_each_stream_format) {
  const std::string data = patterned(3 << 20);  // more than one step of output growth
  for (StreamFormat format :
       {StreamFormat::kGzip, StreamFormat::kZlib, StreamFormat::kRawDeflate}) {
    const std::string packed = deflated(format, data);
    InflatedBytes out;
    CHECK(inflate_of(format, packed, data.size(), &out) == Inflated::kDone);
    CHECK(out.view() == data);
    // Bytes after the end of the stream are ignored (as zlib.decompress).
    CHECK(inflate_of(format, packed + "trailing", data.size(), &out) == Inflated::kDone);
    CHECK(out.view() == data);
  }
  // The compressor's streams (answers) are read back.
  std::string gzip;
  CHECK(compress_body(ResponseEncoding::kGzip, "abc", &gzip));
  InflatedBytes out;
  CHECK(inflate_of(StreamFormat::kGzip, gzip, 3, &out) == Inflated::kDone && out.view() == "abc");
  // An empty stream inflates to nothing.
  CHECK(inflate_of(StreamFormat::kZlib, deflated(StreamFormat::kZlib, ""), 0, &out) ==
        Inflated::kDone);
  CHECK(out.size() == 0);
}

TEST(inflater_stops_at_the_limit_holding_no_more_than_it) {
  InflatedBytes held_once;
  CHECK(inflate_of(StreamFormat::kGzip, deflated(StreamFormat::kGzip, std::string(1000, 'x')), 1000,
                   &held_once) == Inflated::kDone);
  InflatedBytes out;
  CHECK(inflate_of(StreamFormat::kGzip, deflated(StreamFormat::kGzip, std::string(1001, 'x')), 1000,
                   &out) == Inflated::kTooLarge);
  // A bomb: 64 MiB of zeros in about 64 kB, against a 4 MiB limit. The output grew only
  // to the limit (and one byte that tells it is passed).
  const std::string bomb = deflated(StreamFormat::kGzip, std::string(64 << 20, '\0'), 9);
  CHECK(bomb.size() < (100 << 10));
  const size_t limit = 4 << 20;
  InflatedBytes held;
  CHECK(inflate_of(StreamFormat::kGzip, bomb, limit, &held) == Inflated::kTooLarge);
  CHECK(held.capacity() < limit + (1 << 20));
  CHECK(inflate_of(StreamFormat::kGzip, bomb, 0, &held) == Inflated::kTooLarge);
}

TEST(inflater_names_damaged_and_truncated_streams_as_pythons_zlib) {
  const std::string data = patterned(100000);
  const std::string gzip = deflated(StreamFormat::kGzip, data);
  InflatedBytes out;
  std::string error;
  CHECK(inflate_of(StreamFormat::kGzip, gzip.substr(0, gzip.size() - 20), 1 << 20, &out, &error) ==
        Inflated::kDamaged);
  CHECK(error == "incomplete or truncated stream");
  CHECK(out.size() == 0);
  CHECK(inflate_of(StreamFormat::kGzip, "", 1 << 20, &out, &error) == Inflated::kDamaged);
  CHECK(error == "incomplete or truncated stream");
  CHECK(inflate_of(StreamFormat::kZlib, "not zlib at all", 1 << 20, &out, &error) ==
        Inflated::kDamaged);
  CHECK(error == "Error -3 while decompressing data: incorrect header check");
  CHECK(inflate_of(StreamFormat::kGzip, deflated(StreamFormat::kZlib, data), 1 << 20, &out,
                   &error) == Inflated::kDamaged);
  CHECK(error == "Error -3 while decompressing data: incorrect header check");
  std::string corrupt = gzip;
  corrupt[gzip.size() - 6] ^= 0x55;  // the CRC
  CHECK(inflate_of(StreamFormat::kGzip, corrupt, 1 << 20, &out, &error) == Inflated::kDamaged);
  CHECK(error == "Error -3 while decompressing data: incorrect data check");
}

TEST(http_deflate_bodies_are_read_in_the_zlib_format_or_raw) {
  const std::string data = patterned(50000);
  InflatedBytes out;
  std::string error;
  CHECK(inflate_body(ContentEncoding::kDeflate, deflated(StreamFormat::kZlib, data), 1 << 20, &out,
                     &error) == Inflated::kDone);
  CHECK(out.view() == data);
  CHECK(inflate_body(ContentEncoding::kDeflate, deflated(StreamFormat::kRawDeflate, data), 1 << 20,
                     &out, &error) == Inflated::kDone);
  CHECK(out.view() == data);
  CHECK(inflate_body(ContentEncoding::kGzip, deflated(StreamFormat::kGzip, data), 1 << 20, &out,
                     &error) == Inflated::kDone);
  CHECK(out.view() == data);
  // gzip is gzip only; a zlib stream that passes the limit is not read again raw.
  CHECK(inflate_body(ContentEncoding::kGzip, deflated(StreamFormat::kZlib, data), 1 << 20, &out,
                     &error) == Inflated::kDamaged);
  CHECK(inflate_body(ContentEncoding::kDeflate, deflated(StreamFormat::kZlib, data), 100, &out,
                     &error) == Inflated::kTooLarge);
  // Neither format: the raw attempt's complaint.
  CHECK(inflate_body(ContentEncoding::kDeflate, "\xff\xff\xff\xff", 1 << 20, &out, &error) ==
        Inflated::kDamaged);
  CHECK(error == "Error -3 while decompressing data: invalid block type");
}

TEST(http_scan_reads_the_content_encoding) {
  struct Case {
    const char* header;
    ContentEncoding expected;
  } cases[] = {
      {"", ContentEncoding::kIdentity},
      {"Content-Encoding: gzip\r\n", ContentEncoding::kGzip},
      {"content-encoding:  deflate \r\n", ContentEncoding::kDeflate},
      {"Content-Encoding: identity\r\n", ContentEncoding::kIdentity},
      {"Content-Encoding: \r\n", ContentEncoding::kIdentity},
      {"Content-Encoding: br\r\n", ContentEncoding::kUnsupported},
      {"Content-Encoding: GZIP\r\n", ContentEncoding::kUnsupported},  // as the general path
      {"Content-Encoding: gzip, deflate\r\n", ContentEncoding::kUnsupported},
      {"Content-Encoding: br\r\nContent-Encoding: gzip\r\n", ContentEncoding::kGzip},  // the last
  };
  for (const Case& c : cases) {
    const std::string request = post("ab", c.header);
    ScannedRequest out;
    CHECK(scan_request(request.data(), request.size(), 1 << 20, &out) == ScanResult::kRequest);
    CHECK(out.content == c.expected);
  }
}

TEST(lane_queues_compressed_bodies_with_the_plain_bodies_tensors) {
  Core core(1 << 20, nullptr, false);
  BatcherConfig config;
  config.dynamic_batching = true;
  config.max_batch_size = 8;
  ModelSpec model = add_sub_model();
  model.core_model_id = core.add_model(config);
  uint32_t instance = core.add_instance(model.core_model_id);
  HttpLane lane(core);
  lane.add_route(kTarget, lane.codec().add_model(model));
  // Each encoding, with and without Inference-Header-Content-Length (which counts the
  // inflated bytes), and a JSON body whose whole inflated body is the header.
  std::string received;
  std::string expected_input0;
  for (int i = 0; i < 6; ++i) {
    Body body = add_sub_binary(i);
    expected_input0 += body.bytes.substr(body.header_size, 64);
    std::string headers = "Inference-Header-Content-Length: " + std::to_string(body.header_size) +
                          "\r\nContent-Type: application/octet-stream\r\n";
    std::string sent;
    switch (i % 3) {
      case 0:
        sent = deflated(StreamFormat::kGzip, body.bytes);
        headers += "Content-Encoding: gzip\r\n";
        break;
      case 1:
        sent = deflated(StreamFormat::kZlib, body.bytes);
        headers += "Content-Encoding: deflate\r\n";
        break;
      default:
        sent = deflated(StreamFormat::kRawDeflate, body.bytes);
        headers += "Content-Encoding: deflate\r\n";
    }
    received += post(sent, headers);
  }
  std::string floats = "[";
  for (int i = 0; i < 16; ++i) floats += (i ? "," : "") + std::to_string(i) + ".5";
  floats += "]";
  const std::string json =
      "{\"inputs\":[{\"name\":\"INPUT0\",\"datatype\":\"FP32\",\"shape\":[1,16],"
      "\"data\":" +
      floats + "},{\"name\":\"INPUT1\",\"datatype\":\"FP32\",\"shape\":[1,16],\"data\":" + floats +
      "}]}";
  received += post(deflated(StreamFormat::kGzip, json), "Content-Encoding: gzip\r\n");
  for (int i = 0; i < 16; ++i) {
    const float value = static_cast<float>(i) + 0.5f;
    expected_input0.append(reinterpret_cast<const char*>(&value), 4);
  }
  std::vector<HttpLane::Taken> taken = take(lane, received);
  CHECK(taken.size() == 7);
  for (const HttpLane::Taken& one : taken) CHECK(one.request_id != 0 && one.reply.empty());

  InstanceEndpoint ep = core.endpoint(instance);
  WorkerEndpoint worker(dup(core.arena().fd()), ep.channel_offset, dup(ep.wake_fd),
                        dup(core.notify_fd()));
  core.instance_up(instance);
  BatchMessage message = worker.next();
  const auto& header = *worker.arena().at<BatchHeader>(message.desc_offset);
  CHECK(header.n_requests == 7 && header.n_tensors == 2);
  const auto* tensors =
      worker.arena().at<BatchTensor>(message.desc_offset + batch_tensors_offset(7));
  CHECK(tensors[0].size == 7 * 64);
  const uint8_t* input0 = worker.arena().base() + tensors[0].offset;
  CHECK(std::string(reinterpret_cast<const char*>(input0), 7 * 64) == expected_input0);
}

TEST(lane_refuses_compressed_bodies_with_the_general_paths_answers) {
  LaneFixture f;
  f.lane.add_route(kTarget, f.lane_model);
  const Body body = add_sub_binary(1);
  const std::string length =
      "Inference-Header-Content-Length: " + std::to_string(body.header_size) + "\r\n";
  // Past --http-max-input-size once inflated: 413, and the connection goes on.
  const std::string packed = deflated(StreamFormat::kGzip, body.bytes);
  std::vector<HttpLane::Taken> taken =
      take(f.lane, post(packed, length + "Content-Encoding: gzip\r\n"), body.bytes.size() - 1);
  CHECK(taken.size() == 1 && taken[0].request_id == 0 && taken[0].batch_size == 0);
  const std::string limit = std::to_string(body.bytes.size() - 1);
  CHECK(taken[0].reply ==
        error_answer("413 Request Entity Too Large",
                     "{\"error\":\"inflated request body of more than " + limit +
                         " bytes exceeds the maximum allowed input size of " + limit +
                         " bytes; use --http-max-input-size to increase the limit\"}"));
  // Exactly the limit is served.
  taken = take(f.lane, post(packed, length + "Content-Encoding: gzip\r\n"), body.bytes.size());
  CHECK(taken.size() == 1 && taken[0].request_id != 0);
  // Damaged: 400 with zlib's complaint.
  taken = take(f.lane,
               post(packed.substr(0, packed.size() - 20), length + "Content-Encoding: gzip\r\n"));
  CHECK(taken.size() == 1 && taken[0].request_id == 0);
  CHECK(taken[0].reply == error_answer("400 Bad Request",
                                       "{\"error\":\"failed to decompress the request body: "
                                       "incomplete or truncated stream\"}"));
  // An encoding nobody knows: Triton's 501, whatever the body.
  taken = take(f.lane, post(body.bytes, length + "Content-Encoding: br\r\n"));
  CHECK(taken.size() == 1 && taken[0].request_id == 0);
  CHECK(taken[0].reply ==
        error_answer("501 Not Implemented", "{\"error\":\"Unsupported compression type\"}"));
  // A refusal of the validator after inflating: its 400, as for the plain body.
  Body wrong = add_sub_binary(2);
  wrong.bytes.replace(wrong.bytes.find("INPUT1"), 6, "INPUT9");
  const std::string wrong_length =
      "Inference-Header-Content-Length: " + std::to_string(wrong.header_size) + "\r\n";
  std::vector<HttpLane::Taken> plain = take(f.lane, post(wrong.bytes, wrong_length));
  taken = take(f.lane, post(deflated(StreamFormat::kZlib, wrong.bytes),
                            wrong_length + "Content-Encoding: deflate\r\n"));
  CHECK(plain.size() == 1 && taken.size() == 1 && !plain[0].reply.empty());
  CHECK(taken[0].reply == plain[0].reply);
  // A model the lane does not serve: its compressed body stays the general path's...
  f.lane.codec().models().set_model("other", {{1, true, kNoLaneModel}});
  std::vector<HttpLane::Taken> none;
  const std::string other =
      "POST /v2/models/other/infer HTTP/1.1\r\nContent-Encoding: br\r\n"
      "Content-Length: 2\r\n\r\nab";
  CHECK(f.lane.take_http(reinterpret_cast<const uint8_t*>(other.data()), other.size(), 1 << 20, 7,
                         &none) == 0);
  CHECK(none.empty());
  // ...and an unknown one is refused before the body is looked at, as Triton.
  f.lane.codec().models().clear();
  taken = take(f.lane, other);
  CHECK(taken.size() == 1 && taken[0].request_id == 0);
  CHECK(taken[0].reply ==
        error_answer("404 Not Found",
                     "{\"error\":\"Request for unknown model: 'other' is not found\"}"));
}
