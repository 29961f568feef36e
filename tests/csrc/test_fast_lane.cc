// Unit tests of the infer fast lane: the JSON pull reader, what the lane takes and
// what it leaves to the general path, the request block it writes for the worker,
// the HTTP responses it builds from a worker's result block, and the HTTP scanner.
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "add_sub_model.h"
#include "core.h"
#include "fast_lane.h"
#include "http_scan.h"
#include "ipc_schema.h"
#include "json_reader.h"
#include "response_block.h"
#include "testing.h"
#include "worker_endpoint.h"

using namespace naiad;

namespace {

// A body: the JSON header, then `binary` bytes of input data.
struct Body {
  std::string bytes;
  size_t header_size;
};

Body make_body(const std::string& json, size_t binary) {
  Body body{json, json.size()};
  for (size_t i = 0; i < binary; ++i) body.bytes.push_back(static_cast<char>(i & 0xFF));
  return body;
}

const char* kInput =
    "{\"name\":\"%s\",\"datatype\":\"FP32\",\"shape\":[%d,16],"
    "\"parameters\":{\"binary_data_size\":%d}}";

std::string input_json(const char* name, int batch) {
  char buffer[256];
  std::snprintf(buffer, sizeof(buffer), kInput, name, batch, batch * 64);
  return buffer;
}

// What perf_analyzer sends for add_sub.
const std::string kOutputs =
    "\"outputs\":[{\"name\":\"OUTPUT0\",\"parameters\":{\"binary_data\":true}},"
    "{\"name\":\"OUTPUT1\",\"parameters\":{\"binary_data\":true}}]";

std::string add_sub_json(int batch = 1, const std::string& extra = "") {
  return "{\"id\":\"\",\"inputs\":[" + input_json("INPUT0", batch) + "," +
         input_json("INPUT1", batch) + "]," + kOutputs + extra + "}";
}

bool takes(const FastModel& model, const Body& body, FastRequest* out = nullptr) {
  FastRequest request;
  bool taken = parse_fast_request(model, reinterpret_cast<const uint8_t*>(body.bytes.data()),
                                  body.bytes.size(), body.header_size, &request);
  if (out != nullptr) *out = request;
  return taken;
}

// `text` with the first `from` replaced by `to`.
std::string replaced(std::string text, const std::string& from, const std::string& to) {
  return text.replace(text.find(from), from.size(), to);
}

bool takes_json(const std::string& json, size_t binary = 128) {
  return takes(add_sub_model(), make_body(json, binary));
}

}  // namespace

TEST(json_reader_strings) {
  std::string_view out;
  JsonReader plain(" \"INPUT0\" ", 10);
  CHECK(plain.plain_string(&out) && out == "INPUT0" && plain.at_end());
  JsonReader escaped("\"a\\\"b\"", 6);
  CHECK(!escaped.plain_string(&out));
  JsonReader raw("\"a\\\"b\\u00e9\"", 13);
  CHECK(raw.raw_string(&out) && out == "a\\\"b\\u00e9");
  const char utf8[] = "\"caf\xc3\xa9\"";
  JsonReader good(utf8, sizeof(utf8) - 1);
  CHECK(good.raw_string(&out) && out.size() == 5);
  const char bad_utf8[] = "\"caf\xc3\"";
  JsonReader bad(bad_utf8, sizeof(bad_utf8) - 1);
  CHECK(!bad.raw_string(&out));
  JsonReader bad_escape("\"\\x\"", 4);
  CHECK(!bad_escape.raw_string(&out));
  JsonReader unterminated("\"abc", 4);
  CHECK(!unterminated.raw_string(&out));
}

