// JSON tensors on the C++ lane (kserve_json.h): JSON `data` read into wire bytes for
// every datatype (flat and nested, BYTES as strings), everything the general path
// would refuse or convert differently left to it, JSON outputs written with numbers
// that read back exactly, and damaged JSON requests that never crash the reader.
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "add_sub_model.h"
#include "codec/json_reader.h"
#include "codec/kserve_json.h"
#include "codec/request_validator.h"
#include "http1/http_framer.h"
#include "testing.h"
#include "util/byte_sink.h"

using namespace naiad;

namespace {

bool convert(const std::string& json, std::string_view datatype, uint64_t count,
             std::vector<uint8_t>* out) {
  out->clear();
  return read_tensor_data(JsonReader(json.data(), json.size()), datatype, count, out);
}

template <typename T>
std::vector<T> values_of(const std::vector<uint8_t>& bytes) {
  std::vector<T> values(bytes.size() / sizeof(T));
  if (!values.empty()) std::memcpy(values.data(), bytes.data(), values.size() * sizeof(T));
  return values;
}

bool refuses(const std::string& json, std::string_view datatype, uint64_t count) {
  std::vector<uint8_t> out;
  return !convert(json, datatype, count, &out);
}

std::string add_sub_json_data(const std::string& a, const std::string& b,
                              const std::string& rest = "") {
  return "{\"inputs\":[{\"name\":\"INPUT0\",\"datatype\":\"FP32\",\"shape\":[1,16],\"data\":" + a +
         "},{\"name\":\"INPUT1\",\"datatype\":\"FP32\",\"shape\":[1,16],\"data\":" + b + "}]" +
         rest + "}";
}

std::string sixteen(const char* value) {
  std::string out = "[";
  for (int i = 0; i < 16; ++i) {
    if (i) out += ",";
    out += value;
  }
  return out + "]";
}

bool read(const std::string& body, size_t header_size, ParsedRequest* out) {
  return read_infer_header(reinterpret_cast<const uint8_t*>(body.data()), body.size(), header_size,
                           out);
}

// The response body the HTTP writer makes for `response`, head and all.
std::string http_text(const InferResponse& response) {
  HttpResponseWriter writer;
  return writer.text(response);
}

}  // namespace

TEST(json_data_converts_every_numeric_datatype) {
  std::vector<uint8_t> out;
  CHECK(convert("[1, -2, 3]", "INT32", 3, &out));
  CHECK((values_of<int32_t>(out) == std::vector<int32_t>{1, -2, 3}));
  CHECK(convert("[[1, 2], [3, 4]]", "INT64", 4, &out));
  CHECK((values_of<int64_t>(out) == std::vector<int64_t>{1, 2, 3, 4}));
  CHECK(convert("[-128, 127]", "INT8", 2, &out));
  CHECK((values_of<int8_t>(out) == std::vector<int8_t>{-128, 127}));
  CHECK(convert("[-32768, 32767]", "INT16", 2, &out));
  CHECK(convert("[0, 255]", "UINT8", 2, &out));
  CHECK((values_of<uint8_t>(out) == std::vector<uint8_t>{0, 255}));
  CHECK(convert("[65535]", "UINT16", 1, &out));
  CHECK(convert("[4294967295]", "UINT32", 1, &out));
  CHECK((values_of<uint32_t>(out) == std::vector<uint32_t>{4294967295u}));
  CHECK(convert("[9223372036854775807]", "UINT64", 1, &out));
  CHECK(convert("[true, false, true]", "BOOL", 3, &out));
  CHECK((out == std::vector<uint8_t>{1, 0, 1}));
  // Floats: shortest text, exponents, integers, negative zero; nested to any mix.
  CHECK(convert("[[0.1, 1e20], [-0.0, [3, [2.5e-3]]], 7]", "FP32", 6, &out));
  std::vector<float> f = values_of<float>(out);
  CHECK(f.size() == 6 && f[0] == 0.1f && f[1] == 1e20f && f[2] == 0.0f && std::signbit(f[2]));
  CHECK(f[3] == 3.0f && f[4] == 2.5e-3f && f[5] == 7.0f);
  CHECK(convert("[0.1, 1e300, 5]", "FP64", 3, &out));
  std::vector<double> d = values_of<double>(out);
  CHECK(d[0] == 0.1 && d[1] == 1e300 && d[2] == 5.0);
  // All integers into a float type: as numpy casts its int64 array.
  CHECK(convert("[16777217]", "FP32", 1, &out));
  CHECK(values_of<float>(out)[0] == static_cast<float>(int64_t{16777217}));
  // Empty tensors.
  CHECK(convert("[]", "FP32", 0, &out) && out.empty());
  CHECK(convert("[[], []]", "INT32", 0, &out) && out.empty());
}

