#include "result_block.h"

#include <cstring>

#include "json_reader.h"

namespace naiad {

namespace {

constexpr uint64_t kAlign = 64;

uint64_t align_up(uint64_t value) { return (value + kAlign - 1) & ~(kAlign - 1); }

bool parse_result_output(JsonReader& reader, ResultBlock* out) {
  // [name, datatype, shape, nbytes]
  ResultOutput output;
  const char* shape_start = nullptr;
  if (!reader.consume('[') || !reader.raw_string(&output.name) || !reader.consume(',') ||
      !reader.raw_string(&output.datatype) || !reader.consume(',') ||
      !reader.skip_value(&shape_start) || *shape_start != '[') {
    return false;
  }
  output.shape =
      std::string_view(shape_start, static_cast<size_t>(reader.position() - shape_start));
  if (!reader.consume(',') || !reader.uint(&output.size) || !reader.consume(']')) return false;
  out->outputs.push_back(output);
  return true;
}

bool parse_outcome(JsonReader& reader, ResultBlock* out) {
  ResultOutcome outcome;
  outcome.first_output = out->outputs.size();
  bool ok = reader.object([&](std::string_view key) {
    if (key == "outputs") return reader.array([&] { return parse_result_output(reader, out); });
    if (key == "error") {
      outcome.error = true;
      return reader.raw_string(&outcome.message);
    }
    if (key == "code") {
      uint64_t code;
      if (!reader.uint(&code)) return false;
      outcome.code = static_cast<int64_t>(code);
      return true;
    }
    if (key == "parameters") {
      const char* start = nullptr;
      if (!reader.skip_value(&start) || *start != '{') return false;
      std::string_view text(start, static_cast<size_t>(reader.position() - start));
      // An empty object is no parameters, as the general path writes none for it.
      JsonReader empty(text.data(), text.size());
      if (!(empty.consume('{') && empty.consume('}') && empty.at_end())) outcome.parameters = text;
      return true;
    }
    return reader.skip_value();
  });
  if (!ok) return false;
  outcome.output_count = out->outputs.size() - outcome.first_output;
  out->outcomes.push_back(outcome);
  return true;
}

// Reads the value of a member that may appear once; `seen` says it already did.
template <typename Read>
bool once(bool* seen, Read&& read) {
  if (*seen || !read()) return false;
  *seen = true;
  return true;
}

}  // namespace

bool parse_result_block(const uint8_t* block, uint64_t block_size, ResultBlock* out) {
  if (block_size < 4) return false;
  uint32_t length;
  std::memcpy(&length, block, 4);
  if (length > block_size - 4) return false;
  JsonReader reader(reinterpret_cast<const char*>(block + 4), length);
  bool has_timings = false;
  bool ok = reader.object([&](std::string_view key) {
    if (key == "responses") return reader.array([&] { return parse_outcome(reader, out); });
    if (key == "timings") {
      size_t count = 0;
      return once(&has_timings, [&] {
        return reader.array([&] { return count < 4 && reader.uint(&out->timings[count++]); }) &&
               count == 4;
      });
    }
    return reader.skip_value();
  });
  if (!ok) return false;
  if (!reader.at_end() || !has_timings) return false;
  uint64_t cursor = align_up(4 + uint64_t{length});
  for (ResultOutput& output : out->outputs) {
    if (cursor > block_size || output.size > block_size - cursor) return false;
    output.offset = cursor;
    cursor = align_up(cursor + output.size);
  }
  return true;
}

}  // namespace naiad