TEST(json_reader_numbers_and_values) {
  uint64_t value = 0;
  JsonReader ok("123", 3);
  CHECK(ok.uint(&value) && value == 123);
  JsonReader leading_zero("012", 3);
  CHECK(!leading_zero.uint(&value));
  JsonReader fraction("1.5", 3);
  CHECK(!fraction.uint(&value));
  JsonReader negative("-1", 2);
  CHECK(!negative.uint(&value));
  JsonReader too_long("1234567890123456789", 19);
  CHECK(!too_long.uint(&value));

  std::string doc = "{\"a\":[1,-2.5e3,true,null,{\"b\":\"c\"}],\"d\":false}";
  JsonReader any(doc.data(), doc.size());
  CHECK(any.skip_value() && any.at_end());
  std::string deep(JsonReader::kMaxDepth + 2, '[');
  deep += std::string(JsonReader::kMaxDepth + 2, ']');
  JsonReader too_deep(deep.data(), deep.size());
  CHECK(!too_deep.skip_value());
  JsonReader trailing("[1,]", 4);
  CHECK(!trailing.skip_value());
}

TEST(lane_takes_perf_analyzer_request) {
  FastRequest request;
  Body body = make_body(add_sub_json(), 128);
  CHECK(takes(add_sub_model(), body, &request));
  CHECK(request.batch_size == 1);
  CHECK(request.inputs.size() == 2);
  CHECK(request.inputs[0].body_offset == body.header_size);
  CHECK(request.inputs[1].body_offset == body.header_size + 64);
  CHECK(request.outputs_listed && request.outputs.size() == 2);
  CHECK(request.shape_key == 0);
}

TEST(lane_takes_batches_and_binary_data_output) {
  FastRequest request;
  CHECK(takes(add_sub_model(), make_body(add_sub_json(3), 3 * 128), &request));
  CHECK(request.batch_size == 3);
  std::string all_outputs = "{\"inputs\":[" + input_json("INPUT1", 1) + "," +
                            input_json("INPUT0", 1) +
                            "],\"parameters\":{\"binary_data_output\":true}}";
  // The request's views point into the body: it must outlive them.
  Body body = make_body(all_outputs, 128);
  CHECK(takes(add_sub_model(), body, &request));
  CHECK(!request.outputs_listed);
  CHECK(request.parameters == "{\"binary_data_output\":true}");
  CHECK(request.inputs[0].spec == 1);
}

TEST(lane_leaves_other_requests_to_the_general_path) {
  // Not the lane's kind: JSON data, shared memory, JSON outputs, scheduling parameters.
  std::string json_data =
      "{\"inputs\":[{\"name\":\"INPUT0\",\"datatype\":\"FP32\",\"shape\":[1,16],\"data\":[1]}," +
      input_json("INPUT1", 1) + "]," + kOutputs + "}";
  CHECK(!takes_json(json_data, 64));
  std::string shm =
      "{\"inputs\":[{\"name\":\"INPUT0\",\"datatype\":\"FP32\",\"shape\":[1,16],"
      "\"parameters\":{\"shared_memory_region\":\"r\",\"binary_data_size\":64}}," +
      input_json("INPUT1", 1) + "]," + kOutputs + "}";
  CHECK(!takes_json(shm, 64));
  std::string json_outputs = "{\"inputs\":[" + input_json("INPUT0", 1) + "," +
                             input_json("INPUT1", 1) + "],\"outputs\":[{\"name\":\"OUTPUT0\"}]}";
  CHECK(!takes_json(json_outputs));
  std::string no_outputs =
      "{\"inputs\":[" + input_json("INPUT0", 1) + "," + input_json("INPUT1", 1) + "]}";
  CHECK(!takes_json(no_outputs));
  CHECK(!takes_json(add_sub_json(1, ",\"parameters\":{\"priority\":1}")));
  CHECK(!takes_json(add_sub_json(1, ",\"parameters\":{\"binary_data_output\":true,\"x\":1}")));
  // An id with an escape: the general path decodes it.
  CHECK(!takes_json(replaced(add_sub_json(), "\"id\":\"\"", "\"id\":\"a\\nb\"")));
  // Raw binary (header size 0) and a truncated header.
  CHECK(!takes(add_sub_model(), Body{std::string(128, 'x'), 0}));
  std::string cut = add_sub_json();
  CHECK(!takes_json(cut.substr(0, cut.size() - 1)));
}