TEST(json_data_converts_bytes_as_strings) {
  std::vector<uint8_t> out;
  CHECK(convert("[\"ab\", \"\", \"\\u00e9\\n\\\"\", \"\xc3\xa9\", \"\\ud83d\\ude00\"]", "BYTES", 5,
                &out));
  const std::string expected = std::string(
                                   "\x02\x00\x00\x00"
                                   "ab",
                                   6) +
                               std::string("\x00\x00\x00\x00", 4) +
                               std::string("\x04\x00\x00\x00\xc3\xa9\n\"", 8) +
                               std::string("\x02\x00\x00\x00\xc3\xa9", 6) +
                               std::string("\x04\x00\x00\x00\xf0\x9f\x98\x80", 8);
  CHECK(std::string(out.begin(), out.end()) == expected);
  CHECK(convert("[[\"a\"], [\"b\"]]", "BYTES", 2, &out));
  CHECK(refuses("[\"a\", 1]", "BYTES", 2));
  CHECK(refuses("[\"a\", [\"b\"]]", "BYTES", 2));  // a scalar, then a nested array
  CHECK(refuses("[\"\\ud83d\"]", "BYTES", 1));     // a lone high surrogate
  CHECK(refuses("[\"\\ude00\"]", "BYTES", 1));     // a lone low surrogate
  CHECK(refuses("[\"\xff\"]", "BYTES", 1));        // not UTF-8
  CHECK(refuses("[\"a\tb\"]", "BYTES", 1));        // a raw control character
  CHECK(refuses("[\"a\"]", "BYTES", 2));           // fewer than the shape says
  CHECK(refuses("\"a\"", "BYTES", 1));             // not an array
}

TEST(json_data_leaves_what_the_general_path_refuses_or_converts_otherwise) {
  CHECK(refuses("[1, 2]", "FP16", 2));
  CHECK(refuses("[1, 2]", "BF16", 2));
  CHECK(refuses("[1, 2]", "FOO", 2));
  CHECK(refuses("[1, 2]", "INT32", 3));     // count
  CHECK(refuses("[1, 2, 3]", "INT32", 2));  // count
  CHECK(refuses("[1.5, 2]", "INT32", 2));   // a float for an integer type
  CHECK(refuses("[1, 2e0]", "INT32", 2));   // an exponent makes it a float
  CHECK(refuses("[128]", "INT8", 1));       // numpy would wrap it
  CHECK(refuses("[-1]", "UINT8", 1));
  CHECK(refuses("[256]", "UINT8", 1));
  CHECK(refuses("[65536]", "UINT16", 1));
  CHECK(refuses("[4294967296]", "UINT32", 1));
  CHECK(refuses("[9223372036854775808]", "UINT64", 1));
  CHECK(refuses("[2147483648]", "INT32", 1));
  CHECK(refuses("[1e39]", "FP32", 1));  // beyond float
  CHECK(refuses("[1e400]", "FP64", 1));
  CHECK(refuses("[true, 1]", "INT32", 2));  // booleans among numbers
  CHECK(refuses("[1, 0]", "BOOL", 2));      // numbers for BOOL
  CHECK(refuses("[null]", "FP32", 1));
  CHECK(refuses("[\"1\"]", "FP32", 1));
  CHECK(refuses("[1, [2]]", "FP32", 2));  // a scalar, then a nested array
  CHECK(refuses("1", "FP32", 1));         // not an array
  CHECK(refuses("[01]", "INT32", 1));     // not JSON
  CHECK(refuses("[1,]", "INT32", 1));
  CHECK(refuses("[-]", "INT32", 1));
  CHECK(refuses("[1", "INT32", 1));
  // Deep nesting stops somewhere, without recursing without bound.
  std::string deep(100000, '[');
  CHECK(refuses(deep, "FP32", 1));
}

