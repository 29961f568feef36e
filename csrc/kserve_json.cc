#include "kserve_json.h"

#include "json_reader.h"

namespace naiad {

namespace {

constexpr size_t kMaxRank = 32;

bool read_shape(JsonReader& reader, std::vector<int64_t>* shape) {
  return reader.array([&] {
    uint64_t dim;
    if (!reader.uint(&dim) || shape->size() >= kMaxRank) return false;
    shape->push_back(static_cast<int64_t>(dim));
    return true;
  });
}

// Reads the value of a member that may appear once; `seen` says it already did.
template <typename Read>
bool once(bool* seen, Read&& read) {
  if (*seen || !read()) return false;
  *seen = true;
  return true;
}

// {"binary_data_size": N}; anything else in an input's parameters (shared memory,
// unknown keys) is for the general path.
bool read_input_parameters(JsonReader& reader, uint64_t* binary_size) {
  bool seen = false;
  bool ok = reader.object([&](std::string_view key) {
    return key == "binary_data_size" && once(&seen, [&] { return reader.uint(binary_size); });
  });
  return ok && seen;
}

bool read_input(JsonReader& reader, RequestInput* input, uint64_t* binary_size) {
  bool has_name = false, has_datatype = false, has_shape = false, has_size = false;
  bool ok = reader.object([&](std::string_view key) {
    if (key == "name") return once(&has_name, [&] { return reader.plain_string(&input->name); });
    if (key == "datatype") {
      return once(&has_datatype, [&] { return reader.plain_string(&input->datatype); });
    }
    if (key == "shape") return once(&has_shape, [&] { return read_shape(reader, &input->shape); });
    if (key == "parameters") {
      return once(&has_size, [&] { return read_input_parameters(reader, binary_size); });
    }
    if (key == "data") return false;  // JSON tensor data: the general path converts it
    return reader.skip_value();
  });
  return ok && has_name && has_datatype && has_shape && has_size;
}

bool read_inputs(JsonReader& reader, const uint8_t* body, size_t body_size, uint64_t* data_offset,
                 ParsedRequest* out) {
  bool ok = reader.array([&] {
    RequestInput input;
    uint64_t binary_size = 0;
    if (!read_input(reader, &input, &binary_size)) return false;
    if (binary_size > body_size - *data_offset) return false;
    input.data = body + *data_offset;
    input.size = binary_size;
    *data_offset += binary_size;
    out->inputs.push_back(std::move(input));
    return true;
  });
  return ok && !out->inputs.empty();
}

// {"name": ..., "parameters": {"binary_data": true}}: only binary outputs, since the
// C++ writer writes no JSON tensor data.
bool read_output(JsonReader& reader, std::string_view* name) {
  bool has_name = false, has_parameters = false, has_binary = false, binary = false;
  auto parameters = [&] {
    return reader.object([&](std::string_view key) {
      return key == "binary_data" && once(&has_binary, [&] { return reader.boolean(&binary); });
    });
  };
  bool ok = reader.object([&](std::string_view key) {
    if (key == "name") return once(&has_name, [&] { return reader.plain_string(name); });
    if (key == "parameters") return once(&has_parameters, parameters);
    return reader.skip_value();
  });
  return ok && has_name && binary;
}

bool read_outputs(JsonReader& reader, ParsedRequest* out) {
  // An empty list asks for every output, as no list does.
  return reader.array([&] {
    std::string_view name;
    if (!read_output(reader, &name)) return false;
    for (std::string_view seen : out->output_names) {
      if (seen == name) return false;  // the general path decides what a repeat means
    }
    out->output_names.push_back(name);
    return true;
  });
}

// Request parameters: `binary_data_output` (bool), `priority` and `timeout`
// (non-negative integers, as the general path requires) and custom scalars. Keys with
// escapes, repeated keys and other values go the general way.
bool read_parameters(JsonReader& reader, ParsedRequest* out, bool* binary_output) {
  const char* start = nullptr;
  JsonReader probe = reader;
  if (!probe.skip_value(&start)) return false;
  bool has_binary = false, has_priority = false, has_timeout = false;
  bool has_sequence_id = false, has_start = false, has_end = false;
  bool ok = reader.object([&](std::string_view key) {
    if (key == "binary_data_output") {
      return once(&has_binary, [&] { return reader.boolean(binary_output); });
    }
    if (key == "priority") {
      return once(&has_priority, [&] {
        uint64_t priority;
        if (!reader.uint(&priority) || priority > UINT32_MAX) return false;
        out->priority = static_cast<uint32_t>(priority);
        return true;
      });
    }
    if (key == "timeout") return once(&has_timeout, [&] { return reader.uint(&out->timeout_us); });
    if (key == "sequence_id") {
      return once(&has_sequence_id, [&] {
        return reader.uint(&out->sequence_id) || reader.plain_string(&out->sequence_key);
      });
    }
    if (key == "sequence_start" || key == "sequence_end") {
      const uint32_t flag = key == "sequence_start" ? kSequenceFlagStart : kSequenceFlagEnd;
      return once(flag == kSequenceFlagStart ? &has_start : &has_end, [&] {
        bool value;
        if (!reader.boolean(&value)) return false;
        if (value) out->sequence_flags |= flag;
        return true;
      });
    }
    // A custom parameter: a string, number or bool passes to the model as written;
    // null, objects and arrays get the general path's error.
    const char* value = nullptr;
    return reader.skip_value(&value) && *value != 'n' && *value != '{' && *value != '[';
  });
  if (!ok) return false;
  out->parameters = std::string_view(start, static_cast<size_t>(reader.position() - start));
  return true;
}

}  // namespace

bool read_infer_header(const uint8_t* body, size_t body_size, size_t header_size,
                       ParsedRequest* out) {
  if (header_size == 0 || header_size > body_size) return false;
  JsonReader reader(reinterpret_cast<const char*>(body), header_size);
  bool has_id = false, has_inputs = false, has_outputs = false, has_parameters = false;
  bool binary_output = false;
  uint64_t data_offset = header_size;
  bool ok = reader.object([&](std::string_view key) {
    if (key == "id") return once(&has_id, [&] { return reader.plain_string(&out->id); });
    if (key == "inputs") {
      return once(&has_inputs,
                  [&] { return read_inputs(reader, body, body_size, &data_offset, out); });
    }
    if (key == "outputs") return once(&has_outputs, [&] { return read_outputs(reader, out); });
    if (key == "parameters") {
      return once(&has_parameters, [&] { return read_parameters(reader, out, &binary_output); });
    }
    return reader.skip_value();
  });
  if (!ok) return false;
  if (!reader.at_end() || !has_inputs || data_offset != body_size) return false;
  // Every output goes back as binary data, or the general path writes JSON data.
  return !out->output_names.empty() || binary_output;
}

std::string json_string_text(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    unsigned char u = static_cast<unsigned char>(c);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (u < 0x20) {
          out += "\\u00";
          out += kHex[u >> 4];
          out += kHex[u & 0xF];
        } else {
          out += c;
        }
    }
  }
  return out;
}

