// The request as the core takes it (Core::submit): the worker's metadata JSON
// (ipc_schema.h) and where each input's bytes are; the core lays the block out.
// layout_request_block() is the one place that builds it from a validated request,
// for every framer and for the general path's requests (_core.ModelSpec.submit).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "codec/infer_types.h"
#include "core/core.h"

namespace naiad {

struct RequestBlock {
  std::string metadata;
  std::vector<InputSource> inputs;  // the request's bytes, in metadata order
  uint64_t input_order = 0;         // input_order_key of the inputs' config indices
};

// `request` must have passed validate_request() for `model`; its `id` and `parameters`
// are written as they are, so they must be JSON text (a string's inside, an object).
// Every field of `out` is set; its strings and vectors keep their room.
void layout_request_block(const ModelSpec& model, const ParsedRequest& request, RequestBlock* out);

// The SubmitRequest for Core::submit of a validated `request` laid out in `block`
// (its inputs copied in, its metadata viewed): the one place that turns the
// validator's and the request's scheduling fields into SubmitOptions, for the codec
// and the ensemble scheduler's steps. Every field of `out` is set: `traced` and the
// trace ids to none, the caller's to set.
void submit_request_of(const ParsedRequest& request, RequestBlock* block, uint64_t request_id,
                       SubmitRequest* out);

// The client's tracestate in a block's metadata (layout_request_block wrote it from
// ParsedRequest::trace_state): the JSON string literal, or empty when it has none.
std::string request_trace_state(std::string_view metadata);

// The request id in a block's metadata (as layout_request_block writes it): its JSON
// string text, escapes kept; empty when it has none or cannot be read.
std::string request_id_text(std::string_view metadata);

// A request block another process wrote (a worker's BLS request, Core's to_core ring),
// read before anything trusts it: true when it starts with kRequestMagic at or after
// `heap_begin` and its header, slots and metadata, and every slot's bytes, lie inside
// the `arena_size` bytes at `base`. A block that fails is refused unread (a worker
// that writes it anyway after the check only hurts its own requests' bytes).
bool request_block_fits(const uint8_t* base, uint64_t arena_size, uint64_t heap_begin,
                        uint64_t block);

}  // namespace naiad
