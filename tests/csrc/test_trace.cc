// Unit tests of tracing in the request path: the codec's sampler (1 in trace_rate
// requests of a model, whichever path takes them) and the core's stamps of a traced
// request (when its submit began and when it entered the queue), read once.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "add_sub_model.h"
#include "codec/kserve_json.h"
#include "codec/trace_tensor.h"
#include "core/core.h"
#include "core/trace_context.h"
#include "core/trace_tree.h"
#include "http1/http_framer.h"
#include "ipc/ipc_schema.h"
#include "ipc/request_block.h"
#include "testing.h"

using namespace naiad;

namespace {

struct TraceFixture {
  TraceFixture() : core(1 << 20, [this] { return now += 10; }, false), lane(core) {
    BatcherConfig config;
    config.max_batch_size = 8;
    model = add_sub_model();
    model.core_model_id = core.add_model(config);
    lane_model = lane.codec().add_model(model);
  }
  // Queues one add_sub request (batch 1, binary inputs) under `request_id`.
  bool submit(uint64_t request_id) {
    std::string json =
        "{\"inputs\":[{\"name\":\"INPUT0\",\"datatype\":\"FP32\",\"shape\":[1,16],"
        "\"parameters\":{\"binary_data_size\":64}},{\"name\":\"INPUT1\",\"datatype\":\"FP32\","
        "\"shape\":[1,16],\"parameters\":{\"binary_data_size\":64}}]}";
    std::string body = json + std::string(128, '\0');
    ParsedRequest request;
    if (!read_infer_header(reinterpret_cast<const uint8_t*>(body.data()), body.size(), json.size(),
                           &request)) {
      return false;
    }
    std::string error;
    return lane.codec().submit(lane_model, request, request_id, 5, &error) ==
           SubmitOutcome::kQueued;
  }
  uint64_t now = 1000;
  Core core;
  HttpLane lane;
  ModelSpec model;
  uint32_t lane_model = 0;
};

}  // namespace

TEST(codec_traces_nothing_until_a_rate_is_set) {
  TraceFixture f;
  for (uint64_t id = 1; id <= 5; ++id) CHECK(f.submit(id));
  CHECK(f.lane.codec().take_traced().empty());
  TraceStamps stamps;
  for (uint64_t id = 1; id <= 5; ++id) CHECK(!f.core.take_trace_stamps(id, &stamps));
  CHECK(!f.lane.codec().sample_trace(f.lane_model));
}

TEST(codec_samples_one_in_rate_and_core_stamps_them) {
  TraceFixture f;
  KServeCodec& codec = f.lane.codec();
  codec.set_trace_rate(f.lane_model, 3, 1);
  for (uint64_t id = 1; id <= 7; ++id) CHECK(f.submit(id));
  CHECK((codec.take_traced() == std::vector<uint64_t>{3, 6}));
  CHECK(codec.take_traced().empty());  // taken once
  TraceStamps stamps;
  CHECK(!f.core.take_trace_stamps(2, &stamps));
  CHECK(f.core.take_trace_stamps(3, &stamps));
  // Each clock reading moves it 10 ns: the submit's start, then the enqueue under the lock.
  CHECK(stamps.request_start_ns != 0 && stamps.queue_start_ns == stamps.request_start_ns + 10);
  CHECK(!f.core.take_trace_stamps(3, &stamps));  // read once
  CHECK(f.core.take_trace_stamps(6, &stamps));

  // The general path's requests count in the same sampler; a new setting (sampler)
  // starts it over.
  codec.set_trace_rate(f.lane_model, 2, 2);
  CHECK(!codec.sample_trace(f.lane_model));
  CHECK(f.submit(8));
  CHECK((codec.take_traced() == std::vector<uint64_t>{8}));
  codec.set_trace_rate(f.lane_model, 0, 2);
  CHECK(f.submit(9) && f.submit(10));
  CHECK(codec.take_traced().empty());
  CHECK(f.core.take_trace_stamps(8, &stamps) && !f.core.take_trace_stamps(10, &stamps));
}

