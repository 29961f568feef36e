// ModelInferRequest reading and ModelInferResponse writing against bytes the protobuf
// library produced (Python's grpc_service_pb2, hex below) for the same messages.
#include <string>
#include <vector>

#include "grpc_request_support.h"
#include "http2/grpc_infer_message.h"
#include "testing.h"

using namespace naiad::grpc;
using grpctest::bytes;

namespace {

std::string unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

// model_name add_sub, version 1, id req-7; parameters priority (uint64 2), timeout
// (int64 5000), tag (string x), flag (bool), ratio (double 0.5); INPUT0 FP32 [1,16]
// with parameter binary_data_size 64; INPUT1 FP32 [1,-1]; output OUTPUT0 with
// classification 3; raw contents bytes 0..63 and 01 01 01 01.
const std::string kRequest = unhex(
    "0a076164645f7375621201311a057265712d37220e0a087072696f7269747912022802220e0a0774696d656f"
    "75741203108827220a0a0374616712031a0178220a0a04666c61671202080122120a05726174696f120921"
    "000000000000e03f2a2a0a06494e505554301204465033321a02011022160a1062696e6172795f64617461"
    "5f73697a65120210402a1b0a06494e505554311204465033321a0b01ffffffffffffffffff01321f0a074f"
    "55545055543012140a0e636c617373696669636174696f6e120210033a40000102030405060708090a0b0c"
    "0d0e0f101112131415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f3031323334353637"
    "38393a3b3c3d3e3f3a0401010101");

const std::string kResponse = unhex(
    "0a076164645f7375621201311a057265712d372a130a074f5554505554301204465033321a0201102a130a"
    "074f555450555431120542595445531a01023240000102030405060708090a0b0c0d0e0f10111213141516"
    "1718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f3209"
    "010000006100000000");

}  // namespace

TEST(grpc_reads_a_model_infer_request) {
  InferRequestView r;
  std::string error;
  CHECK(read_infer_request(kRequest, &r, &error));
  CHECK(error.empty());
  CHECK(r.model_name == "add_sub" && r.model_version == "1" && r.id == "req-7");
  CHECK(r.parameters.size() == 5);
  CHECK(r.parameters[0].key == "priority" && r.parameters[0].kind == Parameter::Kind::kUint64 &&
        r.parameters[0].uint64_value == 2);
  CHECK(r.parameters[1].key == "timeout" && r.parameters[1].int64_value == 5000);
  CHECK(r.parameters[2].kind == Parameter::Kind::kString && r.parameters[2].string_value == "x");
  CHECK(r.parameters[3].kind == Parameter::Kind::kBool && r.parameters[3].bool_value);
  CHECK(r.parameters[4].kind == Parameter::Kind::kDouble && r.parameters[4].double_value == 0.5);
  CHECK(r.inputs.size() == 2);
  CHECK(r.inputs[0].name == "INPUT0" && r.inputs[0].datatype == "FP32");
  CHECK((r.inputs[0].shape == std::vector<int64_t>{1, 16}));
  CHECK((r.inputs[1].shape == std::vector<int64_t>{1, -1}));
  CHECK(r.inputs[0].parameters.size() == 1 && r.inputs[0].parameters[0].int64_value == 64);
  CHECK(!r.inputs[0].has_contents());
  CHECK(r.outputs.size() == 1 && r.outputs[0].name == "OUTPUT0");
  CHECK(r.outputs[0].parameters[0].key == "classification");
  CHECK(r.raw_input_contents.size() == 2 && r.raw_input_contents[0].size() == 64);
  CHECK(r.raw_input_contents[0][63] == 63 && r.raw_input_contents[1] == "\x01\x01\x01\x01");
}

TEST(grpc_refuses_every_truncation_of_a_request) {
  // Every prefix is either a valid message (cut at a field boundary) or refused; no
  // prefix reads past its end (ASan checks that).
  int refused = 0;
  for (size_t n = 0; n < kRequest.size(); ++n) {
    InferRequestView r;
    std::string error;
    if (!read_infer_request(std::string_view(kRequest).substr(0, n), &r, &error)) {
      ++refused;
      CHECK(!error.empty());
    }
  }
  CHECK(refused > static_cast<int>(kRequest.size()) / 2);
}

