// Writing and reading response blocks (ipc_schema.h). Workers write them (through
// WorkerEndpoint::respond); the core reads their records to route responses and see
// which requests are finished; the lane and the Python general path read them to
// answer clients. Readers check every offset and size against the block: a worker's
// block is never trusted to be well formed.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "ipc/ipc_schema.h"

namespace naiad {

struct OutputBytes {
  const void* data = nullptr;
  uint64_t size = 0;
};

// One response as a writer describes it.
struct ResponseEntry {
  uint32_t request_index = 0;
  uint32_t flags = kResponseFinal;
  int32_t error_code = 0;
  std::string_view json;  // {"outputs": [[name, datatype, shape], ...]} or {"error": ...}
  std::vector<OutputBytes> outputs;
};

// `started_each`: the block ends with each response's start (kResponseStartedEach).
uint64_t response_block_size(const std::vector<ResponseEntry>& entries, bool started_each = false);
// Writes the block (response_block_size bytes) at `block`, outputs copied in; with
// `started` (one per entry), flagged kResponseStartedEach and ending with them.
void write_response_block(uint8_t* block, const std::vector<ResponseEntry>& entries,
                          const uint64_t timings[4], const uint64_t* started = nullptr);

// Output-major blocks, for a model that writes its batch-major outputs in place: every
// entry has the same outputs in the same order, and output j of all entries lies in one
// run of bytes, entry after entry (the rows of a [N, ...] tensor in batch order), each
// run 64-byte aligned. The entries' OutputBytes give sizes only. layout_output_major_block
// writes the header (flagged kResponseOutputsInPlace, timings zero), records, JSON and
// slots, leaves the outputs' bytes to the model, and stores each run's offset from the
// block start in `runs` (one per output). Readers need nothing new: the slots say where
// each output is. std::invalid_argument when the entries' output counts differ.
uint64_t output_major_block_size(const std::vector<ResponseEntry>& entries);
void layout_output_major_block(uint8_t* block, const std::vector<ResponseEntry>& entries,
                               uint64_t* runs);
// The worker-side timings of a block already written (see ResponseHeader).
void set_response_timings(uint8_t* block, const uint64_t timings[4]);

// A checked view of a block: every record's JSON and outputs lie inside it.
struct ResponseBlockView {
  const uint8_t* block = nullptr;
  uint64_t size = 0;
  const ResponseHeader* header = nullptr;
  const ResponseRecord* records = nullptr;
  const OutputSlot* outputs = nullptr;
  // kResponseStartedEach: where the responses' start stamps are (unaligned), else null.
  const uint8_t* started = nullptr;

  // When response `r`'s request started (kResponseStartedEach), else 0.
  uint64_t started_ns(uint32_t r) const;
  std::string_view json(const ResponseRecord& record) const {
    return std::string_view(reinterpret_cast<const char*>(block + record.json_offset),
                            record.json_size);
  }
};
bool view_response_block(const uint8_t* block, uint64_t size, ResponseBlockView* out);

// Response `index` of `view` as an entry of its own (pointing into the view's block),
// for a new block that carries it alone: how a BLS caller gets its response.
ResponseEntry entry_of(const ResponseBlockView& view, uint32_t index);

}  // namespace naiad