TEST(models_under_one_setting_are_sampled_in_one_count) {
  // Triton 2.51 counts per trace setting: the models without a setting of their own
  // share the global one's count, a model with its own setting counts apart.
  TraceFixture f;
  KServeCodec& codec = f.lane.codec();
  const uint32_t a = f.lane_model, b = codec.add_model(f.model), c = codec.add_model(f.model);
  codec.set_trace_rate(a, 3, 1);
  codec.set_trace_rate(b, 3, 1);
  codec.set_trace_rate(c, 2, 7);
  std::vector<bool> picks;
  for (int i = 0; i < 6; ++i) picks.push_back(codec.sample_trace(i % 2 == 0 ? a : b));
  CHECK((picks == std::vector<bool>{false, false, true, false, false, true}));
  CHECK(!codec.sample_trace(c) && codec.sample_trace(c));  // its own count
  // Setting the same sampler again (another change elsewhere) keeps its count going.
  codec.set_trace_rate(a, 3, 1);
  CHECK(!codec.sample_trace(a) && !codec.sample_trace(b) && codec.sample_trace(a));
  // b gets a setting of its own (a new sampler): counted from 0, apart from a's.
  codec.set_trace_rate(b, 2, 8);
  CHECK(!codec.sample_trace(b) && !codec.sample_trace(a) && codec.sample_trace(b));
  CHECK(!codec.sample_trace(a) && codec.sample_trace(a));
}

TEST(core_keeps_no_stamps_for_a_refused_request) {
  TraceFixture f;
  SubmitRequest request;
  request.request_id = 77;
  request.options.traced = true;
  ModelHandle gone = ModelHandle::of(5, 1);  // no such model
  CHECK(f.core.submit(gone, request) == SubmitResult::kModelGone);
  TraceStamps stamps;
  CHECK(!f.core.take_trace_stamps(77, &stamps));
}