template <typename Sink>
size_t write_response_body(const InferResponse& response, Sink& sink) {
  if (response.error != ErrorKind::kNone) {
    sink.put("{\"error\":\"");
    sink.put(response.error_message);
    sink.put("\"}");
    return 12 + response.error_message.size();
  }
  const size_t start = sink.size();
  sink.put('{');
  if (!response.id.empty()) {
    sink.put("\"id\":\"");
    sink.put(response.id);
    sink.put("\",");
  }
  sink.put("\"model_name\":\"");
  sink.put(response.model_name);
  sink.put("\",\"model_version\":\"");
  sink.put(response.model_version);
  sink.put('"');
  if (!response.parameters.empty()) {
    sink.put(",\"parameters\":");
    sink.put(response.parameters);
  }
  sink.put(",\"outputs\":[");
  for (size_t i = 0; i < response.outputs.size(); ++i) {
    const ResponseOutput& output = response.outputs[i];
    if (i) sink.put(',');
    sink.put("{\"name\":\"");
    sink.put(output.name);
    sink.put("\",\"datatype\":\"");
    sink.put(output.datatype);
    sink.put("\",\"shape\":");
    sink.put(output.shape);
    sink.put(",\"parameters\":{\"binary_data_size\":");
    sink.number(output.size);
    sink.put("}}");
  }
  sink.put("]}");
  const size_t json_size = sink.size() - start;
  for (const ResponseOutput& output : response.outputs) sink.put(output.data, output.size);
  return json_size;
}

template size_t write_response_body<ByteCounter>(const InferResponse&, ByteCounter&);
template size_t write_response_body<ByteWriter>(const InferResponse&, ByteWriter&);

}  // namespace naiad
