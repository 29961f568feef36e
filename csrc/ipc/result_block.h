// A worker's response block (ipc_schema.h), read in place: the structs the codec
// builds responses from. The block's layout belongs to the IPC schema; the codec only
// reads these structs.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace naiad {

struct ResultOutput {
  std::string_view name;      // raw JSON string text
  std::string_view datatype;  // raw JSON string text
  std::string_view shape;     // the raw JSON array
  uint64_t size = 0;
  uint64_t offset = 0;  // from the block start
};
struct ResultOutcome {
  uint32_t request_index = 0;  // which request of the batch it answers
  bool final = true;           // the request's last response
  bool error = false;
  bool counted_failure = false;  // for the statistics (response_counts_as_failure)
  std::string_view message;      // raw JSON string text
  int64_t code = 1;
  std::string_view parameters;  // the response parameters: a raw JSON object, or empty
  size_t first_output = 0;
  size_t output_count = 0;
  // When its request started, from a block flagged kResponseStartedEach; else 0 (the
  // completion's dispatch time is every request's).
  uint64_t started_ns = 0;
};
struct ResultBlock {
  std::vector<ResultOutcome> outcomes;
  std::vector<ResultOutput> outputs;
  uint64_t timings[4] = {0, 0, 0, 0};
};

// False when the block is damaged or does not fit `block_size`.
bool parse_result_block(const uint8_t* block, uint64_t block_size, ResultBlock* out);

}  // namespace naiad
