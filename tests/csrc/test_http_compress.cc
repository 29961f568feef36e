// The compressor of HTTP answers (http_compress.h) and the fast lane's compressed
// answers (http_framer.h): each Accept-Encoding case from the scan to the bytes written,
// cache hits and refusals included.
#include <string>
#include <vector>

#include "codec/http_compress.h"
#include "core/response_cache.h"
#include "http1/http_framer.h"
#include "http1/http_scan.h"
#include "inflate_support.h"
#include "lane_support.h"
#include "testing.h"

using namespace naiad;

namespace {

std::string compressed(ResponseEncoding encoding, const std::vector<std::string_view>& parts) {
  std::string out;
  CHECK(compress_body(encoding, parts.data(), parts.size(), &out));
  return out;
}

// A body zlib finds patterns in, as tensors and JSON have.
std::string sample_body(size_t size) {
  std::string body;
  for (size_t i = 0; body.size() < size; ++i) body += "{\"v\":" + std::to_string(i % 97) + "},";
  body.resize(size);
  return body;
}

const char* kTarget = "/v2/models/add_sub/infer";

std::string input(const char* name) {
  return std::string("{\"name\":\"") + name +
         "\",\"datatype\":\"FP32\",\"shape\":[1,16],\"parameters\":{\"binary_data_size\":64}}";
}

// add_sub's request: binary inputs; binary outputs unless `json_outputs`.
Body add_sub_body(bool json_outputs) {
  std::string header = "{\"inputs\":[" + input("INPUT0") + "," + input("INPUT1") + "]" +
                       (json_outputs ? ",\"parameters\":{\"binary_data_output\":false}}"
                                     : ",\"parameters\":{\"binary_data_output\":true}}");
  return make_body(header, 128);
}

std::string post(const Body& body, const std::string& extra_headers) {
  return std::string("POST ") + kTarget +
         " HTTP/1.1\r\nHost: x\r\nInference-Header-Content-Length: " +
         std::to_string(body.header_size) + "\r\n" + extra_headers +
         "Content-Length: " + std::to_string(body.bytes.size()) + "\r\n\r\n" + body.bytes;
}

// add_sub's two [1,16] FP32 outputs, each 64 bytes.
std::string add_sub_result(const std::string& out0, const std::string& out1) {
  return result_block(
      {ok_entry(0, "{\"outputs\":[[\"OUTPUT0\",\"FP32\",[1,16]],[\"OUTPUT1\",\"FP32\",[1,16]]]}",
                {&out0, &out1})});
}

struct Http {
  std::string head;
  std::string body;
};

Http split(const std::string& text) {
  size_t end = text.find("\r\n\r\n");
  return {text.substr(0, end + 4), text.substr(end + 4)};
}

std::string header_value(const std::string& head, const std::string& name) {
  size_t at = head.find("\r\n" + name + ": ");
  if (at == std::string::npos) return "";
  at += name.size() + 4;
  return head.substr(at, head.find("\r\n", at) - at);
}

// The answer the lane writes for queued request `id` from `block`, with the encoding
// the lane kept for it.
std::string answer_of(LaneFixture& f, uint64_t id, const std::string& block) {
  std::vector<KServeCodec::Answer> answers;
  uint64_t timings[4];
  CHECK(f.lane.codec().complete(reinterpret_cast<const uint8_t*>(block.data()), block.size(), {id},
                                0, 0, &answers, timings));
  CHECK(answers.size() == 1);
  ResponseEncoding coding = f.lane.take_encoding(id);
  const HttpResponseWriter& writer = f.lane.writer();
  std::string out(writer.size(answers[0].response, coding), '\0');
  writer.write(answers[0].response, coding, out.data());
  return out;
}

}  // namespace

TEST(compressor_writes_gzip_and_zlib_streams_of_the_body) {
  const std::string body = sample_body(100000);
  std::string gzip = compressed(ResponseEncoding::kGzip, {body});
  std::string deflate = compressed(ResponseEncoding::kDeflate, {body});
  CHECK(gzip.size() < body.size() / 4 && deflate.size() < body.size() / 4);
  CHECK(static_cast<unsigned char>(gzip[0]) == 0x1f && static_cast<unsigned char>(gzip[1]) == 0x8b);
  CHECK(deflate[0] == 0x78);  // the zlib header of a 32 KiB window
  CHECK(inflated(gzip, 31) == body && inflated(deflate, 15) == body);
  // A body in parts is the same stream as the body whole; a reused stream compresses
  // as a fresh one (each thread keeps its deflaters).
  std::string_view whole(body);
  CHECK(compressed(ResponseEncoding::kGzip, {whole.substr(0, 7), whole.substr(7, 0),
                                             whole.substr(7, 50000), whole.substr(50007)}) == gzip);
  CHECK(compressed(ResponseEncoding::kGzip, {body}) == gzip);
  CHECK(compressed(ResponseEncoding::kDeflate, {whole.substr(0, 1), whole.substr(1)}) == deflate);
  // Incompressible bytes still fit (the output grows past the first guess if need be).
  std::string noise(70000, '\0');
  uint32_t x = 12345;
  for (char& c : noise) c = static_cast<char>((x = x * 1103515245 + 12345) >> 24);
  CHECK(inflated(compressed(ResponseEncoding::kGzip, {noise}), 31) == noise);
  // Appended to what `out` holds.
  std::string out = "head";
  CHECK(compress_body(ResponseEncoding::kDeflate, "abc", &out));
  CHECK(out.substr(0, 4) == "head" && inflated(out.substr(4), 15) == "abc");
}

