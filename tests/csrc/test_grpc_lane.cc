// The gRPC framer over the KServe codec: ModelInferRequest bytes in (built with the
// protobuf wire format by hand below), queued on a core, answered as
// ModelInferResponse bytes read back with grpc_infer_message's reader of responses'
// twin fields; what it leaves to the general path.
#include <cstring>
#include <string>
#include <vector>

#include "add_sub_model.h"
#include "core/core.h"
#include "grpc_lane_fixture.h"
#include "grpc_request_support.h"
#include "http1/http_framer.h"
#include "http2/grpc_infer_message.h"
#include "http2/grpc_lane.h"
#include "ipc/response_block.h"
#include "testing.h"

using namespace naiad;
using namespace grpctest;

namespace {

// A response block as the worker writes it (WorkerEndpoint::respond): one final
// response for request 0 of the batch.
std::string result_block(std::string_view json, const std::vector<const std::string*>& outputs) {
  ResponseEntry entry;
  entry.json = json;
  for (const std::string* output : outputs) {
    entry.outputs.push_back(OutputBytes{output->data(), output->size()});
  }
  uint64_t timings[4] = {1, 2, 3, 4};
  std::string block(response_block_size({entry}), '\0');
  write_response_block(reinterpret_cast<uint8_t*>(&block[0]), {entry}, timings);
  return block;
}

using Fixture = LaneFixture;

// The gRPC answer the lane writes for the taken request answered by result `block`.
std::string written_answer(Fixture& f, const GrpcLane::Taken& taken, const std::string& block) {
  std::vector<KServeCodec::Answer> answers;
  uint64_t timings[4];
  CHECK(f.http.codec().complete(reinterpret_cast<const uint8_t*>(block.data()), block.size(),
                                {taken.request_id}, 1500, 4000, &answers, timings));
  CHECK(answers.size() == 1);
  if (answers.size() != 1) return std::string();
  GrpcResponseWriter writer;
  std::string out(writer.size(answers[0].response), '\0');
  writer.write(answers[0].response, out.data());
  return out;
}

}  // namespace

TEST(grpc_lane_queues_raw_requests_and_answers_in_protobuf) {
  Fixture f;
  GrpcLane::Taken taken;
  CHECK(f.grpc.submit(add_sub_request(2, "req-1"), 1000, &taken));
  CHECK(taken.request_id != 0 && taken.batch_size == 2 && taken.error.empty());
  CHECK(f.http.codec().owns(taken.request_id));
  const std::string first = "0123456789abcdef", second = "fedcba9876543210";
  std::string block =
      result_block("{\"outputs\":[[\"OUTPUT0\",\"FP32\",[2,2]],[\"OUT\\\"1\",\"FP32\",[2,2]]]}",
                   {&first, &second});
  const std::string out = written_answer(f, taken, block);
  // The same bytes the protobuf writer gives for the same response, names unescaped.
  grpc::ResponseToWrite expected;
  expected.model_name = "add_sub";
  expected.model_version = "1";
  expected.id = "req-1";
  const uint8_t* a = reinterpret_cast<const uint8_t*>("0123456789abcdef");
  const uint8_t* b = reinterpret_cast<const uint8_t*>("fedcba9876543210");
  expected.outputs.push_back({"OUTPUT0", "FP32", {2, 2}, a, 16});
  expected.outputs.push_back({"OUT\"1", "FP32", {2, 2}, b, 16});
  std::string want(grpc::infer_response_size(expected), '\0');
  grpc::write_infer_response(expected, want.data());
  CHECK(out == want);
}

