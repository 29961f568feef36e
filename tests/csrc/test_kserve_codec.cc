// Unit tests of the request path in C++: the JSON pull reader, what the KServe reader
// takes and what it leaves to the general path, the request block written for the
// worker, the responses built from a worker's response block, the HTTP scanner and the
// HTTP framer over the codec and the core.
#include <unistd.h>

#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "add_sub_model.h"
#include "codec/json_reader.h"
#include "codec/kserve_json.h"
#include "codec/request_validator.h"
#include "core/core.h"
#include "http1/http_framer.h"
#include "http1/http_scan.h"
#include "ipc/ipc_schema.h"
#include "ipc/request_block.h"
#include "ipc/response_block.h"
#include "ipc/worker_endpoint.h"
#include "lane_support.h"
#include "testing.h"
#include "util/spare_nodes.h"

using namespace naiad;

namespace {

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

// The C++ reader takes the body and the validator accepts it.
bool takes(const ModelSpec& model, const Body& body, ParsedRequest* out = nullptr) {
  ParsedRequest request;
  std::string error;
  bool taken = read_infer_header(reinterpret_cast<const uint8_t*>(body.bytes.data()),
                                 body.bytes.size(), body.header_size, &request) &&
               validate_request(model, &request, &error);
  if (out != nullptr) *out = std::move(request);  // moved: JSON data stays where it points
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
  std::forward_list<std::string> owned;
  JsonReader plain(" \"INPUT0\" ", 10);
  CHECK(plain.string(&out, &owned) && out == "INPUT0" && plain.at_end() && owned.empty());
  // Escaped: unescaped into `owned`, which the view then points into.
  const char escaped_text[] = "\"a\\\"b\\u00e9\\ud83d\\ude00\"";
  JsonReader escaped(escaped_text, sizeof(escaped_text) - 1);
  CHECK(escaped.string(&out, &owned) && out == "a\"b\xc3\xa9\xf0\x9f\x98\x80" && escaped.at_end());
  CHECK(!owned.empty() && out.data() == owned.front().data());
  JsonReader lone("\"\\udc00\"", 8);  // a low surrogate alone
  CHECK(!lone.string(&out, &owned));
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
  ParsedRequest request;
  Body body = make_body(add_sub_json(), 128);
  const uint8_t* start = reinterpret_cast<const uint8_t*>(body.bytes.data());
  CHECK(takes(add_sub_model(), body, &request));
  CHECK(request.batch_size == 1);
  CHECK(request.inputs.size() == 2);
  CHECK(request.inputs[0].data == start + body.header_size);
  CHECK(request.inputs[1].data == start + body.header_size + 64);
  CHECK(request.outputs.size() == 2);
  CHECK(request.shape_key == 0);
}

TEST(lane_takes_batches_and_binary_data_output) {
  ParsedRequest request;
  CHECK(takes(add_sub_model(), make_body(add_sub_json(3), 3 * 128), &request));
  CHECK(request.batch_size == 3);
  std::string all_outputs = "{\"inputs\":[" + input_json("INPUT1", 1) + "," +
                            input_json("INPUT0", 1) +
                            "],\"parameters\":{\"binary_data_output\":true}}";
  // The request's views point into the body: it must outlive them.
  Body body = make_body(all_outputs, 128);
  CHECK(takes(add_sub_model(), body, &request));
  CHECK(request.outputs.empty());
  CHECK(request.parameters == "{\"binary_data_output\":true}");
  CHECK(request.inputs[0].spec == 1);
}

TEST(lane_takes_scheduling_and_custom_parameters) {
  ParsedRequest request;
  Body body =
      make_body(add_sub_json(1,
                             ",\"parameters\":{\"priority\":2,\"timeout\":5000,\"s\":\"a\\\"b\","
                             "\"f\":-1.5e3,\"t\":true}"),
                128);
  CHECK(takes(add_sub_model(), body, &request));
  CHECK(request.priority == 2 && request.timeout_us == 5000);
  CHECK(request.parameters ==
        "{\"priority\":2,\"timeout\":5000,\"s\":\"a\\\"b\",\"f\":-1.5e3,\"t\":true}");
}

TEST(lane_leaves_other_requests_to_the_general_path) {
  // Not the lane's kind: JSON data it does not convert (here: fewer elements than the
  // shape), shared memory, scheduling parameters.
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
  CHECK(takes_json(json_outputs));  // JSON outputs are the lane's now (kserve_json.h)
  std::string no_outputs =
      "{\"inputs\":[" + input_json("INPUT0", 1) + "," + input_json("INPUT1", 1) + "]}";
  CHECK(takes_json(no_outputs));
  CHECK(!takes_json(add_sub_json(1, ",\"parameters\":{\"priority\":-1}")));
  CHECK(!takes_json(add_sub_json(1, ",\"parameters\":{\"timeout\":\"1\"}")));
  CHECK(!takes_json(add_sub_json(1, ",\"parameters\":{\"binary_data_output\":true,\"x\":null}")));
  CHECK(!takes_json(add_sub_json(1, ",\"parameters\":{\"x\":{\"y\":1}}")));
  CHECK(!takes_json(add_sub_json(1, ",\"parameters\":{\"x\":[1]}")));
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
  ModelSpec model;
  model.name = "strings";
  model.version = "1";
  model.max_batch_size = 0;
  InputSpec input;
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
  ParsedRequest request;
  CHECK(takes(model, body, &request));
  CHECK(request.batch_size == 1);
  Body one_element{json, json.size()};
  one_element.bytes += std::string("\x07\x00\x00\x00hi there", 11);
  CHECK(!takes(model, one_element));
}

TEST(shape_key_ignores_the_batch_dim_and_separates_shapes) {
  ModelSpec model = add_sub_model();
  model.inputs[0].dims = {-1};
  model.inputs[0].shape_keyed = true;
  model.inputs[1].dims = {-1};
  model.inputs[1].shape_keyed = true;
  ParsedRequest one, two, other;
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
  ModelSpec model = add_sub_model();
  Body body = make_body(add_sub_json(), 128);
  ParsedRequest request;
  CHECK(takes(model, body, &request));
  RequestBlock block;
  layout_request_block(model, request, &block);
  CHECK(block.metadata ==
        "{\"id\":\"\",\"inputs\":[[\"INPUT0\",\"FP32\",[1,16]],[\"INPUT1\",\"FP32\",[1,16]]],"
        "\"outputs\":[\"OUTPUT0\",\"OUTPUT1\"],\"parameters\":{}}");
  CHECK(block.inputs.size() == 2);
  CHECK(block.inputs.size() == 2 && block.inputs[0].kind == InputKind::kInline &&
        block.inputs[0].size == 64 && block.inputs[1].size == 64);
  CHECK(block.inputs.size() == 2 &&
        block.inputs[1].data == body.bytes.data() + body.header_size + 64);
  CHECK(std::memcmp(block.inputs[1].data, body.bytes.data() + body.header_size + 64, 64) == 0);
  uint32_t order[] = {0, 1};
  CHECK(block.input_order == input_order_key(order, 2));
}

namespace {

const std::string kAs = "AAAAAAAA", kBs = "BBBBBBBB";

// Request 0 answered with both outputs, request 1 with an INVALID_ARG error.
std::string two_responses() {
  return result_block(
      {ok_entry(0, "{\"outputs\":[[\"OUTPUT0\",\"FP32\",[1,2]],[\"OUTPUT1\",\"FP32\",[1,2]]]}",
                {&kAs, &kBs}),
       error_entry(1, "{\"error\":\"bad \\\"x\\\"\"}", 3)});
}

}  // namespace

TEST(result_block_parses) {
  std::string block = two_responses();
  const uint8_t* data = reinterpret_cast<const uint8_t*>(block.data());
  ResultBlock result;
  CHECK(parse_result_block(data, block.size(), &result));
  CHECK(result.outcomes.size() == 2 && result.outputs.size() == 2);
  CHECK(result.timings[0] == 10 && result.timings[3] == 40);
  CHECK(result.outputs[0].shape == "[1,2]");
  CHECK(result.outcomes[0].parameters.empty());
  CHECK(result.outcomes[1].request_index == 1 && result.outcomes[1].final);
  CHECK(result.outcomes[1].error && result.outcomes[1].code == 3);
  // Response parameters pass through as the worker wrote them; `{}` is none.
  std::string with_parameters =
      result_block({ok_entry(0, "{\"outputs\":[],\"parameters\":{\"a\":1,\"b\":\"x\"}}", {}),
                    ok_entry(1, "{\"outputs\":[],\"parameters\":{ }}", {})},
                   {1, 2, 3, 4});
  ResultBlock parsed;
  CHECK(parse_result_block(reinterpret_cast<const uint8_t*>(with_parameters.data()),
                           with_parameters.size(), &parsed));
  CHECK(parsed.outcomes.size() == 2);
  CHECK(parsed.outcomes[0].parameters == "{\"a\":1,\"b\":\"x\"}");
  CHECK(parsed.outcomes[1].parameters.empty());
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

TEST(a_reused_block_and_submit_hold_only_the_last_request) {
  // The codec lays every request out into one RequestBlock and SubmitRequest (they keep
  // their room): nothing of an earlier request may stay in them.
  ModelSpec model = add_sub_model();
  Body first_body =
      make_body(replaced(add_sub_json(2, ",\"parameters\":{\"priority\":3,\"timeout\":9}"),
                         "\"id\":\"\"", "\"id\":\"first-request\""),
                256);
  // No id, no outputs named, the inputs in the other order.
  Body second_body = make_body(
      "{\"inputs\":[" + input_json("INPUT1", 1) + "," + input_json("INPUT0", 1) + "]}", 128);
  ParsedRequest first, second;
  CHECK(takes(model, first_body, &first));
  CHECK(takes(model, second_body, &second));
  RequestBlock reused, fresh;
  SubmitRequest reused_submit, fresh_submit;
  layout_request_block(model, first, &reused);
  submit_request_of(first, &reused, 7, &reused_submit);
  CHECK(reused_submit.options.priority == 3 && reused_submit.options.timeout_us == 9);
  CHECK(reused_submit.options.batch_size == 2);
  reused_submit.options.traced = true;  // the codec's own, set after submit_request_of
  reused_submit.options.trace_tensors = true;
  layout_request_block(model, second, &reused);
  submit_request_of(second, &reused, 8, &reused_submit);
  layout_request_block(model, second, &fresh);
  submit_request_of(second, &fresh, 8, &fresh_submit);
  CHECK(reused.metadata == fresh.metadata);
  CHECK(reused.metadata.find("first-request") == std::string::npos);
  CHECK(reused.input_order == fresh.input_order && reused.input_order != 0);
  CHECK(reused.inputs.size() == 2 && fresh.inputs.size() == 2);
  CHECK(reused_submit.inputs.size() == 2 && reused_submit.metadata == fresh_submit.metadata);
  for (size_t i = 0; i < 2 && i < reused_submit.inputs.size(); ++i) {
    CHECK(reused_submit.inputs[i].data == fresh_submit.inputs[i].data);
    CHECK(reused_submit.inputs[i].size == 64);
  }
  CHECK(reused_submit.request_id == 8);
  const SubmitOptions& options = reused_submit.options;
  CHECK(options.batch_size == 1 && options.priority == 0 && options.timeout_us == 0);
  CHECK(!options.traced && !options.trace_tensors);
  CHECK(options.input_order == fresh_submit.options.input_order);
  CHECK(options.shape_key == fresh_submit.options.shape_key);
}

TEST(spare_nodes_are_reused_and_their_values_reset) {
  using Map = std::unordered_map<uint64_t, std::vector<int>>;
  Map map;
  SpareNodes<Map> spare(2);
  spare.insert(map, 1).assign({1, 2, 3});
  spare.insert(map, 2).push_back(4);
  spare.insert(map, 3).push_back(5);
  CHECK(map.size() == 3 && spare.spare() == 0);
  const std::vector<int>* kept = &map.at(1);
  auto reset = [](std::vector<int>& value) { value.clear(); };
  spare.erase(map, map.find(1), reset);
  spare.erase(map, map.find(2), reset);
  spare.erase(map, map.find(3), reset);  // past `most`: freed
  CHECK(map.size() == 0 && spare.spare() == 2);
  // The last node kept comes back first, under its new key, its value reset.
  std::vector<int>& reused = spare.insert(map, 9);
  CHECK(reused.empty() && map.count(9) == 1 && map.count(2) == 0);
  CHECK(spare.spare() == 1);
  std::vector<int>& older = spare.insert(map, 10);
  CHECK(&older == kept && older.empty() && older.capacity() >= 3);  // room kept
  // A key already there keeps its entry, as operator[], and no spare is lost.
  older.push_back(6);
  spare.erase(map, map.find(9), reset);
  CHECK(spare.spare() == 1);
  std::vector<int>& again = spare.insert(map, 10);
  CHECK(&again == &older && again.size() == 1 && spare.spare() == 1);
  CHECK(map.size() == 1);
}

namespace {

// The fixture's core has no instance: every block in its arena is a queued request's.
uint64_t queued_blocks(Core& core) { return core.arena().stats().blocks_in_use; }

}  // namespace

TEST(codec_counts_each_requests_queue_to_its_own_start_when_the_block_gives_them) {
  // The core's answer to ensemble requests that ended together (kResponseStartedEach):
  // one block, each request's start in it; the completion's dispatch time is not theirs.
  LaneFixture f;
  KServeCodec& codec = f.lane.codec();
  CHECK(f.submit(make_body(add_sub_json(2), 256), 41) == SubmitOutcome::kQueued);  // at 1000
  CHECK(f.submit(make_body(add_sub_json(2), 256), 42) == SubmitOutcome::kQueued);
  const std::vector<ResponseEntry> entries{ok_entry(0, "{\"outputs\":[]}", {}),
                                           ok_entry(1, "{\"outputs\":[]}", {})};
  const uint64_t timings[4] = {1200, 0, 50, 0};
  const uint64_t started[2] = {1200, 1700};
  std::string block(response_block_size(entries, true), '\0');
  write_response_block(reinterpret_cast<uint8_t*>(&block[0]), entries, timings, started);
  std::vector<KServeCodec::Answer> answers;
  uint64_t read_timings[4];
  const uint8_t* result = reinterpret_cast<const uint8_t*>(block.data());
  CHECK(codec.complete(result, block.size(), {41, 42}, 1500, 4000, &answers, read_timings));
  CHECK(answers.size() == 2);
  CHECK(answers[0].response.request_id == 41 && answers[0].queue_ns == 200);
  CHECK(answers[1].response.request_id == 42 && answers[1].queue_ns == 700);
  CHECK(answers[0].request_ns == 3000 && answers[1].request_ns == 3000);
  ResponseBlockView view;
  CHECK(view_response_block(result, block.size(), &view) && view.started_ns(1) == 1700);
  // Stamps that cannot fit after the records are a damaged block.
  std::string header_only(block.data(), sizeof(ResponseHeader) + sizeof(ResponseRecord));
  reinterpret_cast<ResponseHeader*>(&header_only[0])->n_responses = 1;
  auto* record = reinterpret_cast<ResponseRecord*>(&header_only[sizeof(ResponseHeader)]);
  record->json_size = 0;  // a record that fits: only the stamps do not
  record->json_offset = header_only.size();
  CHECK(!view_response_block(reinterpret_cast<const uint8_t*>(header_only.data()),
                             header_only.size(), &view));
  reinterpret_cast<ResponseHeader*>(&header_only[0])->flags = 0;  // no stamps: it reads
  CHECK(view_response_block(reinterpret_cast<const uint8_t*>(header_only.data()),
                            header_only.size(), &view) &&
        view.started == nullptr);
}

// Triton's queue ends when the backend starts the batch: the worker's start, past the
// core's dispatch (the ring's hand-off and the worker's wake-up are queue time); its
// request ends once the answers are made (extend_to_answered), where compute_output
// ends too, so that queue and compute cover the request's whole duration.
TEST(codec_queue_ends_at_the_workers_start_and_the_request_once_answered) {
  LaneFixture f;
  KServeCodec& codec = f.lane.codec();
  CHECK(f.submit(make_body(add_sub_json(2), 256), 41) == SubmitOutcome::kQueued);  // at 1000
  // Dispatched at 1500, started by the worker at 2100, compute_input 100, infer 200.
  std::string block = result_block({ok_entry(0, "{\"outputs\":[]}", {})}, {2100, 100, 200, 50});
  std::vector<KServeCodec::Answer> answers;
  uint64_t timings[4];
  const uint8_t* result = reinterpret_cast<const uint8_t*>(block.data());
  CHECK(codec.complete(result, block.size(), {41}, 1500, 4000, &answers, timings));
  CHECK(answers.size() == 1);
  CHECK(answers[0].queue_ns == 1100 && answers[0].request_ns == 3000);
  // The answers are written at 4600: 600 more for the request, compute_output from the
  // infer's end (2400) to there.
  CHECK(extend_to_answered(4000, 4600, timings) == 600);
  CHECK(timings[0] == 2100 && timings[1] == 100 && timings[2] == 200 && timings[3] == 2200);
  CHECK(answers[0].queue_ns + timings[1] + timings[2] + timings[3] == answers[0].request_ns + 600);
  // No later clock read, or a block without the batch's timings: nothing moves.
  CHECK(extend_to_answered(4000, 4000, timings) == 0 && timings[3] == 2200);
  uint64_t none[4] = {0, 0, 0, 0};
  CHECK(extend_to_answered(4000, 4600, none) == 600 && none[3] == 0);
}

TEST(codec_queues_and_answers_through_the_core) {
  LaneFixture f;
  KServeCodec& codec = f.lane.codec();
  CHECK(f.submit(make_body(add_sub_json(2), 256), 41) == SubmitOutcome::kQueued);
  CHECK(queued_blocks(f.core) == 1);
  CHECK(codec.owns(41));
  // Per model, as a reload's drain asks (ModelManager.draining).
  CHECK(codec.in_flight_of(f.lane_model) == 1 && codec.in_flight_of(f.lane_model + 1) == 0);
  std::string error;
  CHECK(f.submit(make_body(add_sub_json(2), 255), 42, &error) == SubmitOutcome::kFallback);
  CHECK(f.submit(make_body(replaced(add_sub_json(2), "FP32", "INT8"), 256), 42, &error) ==
        SubmitOutcome::kInvalid);
  CHECK(error ==
        "[request id: <id_unknown>] inference input 'INPUT0' data-type is 'INT8', but model "
        "'add_sub' expects 'FP32'");
  CHECK(!codec.owns(42));
  CHECK(queued_blocks(f.core) == 1);

  const std::string output = "0123456789abcdef";
  std::string block = result_block(
      {ok_entry(0, "{\"outputs\":[[\"OUTPUT0\",\"FP32\",[2,2]]],\"parameters\":{\"p\":1}}",
                {&output}),
       ok_entry(1, "{\"outputs\":[]}", {})},
      {1, 2, 3, 4});
  std::vector<KServeCodec::Answer> answers;
  uint64_t timings[4];
  const uint8_t* result = reinterpret_cast<const uint8_t*>(block.data());
  CHECK(codec.complete(result, block.size(), {41, 99}, 1500, 4000, &answers, timings));
  CHECK(answers.size() == 1);  // request 99 is not the codec's
  const InferResponse& response = answers[0].response;
  CHECK(response.request_id == 41 && response.error == ErrorKind::kNone);
  CHECK(answers[0].batch_size == 2);
  CHECK(answers[0].request_ns == 3000 && answers[0].queue_ns == 500);
  ResponseBlockView view;
  CHECK(view_response_block(result, block.size(), &view));
  CHECK(response.outputs.size() == 1 &&
        response.outputs[0].data == result + view.outputs[0].offset);
  std::string json =
      "{\"model_name\":\"add_sub\",\"model_version\":\"1\",\"parameters\":{\"p\":1},"
      "\"outputs\":[{\"name\":\"OUTPUT0\",\"datatype\":\"FP32\",\"shape\":[2,2],"
      "\"parameters\":{\"binary_data_size\":16}}]}";
  std::string expected = "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(json.size() + 16) +
                         "\r\nContent-Type: application/octet-stream\r\n"
                         "Inference-Header-Content-Length: " +
                         std::to_string(json.size()) + "\r\n\r\n" + json + "0123456789abcdef";
  CHECK(f.lane.writer().text(response) == expected);
  CHECK(f.lane.writer().size(response) == expected.size());
  CHECK(timings[2] == 3);
  CHECK(!codec.owns(41) && codec.in_flight() == 0 && codec.in_flight_of(f.lane_model) == 0);
  // A block naming a request beyond the batch is not read.
  CHECK(f.submit(make_body(add_sub_json(2), 256), 43) == SubmitOutcome::kQueued);
  answers.clear();
  CHECK(!codec.complete(result, block.size(), {43}, 1500, 4000, &answers, timings));
  codec.forget(43);
  CHECK(codec.in_flight() == 0);
}

TEST(codec_answers_ids_output_choices_and_model_errors_as_the_general_path) {
  LaneFixture f;
  KServeCodec& codec = f.lane.codec();
  // req-7 asks for OUTPUT1 only; the second for every output; the third fails.
  std::string one_output =
      replaced(replaced(add_sub_json(), "\"id\":\"\"", "\"id\":\"req-7\""),
               "{\"name\":\"OUTPUT0\",\"parameters\":{\"binary_data\":true}},", "");
  std::string all = "{\"inputs\":[" + input_json("INPUT0", 1) + "," + input_json("INPUT1", 1) +
                    "],\"parameters\":{\"binary_data_output\":true}}";
  CHECK(f.submit(make_body(one_output, 128), 1) == SubmitOutcome::kQueued);
  CHECK(f.submit(make_body(all, 128), 2) == SubmitOutcome::kQueued);
  CHECK(f.submit(make_body(all, 128), 3) == SubmitOutcome::kQueued);
  const std::string as = "AAAAAAAA", bs = "BBBBBBBB", cs = "CCCCCCCC", ds = "DDDDDDDD";
  const char* both = "{\"outputs\":[[\"OUTPUT0\",\"FP32\",[1,2]],[\"OUTPUT1\",\"FP32\",[1,2]]]}";
  std::string block = result_block({ok_entry(0, both, {&as, &bs}), ok_entry(1, both, {&cs, &ds}),
                                    error_entry(2, "{\"error\":\"bad \\\"x\\\"\"}", 3)});
  std::vector<KServeCodec::Answer> answers;
  uint64_t timings[4];
  CHECK(codec.complete(reinterpret_cast<const uint8_t*>(block.data()), block.size(), {1, 2, 3}, 0,
                       0, &answers, timings));
  CHECK(answers.size() == 3);
  const HttpResponseWriter& writer = f.lane.writer();
  std::string json =
      "{\"id\":\"req-7\",\"model_name\":\"add_sub\",\"model_version\":\"1\",\"outputs\":["
      "{\"name\":\"OUTPUT1\",\"datatype\":\"FP32\",\"shape\":[1,2],"
      "\"parameters\":{\"binary_data_size\":8}}]}";
  CHECK(writer.text(answers[0].response) ==
        "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(json.size() + 8) +
            "\r\nContent-Type: application/octet-stream\r\nInference-Header-Content-Length: " +
            std::to_string(json.size()) + "\r\n\r\n" + json + "BBBBBBBB");
  std::string second = writer.text(answers[1].response);
  CHECK(second.find("{\"model_name\"") != std::string::npos);
  CHECK(second.substr(second.size() - 16) == "CCCCCCCCDDDDDDDD");
  // An error outcome: the model's code picks the status (INVALID_ARG: 400).
  CHECK(answers[2].response.error == ErrorKind::kInvalidArgument);
  std::string error_body = "{\"error\":\"bad \\\"x\\\"\"}";
  CHECK(writer.text(answers[2].response) ==
        "HTTP/1.1 400 Bad Request\r\nContent-Length: " + std::to_string(error_body.size()) +
            "\r\nContent-Type: application/json\r\n\r\n" + error_body);
  // The statistics count a failure, but not an error response the model sent itself.
  CHECK(!answers[0].counted_failure && answers[2].counted_failure);
  CHECK(f.submit(make_body(all, 128), 4) == SubmitOutcome::kQueued);
  ResponseEntry sent = error_entry(0, "{\"error\":\"no\"}", 3);
  sent.flags |= kResponseModelError;
  std::string model_error = result_block({sent});
  answers.clear();
  CHECK(codec.complete(reinterpret_cast<const uint8_t*>(model_error.data()), model_error.size(),
                       {4}, 0, 0, &answers, timings));
  CHECK(answers.size() == 1 && answers[0].response.error == ErrorKind::kInvalidArgument);
  CHECK(!answers[0].counted_failure);
}

TEST(codec_answers_each_request_from_its_own_recipe_when_recipes_are_reused) {
  // Requests answered one at a time: each is queued on the recipe (map node and
  // vectors) the previous one left, read with the codec's reused ResultBlock and
  // answered in the outputs list the previous answer gave back. Nothing of an earlier
  // request may reach its answer.
  LaneFixture f;
  KServeCodec& codec = f.lane.codec();
  const HttpResponseWriter& writer = f.lane.writer();
  std::string one_json_output =
      replaced(replaced(add_sub_json(), "\"id\":\"\"", "\"id\":\"req-7\""),
               "{\"name\":\"OUTPUT0\",\"parameters\":{\"binary_data\":true}},{\"name\":\"OUTPUT1\","
               "\"parameters\":{\"binary_data\":true}}",
               "{\"name\":\"OUTPUT1\",\"parameters\":{\"binary_data\":false}}");
  std::string all = "{\"inputs\":[" + input_json("INPUT0", 1) + "," + input_json("INPUT1", 1) +
                    "],\"parameters\":{\"binary_data_output\":true}}";
  const char* both = "{\"outputs\":[[\"OUTPUT0\",\"FP32\",[1,2]],[\"OUTPUT1\",\"FP32\",[1,2]]]}";
  const std::string as = "AAAAAAAA", bs = std::string("\0\0\x80?\0\0\0@", 8);
  std::string block = result_block({ok_entry(0, both, {&as, &bs})});
  uint64_t timings[4];
  std::vector<std::string> texts;
  const std::string* order[] = {&one_json_output, &all, &one_json_output, &all};
  for (uint64_t id = 1; id <= 4; ++id) {
    CHECK(f.submit(make_body(*order[id - 1], 128), id) == SubmitOutcome::kQueued);
    std::vector<KServeCodec::Answer> answers;
    CHECK(codec.complete(reinterpret_cast<const uint8_t*>(block.data()), block.size(), {id}, 0, 0,
                         &answers, timings));
    CHECK(answers.size() == 1 && answers[0].response.request_id == id);
    if (answers.size() == 1) {
      texts.push_back(writer.text(answers[0].response));
      codec.give_back(answers[0].response);  // as HttpIo does: the next answer's list
    }
    CHECK(codec.in_flight() == 0);
  }
  CHECK(texts.size() == 4);
  if (texts.size() != 4) return;
  // req-7: its id, OUTPUT1 only, as JSON numbers.
  const std::string json_answer =
      "{\"id\":\"req-7\",\"model_name\":\"add_sub\",\"model_version\":\"1\",\"outputs\":["
      "{\"name\":\"OUTPUT1\",\"datatype\":\"FP32\",\"shape\":[1,2],\"data\":[1.0,2.0]}]}";
  CHECK(texts[0].substr(texts[0].size() - json_answer.size()) == json_answer);
  CHECK(texts[2] == texts[0]);
  // The others: no id, both outputs, binary.
  CHECK(texts[1].find("\"id\"") == std::string::npos);
  CHECK(texts[1].find("\"name\":\"OUTPUT0\"") != std::string::npos);
  CHECK(texts[1].find("\"binary_data_size\":8") != std::string::npos);
  CHECK(texts[1].find("\"data\"") == std::string::npos);
  CHECK(texts[1].substr(texts[1].size() - 16) == as + bs);
  CHECK(texts[3] == texts[1]);
}

TEST(codec_classifies_the_outputs_a_request_asks_to_and_refuses_those_without_order) {
  LaneFixture f;
  KServeCodec& codec = f.lane.codec();
  const HttpResponseWriter& writer = f.lane.writer();
  // OUTPUT0 as its tensor (binary), OUTPUT1 classified, top 1 as JSON data.
  std::string classify = "{\"inputs\":[" + input_json("INPUT0", 1) + "," + input_json("INPUT1", 1) +
                         "],\"outputs\":[{\"name\":\"OUTPUT0\",\"parameters\":{\"binary_data\":"
                         "true}},{\"name\":\"OUTPUT1\",\"parameters\":{\"classification\":1}}]}";
  const std::string as = "AAAAAAAA", bs = std::string("\0\0\x80?\0\0\0@", 8);  // 1.0, 2.0
  const char* fp32 = "{\"outputs\":[[\"OUTPUT0\",\"FP32\",[1,2]],[\"OUTPUT1\",\"FP32\",[1,2]]]}";
  const char* bools = "{\"outputs\":[[\"OUTPUT0\",\"FP32\",[1,2]],[\"OUTPUT1\",\"BOOL\",[1,2]]]}";
  CHECK(f.submit(make_body(classify, 128), 1) == SubmitOutcome::kQueued);
  CHECK(f.submit(make_body(classify, 128), 2) == SubmitOutcome::kQueued);
  std::string block = result_block({ok_entry(0, fp32, {&as, &bs}), ok_entry(1, bools, {&as, &bs})});
  std::vector<KServeCodec::Answer> answers;
  uint64_t timings[4];
  CHECK(codec.complete(reinterpret_cast<const uint8_t*>(block.data()), block.size(), {1, 2}, 0, 0,
                       &answers, timings));
  CHECK(answers.size() == 2);
  if (answers.size() != 2) return;
  // The answers' views outlive a move of the answers (the classified tensors are shared).
  std::vector<KServeCodec::Answer> moved = std::move(answers);
  const std::string json =
      "{\"model_name\":\"add_sub\",\"model_version\":\"1\",\"outputs\":["
      "{\"name\":\"OUTPUT0\",\"datatype\":\"FP32\",\"shape\":[1,2],"
      "\"parameters\":{\"binary_data_size\":8}},"
      "{\"name\":\"OUTPUT1\",\"datatype\":\"BYTES\",\"shape\":[1,1],\"data\":[\"2.000000:1\"]}]}";
  CHECK(writer.text(moved[0].response) ==
        "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(json.size() + 8) +
            "\r\nContent-Type: application/octet-stream\r\nInference-Header-Content-Length: " +
            std::to_string(json.size()) + "\r\n\r\n" + json + as);
  // BOOL has no order: Triton's 400, sent as text/plain as Triton's frontend sends it.
  const std::string error =
      "{\"error\":\"class result not available for output due to unsupported type 'BOOL'\"}";
  CHECK(writer.text(moved[1].response) ==
        "HTTP/1.1 400 Bad Request\r\nContent-Length: " + std::to_string(error.size()) +
            "\r\nContent-Type: text/plain\r\n\r\n" + error);
  CHECK(codec.in_flight() == 0);
}

TEST(only_an_error_the_model_did_not_send_counts_as_a_failure) {
  CHECK(!response_counts_as_failure(kResponseFinal));
  CHECK(response_counts_as_failure(kResponseFinal | kResponseError));
  CHECK(!response_counts_as_failure(kResponseFinal | kResponseError | kResponseModelError));
  CHECK(!response_counts_as_failure(kResponseModelError));  // no error: nothing to count
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
  // Once the head is there, the whole request's size is known.
  size_t head = request.size() - 10;
  CHECK(incomplete_request_size(request.data(), head - 1, 1 << 20) == 0);
  CHECK(incomplete_request_size(request.data(), head, 1 << 20) == request.size());
  CHECK(incomplete_request_size(request.data(), request.size() - 1, 1 << 20) == request.size());
  CHECK(incomplete_request_size(request.data(), request.size(), 1 << 20) == 0);
  CHECK(incomplete_request_size(request.data(), head, 9) == 0);  // over max body
}

TEST(http_scan_reads_how_the_connection_goes_on) {
  struct Case {
    const char* version;
    const char* header;
    HttpConnection expected;
  };
  const Case cases[] = {
      {"HTTP/1.1", "", HttpConnection::kKeepAlive},
      {"HTTP/1.1", "Connection: keep-alive\r\n", HttpConnection::kKeepAlive},
      {"HTTP/1.1", "Connection: close\r\n", HttpConnection::kClose},
      {"HTTP/1.1", "connection: Close\r\n", HttpConnection::kClose},
      {"HTTP/1.0", "", HttpConnection::kClose10},
      {"HTTP/1.0", "Connection: close\r\n", HttpConnection::kClose10},
      {"HTTP/1.0", "Connection: Keep-Alive\r\n", HttpConnection::kKeepAlive10},
  };
  for (const Case& c : cases) {
    std::string request =
        std::string("POST /x ") + c.version + "\r\n" + c.header + "Content-Length: 2\r\n\r\nab";
    ScannedRequest out;
    CHECK(scan(request, &out) == ScanResult::kRequest && out.connection == c.expected);
    CHECK(closes(c.expected) ==
          (c.expected == HttpConnection::kClose || c.expected == HttpConnection::kClose10));
  }
}

TEST(set_connection_words_the_head_as_triton) {
  const std::string answer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}";
  std::string out = "before" + answer;
  set_connection(&out, 6, HttpConnection::kKeepAlive);
  CHECK(out == "before" + answer);
  set_connection(&out, 6, HttpConnection::kClose);
  CHECK(out == "beforeHTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}");
  out = answer;
  set_connection(&out, 0, HttpConnection::kKeepAlive10);
  CHECK(out == "HTTP/1.0 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\n{}");
  out = answer;
  set_connection(&out, 0, HttpConnection::kClose10);
  CHECK(out == "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}");
  // A body that holds a blank line is not the head's.
  out = "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n\r\n\r\n";
  set_connection(&out, 0, HttpConnection::kClose);
  CHECK(out == "HTTP/1.1 200 OK\r\nContent-Length: 4\r\nConnection: close\r\n\r\n\r\n\r\n");
}

TEST(http_scan_finds_the_end_of_the_head_and_checks_header_names) {
  // The head ends at the first CRLF CRLF, wherever the bytes stop before it.
  const std::string request = "POST /x HTTP/1.1\r\nContent-Length: 2\r\n\r\nab";
  const size_t head = request.size() - 2;
  for (size_t cut = 1; cut < request.size(); ++cut) {
    ScannedRequest out;
    CHECK(scan(request.substr(0, cut), &out) == ScanResult::kIncomplete);
    if (cut >= head) CHECK(out.total == request.size() && out.body_offset == head);
  }
  CHECK(scan(request) == ScanResult::kRequest);
  // A CR not followed by LF CR LF does not end it (and is no header's byte).
  CHECK(scan("POST /x HTTP/1.1\r\nContent-Length: 2\r\n\r\rab") == ScanResult::kIncomplete);
  CHECK(scan("POST /x HTTP/1.1\r\nX: a\rb\r\nContent-Length: 2\r\n\r\nab") == ScanResult::kOther);
  // A head that does not end within the limit is the parser's.
  std::string long_head = "POST /x HTTP/1.1\r\nX: " + std::string(kHttpMaxHead, 'a');
  CHECK(scan(long_head) == ScanResult::kOther);
  CHECK(scan(long_head.substr(0, kHttpMaxHead - 1)) == ScanResult::kIncomplete);
  // Header names: every tchar of RFC 9110 is one, nothing else.
  CHECK(scan(http_post("/x", "0123456789", 4, "Az09!#$%&'*+-.^_`|~: v\r\n")) ==
        ScanResult::kRequest);
  for (const char* name : {"X(", "X)", "X,", "X/", "X;", "X<", "X=", "X>", "X?", "X@", "X[", "X\\",
                           "X]", "X{", "X}", "X\"", "X\x7f", "X\x80"}) {
    CHECK(scan(http_post("/x", "0123456789", 4, std::string(name) + ": v\r\n")) ==
          ScanResult::kOther);
  }
}

TEST(http_scan_leaves_everything_else_to_the_parser) {
  const std::string body = "0123456789";
  CHECK(scan("GET /v2/health/ready HTTP/1.1\r\n\r\n") == ScanResult::kOther);
  CHECK(scan("POST /x HTTP/2.0\r\nContent-Length: 0\r\n\r\n") == ScanResult::kOther);
  CHECK(scan("POST /x HTTP/1.1\r\n\r\n") == ScanResult::kOther);  // no Content-Length
  for (const char* header :
       {"Connection: upgrade\r\n", "Connection: close\r\nConnection: close\r\n",
        "Connection: close, keep-alive\r\n", "Transfer-Encoding: chunked\r\n",
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

TEST(http_scan_reads_the_answer_encoding) {
  const std::string body = "0123456789";
  ScannedRequest out;
  // The lane takes requests that ask for gzip or deflate and says which was picked.
  struct Case {
    const char* header;
    ResponseEncoding expected;
  } cases[] = {
      {"Accept-Encoding: gzip\r\n", ResponseEncoding::kGzip},
      {"accept-encoding: gzip, deflate\r\n", ResponseEncoding::kGzip},
      {"Accept-Encoding: br, deflate;q=0.5\r\n", ResponseEncoding::kDeflate},
      {"Accept-Encoding: identity\r\n", ResponseEncoding::kIdentity},
      {"Accept-Encoding: br\r\n", ResponseEncoding::kIdentity},
      {"Accept-Encoding: GZIP\r\n", ResponseEncoding::kIdentity},
      {"Accept-Encoding: gzip;q=0\r\n", ResponseEncoding::kIdentity},
      {"", ResponseEncoding::kIdentity},
      // Two of them: the last, as the front end's parser keeps it.
      {"Accept-Encoding: gzip\r\nAccept-Encoding: deflate\r\n", ResponseEncoding::kDeflate},
  };
  for (const Case& c : cases) {
    CHECK(scan(http_post("/x", body, 4, c.header), &out) == ScanResult::kRequest);
    CHECK(out.encoding == c.expected);
  }
}

TEST(response_encoding_follows_tritons_accept_encoding_rule) {
  using naiad::response_encoding;
  using naiad::ResponseEncoding;
  struct Case {
    const char* value;
    ResponseEncoding expected;
  } cases[] = {
      // The answers of a real Triton 2.51 to these Accept-Encoding values.
      {"gzip", ResponseEncoding::kGzip},
      {"deflate", ResponseEncoding::kDeflate},
      {"br", ResponseEncoding::kIdentity},
      {"gzip;q=0.5, deflate;q=0.8", ResponseEncoding::kDeflate},
      {"gzip; q=0.5, deflate", ResponseEncoding::kDeflate},  // "gzip; q=0.5" is no type
      {"identity;q=1, gzip;q=1", ResponseEncoding::kIdentity},
      {"GZIP", ResponseEncoding::kIdentity},
      {"gzip, deflate, br", ResponseEncoding::kGzip},
      {" gzip", ResponseEncoding::kGzip},
      {"gzip ", ResponseEncoding::kIdentity},
      {"*", ResponseEncoding::kIdentity},
      {"deflate;q=0, gzip;q=0", ResponseEncoding::kIdentity},
      {"x;q=abc, gzip", ResponseEncoding::kGzip},
      {"gzip;q=abc", ResponseEncoding::kIdentity},
      {"", ResponseEncoding::kIdentity},
      {",,deflate,", ResponseEncoding::kDeflate},
  };
  for (const Case& c : cases) CHECK(response_encoding(c.value) == c.expected);
}

TEST(fast_lane_takes_http_requests_up_to_the_first_it_cannot) {
  LaneFixture f;
  f.lane.add_route("/v2/models/add_sub/infer", f.lane_model);
  // A model served, not by the lane: its requests are the general path's.
  f.lane.codec().models().set_model("other", {{1, true, kNoLaneModel}});

  Body body = make_body(add_sub_json(), 128);
  std::string good = http_post("/v2/models/add_sub/infer", body.bytes, body.header_size);
  std::string unrouted = http_post("/v2/models/other/infer", body.bytes, body.header_size);
  std::string data = good + good + unrouted + good;
  std::vector<HttpLane::Taken> taken;
  const uint8_t* bytes = reinterpret_cast<const uint8_t*>(data.data());
  size_t consumed = f.lane.take_http(bytes, data.size(), 1 << 20, 7, &taken);
  CHECK(consumed == 2 * good.size());
  CHECK(taken.size() == 2);
  CHECK(taken[0].model == f.lane_model && taken[0].batch_size == 1);
  CHECK(taken[1].request_id == taken[0].request_id + 1);
  CHECK(queued_blocks(f.core) == 2);
  // Ids stay unique with the general path's.
  CHECK(f.core.new_request_id() == taken[1].request_id + 1);
  // A body the HTTP parser put together goes by the same routes.
  HttpLane::Taken one;
  const uint8_t* body_bytes = reinterpret_cast<const uint8_t*>(body.bytes.data());
  CHECK(!f.lane.submit_to("/v2/models/other/infer", body_bytes, body.bytes.size(), body.header_size,
                          7, &one));
  CHECK(f.lane.submit_to("/v2/models/add_sub/infer", body_bytes, body.bytes.size(),
                         body.header_size, 7, &one));
  CHECK(one.model == f.lane_model && one.request_id == taken[1].request_id + 2);
  CHECK(queued_blocks(f.core) == 3);

  // A model that is not ready takes nothing, and an invalid body is left as well.
  f.lane.codec().set_accepting(f.lane_model, false);
  taken.clear();
  CHECK(f.lane.take_http(bytes, good.size(), 1 << 20, 7, &taken) == 0 && taken.empty());
  f.lane.codec().set_accepting(f.lane_model, true);
  Body short_body = make_body(add_sub_json(), 127);
  std::string invalid =
      http_post("/v2/models/add_sub/infer", short_body.bytes, short_body.header_size);
  CHECK(f.lane.take_http(reinterpret_cast<const uint8_t*>(invalid.data()), invalid.size(), 1 << 20,
                         7, &taken) == 0);
  CHECK(queued_blocks(f.core) == 3);

  // A request the validator refuses is answered at once, as the general path would.
  Body wrong = make_body(replaced(add_sub_json(), "FP32", "INT8"), 128);
  std::string refused = http_post("/v2/models/add_sub/infer", wrong.bytes, wrong.header_size);
  std::string two = refused + good;
  taken.clear();
  CHECK(f.lane.take_http(reinterpret_cast<const uint8_t*>(two.data()), two.size(), 1 << 20, 7,
                         &taken) == two.size());
  CHECK(taken.size() == 2 && taken[0].request_id == 0 && taken[1].request_id != 0);
  CHECK(taken[1].reply.empty());
  std::string error_body =
      "{\"error\":\"[request id: <id_unknown>] inference input 'INPUT0' data-type is 'INT8', "
      "but model 'add_sub' expects 'FP32'\"}";
  CHECK(taken[0].reply ==
        "HTTP/1.1 400 Bad Request\r\nContent-Length: " + std::to_string(error_body.size()) +
            "\r\nContent-Type: application/json\r\n\r\n" + error_body);
  CHECK(queued_blocks(f.core) == 4);

  // At most max_requests (the connection's room under kHttpMaxPipeline): the rest is
  // left untaken, for the front end to hold until answers make room.
  std::string three = good + good + good;
  taken.clear();
  CHECK(f.lane.take_http(reinterpret_cast<const uint8_t*>(three.data()), three.size(), 1 << 20, 7,
                         &taken, 2) == 2 * good.size());
  CHECK(taken.size() == 2 && queued_blocks(f.core) == 6);

  // A request that closes the connection: taken only by a front end that closes it
  // (`closes`), and nothing after it.
  std::string close =
      http_post("/v2/models/add_sub/infer", body.bytes, body.header_size, "Connection: close\r\n");
  std::string closing = good + close + good;
  const uint8_t* closing_bytes = reinterpret_cast<const uint8_t*>(closing.data());
  taken.clear();
  CHECK(f.lane.take_http(closing_bytes, closing.size(), 1 << 20, 7, &taken) == good.size());
  CHECK(taken.size() == 1 && taken[0].connection == HttpConnection::kKeepAlive);
  taken.clear();
  CHECK(f.lane.take_http(closing_bytes, closing.size(), 1 << 20, 7, &taken, SIZE_MAX, true) ==
        good.size() + close.size());
  CHECK(taken.size() == 2 && taken[1].connection == HttpConnection::kClose);
}

TEST(fast_lane_routes_follow_removed_models) {
  LaneFixture f;
  const std::string unversioned = "/v2/models/add_sub/infer";
  const std::string versioned = "/v2/models/add_sub/versions/1/infer";
  f.lane.add_route(unversioned, f.lane_model);
  f.lane.add_route(versioned, f.lane_model);
  f.lane.codec().models().set_model("add_sub", {{1, true, f.lane_model}});
  Body body = make_body(add_sub_json(), 128);
  const uint8_t* bytes = reinterpret_cast<const uint8_t*>(body.bytes.data());
  auto take = [&](const std::string& target, HttpLane::Taken* taken) {
    return f.lane.submit_to(target, bytes, body.bytes.size(), body.header_size, 7, taken);
  };
  HttpLane::Taken taken;
  CHECK(take(versioned, &taken));
  f.lane.remove_model(f.lane_model);
  CHECK(!take(unversioned, &taken) && !take(versioned, &taken));
  // The model loaded again gets the URL back under its new codec id.
  uint32_t again = f.lane.codec().add_model(f.model);
  f.lane.add_route(unversioned, again);
  CHECK(take(unversioned, &taken) && taken.model == again);
  CHECK(!take(versioned, &taken));
  // A codec model whose core model is gone takes nothing and keeps nothing.
  size_t in_flight = f.lane.codec().in_flight();
  CHECK(f.core.remove_model(f.model.core_model_id));
  CHECK(!take(unversioned, &taken));
  CHECK(f.lane.codec().in_flight() == in_flight);
}

// A version the lane serves with no route of its own, or spelled otherwise ("01", as
// Triton reads the number): queued on the lane, as the version's route.
TEST(fast_lane_takes_a_served_version_spelled_otherwise) {
  LaneFixture f;
  f.lane.add_route("/v2/models/add_sub/infer", f.lane_model);
  f.lane.codec().models().set_model("add_sub", {{1, true, f.lane_model}});
  Body body = make_body(add_sub_json(), 128);
  const uint8_t* bytes = reinterpret_cast<const uint8_t*>(body.bytes.data());
  for (const char* target :
       {"/v2/models/add_sub/versions/1/infer", "/v2/models/add_sub/versions/01/infer",
        "/v2/models/add_sub/versions/0001/infer"}) {
    HttpLane::Taken taken;
    CHECK(f.lane.submit_to(target, bytes, body.bytes.size(), body.header_size, 7, &taken));
    CHECK(taken.model == f.lane_model && taken.request_id != 0 && taken.reply.empty());
  }
  CHECK(queued_blocks(f.core) == 3);
}

// What Triton refuses before it reads a tensor is answered by the lane with Triton's
// status and message (as tritonserver 2.51 answers: tests/test_http_refusals_triton.py):
// infer URLs whose model or version the codec's table does not serve, a header size
// past the body, a header that is no JSON document.
TEST(fast_lane_refuses_unknown_models_and_headers_that_are_no_json) {
  LaneFixture f;
  f.lane.add_route("/v2/models/add_sub/infer", f.lane_model);
  f.lane.codec().models().set_model("add_sub", {{1, true, f.lane_model}, {3, false, kNoLaneModel}});
  f.lane.codec().models().set_model("general", {{1, true, kNoLaneModel}});
  Body body = make_body(add_sub_json(), 128);
  const uint8_t* bytes = reinterpret_cast<const uint8_t*>(body.bytes.data());
  auto reply = [](int status, const std::string& message) {
    const std::string json = "{\"error\":\"" + json_string_text(message) + "\"}";
    const char* line = status == 404   ? "404 Not Found"
                       : status == 503 ? "503 Service Unavailable"
                       : status == 500 ? "500 Internal Server Error"
                                       : "400 Bad Request";
    return std::string("HTTP/1.1 ") + line + "\r\nContent-Length: " + std::to_string(json.size()) +
           "\r\nContent-Type: application/json\r\n\r\n" + json;
  };
  struct Case {
    const char* target;
    std::string reply;  // "": the general path's
  };
  const Case cases[] = {
      {"/v2/models/nosuch/infer", reply(404, "Request for unknown model: 'nosuch' is not found")},
      {"/v2/models/nosuch/versions/2/infer",
       reply(404, "Request for unknown model: 'nosuch' is not found")},
      {"/v2/models/add_sub/versions/2/infer",
       reply(404, "Request for unknown model: 'add_sub' version 2 is not found")},
      {"/v2/models/add_sub/versions/3/infer",
       reply(503, "Request for unknown model: 'add_sub' version 3 is not at ready state")},
      {"/v2/models/add%5fsub/infer",
       reply(404, "Request for unknown model: 'add%5fsub' is not found")},
      // Served by the general path, or not an infer URL as Triton routes them.
      {"/v2/models/general/infer", ""},
      {"/v2/models/nosuch/infer?x=1", ""},
      {"/v2/models/nosuch/versions/x/infer", ""},
      {"/v2/models/nosuch/versions//infer", ""},
      {"/v2/models//infer", ""},
      {"/v2/models/a/b/infer", ""},
      {"/v2/models/nosuch/ready", ""},
  };
  for (const Case& c : cases) {
    HttpLane::Taken taken;
    const bool took =
        f.lane.submit_to(c.target, bytes, body.bytes.size(), body.header_size, 7, &taken);
    CHECK(took == !c.reply.empty());
    if (took) CHECK(taken.request_id == 0 && taken.batch_size == 0 && taken.reply == c.reply);
  }

  auto refused = [&](const std::string& header, size_t header_size) {
    HttpLane::Taken taken;
    if (!f.lane.submit_to("/v2/models/add_sub/infer",
                          reinterpret_cast<const uint8_t*>(header.data()), header.size(),
                          header_size, 7, &taken)) {
      return std::string("general");
    }
    CHECK(taken.request_id == 0);
    return taken.reply;
  };
  CHECK(refused("{\"inputs\": [", SIZE_MAX) ==
        reply(500, "failed to parse the request JSON buffer: Invalid value. at 12"));
  CHECK(refused("{} x", SIZE_MAX) ==
        reply(500,
              "failed to parse the request JSON buffer: The document root must not be "
              "followed by other values. at 3"));
  CHECK(refused(add_sub_json(), 3) ==
        reply(500,
              "failed to parse the request JSON buffer: Missing a closing quotation mark in "
              "string. at 3"));
  CHECK(refused("{\"inputs\":[]}", 100) ==
        reply(400, "inference header size should be in range (0, 13), got: 100"));
  // JSON Triton's parser takes, and raw binary requests: the general path's.
  CHECK(refused("{\"inputs\": NaN}", SIZE_MAX) == "general");
  CHECK(refused(std::string("{\"a\":1}\0x", 9), SIZE_MAX) == "general");
  CHECK(refused("\x01\x02\x03\x04", 0) == "general");
  CHECK(refused("", SIZE_MAX) == "general");
  CHECK(queued_blocks(f.core) == 0);
}

TEST(json_string_text_escapes_as_the_general_path) {
  CHECK(json_string_text("plain 'text' é") == "plain 'text' é");
  CHECK(json_string_text("a\"b\\c\x01\x1f\x7f\b\f\n\r\t") ==
        "a\\\"b\\\\c\\u0001\\u001f\x7f\\b\\f\\n\\r\\t");
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

// Damaged input never makes the reader, the validator, the block layout or the
// response writer read out of bounds (run under ASan/UBSan and TSan in make test), and
// what they still take is consistent with the body.
TEST(lane_survives_damaged_requests_and_results) {
  ModelSpec model = add_sub_model();
  const std::string json = add_sub_json(2);
  const std::string binary(256, '\x05');
  Mutator mutator(0x9E3779B97F4A7C15ULL);
  int read = 0, valid = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string header = mutator.mutate(json);
    std::string body = header + binary;
    const uint8_t* start = reinterpret_cast<const uint8_t*>(body.data());
    ParsedRequest request;
    if (!read_infer_header(start, body.size(), header.size(), &request)) continue;
    ++read;
    const uint8_t* end = start + header.size();
    for (const RequestInput& input : request.inputs) {
      CHECK(input.data == end);
      end += input.size;
    }
    CHECK(end == start + body.size());
    std::string error;
    if (!validate_request(model, &request, &error)) {
      CHECK(!error.empty());
      continue;
    }
    ++valid;
    RequestBlock block;
    layout_request_block(model, request, &block);
    CHECK(block.inputs.size() == request.inputs.size());
  }
  CHECK(read > valid && valid > 0);  // some mutations leave a valid request

  const std::string http = http_post("/v2/models/add_sub/infer", json + binary, json.size());
  for (int i = 0; i < 20000; ++i) {
    std::string damaged = mutator.mutate(http);
    ScannedRequest request;
    if (scan_request(damaged.data(), damaged.size(), 1 << 20, &request) == ScanResult::kRequest) {
      CHECK(request.total <= damaged.size());
      CHECK(request.body_offset + request.body_size == request.total);
    }
  }

  // Response blocks through the codec and the HTTP writer: the block's requests are
  // queued (they stay in the core's queue: no instance runs them), then answered.
  LaneFixture f(uint64_t{64} << 20);
  KServeCodec& codec = f.lane.codec();
  const Body request_body = make_body(add_sub_json(1), 128);
  const std::string result = two_responses();
  uint64_t next_id = 1;
  for (int i = 0; i < 20000; ++i) {
    std::string damaged = mutator.mutate(result);
    ResultBlock parsed;
    const uint8_t* data = reinterpret_cast<const uint8_t*>(damaged.data());
    if (!parse_result_block(data, damaged.size(), &parsed)) continue;
    for (const ResultOutput& output : parsed.outputs) {
      CHECK(output.offset + output.size <= damaged.size());
    }
    std::vector<uint64_t> ids;
    for (size_t n = 0; n < parsed.outcomes.size() && n < 4; ++n) {
      uint64_t id = next_id++;
      if (f.submit(request_body, id) == SubmitOutcome::kQueued) ids.push_back(id);
    }
    std::vector<KServeCodec::Answer> answers;
    uint64_t timings[4];
    if (codec.complete(data, damaged.size(), ids, 0, 0, &answers, timings)) {
      for (const KServeCodec::Answer& answer : answers) {
        std::string text = f.lane.writer().text(answer.response);
        CHECK(text.size() == f.lane.writer().size(answer.response));
      }
    }
    for (uint64_t id : ids) codec.forget(id);
  }
  CHECK(next_id > 1000);
}

// The copies of an input on the lane, counted: received HTTP bytes to the batch tensor
// the worker reads is one copy (place), none at dispatch for a first-in first-out batch.
TEST(lane_requests_reach_the_batch_tensor_with_one_copy) {
  Core core(1 << 22, nullptr, false);
  BatcherConfig config;
  config.dynamic_batching = true;
  config.max_batch_size = 8;
  ModelSpec model = add_sub_model();
  model.core_model_id = core.add_model(config);
  uint32_t instance = core.add_instance(model.core_model_id);
  HttpLane lane(core);
  lane.add_route("/v2/models/add_sub/infer", lane.codec().add_model(model));
  std::string received;
  for (int i = 0; i < 8; ++i) {
    Body body = make_body(add_sub_json(), 128);
    for (size_t b = 0; b < 128; ++b)
      body.bytes[body.header_size + b] = static_cast<char>(i * 16 + b / 8);
    received += http_post("/v2/models/add_sub/infer", body.bytes, body.header_size);
  }
  std::vector<HttpLane::Taken> taken;
  lane.take_http(reinterpret_cast<const uint8_t*>(received.data()), received.size(), 1 << 20, 7,
                 &taken);
  CHECK(taken.size() == 8);
  // One header, parsed once: each later request's rows come from its own body through
  // the lane's header memo.
  CHECK(lane.header_memo_hits() == 7);
  CHECK(lane.scan_memo_hits() == 7);  // and one HTTP head, scanned once
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