TEST(lane_leaves_invalid_requests_to_the_validator) {
  // Each of these gets Triton's error from the general path.
  CHECK(!takes_json(add_sub_json(), 127));       // one byte short
  CHECK(!takes_json(add_sub_json(), 129));       // one byte extra
  CHECK(!takes_json(add_sub_json(9), 9 * 128));  // batch over max_batch_size
  CHECK(!takes_json(replaced(add_sub_json(), "FP32", "INT32")));
  CHECK(!takes_json(replaced(add_sub_json(), "[1,16]", "[1,15]")));
  CHECK(!takes_json(replaced(add_sub_json(), "INPUT1", "INPUT9")));
  CHECK(!takes_json(replaced(add_sub_json(), "INPUT1", "INPUT0")));
  std::string missing = "{\"inputs\":[" + input_json("INPUT0", 1) + "]," + kOutputs + "}";
  CHECK(!takes_json(missing, 64));
  CHECK(!takes_json(replaced(add_sub_json(), "OUTPUT1", "OUTPUT7")));
  std::string mixed_batch = "{\"inputs\":[" + input_json("INPUT0", 1) + "," +
                            input_json("INPUT1", 2) + "]," + kOutputs + "}";
  CHECK(!takes_json(mixed_batch, 192));
}

TEST(lane_counts_bytes_elements) {
  FastModel model;
  model.name = "strings";
  model.version = "1";
  model.max_batch_size = 0;
  FastInput input;
  input.name = "TEXT";
  input.datatype = "BYTES";
  input.dims = {2};
  model.inputs.push_back(input);
  model.outputs = {"OUT"};
  std::string json =
      "{\"inputs\":[{\"name\":\"TEXT\",\"datatype\":\"BYTES\",\"shape\":[2],"
      "\"parameters\":{\"binary_data_size\":11}}],\"parameters\":{\"binary_data_output\":true}}";
  Body body{json, json.size()};
  body.bytes += std::string("\x02\x00\x00\x00hi\x01\x00\x00\x00!", 11);
  FastRequest request;
  CHECK(takes(model, body, &request));
  CHECK(request.batch_size == 1);
  Body one_element{json, json.size()};
  one_element.bytes += std::string("\x07\x00\x00\x00hi there", 11);
  CHECK(!takes(model, one_element));
}

TEST(shape_key_ignores_the_batch_dim_and_separates_shapes) {
  FastModel model = add_sub_model();
  model.inputs[0].dims = {-1};
  model.inputs[0].shape_keyed = true;
  model.inputs[1].dims = {-1};
  model.inputs[1].shape_keyed = true;
  FastRequest one, two, other;
  CHECK(takes(model, make_body(add_sub_json(1), 128), &one));
  CHECK(takes(model, make_body(add_sub_json(2), 256), &two));
  std::string eight = add_sub_json();
  for (size_t at = eight.find("[1,16]"); at != std::string::npos; at = eight.find("[1,16]")) {
    eight.replace(at, 6, "[1,8]");
  }
  for (size_t at = eight.find(":64}"); at != std::string::npos; at = eight.find(":64}")) {
    eight.replace(at, 4, ":32}");
  }
  CHECK(takes(model, make_body(eight, 64), &other));
  CHECK(one.shape_key != 0);
  CHECK(one.shape_key == two.shape_key);
  CHECK(one.shape_key != other.shape_key);
  ShapeKey expected;
  int64_t dims[] = {16};
  expected.add(0, dims, 1);
  expected.add(1, dims, 1);
  CHECK(one.shape_key == expected.value());
}

TEST(request_block_matches_the_worker_layout) {
  FastModel model = add_sub_model();
  Body body = make_body(add_sub_json(), 128);
  FastRequest request;
  CHECK(takes(model, body, &request));
  RequestBlock block;
  layout_request_block(model, request, reinterpret_cast<const uint8_t*>(body.bytes.data()), &block);
  CHECK(block.metadata ==
        "{\"id\":\"\",\"inputs\":[[\"INPUT0\",\"FP32\",[1,16]],[\"INPUT1\",\"FP32\",[1,16]]],"
        "\"outputs\":[\"OUTPUT0\",\"OUTPUT1\"],\"parameters\":{}}");
  CHECK(block.inputs.size() == 2);
  CHECK(block.inputs.size() == 2 && block.inputs[0].kind == InputKind::kInline &&
        block.inputs[0].size == 64 && block.inputs[1].size == 64);
  CHECK(block.inputs.size() == 2 &&
        block.inputs[1].data == body.bytes.data() + body.header_size + 64);
  uint32_t order[] = {0, 1};
  CHECK(block.input_order == input_order_key(order, 2));
}

