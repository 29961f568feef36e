// A gRPC lane over a core with add_sub (max batch 8) as version 1, the one the lane
// serves: the fixture of the lane's tests.
#pragma once

#include <cstdint>

#include "add_sub_model.h"
#include "core/core.h"
#include "http1/http_framer.h"
#include "http2/grpc_lane.h"

namespace grpctest {

struct LaneFixture {
  LaneFixture() : core(1 << 20, nullptr, false), http(core), grpc(http.codec()) {
    naiad::BatcherConfig config;
    config.max_batch_size = 8;
    naiad::ModelSpec model = naiad::add_sub_model();
    model.core_model_id = core.add_model(config);
    lane_model = http.codec().add_model(model);
    grpc.set_model("add_sub", {{1, true, lane_model}});
  }
  naiad::Core core;
  naiad::HttpLane http;
  naiad::GrpcLane grpc;
  uint32_t lane_model = 0;
};

}  // namespace grpctest