TEST(json_request_is_read_into_wire_bytes) {
  ParsedRequest request;
  std::string body = add_sub_json_data(sixteen("1.5"), sixteen("2"));
  CHECK(read(body, body.size(), &request));
  CHECK(request.inputs.size() == 2 && request.inputs[0].size == 64 && request.inputs[1].size == 64);
  float first;
  std::memcpy(&first, request.inputs[0].data, 4);
  CHECK(first == 1.5f);
  // No outputs listed and no binary_data_output: every output as JSON.
  CHECK(request.output_names.empty() && request.json_unlisted);
  std::string error;
  CHECK(validate_request(add_sub_model(), &request, &error));
  // A request moved keeps its converted bytes where its inputs point.
  ParsedRequest moved = std::move(request);
  std::memcpy(&first, moved.inputs[0].data, 4);
  CHECK(first == 1.5f);

  // Listed outputs: JSON unless binary_data is true.
  ParsedRequest listed;
  body =
      add_sub_json_data(sixteen("1"), sixteen("2"),
                        ",\"outputs\":[{\"name\":\"OUTPUT0\"},{\"name\":\"OUTPUT1\",\"parameters\":"
                        "{\"binary_data\":true}}]");
  CHECK(read(body, body.size(), &listed));
  CHECK((listed.output_json == std::vector<uint8_t>{1, 0}));
  ParsedRequest binary_default;
  body = add_sub_json_data(sixteen("1"), sixteen("2"),
                           ",\"parameters\":{\"binary_data_output\":true}");
  CHECK(read(body, body.size(), &binary_default) && !binary_default.json_unlisted);

  // A JSON input beside a binary one, in either order.
  std::string header =
      "{\"inputs\":[{\"name\":\"INPUT0\",\"datatype\":\"FP32\",\"shape\":[1,16],"
      "\"parameters\":{\"binary_data_size\":64}},{\"data\":" +
      sixteen("3") + ",\"name\":\"INPUT1\",\"shape\":[1,16],\"datatype\":\"FP32\"}]}";
  std::string mixed = header + std::string(64, '\0');
  ParsedRequest both;
  CHECK(read(mixed, header.size(), &both));
  CHECK(both.inputs[0].data == reinterpret_cast<const uint8_t*>(mixed.data()) + header.size());
  std::memcpy(&first, both.inputs[1].data, 4);
  CHECK(first == 3.0f && both.inputs[1].size == 64);
  CHECK(validate_request(add_sub_model(), &both, &error));
}

TEST(json_request_forms_left_to_the_general_path) {
  ParsedRequest request;
  // data and binary_data_size both, or neither.
  std::string both =
      "{\"inputs\":[{\"name\":\"INPUT0\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1],"
      "\"parameters\":{\"binary_data_size\":4}}]}";
  CHECK(!read(both + "abcd", both.size(), &request));
  std::string neither = "{\"inputs\":[{\"name\":\"INPUT0\",\"datatype\":\"FP32\",\"shape\":[1]}]}";
  CHECK(!read(neither, neither.size(), &request));
  // Shared memory, classification, repeated data.
  std::string shm =
      "{\"inputs\":[{\"name\":\"INPUT0\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1],"
      "\"parameters\":{\"shared_memory_region\":\"r\"}}]}";
  CHECK(!read(shm, shm.size(), &request));
  std::string classify = add_sub_json_data(
      sixteen("1"), sixteen("2"),
      ",\"outputs\":[{\"name\":\"OUTPUT0\",\"parameters\":{\"classification\":2}}]");
  ParsedRequest classified;
  CHECK(!read(classify, classify.size(), &classified));
  std::string twice =
      "{\"inputs\":[{\"name\":\"INPUT0\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1],"
      "\"data\":[2]}]}";
  ParsedRequest repeated;
  CHECK(!read(twice, twice.size(), &repeated));
}