TEST(grpc_refuses_bad_wire_types_and_lengths) {
  InferRequestView r;
  std::string error;
  CHECK(!read_infer_request(std::string("\x4b", 1), &r, &error));  // field 9, group start
  CHECK(error == "truncated varint");
  CHECK(!read_infer_request(std::string("\x4b\x54", 2), &r, &error));  // ended by field 10
  CHECK(error == "a group ended by another field's end");
  CHECK(!read_infer_request(std::string("\x4c", 1), &r, &error));  // an end alone
  CHECK(error == "a group's end without its start");
  CHECK(!read_infer_request(std::string("\x4e", 1), &r, &error));  // wire type 6
  CHECK(error == "unsupported wire type");
  std::string deep;
  for (int i = 0; i < 101; ++i) deep += "\x4b";
  for (int i = 0; i < 101; ++i) deep += "\x4c";
  CHECK(!read_infer_request(deep, &r, &error));
  CHECK(error == "groups nested too deep");
  CHECK(!read_infer_request(std::string("\x0a\x05"
                                        "ab",
                                        4),
                            &r, &error));
  CHECK(error == "length beyond the message");
  CHECK(!read_infer_request(std::string("\x00\x00", 2), &r, &error));  // field 0
  std::string long_varint("\x48");
  long_varint += std::string(10, '\xff');
  CHECK(!read_infer_request(long_varint + "\x01", &r, &error));
  CHECK(error == "varint longer than 10 bytes");
  // A tenth byte's bits past 64 are dropped, as protobuf drops them.
  long_varint.back() = '\x7f';
  CHECK(read_infer_request(long_varint, &r, &error));
  // Unknown fields of every wire type are skipped.
  std::string unknown(
      "\x48\x05\x51"
      "12345678"
      "\x5a\x02xy\x65"
      "1234"
      "\x0a\x01m",
      23);
  CHECK(read_infer_request(unknown, &r, &error));
  CHECK(r.model_name == "m");
  // Groups, nested, and known fields sent with another wire type are unknown fields to
  // protobuf: skipped.
  std::string skipped(
      "\x4b\x5b\x08\x01\x5c\x4c"  // group 9 { group 11 { 1: 1 } }
      "\x08\x01"                  // model_name as a varint
      "\x0b\x0c"                  // model_name as a group
      "\x2d"
      "1234"  // inputs as a fixed32
      "\x0a\x01m",
      18);
  CHECK(read_infer_request(skipped, &r, &error));
  CHECK(r.model_name == "m" && r.inputs.empty());
}

