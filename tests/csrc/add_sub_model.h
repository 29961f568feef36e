// add_sub as the request path sees it (two FP32 [16] inputs, two outputs): the model
// of the codec's tests and of perf/lane_bench.cc.
#pragma once

#include <cstdint>

#include "codec/infer_types.h"

namespace naiad {

inline ModelSpec add_sub_model(int64_t max_batch_size = 8) {
  ModelSpec model;
  model.name = "add_sub";
  model.name_json = "add_sub";
  model.version = "1";
  model.max_batch_size = max_batch_size;
  for (const char* name : {"INPUT0", "INPUT1"}) {
    InputSpec input;
    input.name = name;
    input.name_json = name;
    input.datatype = "FP32";
    input.dims = {16};
    input.element_size = 4;
    model.inputs.push_back(input);
  }
  model.outputs = {"OUTPUT0", "OUTPUT1"};
  model.outputs_json = model.outputs;
  return model;
}

}  // namespace naiad
