// What the libFuzzer targets (tests/fuzz/*.cc, built by `make fuzz-build`) share: the
// lanes over a core with the example models (add_sub: two FP32 [16] inputs; and
// identity_bytes: one BYTES [-1] input, for length prefixes), fresh for each input so
// that a run is repeatable from its input alone, and the checks of the lanes' contract:
// every answer is a well-formed HTTP response or gRPC frame, an error carries Triton's
// JSON body or grpc-status, and what a lane does not take is left to the general path.
#pragma once

#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "codec/json_reader.h"
#include "http2/grpc_lane.h"
#include "lane_support.h"

// The contract is broken: report where and stop (libFuzzer saves the input).
#define FUZZ_CHECK(cond)                                                               \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      std::fprintf(stderr, "%s:%d: contract broken: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                    \
    }                                                                                  \
  } while (0)

// The same, showing the bytes at fault.
#define FUZZ_CHECK_IN(cond, text)                                                         \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "in: %.*s\n", static_cast<int>((text).size()), (text).data()); \
      FUZZ_CHECK(cond);                                                                   \
    }                                                                                     \
  } while (0)

namespace naiad::fuzz {

constexpr size_t kMaxBody = 1 << 16;

inline ModelSpec identity_bytes_model() {
  ModelSpec model;
  model.name = model.name_json = "identity_bytes";
  model.version = "1";
  model.max_batch_size = 8;
  InputSpec input;
  input.name = input.name_json = "INPUT0";
  input.datatype = "BYTES";
  input.dims = {-1};
  input.element_size = 0;
  input.shape_keyed = true;
  model.inputs.push_back(input);
  model.outputs = model.outputs_json = {"OUTPUT0"};
  return model;
}

// Both lanes over one codec, routed as the front end routes the example models.
struct Lanes {
  Lanes() : fixture(4 << 20), grpc(fixture.lane.codec()) {
    BatcherConfig config;
    config.max_batch_size = 8;
    ModelSpec bytes = identity_bytes_model();
    bytes.core_model_id = fixture.core.add_model(config);
    bytes_model = fixture.lane.codec().add_model(bytes);
    HttpLane& http = fixture.lane;
    http.add_route("/v2/models/add_sub/infer", fixture.lane_model);
    http.add_route("/v2/models/add_sub/versions/1/infer", fixture.lane_model);
    http.add_route("/v2/models/identity_bytes/infer", bytes_model);
    grpc.set_model("add_sub", {{1, true, fixture.lane_model}, {2, false, naiad::kNoLaneModel}});
    grpc.set_model("identity_bytes", {{1, true, bytes_model}});
  }
  KServeCodec& codec() { return fixture.lane.codec(); }

  // Answers queued requests as a worker would (one response each, with the model's
  // outputs of one row), or fails them with a model error every third call. Returns the answers
  // (views into `block`).
  std::vector<KServeCodec::Answer> answer(const std::vector<uint64_t>& ids,
                                          const std::vector<uint32_t>& models, std::string* block) {
    // 64 bytes each: 16 FP32, or 4 BYTES elements of 12 bytes (u32 length + bytes).
    static const std::string data(64, '\x01');
    static const std::string strings = [] {
      std::string four;
      for (int i = 0; i < 4; ++i) four += std::string("\x0c\0\0\0", 4) + "twelve bytes";
      return four;
    }();
    std::vector<std::string> json(ids.size());
    std::vector<ResponseEntry> entries;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (++answered_ % 3 == 0) {
        entries.push_back(
            error_entry(static_cast<uint32_t>(i), "{\"error\":\"model \\\"x\\\"\"}", 3));
        continue;
      }
      const ModelSpec& model = codec().model(models[i]);
      std::vector<const std::string*> outputs;
      json[i] = "{\"outputs\":[";
      for (size_t o = 0; o < model.outputs.size(); ++o) {
        const bool bytes = model.inputs[0].datatype == "BYTES";
        json[i] += std::string(o ? "," : "") + "[\"" + model.outputs_json[o] + "\",\"" +
                   (bytes ? "BYTES" : "FP32") + "\",[1," + (bytes ? "4" : "16") + "]]";
        outputs.push_back(bytes ? &strings : &data);
      }
      json[i] += "]}";
      entries.push_back(ok_entry(static_cast<uint32_t>(i), json[i], outputs));
    }
    *block = result_block(entries);
    std::vector<KServeCodec::Answer> answers;
    uint64_t timings[4];
    bool read = codec().complete(reinterpret_cast<const uint8_t*>(block->data()), block->size(),
                                 ids, 0, 0, &answers, timings);
    FUZZ_CHECK(read);  // the writer's own blocks always read back
    FUZZ_CHECK(answers.size() == ids.size());
    return answers;
  }

