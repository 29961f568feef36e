#include "ipc/request_block.h"

#include <charconv>
#include <cstring>

#include "codec/json_reader.h"
#include "ipc/ipc_schema.h"

namespace naiad {

namespace {

constexpr size_t kMaxInputs = 64;  // beyond this, the input order key covers the first 64

void append_uint(std::string* out, uint64_t value) {
  char buffer[24];
  std::to_chars_result end = std::to_chars(buffer, buffer + sizeof(buffer), value);
  out->append(buffer, end.ptr);
}

}  // namespace

void layout_request_block(const ModelSpec& model, const ParsedRequest& request, RequestBlock* out) {
  // Written in place: a block the caller reuses keeps its string's room (the codec's,
  // one per request on the lane).
  std::string& header = out->metadata;
  header.clear();
  header.reserve(128 + 64 * request.inputs.size());
  header += "{\"id\":\"";
  header += request.id;
  header += "\",\"inputs\":[";
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    const RequestInput& input = request.inputs[i];
    const InputSpec& spec = model.inputs[input.spec];
    if (i) header += ',';
    header += "[\"";
    header += spec.name_json;
    header += "\",\"";
    header += spec.datatype;
    header += "\",[";
    for (size_t d = 0; d < input.shape.size(); ++d) {
      if (d) header += ',';
      append_uint(&header, static_cast<uint64_t>(input.shape[d]));
    }
    header += "]]";
  }
  header += "],\"outputs\":";
  if (!request.outputs.empty()) {
    header += '[';
    for (size_t i = 0; i < request.outputs.size(); ++i) {
      if (i) header += ',';
      header += '"';
      header += model.outputs_json[request.outputs[i]];
      header += '"';
    }
    header += ']';
  } else {
    header += "null";
  }
  header += ",\"parameters\":";
  if (request.parameters.empty()) {
    header += "{}";
  } else {
    header += request.parameters;
  }
  if (!request.output_regions.empty()) {
    header += ",\"regions\":";
    header += request.output_regions;
  }
  if (!request.trace_state.empty()) {
    header += ",\"tracestate\":";
    header += request.trace_state;
  }
  header += '}';

  out->inputs.clear();
  out->inputs.reserve(request.inputs.size());
  uint32_t order[kMaxInputs];
  size_t n_order = 0;
  for (const RequestInput& input : request.inputs) {
    InputSource source;
    source.data = input.data;
    source.size = input.size;
    out->inputs.push_back(source);
    if (n_order < kMaxInputs) order[n_order++] = static_cast<uint32_t>(input.spec);
  }
  out->input_order = input_order_key(order, n_order);
}

void submit_request_of(const ParsedRequest& request, RequestBlock* block, uint64_t request_id,
                       SubmitRequest* out) {
  out->request_id = request_id;
  out->metadata = block->metadata;
  out->options = SubmitOptions();  // what a reused `out` held is not this request's
  // Copied, not moved: a caller that reuses `block` and `out` keeps both vectors' room.
  out->inputs.assign(block->inputs.begin(), block->inputs.end());
  out->options.batch_size = request.batch_size;
  out->options.priority = request.priority;
  out->options.timeout_us = request.timeout_us;
  out->options.shape_key = request.shape_key;
  out->options.input_order = block->input_order;
  out->options.sequence_id = request.sequence_id;
  out->options.sequence_key = request.sequence_key;
  out->options.sequence_flags = request.sequence_flags;
}

bool request_block_fits(const uint8_t* base, uint64_t arena_size, uint64_t heap_begin,
                        uint64_t block) {
  if (block < heap_begin || block >= arena_size || arena_size - block < sizeof(RequestHeader)) {
    return false;
  }
  RequestHeader header;
  std::memcpy(&header, base + block, sizeof header);
  const uint64_t room = arena_size - block;
  const uint64_t metadata = request_metadata_offset(header.n_inputs);
  if (header.magic != kRequestMagic || metadata > room || header.metadata_size > room - metadata) {
    return false;
  }
  for (uint32_t i = 0; i < header.n_inputs; ++i) {
    InputSlot slot;
    std::memcpy(&slot, base + block + sizeof(RequestHeader) + uint64_t{i} * sizeof(InputSlot),
                sizeof slot);
    if (slot.offset < heap_begin || slot.offset > arena_size ||
        slot.size > arena_size - slot.offset) {
      return false;
    }
  }
  return true;
}

std::string request_trace_state(std::string_view metadata) {
  const char* start = nullptr;
  const char* end = nullptr;
  JsonReader reader(metadata.data(), metadata.size());
  const bool read = reader.object([&](std::string_view key) {
    if (key != "tracestate") return reader.skip_value();
    if (reader.peek() != '"' || !reader.skip_value(&start)) return false;
    end = reader.position();
    return true;
  });
  return read && start != nullptr ? std::string(start, static_cast<size_t>(end - start))
                                  : std::string();
}

std::string request_id_text(std::string_view metadata) {
  std::string_view id;
  JsonReader reader(metadata.data(), metadata.size());
  const bool read = reader.object([&](std::string_view key) {
    if (key == "id") return reader.raw_string(&id);
    return reader.skip_value();
  });
  return read ? std::string(id) : std::string();
}

}  // namespace naiad