namespace {

// A response block as the worker writes it (WorkerEndpoint::respond).
std::string result_block(const std::vector<ResponseEntry>& entries,
                         const uint64_t (&timings)[4] = {10, 20, 30, 40}) {
  std::string block(response_block_size(entries), '\0');
  write_response_block(reinterpret_cast<uint8_t*>(&block[0]), entries, timings);
  return block;
}

ResponseEntry ok_entry(uint32_t index, std::string_view json,
                       const std::vector<const std::string*>& outputs) {
  ResponseEntry entry;
  entry.request_index = index;
  entry.json = json;
  for (const std::string* output : outputs) {
    entry.outputs.push_back(ResponseOutput{output->data(), output->size()});
  }
  return entry;
}

ResponseEntry error_entry(uint32_t index, std::string_view json, int32_t code) {
  ResponseEntry entry;
  entry.request_index = index;
  entry.flags = kResponseFinal | kResponseError;
  entry.error_code = code;
  entry.json = json;
  return entry;
}

const std::string kAs = "AAAAAAAA", kBs = "BBBBBBBB";

// Request 0 answered with both outputs, request 1 with an INVALID_ARG error.
std::string two_responses() {
  return result_block(
      {ok_entry(0, "{\"outputs\":[[\"OUTPUT0\",\"FP32\",[1,2]],[\"OUTPUT1\",\"FP32\",[1,2]]]}",
                {&kAs, &kBs}),
       error_entry(1, "{\"error\":\"bad \\\"x\\\"\"}", 3)});
}

}  // namespace

TEST(result_block_parses_and_replies_match_the_general_path) {
  std::string block = two_responses();
  const uint8_t* data = reinterpret_cast<const uint8_t*>(block.data());
  ResultBlock result;
  CHECK(parse_result_block(data, block.size(), &result));
  CHECK(result.outcomes.size() == 2 && result.outputs.size() == 2);
  CHECK(result.timings[0] == 10 && result.timings[3] == 40);
  CHECK(result.outputs[0].shape == "[1,2]");
  CHECK(result.outcomes[1].request_index == 1 && result.outcomes[1].final);
  CHECK(result.outcomes[1].error && result.outcomes[1].code == 3);

  FastModel model = add_sub_model();
  FastRecipe recipe;
  recipe.id = "req-7";
  recipe.outputs_listed = true;
  recipe.outputs = {1};
  std::string reply;
  CHECK(encode_fast_reply(model, recipe, result, 0, data, &reply));
  std::string json =
      "{\"id\":\"req-7\",\"model_name\":\"add_sub\",\"model_version\":\"1\",\"outputs\":["
      "{\"name\":\"OUTPUT1\",\"datatype\":\"FP32\",\"shape\":[1,2],"
      "\"parameters\":{\"binary_data_size\":8}}]}";
  std::string expected = "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(json.size() + 8) +
                         "\r\nContent-Type: application/octet-stream\r\n"
                         "Inference-Header-Content-Length: " +
                         std::to_string(json.size()) + "\r\n\r\n" + json + "BBBBBBBB";
  CHECK(reply == expected);

  recipe.id.clear();
  recipe.outputs_listed = false;
  CHECK(encode_fast_reply(model, recipe, result, 0, data, &reply));
  CHECK(reply.find("{\"model_name\"") != std::string::npos);
  CHECK(reply.substr(reply.size() - 16) == "AAAAAAAABBBBBBBB");

  // An error outcome: the model's code picks the status (INVALID_ARG: 400).
  CHECK(!encode_fast_reply(model, recipe, result, 1, data, &reply));
  std::string error_body = "{\"error\":\"bad \\\"x\\\"\"}";
  CHECK(reply ==
        "HTTP/1.1 400 Bad Request\r\nContent-Length: " + std::to_string(error_body.size()) +
            "\r\nContent-Type: application/json\r\n\r\n" + error_body);
}

