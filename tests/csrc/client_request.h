// Model specs and a client's request as the core receives it from the codec, for the
// C++ tests that submit requests by hand (the ensemble tests).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "codec/request_validator.h"
#include "core/core.h"
#include "ipc/request_block.h"
#include "testing.h"

namespace naiad {

// A model of FP32 [4] inputs `inputs` (batching, up to 8) with outputs `outputs`.
inline ModelSpec fp32_spec(const std::string& name, const std::vector<std::string>& inputs,
                           const std::vector<std::string>& outputs) {
  ModelSpec spec;
  spec.name = spec.name_json = name;
  spec.version = "1";
  spec.max_batch_size = 8;
  for (const std::string& input : inputs) {
    InputSpec in;
    in.name = in.name_json = input;
    in.datatype = "FP32";
    in.dims = {4};
    in.element_size = 4;
    spec.inputs.push_back(in);
  }
  for (const std::string& output : outputs) {
    spec.outputs.push_back(output);
    spec.outputs_json.push_back(output);
  }
  return spec;
}

// `parsed` checked against `spec` and laid out as the codec lays it out, as the core's
// request `id` of batch size 1; its bytes live in `laid`, which must outlive the submit.
inline SubmitRequest laid_out_request(const ModelSpec& spec, ParsedRequest* parsed, uint64_t id,
                                      RequestBlock* laid) {
  std::string error;
  CHECK(validate_request(spec, parsed, &error));
  layout_request_block(spec, *parsed, laid);
  SubmitRequest r;
  r.request_id = id;
  r.metadata = laid->metadata;
  r.inputs = laid->inputs;
  r.options.batch_size = 1;
  return r;
}

}  // namespace naiad
