#include "ipc/result_block.h"

#include "codec/json_reader.h"
#include "ipc/response_block.h"

namespace naiad {

namespace {

// A response's JSON: {"outputs": [[name, datatype, shape], ...], "error": message,
// "parameters": {...}}; sizes and offsets come from the block's OutputSlots.
bool parse_response_json(const ResponseBlockView& view, const ResponseRecord& record,
                         ResultOutcome* outcome, ResultBlock* out) {
  std::string_view json = view.json(record);
  JsonReader reader(json.data(), json.size());
  size_t listed = 0;
  bool ok = reader.object([&](std::string_view key) {
    if (key == "outputs") {
      return reader.array([&] {
        if (listed >= record.n_outputs) return false;
        const OutputSlot& slot = view.outputs[record.first_output + listed++];
        ResultOutput output;
        if (!read_tensor_entry(reader, &output.name, &output.datatype, &output.shape)) {
          return false;
        }
        output.size = slot.size;
        output.offset = slot.offset;
        out->outputs.push_back(output);
        return true;
      });
    }
    if (key == "error") return reader.raw_string(&outcome->message);
    if (key == "parameters") {
      const char* start = nullptr;
      if (!reader.skip_value(&start) || *start != '{') return false;
      std::string_view text(start, static_cast<size_t>(reader.position() - start));
      // An empty object is no parameters, as the general path writes none for it.
      JsonReader empty(text.data(), text.size());
      if (!(empty.consume('{') && empty.consume('}') && empty.at_end())) outcome->parameters = text;
      return true;
    }
    return reader.skip_value();
  });
  return ok && reader.at_end() && listed == record.n_outputs;
}

}  // namespace

bool parse_result_block(const uint8_t* block, uint64_t block_size, ResultBlock* out) {
  ResponseBlockView view;
  if (!view_response_block(block, block_size, &view)) return false;
  for (int i = 0; i < 4; ++i) out->timings[i] = view.header->timings[i];
  out->outcomes.reserve(out->outcomes.size() + view.header->n_responses);
  out->outputs.reserve(out->outputs.size() + view.header->n_outputs);
  for (uint32_t r = 0; r < view.header->n_responses; ++r) {
    const ResponseRecord& record = view.records[r];
    ResultOutcome outcome;
    outcome.request_index = record.request_index;
    outcome.final = (record.flags & kResponseFinal) != 0;
    outcome.error = (record.flags & kResponseError) != 0;
    outcome.counted_failure = response_counts_as_failure(record.flags);
    outcome.code = record.error_code;
    outcome.started_ns = view.started_ns(r);
    outcome.first_output = out->outputs.size();
    if (!parse_response_json(view, record, &outcome, out)) return false;
    outcome.output_count = out->outputs.size() - outcome.first_output;
    out->outcomes.push_back(outcome);
  }
  return true;
}

}  // namespace naiad