TEST(result_block_rejects_damage) {
  std::string block = two_responses();
  const uint8_t* data = reinterpret_cast<const uint8_t*>(block.data());
  ResultBlock result;
  CHECK(!parse_result_block(data, 3, &result));
  ResultBlock cut;
  CHECK(!parse_result_block(data, block.size() - 1, &cut));  // last tensor past the end
  std::string lying = block;
  uint32_t too_many = 1000;  // n_responses
  std::memcpy(&lying[4], &too_many, 4);
  ResultBlock lied;
  CHECK(!parse_result_block(reinterpret_cast<const uint8_t*>(lying.data()), lying.size(), &lied));
  std::string miscounted = block;
  uint32_t one_output = 1;  // record 0 lists two outputs in its JSON
  std::memcpy(&miscounted[response_records_offset() + 12], &one_output, 4);
  ResultBlock counted;
  CHECK(!parse_result_block(reinterpret_cast<const uint8_t*>(miscounted.data()), miscounted.size(),
                            &counted));
}

namespace {

// A core without a timer thread, with add_sub registered in the core and the lane.
struct LaneFixture {
  LaneFixture() : core(1 << 20, nullptr, false), lane(core) {
    BatcherConfig config;
    config.max_batch_size = 8;
    model = add_sub_model();
    model.core_model_id = core.add_model(config);
    lane_model = lane.add_model(model);
  }
  Core core;
  FastLane lane;
  FastModel model;
  uint32_t lane_model = 0;
};

}  // namespace

TEST(fast_lane_queues_and_answers_through_the_core) {
  LaneFixture f;

  Body body = make_body(add_sub_json(2), 256);
  uint32_t batch_size = 0;
  const uint8_t* data = reinterpret_cast<const uint8_t*>(body.bytes.data());
  CHECK(f.lane.submit(f.lane_model, 41, data, body.bytes.size(), body.header_size, 1000,
                      &batch_size) == static_cast<int>(SubmitResult::kOk));
  CHECK(batch_size == 2);
  CHECK(f.core.queued(f.model.core_model_id) == 1);
  CHECK(f.lane.owns(41));
  Body bad = make_body(add_sub_json(2), 255);
  CHECK(f.lane.submit(f.lane_model, 42, reinterpret_cast<const uint8_t*>(bad.bytes.data()),
                      bad.bytes.size(), bad.header_size, 1000, &batch_size) == FastLane::kFallback);
  CHECK(!f.lane.owns(42));
  CHECK(f.core.queued(f.model.core_model_id) == 1);

  const std::string output = "0123456789abcdef";
  std::string block =
      result_block({ok_entry(0, "{\"outputs\":[[\"OUTPUT0\",\"FP32\",[2,2]]]}", {&output}),
                    ok_entry(1, "{\"outputs\":[]}", {})},
                   {1, 2, 3, 4});
  std::vector<FastLane::Reply> replies;
  uint64_t timings[4];
  const uint8_t* result = reinterpret_cast<const uint8_t*>(block.data());
  CHECK(f.lane.complete(result, block.size(), {41, 99}, 1500, 4000, &replies, timings));
  CHECK(replies.size() == 1);  // request 99 is not the lane's
  CHECK(replies[0].request_id == 41 && replies[0].ok && replies[0].batch_size == 2);
  CHECK(replies[0].request_ns == 3000 && replies[0].queue_ns == 500);
  CHECK(replies[0].http.substr(replies[0].http.size() - 16) == "0123456789abcdef");
  CHECK(timings[2] == 3);
  CHECK(!f.lane.owns(41) && f.lane.in_flight() == 0);
  // A block naming a request beyond the batch is not read.
  CHECK(f.lane.submit(f.lane_model, 43, data, body.bytes.size(), body.header_size, 1000,
                      &batch_size) == 0);
  replies.clear();
  CHECK(!f.lane.complete(result, block.size(), {43}, 1500, 4000, &replies, timings));
  f.lane.forget(43);
  CHECK(f.lane.in_flight() == 0);
}