namespace {

std::string tensor_text(std::string_view datatype, std::vector<int64_t> shape,
                        const std::string& bytes) {
  std::string out;
  append_trace_tensor(&out, "T", datatype, shape.data(), shape.size(),
                      reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  return out;
}

template <typename T>
std::string raw(std::vector<T> values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

}  // namespace

TEST(trace_tensor_text_is_tritons_byte_for_byte) {
  // Each expected text is what Triton 2.51 wrote for the same tensor (its trace file).
  CHECK(tensor_text("FP32", {1, 5}, raw<float>({1e-7f, 123456789.0f, 0.1f, 1e20f, -2.5f})) ==
        "{\"name\":\"T\",\"data\":\"1e-07,1.23457e+08,0.1,1e+20,-2.5\",\"shape\":\"1,5\","
        "\"dtype\":\"FP32\"}");
  CHECK(tensor_text("FP64", {1, 3}, raw<double>({3.141592653589793, 1e300, -0.0})) ==
        "{\"name\":\"T\",\"data\":\"3.14159,1e+300,-0\",\"shape\":\"1,3\",\"dtype\":\"FP64\"}");
  CHECK(tensor_text("BOOL", {1, 2}, raw<uint8_t>({1, 0})).find("\"data\":\"1,0\"") !=
        std::string::npos);
  // INT8 and UINT8 values are written as the characters of their bytes.
  CHECK(tensor_text("UINT8", {1, 3}, "ABz").find("\"data\":\"A,B,z\"") != std::string::npos);
  CHECK(tensor_text("INT16", {1, 2}, raw<int16_t>({-7, 9})).find("\"data\":\"-7,9\"") !=
        std::string::npos);
  CHECK(tensor_text("UINT64", {1}, raw<uint64_t>({18446744073709551615ull}))
            .find("\"data\":\"18446744073709551615\"") != std::string::npos);
  // BYTES elements between \" with their text as it is; FP16 has no data.
  std::string bytes = raw<uint32_t>({6}) + "he\"llo" + raw<uint32_t>({3}) + "a\\b";
  CHECK(tensor_text("BYTES", {1, 2}, bytes) ==
        "{\"name\":\"T\",\"data\":\"\\\"he\"llo\\\",\\\"a\\b\\\"\",\"shape\":\"1,2\","
        "\"dtype\":\"BYTES\"}");
  CHECK(tensor_text("FP16", {1, 2}, raw<uint16_t>({0x3e00, 0x4000})) ==
        "{\"name\":\"T\",\"data\":\"\",\"shape\":\"1,2\",\"dtype\":\"FP16\"}");
  // A tensor shorter than its shape: the values stop where its bytes do.
  CHECK(tensor_text("INT32", {1, 4}, raw<int32_t>({5, 6})).find("\"data\":\"5,6\"") !=
        std::string::npos);
}

TEST(a_trace_tree_is_written_in_tritons_order) {
  // Triton 2.51's file for an ensemble of two steps (traces 1, 2, 3) and for a BLS
  // model's traced calls (10; 11; 12 with its steps 13, 14): newest first.
  CHECK((trace_tree_order({1, 2, 3}) == std::vector<uint64_t>{3, 2, 1}));
  CHECK((trace_tree_order({10, 11, 12, 13, 14}) == std::vector<uint64_t>{14, 13, 12, 11, 10}));
  CHECK((trace_tree_order({7}) == std::vector<uint64_t>{7}));
}

TEST(a_child_traces_tensors_are_read_from_its_blocks) {
  // A request block as the core lays it out: its inputs' names, datatypes and shapes
  // from the metadata, their bytes from the slots; one left in a client's region is
  // not read.
  std::vector<uint64_t> storage(1024);  // 8 KiB standing for the arena
  uint8_t* base = reinterpret_cast<uint8_t*>(storage.data());
  const uint64_t size = storage.size() * sizeof(uint64_t);
  const std::string metadata =
      "{\"id\":\"x\",\"inputs\":[[\"A\",\"INT32\",[1,2]],[\"B\",\"FP32\",[2]],[\"C\",\"INT8\",[1]]]"
      ","
      "\"outputs\":null,\"parameters\":{}}";
  const uint64_t block = 64, bytes = 4096;
  const std::string a = raw<int32_t>({7, -3}), b = raw<float>({0.5f, 2.0f});
  std::memcpy(base + bytes, a.data(), a.size());
  std::memcpy(base + bytes + 8, b.data(), b.size());
  RequestHeader header{kRequestMagic, 3, static_cast<uint32_t>(metadata.size()), 1, 0, 0, 0,
                       SpanContext{}};
  std::memcpy(base + block, &header, sizeof header);
  InputSlot slots[3] = {{bytes, 8, 0, 0}, {bytes + 8, 8, 0, 0}, {bytes, 1, 5, 0}};
  std::memcpy(base + block + sizeof header, slots, sizeof slots);
  std::memcpy(base + block + request_metadata_offset(3), metadata.data(), metadata.size());
  TensorRecords records;
  CHECK(append_request_tensors(&records, base, size, block));
  CHECK(
      (records == TensorRecords{
                      {TensorActivity::kQueueInput,
                       "{\"name\":\"A\",\"data\":\"7,-3\",\"shape\":\"1,2\",\"dtype\":\"INT32\"}"},
                      {TensorActivity::kQueueInput,
                       "{\"name\":\"B\",\"data\":\"0.5,2\",\"shape\":\"2\",\"dtype\":\"FP32\"}"},
                  }));
  // A response's outputs; an error response has none; JSON that cannot be read adds none.
  const std::string out = raw<int64_t>({42});
  TensorRecords outputs;
  CHECK(append_response_tensors(&outputs, "{\"outputs\":[[\"Y\",\"INT64\",[1,1]]]}",
                                {OutputBytes{out.data(), out.size()}}));
  CHECK((outputs == TensorRecords{{TensorActivity::kBackendOutput,
                                   "{\"name\":\"Y\",\"data\":\"42\",\"shape\":\"1,1\","
                                   "\"dtype\":\"INT64\"}"}}));
  CHECK(append_response_tensors(&outputs, "{\"error\":\"failed\"}", {}));
  CHECK(!append_response_tensors(&outputs, "{\"outputs\":[[\"Y\",\"INT64\"", {}));
  CHECK(outputs.size() == 1);
}

TEST(a_models_trace_context_is_tritons_traceparent_json) {
  SpanContext span{0x0af7651916cd43ddULL, 0x8448eb211c80319cULL, 0x00f067aa0ba902b7ULL, 1};
  CHECK(trace_context_json(span) ==
        "{\"traceparent\":\"00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01\"}");
  // Leading zeros kept; flags as two hex digits.
  SpanContext small{0, 1, 2, 0};
  CHECK(trace_context_json(small) ==
        "{\"traceparent\":\"00-00000000000000000000000000000001-0000000000000002-00\"}");
  CHECK(trace_context_json(SpanContext{1, 2, 0, 1}).empty());  // no span: no context
}

TEST(a_clients_tracestate_travels_in_the_block_into_the_models_context) {
  // The general path gives the layout the tracestate as a JSON literal; the worker reads
  // it back from the block's metadata into the context, as Triton 2.51 writes it.
  ModelSpec model = add_sub_model();
  ParsedRequest request;
  request.id = "r";
  request.parameters = "{\"p\":1}";
  request.trace_state = "\"congo=t61rcWkgMzE,q=\\\"x\\\"\"";
  RequestBlock block;
  layout_request_block(model, request, &block);
  CHECK(request_id_text(block.metadata) == "r");
  CHECK(request_trace_state(block.metadata) == request.trace_state);
  SpanContext span{0, 1, 2, 1};
  const std::string context = trace_context_json(span, request_trace_state(block.metadata));
  CHECK(context ==
        "{\"traceparent\":\"00-00000000000000000000000000000001-0000000000000002-01\","
        "\"tracestate\":\"congo=t61rcWkgMzE,q=\\\"x\\\"\"}");
  // Without one the block and the context say nothing of it.
  request.trace_state = {};
  layout_request_block(model, request, &block);
  CHECK(block.metadata.find("tracestate") == std::string::npos);
  CHECK(request_trace_state(block.metadata).empty());
  CHECK(trace_context_json(span, request_trace_state(block.metadata)) ==
        "{\"traceparent\":\"00-00000000000000000000000000000001-0000000000000002-01\"}");
  // A damaged block: nothing, not a crash.
  CHECK(request_trace_state("{\"tracestate\":\"unterminated").empty());
  CHECK(request_trace_state("{\"tracestate\":12}").empty());
}

TEST(a_new_span_joins_the_given_trace_or_starts_its_own) {
  SpanIdSource ids;
  SpanContext joined = new_span_context(ids, 7, 9, 0);
  CHECK(joined.trace_id_high == 7 && joined.trace_id_low == 9 && joined.trace_flags == 0);
  CHECK(joined.span_id != 0);
  CHECK(new_span_context(ids, 7, 9, 3).trace_flags == 1);  // the sampled bit only
  SpanContext own = new_span_context(ids, 0, 0, 0);
  CHECK((own.trace_id_high | own.trace_id_low) != 0 && own.span_id != 0);
  CHECK(own.trace_flags == 1);  // sampled
  // Ids do not repeat, and two sources (two servers) draw different ones.
  SpanIdSource other;
  std::vector<uint64_t> drawn;
  for (int i = 0; i < 1000; ++i) drawn.push_back(ids.next());
  CHECK(other.next() != ids.next());
  std::sort(drawn.begin(), drawn.end());
  CHECK(std::adjacent_find(drawn.begin(), drawn.end()) == drawn.end());
  CHECK(drawn.front() != 0);
}
