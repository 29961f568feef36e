// Unit tests of tracing in the request path: the codec's sampler (1 in trace_rate
// requests of a model, whichever path takes them) and the core's stamps of a traced
// request (when its submit began and when it entered the queue), read once.
#include <string>
#include <vector>

#include "add_sub_model.h"
#include "core.h"
#include "http_framer.h"
#include "kserve_json.h"
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
  codec.set_trace_rate(f.lane_model, 3);
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

  // The general path's requests count in the same sampler; a new rate starts it over.
  codec.set_trace_rate(f.lane_model, 2);
  CHECK(!codec.sample_trace(f.lane_model));
  CHECK(f.submit(8));
  CHECK((codec.take_traced() == std::vector<uint64_t>{8}));
  codec.set_trace_rate(f.lane_model, 0);
  CHECK(f.submit(9) && f.submit(10));
  CHECK(codec.take_traced().empty());
  CHECK(f.core.take_trace_stamps(8, &stamps) && !f.core.take_trace_stamps(10, &stamps));
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