TEST(grpc_lane_answers_carry_the_response_parameters) {
  // A model's (or an ensemble's) response parameters, from the result block's JSON, as
  // typed InferParameters: a bool, an int64, a string (unescaped), a double, a uint64
  // above int64's range; a null has no InferParameter and is left out.
  Fixture f;
  GrpcLane::Taken taken;
  CHECK(f.grpc.submit(add_sub_request(2, "req-2"), 1000, &taken));
  const std::string first = "0123456789abcdef", second = "fedcba9876543210";
  std::string block = result_block(
      "{\"outputs\":[[\"OUTPUT0\",\"FP32\",[2,2]],[\"OUTPUT1\",\"FP32\",[2,2]]],"
      "\"parameters\":{\"sequence_id\":-9223372036854775803,\"sequence_start\":true,"
      "\"k\\\"ey\":\"v\\\"al\",\"ratio\":0.5,\"big\":18446744073709551615,\"gone\":null}}",
      {&first, &second});
  const std::string out = written_answer(f, taken, block);
  grpc::ResponseToWrite expected;
  expected.model_name = "add_sub";
  expected.model_version = "1";
  expected.id = "req-2";
  auto parameter = [&](std::string_view key, grpc::Parameter::Kind kind) -> grpc::Parameter& {
    grpc::Parameter& p = expected.parameters.emplace_back();
    p.key = key;
    p.kind = kind;
    return p;
  };
  parameter("sequence_id", grpc::Parameter::Kind::kInt64).int64_value = -9223372036854775803;
  parameter("sequence_start", grpc::Parameter::Kind::kBool).bool_value = true;
  parameter("k\"ey", grpc::Parameter::Kind::kString).string_value = "v\"al";
  parameter("ratio", grpc::Parameter::Kind::kDouble).double_value = 0.5;
  parameter("big", grpc::Parameter::Kind::kUint64).uint64_value = ~uint64_t{0};
  const uint8_t* a = reinterpret_cast<const uint8_t*>(first.data());
  const uint8_t* b = reinterpret_cast<const uint8_t*>(second.data());
  expected.outputs.push_back({"OUTPUT0", "FP32", {2, 2}, a, 16});
  expected.outputs.push_back({"OUTPUT1", "FP32", {2, 2}, b, 16});
  std::string want(grpc::infer_response_size(expected), '\0');
  grpc::write_infer_response(expected, want.data());
  CHECK(out == want);
}