namespace {

std::string http_post(const std::string& target, const std::string& body, size_t header_length,
                      const std::string& extra_headers = "") {
  return "POST " + target +
         " HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nUser-Agent: libcurl-agent/1.0\r\n"
         "Inference-Header-Content-Length: " +
         std::to_string(header_length) + "\r\nContent-Type: application/octet-stream\r\n" +
         extra_headers + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

ScanResult scan(const std::string& data, ScannedRequest* out = nullptr, size_t max_body = 1 << 20) {
  ScannedRequest request;
  ScanResult result = scan_request(data.data(), data.size(), max_body, &request);
  if (out != nullptr) *out = request;
  return result;
}

}  // namespace

TEST(http_scan_finds_plain_requests) {
  std::string request = http_post("/v2/models/add_sub/infer", "0123456789", 4);
  ScannedRequest out;
  CHECK(scan(request, &out) == ScanResult::kRequest);
  CHECK(out.target == "/v2/models/add_sub/infer");
  CHECK(out.has_header_length && out.header_length == 4);
  CHECK(out.body_size == 10 && out.total == request.size());
  CHECK(request.substr(out.body_offset, out.body_size) == "0123456789");
  // Pipelined: the scan stops at the end of the first request.
  CHECK(scan(request + request, &out) == ScanResult::kRequest && out.total == request.size());
  // Header names are case-insensitive; keep-alive may be said.
  std::string lower = "POST /x HTTP/1.1\r\ncontent-length: 2\r\nCONNECTION: Keep-Alive\r\n\r\nab";
  CHECK(scan(lower, &out) == ScanResult::kRequest && out.body_size == 2 && !out.has_header_length);
  // Cut anywhere: not all there yet.
  for (size_t cut : {size_t{1}, size_t{4}, size_t{30}, request.size() - 11, request.size() - 1}) {
    CHECK(scan(request.substr(0, cut)) == ScanResult::kIncomplete);
  }
}

TEST(http_scan_leaves_everything_else_to_the_parser) {
  const std::string body = "0123456789";
  CHECK(scan("GET /v2/health/ready HTTP/1.1\r\n\r\n") == ScanResult::kOther);
  CHECK(scan("POST /x HTTP/1.0\r\nContent-Length: 0\r\n\r\n") == ScanResult::kOther);
  CHECK(scan("POST /x HTTP/1.1\r\n\r\n") == ScanResult::kOther);  // no Content-Length
  for (const char* header :
       {"Connection: close\r\n", "Transfer-Encoding: chunked\r\n", "Content-Encoding: gzip\r\n",
        "Expect: 100-continue\r\n", "Upgrade: h2c\r\n", "Content-Length: 10\r\n", " folded\r\n",
        "Bad Name: x\r\n", "NoColon\r\n", "X: \x01\r\n"}) {
    CHECK(scan(http_post("/x", body, 4, header)) == ScanResult::kOther);
  }
  CHECK(scan("POST /x HTTP/1.1\r\nContent-Length: 1x\r\n\r\n") == ScanResult::kOther);
  CHECK(scan("POST /x HTTP/1.1\r\nInference-Header-Content-Length: -1\r\nContent-Length: "
             "1\r\n\r\n1") == ScanResult::kOther);
  CHECK(scan("POST x HTTP/1.1\r\nContent-Length: 0\r\n\r\n") == ScanResult::kOther);
  CHECK(scan(http_post("/x", body, 4), nullptr, 9) == ScanResult::kOther);  // over max body
}

TEST(fast_lane_takes_http_requests_up_to_the_first_it_cannot) {
  LaneFixture f;
  f.lane.add_route("/v2/models/add_sub/infer", f.lane_model);

  Body body = make_body(add_sub_json(), 128);
  std::string good = http_post("/v2/models/add_sub/infer", body.bytes, body.header_size);
  std::string unrouted = http_post("/v2/models/other/infer", body.bytes, body.header_size);
  std::string data = good + good + unrouted + good;
  std::vector<FastLane::Taken> taken;
  const uint8_t* bytes = reinterpret_cast<const uint8_t*>(data.data());
  size_t consumed = f.lane.take_http(bytes, data.size(), 1 << 20, 7, &taken);
  CHECK(consumed == 2 * good.size());
  CHECK(taken.size() == 2);
  CHECK(taken[0].lane_model == f.lane_model && taken[0].batch_size == 1);
  CHECK(taken[1].request_id == taken[0].request_id + 1);
  CHECK(f.core.queued(f.model.core_model_id) == 2);
  // Ids stay unique with the general path's.
  CHECK(f.lane.new_request_id() == taken[1].request_id + 1);
  // A body the HTTP parser put together goes by the same routes.
  FastLane::Taken one;
  const uint8_t* body_bytes = reinterpret_cast<const uint8_t*>(body.bytes.data());
  CHECK(!f.lane.submit_to("/v2/models/other/infer", body_bytes, body.bytes.size(), body.header_size,
                          7, &one));
  CHECK(f.lane.submit_to("/v2/models/add_sub/infer", body_bytes, body.bytes.size(),
                         body.header_size, 7, &one));
  CHECK(one.lane_model == f.lane_model && one.request_id == taken[1].request_id + 2);
  CHECK(f.core.queued(f.model.core_model_id) == 3);

  // A model that is not ready takes nothing, and an invalid body is left as well.
  f.lane.set_accepting(f.lane_model, false);
  taken.clear();
  CHECK(f.lane.take_http(bytes, good.size(), 1 << 20, 7, &taken) == 0 && taken.empty());
  f.lane.set_accepting(f.lane_model, true);
  Body short_body = make_body(add_sub_json(), 127);
  std::string invalid =
      http_post("/v2/models/add_sub/infer", short_body.bytes, short_body.header_size);
  CHECK(f.lane.take_http(reinterpret_cast<const uint8_t*>(invalid.data()), invalid.size(), 1 << 20,
                         7, &taken) == 0);
  CHECK(f.core.queued(f.model.core_model_id) == 3);
}

namespace {

// Deterministic byte mutations of `text`: flips, insertions, deletions and cuts.
class Mutator {
 public:
  explicit Mutator(uint64_t seed) : state_(seed) {}
  std::string mutate(const std::string& text) {
    std::string out = text;
    int edits = 1 + static_cast<int>(next() % 4);
    for (int i = 0; i < edits && !out.empty(); ++i) {
      size_t at = next() % out.size();
      switch (next() % 4) {
        case 0:
          out[at] = static_cast<char>(next() & 0xFF);
          break;
        case 1:
          out.insert(at, 1, "{}[],:\"\\0123456789-.e"[next() % 21]);
          break;
        case 2:
          out.erase(at, 1 + next() % 8);
          break;
        default:
          out.resize(at);
      }
    }
    return out;
  }

