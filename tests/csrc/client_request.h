// A client's request as the core receives it from the codec, for the C++ tests that
// submit requests by hand (the ensemble tests).
#pragma once

#include <cstdint>
#include <string>

#include "core.h"
#include "request_block.h"
#include "request_validator.h"
#include "testing.h"

namespace naiad {

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