TEST(grpc_lane_refuses_invalid_and_leaves_the_rest) {
  Fixture f;
  GrpcLane::Taken taken;
  // The validator's refusal: answered at once with its message.
  std::string bad = add_sub_request(1);
  bad.replace(bad.find("FP32"), 4, "INT8");
  CHECK(f.grpc.submit(bad, 0, &taken));
  CHECK(taken.request_id == 0);
  CHECK(taken.error.find("data-type is 'INT8', but model 'add_sub' expects 'FP32'") !=
        std::string::npos);
  // Typed contents are the lane's: contents without values are no bytes, which the
  // validator names.
  CHECK(f.grpc.submit(add_sub_request(1, "", true), 0, &taken));
  CHECK(taken.request_id == 0);
  CHECK(taken.error ==
        "[request id: <id_unknown>] input byte size mismatch for input 'INPUT0' for model "
        "'add_sub'. Expected 64, got 0");
  // Unknown models or versions: Triton's status and message (model_lookup.h).
  CHECK(f.grpc.submit(add_sub_request(1, "", false, "7"), 0, &taken));
  CHECK(taken.request_id == 0 && taken.error_kind == ErrorKind::kNotFound);
  CHECK(taken.error == "Request for unknown model: 'add_sub' version 7 is not found");
  std::string other = add_sub_request(1);
  other[2] = 'x';  // "xdd_sub"
  CHECK(f.grpc.submit(other, 0, &taken));
  CHECK(taken.request_id == 0 && taken.error_kind == ErrorKind::kNotFound);
  CHECK(taken.error == "Request for unknown model: 'xdd_sub' is not found");
  CHECK(f.grpc.submit(add_sub_request(1, "", false, "x"), 0, &taken));
  CHECK(taken.request_id == 0 && taken.error_kind == ErrorKind::kInvalidArgument);
  // A version loading, one served but not by the lane, a broken message: the first
  // refused, the second the general path's, the third refused as grpc++ refuses it.
  f.grpc.set_model("add_sub", {{1, true, f.lane_model}, {2, false, 9}, {3, true, kNoLaneModel}});
  CHECK(f.grpc.submit(add_sub_request(1, "", false, "2"), 0, &taken));
  CHECK(taken.request_id == 0 && taken.error_kind == ErrorKind::kUnavailable);
  CHECK(taken.error == "Request for unknown model: 'add_sub' version 2 is not at ready state");
  CHECK(!f.grpc.submit(add_sub_request(1, "", false, "3"), 0, &taken));
  CHECK(!f.grpc.submit(add_sub_request(1), 0, &taken));  // "": version 3
  f.grpc.set_model("add_sub", {{1, true, f.lane_model}});
  CHECK(f.grpc.submit(add_sub_request(1).substr(0, 40), 0, &taken));
  CHECK(taken.request_id == 0 && taken.error_kind == ErrorKind::kInternal);
  // A raw content too few: the input without data named, as Triton names it.
  std::string missing = add_sub_request(1);
  missing.resize(missing.size() - 66);
  CHECK(f.grpc.submit(missing, 0, &taken) && taken.request_id == 0);
  CHECK(taken.error ==
        "unable to find data for input tensor 'INPUT1' for model 'add_sub' in request.");
  // Scheduling parameters are taken; a negative priority refused as Triton does.
  std::string with_priority = add_sub_request(1) + std::string(1, '\x22');
  std::string entry = parameter("priority", 5, 1);
  varint(&with_priority, entry.size());
  with_priority += entry;
  CHECK(f.grpc.submit(with_priority, 0, &taken) && taken.request_id != 0);
  std::string negative = add_sub_request(1) + std::string(1, '\x22');
  entry = parameter("priority", 2, static_cast<uint64_t>(-1));
  varint(&negative, entry.size());
  negative += entry;
  CHECK(f.grpc.submit(negative, 0, &taken) && taken.request_id == 0);
  CHECK(taken.error == "invalid value for 'priority', expected value >= 0.");
  // Routes follow removed models.
  f.grpc.remove_model(f.lane_model);
  CHECK(!f.grpc.submit(add_sub_request(1), 0, &taken));
}

TEST(grpc_lane_error_messages_are_plain_text) {
  InferResponse response;
  response.error = ErrorKind::kInvalidArgument;
  response.error_message = "bad \\\"x\\\" \\u00e9\\n";
  CHECK(grpc_error_message(response) == "bad \"x\" \xc3\xa9\n");
}