 private:
  uint64_t next() {
    state_ ^= state_ << 13;
    state_ ^= state_ >> 7;
    state_ ^= state_ << 17;
    return state_;
  }
  uint64_t state_;
};

}  // namespace

// Damaged input never makes the lane read out of bounds (run under ASan in make test),
// and what it still takes is consistent with the body.
TEST(lane_survives_damaged_requests_and_results) {
  FastModel model = add_sub_model();
  const std::string json = add_sub_json(2);
  const std::string binary(256, '\x05');
  Mutator mutator(0x9E3779B97F4A7C15ULL);
  int taken = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string header = mutator.mutate(json);
    std::string body = header + binary;
    FastRequest request;
    if (!parse_fast_request(model, reinterpret_cast<const uint8_t*>(body.data()), body.size(),
                            header.size(), &request)) {
      continue;
    }
    ++taken;
    uint64_t end = header.size();
    for (const FastInputRef& ref : request.inputs) {
      CHECK(ref.body_offset == end);
      end += ref.size;
    }
    CHECK(end == body.size());
    RequestBlock block;
    layout_request_block(model, request, reinterpret_cast<const uint8_t*>(body.data()), &block);
    CHECK(block.inputs.size() == request.inputs.size());
  }
  CHECK(taken > 0);  // some mutations leave a valid request (e.g. changed input data bytes)