TEST(compressor_leaves_identity_and_empty_bodies) {
  std::string out = "kept";
  CHECK(!compress_body(ResponseEncoding::kIdentity, "abc", &out));
  CHECK(!compress_body(ResponseEncoding::kGzip, "", &out));
  std::string_view empty[2] = {"", ""};
  CHECK(!compress_body(ResponseEncoding::kDeflate, empty, 2, &out));
  CHECK(!compress_body(ResponseEncoding::kGzip, nullptr, 0, &out));
  CHECK(out == "kept");
  CHECK(content_encoding_line(ResponseEncoding::kGzip) == "Content-Encoding: gzip\r\n");
  CHECK(content_encoding_line(ResponseEncoding::kDeflate) == "Content-Encoding: deflate\r\n");
  CHECK(content_encoding_line(ResponseEncoding::kIdentity).empty());
}

TEST(lane_compresses_answers_as_accept_encoding_asks) {
  LaneFixture f;
  f.lane.add_route(kTarget, f.lane_model);
  const std::string out0(64, 'a'), out1 = sample_body(64);
  const std::string block = add_sub_result(out0, out1);
  struct Case {
    const char* header;
    bool json_outputs;
    ResponseEncoding expected;
  } cases[] = {
      {"", false, ResponseEncoding::kIdentity},
      {"Accept-Encoding: gzip, deflate\r\n", false, ResponseEncoding::kGzip},
      {"Accept-Encoding: gzip, deflate\r\n", true, ResponseEncoding::kGzip},
      {"Accept-Encoding: deflate\r\n", false, ResponseEncoding::kDeflate},
      {"Accept-Encoding: deflate\r\n", true, ResponseEncoding::kDeflate},
      {"Accept-Encoding: gzip;q=0.2, deflate;q=0.7\r\n", false, ResponseEncoding::kDeflate},
      {"Accept-Encoding: identity, gzip;q=0.5\r\n", true, ResponseEncoding::kIdentity},
      {"Accept-Encoding: br\r\n", false, ResponseEncoding::kIdentity},
  };
  for (const Case& c : cases) {
    const Body body = add_sub_body(c.json_outputs);
    // The plain answer of the same request, for comparison.
    std::vector<HttpLane::Taken> taken;
    std::string plain_request = post(body, "");
    CHECK(f.lane.take_http(reinterpret_cast<const uint8_t*>(plain_request.data()),
                           plain_request.size(), 1 << 20, 7, &taken) == plain_request.size());
    const Http plain = split(answer_of(f, taken[0].request_id, block));

    std::string request = post(body, c.header);
    taken.clear();
    CHECK(f.lane.take_http(reinterpret_cast<const uint8_t*>(request.data()), request.size(),
                           1 << 20, 7, &taken) == request.size());
    CHECK(taken.size() == 1 && taken[0].request_id != 0 && taken[0].reply.empty());
    const Http answer = split(answer_of(f, taken[0].request_id, block));
    // Asked once: the lane keeps the encoding no longer.
    CHECK(f.lane.take_encoding(taken[0].request_id) == ResponseEncoding::kIdentity);
    CHECK(answer.head.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
    CHECK(header_value(answer.head, "Content-Length") == std::to_string(answer.body.size()));
    CHECK(header_value(answer.head, "Content-Type") ==
          (c.json_outputs ? "application/json" : "application/octet-stream"));
    // The JSON's length before compression, as Triton says it.
    CHECK(header_value(answer.head, "Inference-Header-Content-Length") ==
          header_value(plain.head, "Inference-Header-Content-Length"));
    if (c.expected == ResponseEncoding::kIdentity) {
      CHECK(answer.head == plain.head && answer.body == plain.body);
      continue;
    }
    std::string coding = c.expected == ResponseEncoding::kGzip ? "gzip" : "deflate";
    CHECK(header_value(answer.head, "Content-Encoding") == coding);
    // Headers in the general path's order: Content-Encoding last.
    CHECK(answer.head.size() > 30 &&
          answer.head.substr(answer.head.size() - 4 - coding.size() - 18) ==
              "Content-Encoding: " + coding + "\r\n\r\n");
    std::string expected_body;
    CHECK(compress_body(c.expected, plain.body, &expected_body));
    CHECK(answer.body == expected_body);
    CHECK(inflated(answer.body, c.expected == ResponseEncoding::kGzip ? 31 : 15) == plain.body);
  }
  CHECK(f.lane.codec().in_flight() == 0);
}

TEST(lane_leaves_errors_uncompressed_and_forgets_encodings) {
  LaneFixture f;
  f.lane.add_route(kTarget, f.lane_model);
  // The validator's refusal: Triton's 400, uncompressed as on the general path.
  Body wrong = add_sub_body(false);
  wrong.bytes.replace(wrong.bytes.find("FP32"), 4, "INT8");
  std::string request = post(wrong, "Accept-Encoding: gzip\r\n");
  std::vector<HttpLane::Taken> taken;
  CHECK(f.lane.take_http(reinterpret_cast<const uint8_t*>(request.data()), request.size(), 1 << 20,
                         7, &taken) == request.size());
  CHECK(taken.size() == 1 && taken[0].request_id == 0);
  CHECK(taken[0].reply.rfind("HTTP/1.1 400 Bad Request\r\n", 0) == 0);
  CHECK(taken[0].reply.find("Content-Encoding") == std::string::npos);
  CHECK(taken[0].reply.find("{\"error\":\"[request id: <id_unknown>] inference input") !=
        std::string::npos);

  // A model's error answer: uncompressed too.
  const Body body = add_sub_body(false);
  HttpLane::Taken one;
  const uint8_t* bytes = reinterpret_cast<const uint8_t*>(body.bytes.data());
  CHECK(f.lane.submit_to(kTarget, bytes, body.bytes.size(), body.header_size, 7, &one,
                         ResponseEncoding::kDeflate));
  std::string failed = result_block({error_entry(0, "{\"error\":\"model failed\"}", 3)});
  std::string answer = answer_of(f, one.request_id, failed);
  CHECK(answer.rfind("HTTP/1.1 400 Bad Request\r\n", 0) == 0);
  CHECK(answer.find("Content-Encoding") == std::string::npos);
  CHECK(split(answer).body == "{\"error\":\"model failed\"}");

  // A request answered another way (failed batch, shutdown) leaves nothing behind.
  CHECK(f.lane.submit_to(kTarget, bytes, body.bytes.size(), body.header_size, 7, &one,
                         ResponseEncoding::kGzip));
  f.lane.forget(one.request_id);
  CHECK(f.lane.take_encoding(one.request_id) == ResponseEncoding::kIdentity);
  CHECK(f.lane.codec().in_flight() == 0);
}

TEST(lane_compresses_cache_hits_at_take_time) {
  LocalCache cache(1 << 20);
  LaneFixture f(1 << 20, &cache);
  f.lane.add_route(kTarget, f.lane_model);

  const Body body = add_sub_body(false);
  const uint8_t* bytes = reinterpret_cast<const uint8_t*>(body.bytes.data());
  HttpLane::Taken miss;
  CHECK(f.lane.submit_to(kTarget, bytes, body.bytes.size(), body.header_size, 1000, &miss));
  const std::string out0(64, 'a'), out1(64, 'b');
  const std::string block = add_sub_result(out0, out1);
  std::vector<KServeCodec::Answer> answers;
  uint64_t timings[4];
  CHECK(f.lane.codec().complete(reinterpret_cast<const uint8_t*>(block.data()), block.size(),
                                {miss.request_id}, 1500, 4000, &answers, timings));
  const Http plain = split(f.lane.writer().text(answers[0].response));
  CHECK(cache.totals().entries == 1);

  // Hits, through the scanner and through submit_to: compressed as asked.
  std::string request = post(body, "Accept-Encoding: gzip\r\n");
  std::vector<HttpLane::Taken> taken;
  CHECK(f.lane.take_http(reinterpret_cast<const uint8_t*>(request.data()), request.size(), 1 << 20,
                         5000, &taken) == request.size());
  CHECK(taken.size() == 1 && taken[0].request_id == 0 && taken[0].batch_size == 1);
  Http hit = split(taken[0].reply);
  CHECK(header_value(hit.head, "Content-Encoding") == "gzip");
  CHECK(header_value(hit.head, "Inference-Header-Content-Length") ==
        header_value(plain.head, "Inference-Header-Content-Length"));
  CHECK(inflated(hit.body, 31) == plain.body);
  HttpLane::Taken deflated;
  CHECK(f.lane.submit_to(kTarget, bytes, body.bytes.size(), body.header_size, 6000, &deflated,
                         ResponseEncoding::kDeflate));
  hit = split(deflated.reply);
  CHECK(header_value(hit.head, "Content-Encoding") == "deflate");
  CHECK(inflated(hit.body, 15) == plain.body);
  CHECK(cache.counters(f.lane_model).hits == 2);
}