// ModelStreamInfer's writer goes record by record: a decoupled model's responses before
// the last (kResponseFinal unset) are answered each as one ModelStreamInferResponse with
// the request's id, and the request stays the codec's until its final record; without
// `partial` (unary RPCs, HTTP) only the final record is answered.
TEST(grpc_stream_answers_record_by_record_until_final) {
  for (bool partial : {true, false}) {
    Fixture f;
    GrpcLane::Taken taken;
    CHECK(f.grpc.submit(add_sub_request(1, "stream-7"), 1000, &taken));
    const std::string one = "0123456789abcdef", two = "ghijklmnopqrstuv",
                      three = "wxyzWXYZ01234567";
    const char* json = "{\"outputs\":[[\"OUTPUT0\",\"FP32\",[1,4]]]}";
    std::vector<ResponseEntry> entries(3);
    const std::string* data[3] = {&one, &two, &three};
    for (int i = 0; i < 3; ++i) {
      entries[i].flags = i == 2 ? kResponseFinal : 0;
      entries[i].json = json;
      entries[i].outputs.push_back(OutputBytes{data[i]->data(), data[i]->size()});
    }
    uint64_t timings[4] = {1, 2, 3, 4};
    std::string block(response_block_size(entries), '\0');
    write_response_block(reinterpret_cast<uint8_t*>(&block[0]), entries, timings);
    std::vector<KServeCodec::Answer> answers;
    uint64_t got_timings[4];
    CHECK(f.http.codec().complete(reinterpret_cast<const uint8_t*>(block.data()), block.size(),
                                  {taken.request_id}, 1500, 4000, &answers, got_timings, partial));
    CHECK(answers.size() == (partial ? 3u : 1u));
    GrpcResponseWriter writer;
    for (size_t i = 0; i < answers.size(); ++i) {
      size_t record = partial ? i : 2;
      CHECK(answers[i].final == (record == 2));
      std::string out(writer.stream_size(answers[i].response), '\0');
      writer.stream_write(answers[i].response, out.data());
      grpc::ResponseToWrite expected;
      expected.model_name = "add_sub";
      expected.model_version = "1";
      expected.id = "stream-7";
      expected.outputs.push_back(
          {"OUTPUT0", "FP32", {1, 4}, reinterpret_cast<const uint8_t*>(data[record]->data()), 16});
      std::string want(grpc::infer_response_size(expected, true), '\0');
      grpc::write_infer_response(expected, want.data(), true);
      CHECK(out == want);
      // The same bytes as pieces, the tensor viewed in the block, for send_message.
      std::string scratch;
      std::vector<std::string_view> parts;
      writer.parts(answers[i].response, true, &scratch, &parts);
      std::string joined;
      for (std::string_view p : parts) joined.append(p.data(), p.size());
      CHECK(joined == want);
    }
    CHECK(!f.http.codec().owns(taken.request_id));  // answered: its final record was read
  }
}

// A request whose final record has not come yet stays in flight across blocks.
TEST(grpc_stream_request_stays_in_flight_until_its_final_record) {
  Fixture f;
  GrpcLane::Taken taken;
  CHECK(f.grpc.submit(add_sub_request(1, "later"), 1000, &taken));
  const std::string bytes16 = "0123456789abcdef";
  std::vector<ResponseEntry> entries(1);
  entries[0].flags = 0;
  entries[0].json = "{\"outputs\":[[\"OUTPUT0\",\"FP32\",[1,4]]]}";
  entries[0].outputs.push_back(OutputBytes{bytes16.data(), bytes16.size()});
  uint64_t timings[4] = {1, 2, 3, 4};
  std::string block(response_block_size(entries), '\0');
  write_response_block(reinterpret_cast<uint8_t*>(&block[0]), entries, timings);
  std::vector<KServeCodec::Answer> answers;
  uint64_t got[4];
  CHECK(f.http.codec().complete(reinterpret_cast<const uint8_t*>(block.data()), block.size(),
                                {taken.request_id}, 1500, 4000, &answers, got, true));
  CHECK(answers.size() == 1 && !answers[0].final && answers[0].response.id == "later");
  CHECK(f.http.codec().owns(taken.request_id));
  entries[0].flags = kResponseFinal;
  write_response_block(reinterpret_cast<uint8_t*>(&block[0]), entries, timings);
  answers.clear();
  CHECK(f.http.codec().complete(reinterpret_cast<const uint8_t*>(block.data()), block.size(),
                                {taken.request_id}, 1500, 4000, &answers, got, true));
  CHECK(answers.size() == 1 && answers[0].final && answers[0].response.id == "later");
  CHECK(!f.http.codec().owns(taken.request_id));
}

namespace {

// add_sub (raw contents) with one request parameter `name` of InferParameter `field`
// (1 bool, 2 int64, 3 string, 4 double, 5 uint64; 0: no value) holding `value`.
std::string with_parameter(const std::string& name, uint32_t field, uint64_t value,
                           const std::string& text = "") {
  std::string v;
  if (field == 3) {
    bytes(&v, 3, text);
  } else if (field == 4) {
    key(&v, 4, 1);
    for (int i = 0; i < 8; ++i) v.push_back(static_cast<char>(value >> (8 * i)));
  } else if (field != 0) {
    key(&v, field, 0);
    varint(&v, value);
  }
  std::string entry;
  bytes(&entry, 1, name);
  bytes(&entry, 2, v);
  std::string m = add_sub_request(1);
  bytes(&m, 4, entry);
  return m;
}

}  // namespace