TEST(json_outputs_are_written_with_numbers_that_read_back) {
  const float floats[] = {0.1f,
                          1e20f,
                          -0.0f,
                          3.0f,
                          std::numeric_limits<float>::denorm_min(),
                          std::nanf(""),
                          std::numeric_limits<float>::infinity(),
                          16777216.0f,
                          546404032.0f};
  const int64_t ints[] = {-9223372036854775807LL - 1, 0, 42};
  const uint8_t bools[] = {0, 1, 2};
  const std::string strings = std::string(
                                  "\x02\x00\x00\x00"
                                  "a\"",
                                  6) +
                              std::string(
                                  "\x03\x00\x00\x00\xff"
                                  "b\n",
                                  7) +
                              std::string("\x02\x00\x00\x00\xe2\x82", 6);  // cut short
  InferResponse response;
  response.model_name = "m";
  response.model_version = "1";
  response.outputs.push_back(ResponseOutput{
      "F", "FP32", "[9]", reinterpret_cast<const uint8_t*>(floats), sizeof(floats), true});
  response.outputs.push_back(ResponseOutput{
      "I", "INT64", "[3]", reinterpret_cast<const uint8_t*>(ints), sizeof(ints), true});
  response.outputs.push_back(ResponseOutput{"B", "BOOL", "[3]", bools, sizeof(bools), true});
  response.outputs.push_back(ResponseOutput{
      "S", "BYTES", "[3]", reinterpret_cast<const uint8_t*>(strings.data()), strings.size(), true});
  std::string text = http_text(response);
  CHECK(text.find("Content-Type: application/json\r\n") != std::string::npos);
  CHECK(text.find("Inference-Header-Content-Length") == std::string::npos);
  std::string body = text.substr(text.find("\r\n\r\n") + 4);
  CHECK(body.find("\"data\":[0.1,1e+20,-0.0,3.0,1e-45,null,null,16777216.0,546404030.0]") !=
        std::string::npos);
  CHECK(body.find("\"data\":[-9223372036854775808,0,42]") != std::string::npos);
  CHECK(body.find("\"data\":[false,true,true]") != std::string::npos);
  CHECK(body.find("\"data\":[\"a\\\"\",\"\xef\xbf\xbd"
                  "b\\n\",\"\xef\xbf\xbd\"]") != std::string::npos);
  CHECK(body.back() == '}');
  // Every float written reads back as the same float.
  std::mt19937 random(7);
  std::vector<float> many(2000);
  for (float& value : many) {
    uint32_t bits = static_cast<uint32_t>(random());
    std::memcpy(&value, &bits, 4);
    if (!std::isfinite(value)) value = 1.0f;
  }
  InferResponse floats_only;
  floats_only.model_name = "m";
  floats_only.model_version = "1";
  floats_only.outputs.push_back(ResponseOutput{
      "F", "FP32", "[2000]", reinterpret_cast<const uint8_t*>(many.data()), many.size() * 4, true});
  std::string written = http_text(floats_only);
  size_t at = written.find("\"data\":[") + 8;
  for (float expected : many) {
    size_t end = written.find_first_of(",]", at);
    double parsed = 0;
    std::from_chars(written.data() + at, written.data() + end, parsed);
    CHECK(static_cast<float>(parsed) == expected);
    at = end + 1;
  }
}

TEST(json_and_binary_outputs_share_a_response) {
  const float values[] = {1.0f, 2.0f};
  InferResponse response;
  response.model_name = "m";
  response.model_version = "1";
  response.outputs.push_back(
      ResponseOutput{"J", "FP32", "[2]", reinterpret_cast<const uint8_t*>(values), 8, true});
  response.outputs.push_back(
      ResponseOutput{"R", "FP32", "[2]", reinterpret_cast<const uint8_t*>(values), 8, false});
  std::string text = http_text(response);
  CHECK(text.find("Content-Type: application/octet-stream\r\n") != std::string::npos);
  std::string body = text.substr(text.find("\r\n\r\n") + 4);
  // Only the binary output's bytes follow the JSON.
  size_t json_size = body.size() - 8;
  CHECK(text.find("Inference-Header-Content-Length: " + std::to_string(json_size) + "\r\n") !=
        std::string::npos);
  CHECK(body.compare(json_size, 8, reinterpret_cast<const char*>(values), 8) == 0);
  CHECK(body.find("\"data\":[1.0,2.0]") != std::string::npos);
}

TEST(http_writer_formats_a_json_body_once_and_never_mixes_responses) {
  const float a[] = {1.5f, 2.5f};
  const float b[] = {7.0f};
  InferResponse first;
  first.request_id = 1;
  first.model_name = "m";
  first.model_version = "1";
  first.outputs.push_back(
      ResponseOutput{"O", "FP32", "[2]", reinterpret_cast<const uint8_t*>(a), 8, true});
  InferResponse second = first;
  second.request_id = 2;
  second.outputs[0] =
      ResponseOutput{"O", "FP32", "[1]", reinterpret_cast<const uint8_t*>(b), 4, true};
  HttpResponseWriter writer;
  // size(first), size(second), then write(first): first's own bytes, not second's.
  std::string one(writer.size(first), '\0');
  std::string two(writer.size(second), '\0');
  writer.write(first, one.data());
  writer.write(second, two.data());
  CHECK(one.find("\"data\":[1.5,2.5]") != std::string::npos && one.back() == '}');
  CHECK(two.find("\"data\":[7.0]") != std::string::npos && two.back() == '}');
  CHECK(one == writer.text(first) && two == writer.text(second));
  // A binary response after a JSON one is unaffected.
  InferResponse binary = first;
  binary.outputs[0].json = false;
  std::string raw = writer.text(binary);
  CHECK(raw.compare(raw.size() - 8, 8, reinterpret_cast<const char*>(a), 8) == 0);
}

