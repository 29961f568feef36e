// add_sub as the infer fast lane sees it (two FP32 [16] inputs, two outputs): the model
// of the lane's tests and of perf/lane_bench.cc.
#pragma once

#include <cstdint>

#include "fast_lane.h"

namespace naiad {

inline FastModel add_sub_model(int64_t max_batch_size = 8) {
  FastModel model;
  model.name = "add_sub";
  model.version = "1";
  model.max_batch_size = max_batch_size;
  for (const char* name : {"INPUT0", "INPUT1"}) {
    FastInput input;
    input.name = name;
    input.datatype = "FP32";
    input.dims = {16};
    input.element_size = 4;
    model.inputs.push_back(input);
  }
  model.outputs = {"OUTPUT0", "OUTPUT1"};
  return model;
}

}  // namespace naiad
