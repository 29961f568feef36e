#include "request_block.h"

#include <charconv>

namespace naiad {

namespace {

constexpr uint64_t kAlign = 64;

uint64_t align_up(uint64_t value) { return (value + kAlign - 1) & ~(kAlign - 1); }

void append_uint(std::string* out, uint64_t value) {
  char buffer[24];
  std::to_chars_result end = std::to_chars(buffer, buffer + sizeof(buffer), value);
  out->append(buffer, end.ptr);
}

}  // namespace

void layout_request_block(const ModelSpec& model, const ParsedRequest& request, RequestBlock* out) {
  std::string header;
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
    header += "],";
    append_uint(&header, input.size);
    header += ']';
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
  header += '}';

  uint32_t length = static_cast<uint32_t>(header.size());
  out->prefix.assign(reinterpret_cast<const char*>(&length), 4);
  out->prefix += header;
  out->parts.clear();
  out->parts.push_back(SubmitPart{out->prefix.data(), out->prefix.size(), 0});
  uint64_t cursor = align_up(out->prefix.size());
  uint64_t end = out->prefix.size();
  for (const RequestInput& input : request.inputs) {
    out->parts.push_back(SubmitPart{input.data, input.size, cursor});
    end = cursor + input.size;
    cursor = align_up(end);
  }
  out->size = end > out->prefix.size() ? end : out->prefix.size();
}

}  // namespace naiad