TEST(json_output_errors_are_the_general_paths) {
  const uint8_t bytes[6] = {};
  ErrorKind kind;
  CHECK(json_output_error(ResponseOutput{"O", "FP16", "[3]", bytes, 6, true}, &kind) ==
        "sending FP16 data via JSON is not supported. Please use the binary data format for "
        "output");
  CHECK(kind == ErrorKind::kInvalidArgument);
  CHECK(json_output_error(ResponseOutput{"O", "BF16", "[3]", bytes, 6, true}, &kind).find("BF16") !=
        std::string_view::npos);
  CHECK(json_output_error(ResponseOutput{"O", "FOO", "[3]", bytes, 6, true}, &kind) ==
        "Invalid data type for output tensor");
  CHECK(json_output_error(ResponseOutput{"O", "FP32", "[3]", bytes, 6, true}, &kind) ==
        "buffer size must be a multiple of element size");
  CHECK(kind == ErrorKind::kInternal);
  CHECK(json_output_error(ResponseOutput{"O", "FP32", "[1]", bytes, 4, true}, &kind).empty());
  CHECK(kind == ErrorKind::kNone);
}

TEST(damaged_json_requests_never_break_the_reader) {
  // Valid requests of each kind, then every truncation and many random byte changes:
  // the reader takes or refuses each, and what it takes is consistent.
  std::vector<std::string> seeds = {
      add_sub_json_data(sixteen("1.25"), sixteen("-2"),
                        ",\"outputs\":[{\"name\":\"OUTPUT0\"},{\"name\":\"OUTPUT1\"}]"),
      "{\"id\":\"x\",\"inputs\":[{\"name\":\"T\",\"datatype\":\"BYTES\",\"shape\":[2],\"data\":"
      "[[\"a\\u00e9\"],[\"\\ud83d\\ude00\"]]},{\"name\":\"B\",\"datatype\":\"BOOL\",\"shape\":"
      "[2],\"data\":[true,false]}],\"parameters\":{\"p\":1}}",
      "{\"inputs\":[{\"name\":\"U\",\"datatype\":\"UINT16\",\"shape\":[2,2],\"data\":[[1,2],[3,"
      "65535]]},{\"name\":\"D\",\"datatype\":\"FP64\",\"shape\":[1],\"data\":[1e-300]}]}",
  };
  std::mt19937 random(11);
  const char alphabet[] = "[]{}\",:\\-.eE0123456789tfnu \x80\xff";
  size_t taken = 0;
  for (const std::string& seed : seeds) {
    ParsedRequest original;
    CHECK(read(seed, seed.size(), &original));
    for (size_t cut = 0; cut < seed.size(); ++cut) {
      std::string body = seed.substr(0, cut);
      ParsedRequest request;
      CHECK(!read(body, body.size(), &request));
    }
    for (int round = 0; round < 20000; ++round) {
      std::string body = seed;
      int changes = 1 + static_cast<int>(random() % 4);
      for (int c = 0; c < changes; ++c) {
        size_t at = random() % body.size();
        switch (random() % 3) {
          case 0:
            body[at] = alphabet[random() % (sizeof(alphabet) - 1)];
            break;
          case 1:
            body.erase(at, 1);
            break;
          default:
            body.insert(at, 1, alphabet[random() % (sizeof(alphabet) - 1)]);
        }
      }
      ParsedRequest request;
      if (!read(body, body.size(), &request)) continue;
      ++taken;
      for (const RequestInput& input : request.inputs) {
        // JSON data lies in the converted bytes, whole.
        const uint8_t* start = request.converted.data();
        CHECK(input.size == 0 ||
              (input.data >= start && input.data + input.size <= start + request.converted.size()));
      }
    }
  }
  CHECK(taken > 0);
}
