// The request block a worker reads (arena_format.py): u32 length, a JSON header, the
// inputs 64-byte aligned in header order. layout_request_block() is the one place
// that builds it from a validated request, for every framer and for the general path's
// requests that C++ reads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core.h"
#include "infer_types.h"

namespace naiad {

struct RequestBlock {
  std::string prefix;
  std::vector<SubmitPart> parts;  // parts[0] points into `prefix`
  uint64_t size = 0;
};

// `request` must have passed validate_request() for `model`; its `id` and `parameters`
// are written as they are, so they must be JSON text (a string's inside, an object).
void layout_request_block(const ModelSpec& model, const ParsedRequest& request, RequestBlock* out);

}  // namespace naiad