TEST(grpc_lane_takes_tritons_parameter_forms_and_refuses_the_rest) {
  Fixture f;
  GrpcLane::Taken taken;
  auto queued = [&](const std::string& message) {
    taken = GrpcLane::Taken();
    CHECK(f.grpc.submit(message, 0, &taken));
    CHECK(taken.request_id != 0 && taken.error.empty());
    f.http.codec().forget(taken.request_id);
  };
  auto refused = [&](const std::string& message, const std::string& error) {
    taken = GrpcLane::Taken();
    CHECK(f.grpc.submit(message, 0, &taken));
    CHECK(taken.request_id == 0);
    if (taken.error != error) std::printf("  got: %s\n", taken.error.c_str());
    CHECK(taken.error == error);
  };
  queued(with_parameter("priority", 2, 1));
  queued(with_parameter("priority", 5, 1));
  queued(with_parameter("priority", 5, UINT64_MAX));  // past every level: the default
  queued(with_parameter("timeout", 2, 1000000));
  queued(with_parameter("sequence_start", 1, 0));
  queued(with_parameter("mine", 2, static_cast<uint64_t>(-5)));
  queued(with_parameter("mine", 3, 0, "a \"quoted\" value"));
  queued(with_parameter("triton_enable_empty_final_response", 1, 1));
  queued(with_parameter("mine", 4, 0x3ff0000000000000ULL));  // 1.0: Triton 2.51 takes doubles
  queued(with_parameter("mine", 4, 0x7ff8000000000000ULL));  // NaN
  refused(with_parameter("priority", 2, static_cast<uint64_t>(-1)),
          "invalid value for 'priority', expected value >= 0.");
  refused(with_parameter("priority", 4, 0),
          "invalid value type for 'priority' parameter, expected int64_param or uint64_param.");
  refused(with_parameter("timeout", 5, 1),
          "invalid value type for 'timeout' parameter, expected int64_param.");
  refused(with_parameter("sequence_id", 1, 1),
          "invalid value type for 'sequence_id' parameter, expected int64_param or "
          "string_param.");
  refused(with_parameter("sequence_id", 5, 1),
          "invalid value type for 'sequence_id' parameter, expected int64_param or "
          "string_param.");
  refused(with_parameter("sequence_end", 2, 1),
          "invalid value type for 'sequence_end' parameter, expected bool_param.");
  refused(with_parameter("mine", 5, 1),
          "invalid value type for 'mine' parameter, expected int64_param, bool_param, or "
          "string_param.");
  refused(with_parameter("mine", 0, 0),
          "invalid value type for 'mine' parameter, expected int64_param, bool_param, or "
          "string_param.");
  refused(with_parameter("triton_mine", 1, 1),
          "parameter keys starting with 'triton_' are reserved for Triton usage. Only the "
          "following keys starting with 'triton_' are allowed: "
          "triton_enable_empty_final_response");
  refused(with_parameter("triton_enable_empty_final_response", 2, 1),
          "invalid value type for 'triton_enable_empty_final_response' parameter, expected "
          "bool_param.");
  CHECK(f.http.codec().in_flight() == 0);
}