  LaneFixture fixture;
  GrpcLane grpc;
  uint32_t bytes_model = 0;
  uint64_t answered_ = 0;
};

// `body` is one JSON value and nothing else.
inline bool is_json(std::string_view body) {
  JsonReader reader(body.data(), body.size());
  return reader.skip_value() && reader.at_end();
}

// `body` is Triton's error body: {"error":"<message>"} (a model's error may have an
// empty message: it is passed on as the model gave it).
inline bool is_error_body(std::string_view body) {
  JsonReader reader(body.data(), body.size());
  std::string message;
  int members = 0;
  bool ok = reader.object([&](std::string_view key) {
    return key == "error" && ++members == 1 && reader.string_into(&message);
  });
  return ok && reader.at_end() && members == 1;
}

// Checks `text` is one complete HTTP/1.1 response, nothing after it: a status line, header
// lines, one Content-Length that counts the body exactly; an error status carries a JSON
// {"error": ...} body, a 200 a JSON header (Inference-Header-Content-Length of it, binary
// outputs after). Returns the status.
// A compressed body inflated (window bits 31: gzip, 15: the zlib format); a stream that
// does not end where the body does fails the check.
inline std::string inflated_body(std::string_view body, int window_bits) {
  z_stream stream{};
  FUZZ_CHECK(inflateInit2(&stream, window_bits) == Z_OK);
  std::string out;
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(body.data()));
  stream.avail_in = static_cast<uInt>(body.size());
  int status = Z_OK;
  while (status == Z_OK) {
    char buffer[4096];
    stream.next_out = reinterpret_cast<Bytef*>(buffer);
    stream.avail_out = sizeof(buffer);
    status = inflate(&stream, Z_NO_FLUSH);
    out.append(buffer, sizeof(buffer) - stream.avail_out);
  }
  const bool whole = status == Z_STREAM_END && stream.avail_in == 0;
  inflateEnd(&stream);
  FUZZ_CHECK(whole);
  return out;
}

inline int check_http_response(std::string_view text) {
  FUZZ_CHECK(text.substr(0, 9) == "HTTP/1.1 " && text.size() > 14);
  FUZZ_CHECK(text[12] == ' ');
  int status = 0;
  for (int i = 9; i < 12; ++i) {
    FUZZ_CHECK(text[i] >= '0' && text[i] <= '9');
    status = status * 10 + (text[i] - '0');
  }
  size_t line_end = text.find("\r\n");
  size_t head_end = text.find("\r\n\r\n");
  FUZZ_CHECK(line_end != std::string_view::npos && head_end != std::string_view::npos);
  std::string_view body = text.substr(head_end + 4);
  int lengths = 0;
  bool json_type = false;
  std::string_view header_length_value;
  std::string plain;  // the body uncompressed, when it is compressed
  int window_bits = 0;
  for (size_t pos = line_end + 2; pos < head_end + 2;) {
    size_t end = text.find("\r\n", pos);
    std::string_view line = text.substr(pos, end - pos);
    size_t colon = line.find(": ");
    FUZZ_CHECK(colon != std::string_view::npos && colon > 0);
    std::string_view name = line.substr(0, colon), value = line.substr(colon + 2);
    for (char c : line) FUZZ_CHECK(c >= 0x20 && c < 0x7f);
    if (name == "Content-Length") {
      ++lengths;
      FUZZ_CHECK(value == std::to_string(body.size()));
    } else if (name == "Content-Type") {
      json_type = value == "application/json";
    } else if (name == "Inference-Header-Content-Length") {
      header_length_value = value;
    } else if (name == "Content-Encoding") {
      FUZZ_CHECK(window_bits == 0 && (value == "gzip" || value == "deflate"));
      window_bits = value == "gzip" ? 31 : 15;
    }
    pos = end + 2;
  }
  FUZZ_CHECK(lengths == 1);
  if (window_bits != 0) {
    FUZZ_CHECK(status == 200);  // errors are never compressed
    plain = inflated_body(body, window_bits);
    body = plain;
  }
  size_t header_length = body.size();
  if (!header_length_value.empty()) {
    header_length = std::strtoull(std::string(header_length_value).c_str(), nullptr, 10);
    FUZZ_CHECK(header_length_value == std::to_string(header_length) &&
               header_length <= body.size());
  }
  if (status >= 400) {
    FUZZ_CHECK_IN(json_type && is_error_body(body), text);
  } else {
    FUZZ_CHECK(status == 200);
    FUZZ_CHECK_IN(is_json(body.substr(0, header_length)), text);
  }
  return status;
}

}  // namespace naiad::fuzz
