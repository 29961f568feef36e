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
  Refusal refusal;
  return read_tensor_data_text(json, datatype, "IN", count, out, &refusal) == DataRead::kConverted;
}

// Triton's status and message for `json` as the data of input IN, or "" when not refused.
std::string refusal_of(const std::string& json, std::string_view datatype, uint64_t count) {
  std::vector<uint8_t> out;
  Refusal refusal;
  if (read_tensor_data_text(json, datatype, "IN", count, &out, &refusal) != DataRead::kRefused) {
    return "";
  }
  return std::to_string(http_status_of(refusal.kind)) + " " + refusal.message;
}

bool not_read(const std::string& json, std::string_view datatype, uint64_t count) {
  std::vector<uint8_t> out;
  Refusal refusal;
  return read_tensor_data_text(json, datatype, "IN", count, &out, &refusal) == DataRead::kNotRead;
}

template <typename T>
std::vector<T> values_of(const std::vector<uint8_t>& bytes) {
  std::vector<T> values(bytes.size() / sizeof(T));
  if (!values.empty()) std::memcpy(values.data(), bytes.data(), values.size() * sizeof(T));
  return values;
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

// Triton's status and message for an inference header of `header` followed by `binary`
// bytes, or "" when the reader does not refuse it.
std::string refusal_of_request(const std::string& header, size_t binary = 0) {
  std::string body = header + std::string(binary, 'x');
  ParsedRequest request;
  Refusal refusal;
  bool taken = read_infer_header(reinterpret_cast<const uint8_t*>(body.data()), body.size(),
                                 header.size(), &request, &refusal);
  CHECK(!taken || refusal.kind == ErrorKind::kNone);
  return refusal.kind == ErrorKind::kNone
             ? std::string()
             : std::to_string(http_status_of(refusal.kind)) + " " + refusal.message;
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
  // Nested to any mix of depths, as Triton flattens them; the count is the validator's.
  CHECK(convert("[\"a\", [\"b\"]]", "BYTES", 2, &out));
  CHECK(convert("[\"a\"]", "BYTES", 2, &out) && out.size() == 5);
  CHECK(not_read("[\"\\ud83d\"]", "BYTES", 1));  // a lone high surrogate
  CHECK(not_read("[\"\\ude00\"]", "BYTES", 1));  // a lone low surrogate
  CHECK(not_read("[\"\xff\"]", "BYTES", 1));     // not UTF-8
  CHECK(not_read("[\"a\tb\"]", "BYTES", 1));     // a raw control character
}

TEST(json_data_is_refused_as_triton_refuses_it) {
  // Each checked against Triton 2.51 (tests/test_json_data_triton.py sends the same).
  const std::string non_int =
      "500 Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer";
  const std::string non_uint =
      "500 Unable to parse 'data': attempt to access JSON non-unsigned-integer as "
      "unsigned-integer";
  const std::string non_number =
      "500 Unable to parse 'data': attempt to access JSON non-number as double";
  const std::string non_bool =
      "500 Unable to parse 'data': attempt to access JSON non-boolean as boolean";
  const std::string mismatch =
      "500 Unable to parse 'data': Shape does not match true shape of 'data' field";
  const std::string non_array =
      "500 Unable to parse 'data': attempt to access JSON non-array as array";
  CHECK(refusal_of("[1, 2]", "FP16", 2) ==
        "400 receiving FP16 data via JSON is not supported. Please use the binary data format "
        "for input IN");
  CHECK(refusal_of("[1, \"x\"]", "BF16", 3) ==
        "400 receiving BF16 data via JSON is not supported. Please use the binary data format "
        "for input IN");
  CHECK(refusal_of("[1, 2]", "FOO", 2) == "400 invalid datatype for input IN");
  // Not an array comes first, before the datatype.
  CHECK(refusal_of("1", "FP16", 1) == non_array);
  CHECK(refusal_of("{\"a\":1}", "INT32", 1) == non_array);
  CHECK(refusal_of("\"a\"", "BYTES", 1) == non_array);
  // Counts: fewer, or an element past the count before its kind is looked at.
  CHECK(refusal_of("[1, 2]", "INT32", 3) == mismatch);
  CHECK(refusal_of("[]", "INT32", 2) == mismatch);
  CHECK(refusal_of("[[1, 2], [3]]", "INT32", 4) == mismatch);
  CHECK(refusal_of("[1, 2, \"x\"]", "INT32", 1) == mismatch);
  CHECK(refusal_of("[true, false, 1]", "BOOL", 1) == mismatch);
  // The first element of the wrong kind, even when the count is wrong too.
  CHECK(refusal_of("[1, \"x\"]", "INT32", 3) == non_int);
  CHECK(refusal_of("[1.5, 2]", "INT32", 2) == non_int);
  CHECK(refusal_of("[1, 2.0]", "INT32", 2) == non_int);  // a fraction makes it a double
  CHECK(refusal_of("[1e2]", "INT32", 1) == non_int);     // so does an exponent
  CHECK(refusal_of("[1, true]", "INT32", 2) == non_int);
  CHECK(refusal_of("[9223372036854775808]", "INT64", 1) == non_int);  // past int64
  CHECK(refusal_of("[-9223372036854775809]", "INT64", 1) == non_int);
  CHECK(refusal_of("[9223372036854775808]", "INT32", 1) == non_int);
  CHECK(refusal_of("[-1]", "UINT8", 1) == non_uint);
  CHECK(refusal_of("[-1.5]", "UINT8", 1) == non_uint);
  CHECK(refusal_of("[1.0]", "UINT64", 1) == non_uint);
  CHECK(refusal_of("[18446744073709551616]", "UINT64", 1) == non_uint);  // past uint64
  CHECK(refusal_of("[true, 1]", "FP32", 2) == non_number);
  CHECK(refusal_of("[null]", "FP32", 1) == non_number);
  CHECK(refusal_of("[\"1\"]", "FP64", 1) == non_number);
  CHECK(refusal_of("[true, 1]", "BOOL", 2) == non_bool);
  CHECK(refusal_of("[\"true\"]", "BOOL", 1) == non_bool);
  CHECK(refusal_of("[\"a\", 1]", "BYTES", 2) ==
        "500 Unable to parse JSON bytes array: attempt to access JSON non-string as string");
  CHECK(refusal_of("[[1, 2], [3, \"a\"]]", "INT32", 4) == non_int);
}

TEST(json_data_takes_what_triton_takes) {
  std::vector<uint8_t> out;
  // Integers out of the type's range but within int64/uint64: cut to its size.
  CHECK(convert("[300, 1]", "UINT8", 2, &out));
  CHECK((values_of<uint8_t>(out) == std::vector<uint8_t>{44, 1}));
  CHECK(convert("[-200, 200]", "INT8", 2, &out));
  CHECK((values_of<int8_t>(out) == std::vector<int8_t>{56, -56}));
  CHECK(convert("[70000]", "UINT16", 1, &out) && values_of<uint16_t>(out)[0] == 4464);
  CHECK(convert("[4294967301]", "UINT32", 1, &out) && values_of<uint32_t>(out)[0] == 5);
  CHECK(convert("[2147483648]", "INT32", 1, &out) && values_of<int32_t>(out)[0] == INT32_MIN);
  CHECK(convert("[18446744073709551615]", "UINT64", 1, &out) &&
        values_of<uint64_t>(out)[0] == UINT64_MAX);
  CHECK(convert("[-9223372036854775808]", "INT64", 1, &out) &&
        values_of<int64_t>(out)[0] == INT64_MIN);
  CHECK(convert("[-0]", "UINT8", 1, &out) && values_of<uint8_t>(out)[0] == 0);
  // Any number for a float type, read as a double first.
  CHECK(convert("[1e39, 1]", "FP32", 2, &out) && std::isinf(values_of<float>(out)[0]));
  CHECK(convert("[18446744073709551616]", "FP32", 1, &out) &&
        values_of<float>(out)[0] == 18446744073709551616.0f);
  CHECK(convert("[18446744073709551615]", "FP64", 1, &out) &&
        values_of<double>(out)[0] == 18446744073709551615.0);
  // Nested arrays in any mix, empty ones included.
  CHECK(convert("[1, [2]]", "FP32", 2, &out));
  CHECK(convert("[[[1]], [2, [3]]]", "INT32", 3, &out));
  CHECK((values_of<int32_t>(out) == std::vector<int32_t>{1, 2, 3}));
  CHECK(convert("[[], [1]]", "INT32", 1, &out) && values_of<int32_t>(out)[0] == 1);
  // A tensor of no elements: its data is not read at all (the validator speaks).
  CHECK(convert("[\"x\"]", "INT32", 0, &out) && out.empty());
  CHECK(convert("5", "FOO", 0, &out) && out.empty());
  CHECK(convert("[1]", "FP16", 0, &out) && out.empty());
}

TEST(json_data_leaves_what_triton_refuses_as_a_document_to_the_general_path) {
  CHECK(not_read("[1e400]", "FP64", 1));  // Triton: a number too big for a double
  CHECK(not_read("[01]", "INT32", 1));    // not JSON
  CHECK(not_read("[1,]", "INT32", 1));
  CHECK(not_read("[-]", "INT32", 1));
  CHECK(not_read("[1", "INT32", 1));
  // Deep nesting stops somewhere, without recursing without bound.
  std::string deep(100000, '[');
  CHECK(not_read(deep, "FP32", 1));
}

TEST(json_request_refusals_are_the_first_input_s_and_only_for_a_whole_document) {
  auto input = [](const char* name, const char* datatype, const char* data) {
    return std::string("{\"name\":\"") + name + "\",\"datatype\":\"" + datatype +
           "\",\"shape\":[1],\"data\":" + data + "}";
  };
  const std::string fp16 =
      "400 receiving FP16 data via JSON is not supported. Please use the binary data format "
      "for input A";
  // The first input refused in request order, whatever follows.
  CHECK(refusal_of_request("{\"inputs\":[" + input("A", "FP16", "[1]") + "," +
                           input("B", "INT32", "[1, 2]") + "]}") == fp16);
  CHECK(refusal_of_request("{\"inputs\":[" + input("A", "INT32", "[1]") + "," +
                           input("B", "INT32", "[1, 2]") + "]}") ==
        "500 Unable to parse 'data': Shape does not match true shape of 'data' field");
  // A document the general path reads anyway (malformed, an id that is no string, a
  // classification that is no count): no refusal.
  CHECK(refusal_of_request("{\"inputs\":[" + input("A", "FP16", "[1]") + "],}").empty());
  CHECK(refusal_of_request("{\"inputs\":[" + input("A", "FP16", "[1]") + "],\"id\":5}").empty());
  CHECK(refusal_of_request("{\"inputs\":[" + input("A", "FP16", "[1]") +
                           "],\"outputs\":[{\"name\":\"O\",\"parameters\":{\"classification\":"
                           "-1}}]}")
            .empty());
  // A classification is read: the input's refusal stands.
  CHECK(refusal_of_request("{\"inputs\":[" + input("A", "FP16", "[1]") +
                           "],\"outputs\":[{\"name\":\"O\",\"parameters\":{\"classification\":"
                           "1}}]}") == fp16);
  // A refused request read again, taken: nothing of the refusal is left.
  CHECK(refusal_of_request("{\"inputs\":[" + input("A", "INT32", "[1]") + "]}").empty());
}

TEST(json_request_reads_escaped_and_utf8_strings) {
  // Escapes in keys, names, datatypes, ids, regions and sequence ids: read unescaped.
  std::string body =
      "{\"i\\u0064\":\"a\\\"b\\n\\u00e9\\ud83d\\ude00\",\"inputs\":[{\"na\\u006de\":"
      "\"IN\\u0050UT0\",\"datatype\":\"FP\\u00332\",\"shape\":[1],\"data\":[1]},"
      "{\"name\":\"caf\xc3\xa9\",\"datatype\":\"FP32\",\"shape\":[1],\"parameters\":"
      "{\"shared_memory_region\":\"r\\/1\",\"shared_memory_byte_size\":4}}],"
      "\"outputs\":[{\"name\":\"OUT\\u0050UT0\"}],"
      "\"parameters\":{\"sequence_id\":\"s\\t1\",\"k\\u0065y\":\"v\\\"\"}}";
  ParsedRequest request;
  CHECK(read(body, body.size(), &request));
  CHECK(request.id == "a\"b\n\xc3\xa9\xf0\x9f\x98\x80");
  CHECK(request.inputs.size() == 2 && request.inputs[0].name == "INPUT0" &&
        request.inputs[0].datatype == "FP32");
  CHECK(request.inputs[1].name == "caf\xc3\xa9" && request.inputs[1].shm_region == "r/1");
  CHECK(request.output_names.size() == 1 && request.output_names[0] == "OUTPUT0");
  CHECK(request.sequence_key == "s\t1");
  // The parameters stay JSON text, escapes as written, for the model.
  CHECK(request.parameters == "{\"sequence_id\":\"s\\t1\",\"k\\u0065y\":\"v\\\"\"}");
  // Moved: the unescaped text stays where the views point.
  ParsedRequest moved = std::move(request);
  CHECK(moved.id == "a\"b\n\xc3\xa9\xf0\x9f\x98\x80" && moved.inputs[0].name == "INPUT0");
  // A known member spelled with escapes is that member.
  std::string priority =
      "{\"inputs\":[{\"name\":\"I\",\"datatype\":\"FP32\",\"shape\":[1],"
      "\"data\":[1]}],\"parameters\":{\"pr\\u0069ority\":3}}";
  ParsedRequest prioritized;
  CHECK(read(priority, priority.size(), &prioritized) && prioritized.priority == 3);
}

TEST(json_request_refuses_inputs_and_parameters_as_triton) {
  const std::string content =
      "400 Input must set only one of the following fields: 'data', 'binary_data_size' in "
      "'parameters', 'shared_memory_region' in 'parameters'. But";
  const std::string good = "{\"name\":\"A\",\"datatype\":\"INT32\",\"shape\":[1],\"data\":[1]}";
  std::string both =
      "{\"name\":\"B\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1],"
      "\"parameters\":{\"binary_data_size\":4}}";
  CHECK(refusal_of_request("{\"inputs\":[" + good + "," + both + "]}", 4) ==
        content + " set 'data' 'binary_data_size'");
  // Before the input's other members (none of which it needs), and whatever binary
  // data is left: Triton stops there.
  CHECK(refusal_of_request("{\"inputs\":[{\"shape\":[1]}]}", 7) == content + " no field is set");
  CHECK(refusal_of_request("{\"inputs\":[{\"name\":\"A\",\"data\":[1],\"parameters\":{"
                           "\"shared_memory_region\":\"r\",\"shared_memory_byte_size\":4}}]}") ==
        content + " set 'data' 'shared_memory_region'");
  // The first input refused, in request order.
  CHECK(refusal_of_request("{\"inputs\":[{\"name\":\"A\",\"datatype\":\"INT32\",\"shape\":[1],"
                           "\"data\":[1,2]}," +
                           both + "]}") ==
        "500 Unable to parse 'data': Shape does not match true shape of 'data' field");
  // A custom parameter of no scalar: Triton reads the parameters before the inputs.
  const std::string invalid = "' has invalid type. It should be either 'int', 'bool', or 'string'.";
  for (const char* value : {"null", "{\"y\":1}", "[1]"}) {
    CHECK(refusal_of_request("{\"inputs\":[" + both + "],\"parameters\":{\"s\":1,\"x\":" + value +
                             ",\"z\":null}}") == "400 parameter 'x" + invalid);
  }
  CHECK(refusal_of_request("{\"parameters\":{\"\\u00e9\":null},\"inputs\":[" + good + "]}") ==
        "400 parameter '\xc3\xa9" + invalid);
  // The general path's when the document is not read whole.
  CHECK(
      refusal_of_request("{\"inputs\":[" + both + "],\"parameters\":{\"x\":null,\"priority\":-1}}")
          .empty());
}

TEST(response_ids_are_escaped_as_json) {
  // The client's id, read unescaped, goes back escaped: the body stays one JSON document.
  InferResponse response;
  response.model_name = "m";
  response.model_version = "1";
  response.id = "a\"b\\c\n\xc3\xa9";
  std::string text = http_text(response);
  CHECK(text.find("{\"id\":\"a\\\"b\\\\c\\n\xc3\xa9\",\"model_name\":\"m\"") != std::string::npos);
  response.id = "plain";
  CHECK(http_text(response).find("{\"id\":\"plain\",") != std::string::npos);
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
  // Shared memory without its size, beside binary data; classification in a shm region
  // or of no count, repeated data.
  std::string shm =
      "{\"inputs\":[{\"name\":\"INPUT0\",\"datatype\":\"FP32\",\"shape\":[1],"
      "\"parameters\":{\"shared_memory_region\":\"r\"}}]}";
  CHECK(!read(shm, shm.size(), &request));
  std::string offset_beside_binary =
      "{\"inputs\":[{\"name\":\"INPUT0\",\"datatype\":\"FP32\",\"shape\":[1],"
      "\"parameters\":{\"binary_data_size\":4,\"shared_memory_offset\":0}}]}";
  CHECK(!read(offset_beside_binary + "abcd", offset_beside_binary.size(), &request));
  // A string holding a NUL: Triton reads names and ids as C strings.
  std::string nul_id =
      "{\"id\":\"a\\u0000b\",\"inputs\":[{\"name\":\"I\",\"datatype\":\"FP32\","
      "\"shape\":[1],\"data\":[1]}]}";
  CHECK(!read(nul_id, nul_id.size(), &request));
  std::string classify = add_sub_json_data(
      sixteen("1"), sixteen("2"),
      ",\"outputs\":[{\"name\":\"OUTPUT0\",\"parameters\":{\"classification\":2}}]");
  ParsedRequest classified;
  CHECK(read(classify, classify.size(), &classified));
  CHECK(classified.output_classes == std::vector<uint64_t>{2});
  for (std::string_view count : {"-1", "1.5", "\"2\"", "null", "true"}) {
    std::string bad = add_sub_json_data(
        sixteen("1"), sixteen("2"),
        ",\"outputs\":[{\"name\":\"OUTPUT0\",\"parameters\":{\"classification\":" +
            std::string(count) + "}}]");
    ParsedRequest refused;
    CHECK(!read(bad, bad.size(), &refused));
  }
  std::string in_shm =
      add_sub_json_data(sixteen("1"), sixteen("2"),
                        ",\"outputs\":[{\"name\":\"OUTPUT0\",\"parameters\":{\"classification\":2,"
                        "\"shared_memory_region\":\"r\",\"shared_memory_byte_size\":64}}]");
  ParsedRequest shm_classified;
  CHECK(!read(in_shm, in_shm.size(), &shm_classified));
  // Only the outputs asked to: the others keep their tensor (0), in request order.
  std::string second = add_sub_json_data(
      sixteen("1"), sixteen("2"),
      ",\"outputs\":[{\"name\":\"OUTPUT0\"},{\"name\":\"OUTPUT1\",\"parameters\":{"
      "\"classification\":3,\"binary_data\":true}}]");
  ParsedRequest one_of_two;
  CHECK(read(second, second.size(), &one_of_two));
  CHECK((one_of_two.output_classes == std::vector<uint64_t>{0, 3}));
  CHECK((one_of_two.output_json == std::vector<uint8_t>{1, 0}));
  // Other output parameters are ignored, as Triton ignores them.
  std::string other =
      add_sub_json_data(sixteen("1"), sixteen("2"),
                        ",\"outputs\":[{\"name\":\"OUTPUT0\",\"parameters\":{\"x\":{\"y\":[null]},"
                        "\"binary_data\":true,\"z\":null}}]");
  ParsedRequest ignored;
  CHECK(read(other, other.size(), &ignored));
  CHECK((ignored.output_json == std::vector<uint8_t>{0}) && ignored.output_classes.empty());
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