TEST(grpc_lane_takes_ids_with_any_characters) {
  Fixture f;
  GrpcLane::Taken taken;
  const std::string id = "say \"hi\" \\ \t\n\x01 \xc3\xa9";
  CHECK(f.grpc.submit(add_sub_request(1, id), 1000, &taken));
  CHECK(taken.request_id != 0 && taken.error.empty());
  // The answer carries the id as sent.
  const std::string first(16, 'a'), second(16, 'b');
  std::string block =
      result_block("{\"outputs\":[[\"OUTPUT0\",\"FP32\",[1,4]],[\"OUTPUT1\",\"FP32\",[1,4]]]}",
                   {&first, &second});
  const std::string out = written_answer(f, taken, block);
  CHECK(out.find(id) != std::string::npos);
  // A refusal names it as sent too.
  std::string bad = add_sub_request(1, id);
  bad.replace(bad.find("FP32"), 4, "INT8");
  CHECK(f.grpc.submit(bad, 0, &taken) && taken.request_id == 0);
  CHECK(taken.error.rfind("[request id: " + id + "] ", 0) == 0);
}

TEST(grpc_lane_ignores_the_tensor_parameters_triton_ignores) {
  Fixture f;
  GrpcLane::Taken taken;
  // add_sub with `input` parameters on INPUT0 and OUTPUT0 requested with `output` ones.
  // Each argument: the tensor's parameter map entries.
  using Entries = std::vector<std::string>;
  auto request = [](const Entries& input, const Entries& output) {
    std::string m;
    bytes(&m, 1, "add_sub");
    std::string in0 = tensor("INPUT0", "FP32", {1, 16});
    for (const std::string& entry : input) bytes(&in0, 4, entry);
    bytes(&m, 5, in0);
    bytes(&m, 5, tensor("INPUT1", "FP32", {1, 16}));
    std::string out0;
    bytes(&out0, 1, "OUTPUT0");
    for (const std::string& entry : output) bytes(&out0, 2, entry);
    bytes(&m, 6, out0);
    bytes(&m, 7, std::string(64, '\1'));
    bytes(&m, 7, std::string(64, '\2'));
    return m;
  };
  // Other keys than shm's: taken, the parameters passed on to no one (as Triton 2.51).
  for (const std::string& message :
       {request({parameter("mine", 2, 3)}, {}), request({parameter("binary_data_size", 2, 64)}, {}),
        request({}, {parameter("binary_data", 1, 1)}), request({}, {parameter("mine", 5, 7)})}) {
    taken = GrpcLane::Taken();
    CHECK(f.grpc.submit(message, 0, &taken));
    CHECK(taken.request_id != 0 && taken.error.empty());
    f.http.codec().forget(taken.request_id);
  }
  // shm keys without the region they go with: Triton's refusals.
  CHECK(f.grpc.submit(request({parameter("shared_memory_offset", 2, 0)}, {}), 0, &taken));
  CHECK(taken.request_id == 0);
  CHECK(taken.error ==
        "'shared_memory_offset' can not be specified without 'shared_memory_region' parameter "
        "for tensor 'INPUT0'");
  CHECK(f.grpc.submit(request({}, {parameter("shared_memory_byte_size", 2, 64)}), 0, &taken));
  CHECK(taken.error ==
        "'shared_memory_byte_size' can not be specified without 'shared_memory_region' "
        "parameter for tensor 'OUTPUT0'");
  std::string region;
  bytes(&region, 1, "shared_memory_region");
  bytes(&region, 2, std::string("\x1a\x01r", 3));  // string_param "r"
  CHECK(f.grpc.submit(request({region}, {}), 0, &taken));
  CHECK(taken.error ==
        "'shared_memory_byte_size' must be specified along with 'shared_memory_region' "
        "parameter for tensor 'INPUT0'");
  // Values of the wrong kind: Triton's refusals, region first, then offset, then size.
  std::string region_int;
  bytes(&region_int, 1, "shared_memory_region");
  bytes(&region_int, 2, std::string("\x10\x03", 2));  // int64_param 3
  CHECK(f.grpc.submit(request({region_int, parameter("shared_memory_byte_size", 5, 64)}, {}), 0,
                      &taken));
  CHECK(taken.request_id == 0 && taken.error_kind == ErrorKind::kInvalidArgument);
  CHECK(taken.error ==
        "invalid value type for 'shared_memory_region' parameter for tensor 'INPUT0', "
        "expected string_param.");
  CHECK(f.grpc.submit(request({}, {region, parameter("shared_memory_byte_size", 5, 64),
                                   parameter("shared_memory_offset", 1, 1)}),
                      0, &taken));
  CHECK(taken.error ==
        "invalid value type for 'shared_memory_offset' parameter for tensor 'OUTPUT0', "
        "expected int64_param.");
  CHECK(
      f.grpc.submit(request({region, parameter("shared_memory_byte_size", 5, 64)}, {}), 0, &taken));
  CHECK(taken.error ==
        "invalid value type for 'shared_memory_byte_size' parameter for tensor 'INPUT0', "
        "expected int64_param.");
  // Both without the region: the offset is named first.
  CHECK(f.grpc.submit(request({parameter("shared_memory_byte_size", 2, 64),
                               parameter("shared_memory_offset", 5, 0)},
                              {}),
                      0, &taken));
  CHECK(taken.error ==
        "'shared_memory_offset' can not be specified without 'shared_memory_region' parameter "
        "for tensor 'INPUT0'");
  // The shm keys are read before a classification.
  CHECK(f.grpc.submit(request({}, {region_int, parameter("classification", 2, 2)}), 0, &taken));
  CHECK(taken.error.find("'shared_memory_region'") != std::string::npos);
  // Classification: the lane's, the output named for the answer; Triton's refusals.
  taken = GrpcLane::Taken();
  CHECK(f.grpc.submit(request({}, {parameter("classification", 2, 2)}), 0, &taken));
  CHECK(taken.request_id != 0 && taken.classify.size() == 1);
  CHECK(taken.classify[0].output == 0 && taken.classify[0].count == 2);
  f.http.codec().forget(taken.request_id);
  CHECK(f.grpc.submit(request({}, {parameter("classification", 5, 2)}), 0, &taken));
  CHECK(taken.request_id == 0 && taken.classify.empty());
  CHECK(taken.error == "invalid value type for 'classification' parameter, expected int64_param");
  CHECK(f.grpc.submit(request({}, {parameter("classification", 2, 0)}), 0, &taken));
  CHECK(taken.error == "invalid value for 'classification' parameter, expected >= 0");
  CHECK(f.grpc.submit(request({}, {region, parameter("shared_memory_byte_size", 2, 64),
                                   parameter("classification", 2, 1)}),
                      0, &taken));
  CHECK(taken.error == "output can't set both 'shared_memory_region' and 'classification'");
  CHECK(f.http.codec().in_flight() == 0);
}

TEST(grpc_lane_refuses_a_message_protobuf_cannot_parse) {
  // grpc++'s answer, from the lane: INTERNAL "Unable to parse request", whatever the
  // model (none can be read).
  Fixture f;
  GrpcLane::Taken taken;
  std::string damaged = add_sub_request(1);
  damaged.resize(damaged.size() - 3);
  std::string not_utf8;
  bytes(&not_utf8, 1, "add\xffsub");
  for (const std::string& message : {damaged, not_utf8, std::string("\xff", 1)}) {
    taken = GrpcLane::Taken();
    CHECK(f.grpc.submit(message, 0, &taken));
    CHECK(taken.request_id == 0 && taken.error_kind == ErrorKind::kInternal);
    CHECK(taken.error == "Unable to parse request");
  }
  // What protobuf skips the lane skips: a known field of another wire type, a group.
  std::string skipped = add_sub_request(1) + "\x18\x01" + "\x4b\x4c";
  CHECK(f.grpc.submit(skipped, 0, &taken) && taken.request_id != 0);
  f.http.codec().forget(taken.request_id);
  CHECK(f.http.codec().in_flight() == 0);
}