  const std::string http = http_post("/v2/models/add_sub/infer", json + binary, json.size());
  for (int i = 0; i < 20000; ++i) {
    std::string damaged = mutator.mutate(http);
    ScannedRequest request;
    if (scan_request(damaged.data(), damaged.size(), 1 << 20, &request) == ScanResult::kRequest) {
      CHECK(request.total <= damaged.size());
      CHECK(request.body_offset + request.body_size == request.total);
    }
  }

  const std::string result = two_responses();
  FastRecipe recipe;
  std::string reply;
  for (int i = 0; i < 20000; ++i) {
    std::string damaged = mutator.mutate(result);
    ResultBlock parsed;
    const uint8_t* data = reinterpret_cast<const uint8_t*>(damaged.data());
    if (!parse_result_block(data, damaged.size(), &parsed)) continue;
    for (const ResultOutput& output : parsed.outputs) {
      CHECK(output.offset + output.size <= damaged.size());
    }
    for (size_t index = 0; index < parsed.outcomes.size(); ++index) {
      encode_fast_reply(model, recipe, parsed, index, data, &reply);
    }
  }
}

// The copies of an input on the lane, counted: received HTTP bytes to the batch tensor
// the worker reads is one copy (place), none at dispatch for a first-in first-out batch.
TEST(lane_requests_reach_the_batch_tensor_with_one_copy) {
  Core core(1 << 22, nullptr, false);
  BatcherConfig config;
  config.dynamic_batching = true;
  config.max_batch_size = 8;
  FastModel model = add_sub_model();
  model.core_model_id = core.add_model(config);
  uint32_t instance = core.add_instance(model.core_model_id);
  FastLane lane(core);
  lane.add_route("/v2/models/add_sub/infer", lane.add_model(model));
  std::string received;
  for (int i = 0; i < 8; ++i) {
    Body body = make_body(add_sub_json(), 128);
    for (size_t b = 0; b < 128; ++b)
      body.bytes[body.header_size + b] = static_cast<char>(i * 16 + b / 8);
    received += http_post("/v2/models/add_sub/infer", body.bytes, body.header_size);
  }
  std::vector<FastLane::Taken> taken;
  lane.take_http(reinterpret_cast<const uint8_t*>(received.data()), received.size(), 1 << 20, 7,
                 &taken);
  CHECK(taken.size() == 8);
  InstanceEndpoint ep = core.endpoint(instance);
  WorkerEndpoint worker(dup(core.arena().fd()), ep.channel_offset, dup(ep.wake_fd),
                        dup(core.notify_fd()));
  core.instance_up(instance);
  BatchMessage message = worker.next();
  const auto& header = *worker.arena().at<BatchHeader>(message.desc_offset);
  CHECK(header.n_requests == 8 && header.n_tensors == 2 && header.gathered == 0);
  const auto* tensors =
      worker.arena().at<BatchTensor>(message.desc_offset + batch_tensors_offset(8));
  CHECK(tensors[0].size == 8 * 64 && tensors[1].size == 8 * 64);
  // INPUT0 of request i is bytes i*16 + [0, 8) of its body, each 8 times.
  const uint8_t* input0 = worker.arena().base() + tensors[0].offset;
  bool rows_in_order = true;
  for (int i = 0; i < 8; ++i) {
    for (int b = 0; b < 64; ++b) rows_in_order &= input0[i * 64 + b] == i * 16 + b / 8;
  }
  CHECK(rows_in_order);
  CHECK(core.assembler().placed_bytes() == 8 * 128);  // one copy of every input byte
  CHECK(core.assembler().gathered_bytes() == 0);      // and no second one
}