TEST(grpc_refuses_strings_that_are_not_utf8) {
  // proto3 `string` fields (names, id, datatype, parameter keys and string values) must be
  // UTF-8, or protobuf refuses the message; `bytes` fields may hold anything.
  InferRequestView r;
  std::string error;
  const std::string bad[] = {"add\xffsub", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xc3"};
  for (const std::string& text : bad) {
    for (uint32_t field : {1u, 2u, 3u}) {
      std::string m;
      bytes(&m, field, text);
      CHECK(!read_infer_request(m, &r, &error));
      CHECK(error == "a string field that is not UTF-8");
    }
    std::string in;
    bytes(&in, 1, text);
    std::string m;
    bytes(&m, 5, in);
    CHECK(!read_infer_request(m, &r, &error));
    std::string key_entry;
    bytes(&key_entry, 1, text);
    m.clear();
    bytes(&m, 4, key_entry);
    CHECK(!read_infer_request(m, &r, &error));
  }
  std::string m;
  bytes(&m, 1, "h\xc3\xa9 \xe2\x98\x83 \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf");
  bytes(&m, 7, "\xff\xfe");
  CHECK(read_infer_request(m, &r, &error));
  CHECK(r.raw_input_contents.size() == 1 && r.raw_input_contents[0] == "\xff\xfe");
}

TEST(grpc_writes_the_response_protobuf_writes) {
  std::string bytes_output("\x01\0\0\0a\x00\0\0\0", 9);
  std::string fp32;
  for (int i = 0; i < 64; ++i) fp32.push_back(static_cast<char>(i));
  ResponseToWrite response;
  response.model_name = "add_sub";
  response.model_version = "1";
  response.id = "req-7";
  response.outputs.push_back(
      {"OUTPUT0", "FP32", {1, 16}, reinterpret_cast<const uint8_t*>(fp32.data()), fp32.size()});
  response.outputs.push_back({"OUTPUT1",
                              "BYTES",
                              {2},
                              reinterpret_cast<const uint8_t*>(bytes_output.data()),
                              bytes_output.size()});
  std::string out(infer_response_size(response), '\0');
  write_infer_response(response, out.data());
  CHECK(out == kResponse);
  std::string streamed(infer_response_size(response, true), '\0');
  write_infer_response(response, streamed.data(), true);
  CHECK(streamed == std::string("\x12\x8a\x01", 3) + kResponse);
  // As pieces: the same bytes, the tensors as views of their data (not copies).
  for (bool stream : {false, true}) {
    std::string scratch;
    std::vector<std::string_view> parts;
    infer_response_parts(response, stream, &scratch, &parts);
    CHECK(parts.size() == 5);
    CHECK(parts[1].data() == fp32.data() && parts[1].size() == fp32.size());
    CHECK(parts[3].data() == bytes_output.data());
    std::string joined;
    for (std::string_view p : parts) joined.append(p.data(), p.size());
    CHECK(joined == (stream ? streamed : out));
  }
}

TEST(grpc_writes_response_parameters_as_the_protobuf_map) {
  // protobuf's own bytes (python, deterministic: entries by key) for model_name "m" and
  // one parameter of each InferParameter kind.
  static const char kBytes[] =
      "\x0a\x01m"
      "\x22\x0c\x0a\x06"
      "a_bool"
      "\x12\x02\x08\x01"
      "\x22\x14\x0a\x05"
      "b_int"
      "\x12\x0b\x10\xfd\xff\xff\xff\xff\xff\xff\xff\xff\x01"
      "\x22\x0e\x0a\x05"
      "c_str"
      "\x12\x05\x1a\x03x\"y"
      "\x22\x15\x0a\x08"
      "d_double"
      "\x12\x09\x21\x00\x00\x00\x00\x00\x00\xe0\x3f"
      "\x22\x15\x0a\x06"
      "e_uint"
      "\x12\x0b\x28\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01";
  const std::string protobuf(kBytes, sizeof kBytes - 1);
  ResponseToWrite response;
  response.model_name = "m";
  Parameter p;
  p.key = "a_bool";
  p.kind = Parameter::Kind::kBool;
  p.bool_value = true;
  response.parameters.push_back(p);
  p = Parameter{};
  p.key = "b_int";
  p.kind = Parameter::Kind::kInt64;
  p.int64_value = -3;
  response.parameters.push_back(p);
  p = Parameter{};
  p.key = "c_str";
  p.kind = Parameter::Kind::kString;
  p.string_value = "x\"y";
  response.parameters.push_back(p);
  p = Parameter{};
  p.key = "d_double";
  p.kind = Parameter::Kind::kDouble;
  p.double_value = 0.5;
  response.parameters.push_back(p);
  p = Parameter{};
  p.key = "e_uint";
  p.kind = Parameter::Kind::kUint64;
  p.uint64_value = ~uint64_t{0};
  response.parameters.push_back(p);
  CHECK(infer_response_size(response) == protobuf.size());
  std::string out(infer_response_size(response), '\0');
  write_infer_response(response, out.data());
  CHECK(out == protobuf);
  std::string scratch;
  std::vector<std::string_view> parts;
  infer_response_parts(response, true, &scratch, &parts);
  std::string joined;
  for (std::string_view part : parts) joined.append(part.data(), part.size());
  std::string streamed(infer_response_size(response, true), '\0');
  write_infer_response(response, streamed.data(), true);
  CHECK(joined == streamed);
}
