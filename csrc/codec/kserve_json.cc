#include "codec/kserve_json.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "codec/datatype.h"
#include "codec/json_reader.h"
#include "util/unaligned.h"

namespace naiad {

namespace {

constexpr size_t kMaxRank = 32;

// What the readers reserve, so that a typical request (rank <= 4, a few inputs and
// outputs) grows none of its vectors one element at a time: one allocation each.
constexpr size_t kTypicalCount = 4;

bool read_shape(JsonReader& reader, std::vector<int64_t>* shape) {
  shape->reserve(kTypicalCount);
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

bool element_count(const std::vector<int64_t>& shape, uint64_t* count) {
  uint64_t total = 1;
  for (int64_t dim : shape) {
    uint64_t d = static_cast<uint64_t>(dim);
    if (d != 0 && total > UINT64_MAX / d) return false;
    total *= d;
  }
  *count = total;
  return true;
}

// {"binary_data_size": N} or {}, or Triton's shm parameters (shared_memory_region,
// _offset, _byte_size: region and size both; the tensor's bytes are in the client's
// region, resolved by the codec); anything else in an input's parameters (unknown keys)
// is for the general path.
bool read_input_parameters(JsonReader& reader, bool* has_size, uint64_t* binary_size,
                           RequestInput* input, bool* has_shm_size) {
  bool has_region = false, has_offset = false;
  bool ok = reader.object([&](std::string_view key) {
    if (key == "binary_data_size") return once(has_size, [&] { return reader.uint(binary_size); });
    if (key == "shared_memory_region") {
      return once(&has_region, [&] { return reader.plain_string(&input->shm_region); });
    }
    if (key == "shared_memory_offset") {
      return once(&has_offset, [&] { return reader.uint(&input->shm_offset); });
    }
    if (key == "shared_memory_byte_size") {
      return once(has_shm_size, [&] { return reader.uint(&input->size); });
    }
    return false;
  });
  if (ok && (has_region || has_offset || *has_shm_size)) {
    input->in_shm = true;
    return has_region && *has_shm_size && !*has_size;
  }
  return ok;
}

// An input as read: its JSON `data` is converted once the datatype and shape are known
// (they may come after it).
struct InputRead {
  bool has_shm_size = false;  // Triton's shm parameters (RequestInput::in_shm)
  bool has_size = false;
  uint64_t binary_size = 0;
  bool has_data = false;
  JsonReader data{nullptr, 0};
};

bool read_input(JsonReader& reader, RequestInput* input, InputRead* read) {
  bool has_name = false, has_datatype = false, has_shape = false, has_parameters = false;
  bool ok = reader.object([&](std::string_view key) {
    if (key == "name") return once(&has_name, [&] { return reader.plain_string(&input->name); });
    if (key == "datatype") {
      return once(&has_datatype, [&] { return reader.plain_string(&input->datatype); });
    }
    if (key == "shape") return once(&has_shape, [&] { return read_shape(reader, &input->shape); });
    if (key == "parameters") {
      return once(&has_parameters, [&] {
        return read_input_parameters(reader, &read->has_size, &read->binary_size, input,
                                     &read->has_shm_size);
      });
    }
    if (key == "data") {
      return once(&read->has_data, [&] {
        read->data = reader;
        return reader.skip_value();
      });
    }
    return reader.skip_value();
  });
  if (!ok || !has_name || !has_datatype || !has_shape) return false;
  // In a client shm region: neither `data` nor `binary_data_size` (checked above).
  if (input->in_shm) return !read->has_data;
  // Exactly one of `data` and `binary_data_size`, as the general path requires.
  return read->has_size != read->has_data;
}

// `binary`: the bytes after the header, of which `*binary_used` are taken so far.
bool read_inputs(JsonReader& reader, const uint8_t* header, const uint8_t* binary,
                 size_t binary_size, uint64_t* binary_used, ParsedRequest* out) {
  // Where each JSON input's bytes start in out->converted (SIZE_MAX: a binary input);
  // the views are set once every input is read (converted may grow meanwhile).
  std::vector<size_t> converted_at;
  converted_at.reserve(kTypicalCount);
  out->inputs.reserve(kTypicalCount);
  bool ok = reader.array([&] {
    RequestInput input;
    InputRead read;
    if (!read_input(reader, &input, &read)) return false;
    if (input.in_shm) {  // its bytes are in a client region (the codec resolves it)
      converted_at.push_back(SIZE_MAX);
    } else if (read.has_data) {
      uint64_t count = 0;
      if (!element_count(input.shape, &count)) return false;
      const size_t start = out->converted.size();
      if (!read_tensor_data(read.data, input.datatype, count, &out->converted)) return false;
      input.size = out->converted.size() - start;
      converted_at.push_back(start);
    } else {
      if (read.binary_size > binary_size - *binary_used) return false;
      input.data = binary + *binary_used;
      input.size = read.binary_size;
      *binary_used += read.binary_size;
      converted_at.push_back(SIZE_MAX);
    }
    out->inputs.push_back(std::move(input));
    return true;
  });
  if (!ok || out->inputs.empty()) return false;
  for (size_t i = 0; i < out->inputs.size(); ++i) {
    if (converted_at[i] == SIZE_MAX) continue;
    // A non-null pointer even for an empty tensor.
    out->inputs[i].data = out->converted.data() + converted_at[i];
    if (out->converted.empty()) out->inputs[i].data = header;
  }
  return true;
}

// {"name": ..., "parameters": {"binary_data": bool}}: binary or JSON outputs, or
// outputs in a client shm region ({"shared_memory_region", "shared_memory_byte_size"
// [, "shared_memory_offset"]}, not with binary_data true); others (classification) are
// the general path's.
bool read_output(JsonReader& reader, std::string_view* name, bool* json, OutputRegion* shm,
                 bool* in_shm) {
  bool has_name = false, has_parameters = false, has_binary = false, binary = false;
  bool has_region = false, has_offset = false, has_size = false;
  auto parameters = [&] {
    return reader.object([&](std::string_view key) {
      if (key == "binary_data") return once(&has_binary, [&] { return reader.boolean(&binary); });
      if (key == "shared_memory_region") {
        return once(&has_region, [&] { return reader.plain_string(&shm->region); });
      }
      if (key == "shared_memory_offset") {
        return once(&has_offset, [&] { return reader.uint(&shm->offset); });
      }
      if (key == "shared_memory_byte_size") {
        return once(&has_size, [&] { return reader.uint(&shm->size); });
      }
      return false;
    });
  };
  bool ok = reader.object([&](std::string_view key) {
    if (key == "name") return once(&has_name, [&] { return reader.plain_string(name); });
    if (key == "parameters") return once(&has_parameters, parameters);
    return reader.skip_value();
  });
  *json = !binary;
  if (ok && (has_region || has_offset || has_size)) {
    *in_shm = true;
    *json = false;
    return has_name && has_region && has_size && !binary;  // the general path words the rest
  }
  return ok && has_name;
}

bool read_outputs(JsonReader& reader, ParsedRequest* out) {
  // An empty list asks for every output, as no list does.
  out->output_names.reserve(kTypicalCount);
  out->output_json.reserve(kTypicalCount);
  return reader.array([&] {
    std::string_view name;
    bool json = false;
    OutputRegion shm;
    bool in_shm = false;
    if (!read_output(reader, &name, &json, &shm, &in_shm)) return false;
    for (std::string_view seen : out->output_names) {
      if (seen == name) return false;  // the general path decides what a repeat means
    }
    if (in_shm) {
      shm.output = out->output_names.size();
      out->output_shm.push_back(shm);
    }
    out->output_names.push_back(name);
    out->output_json.push_back(json);
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

namespace {

using Kind = ElementKind;

// The datatype row of `datatype` when JSON can carry its values; nullptr for FP16, BF16
// and unknown names (the general path's errors).
const Datatype* json_datatype(std::string_view datatype) {
  const Datatype* type = find_datatype(datatype);
  if (type == nullptr || type->kind == Kind::kFloat16 || type->kind == Kind::kBFloat16) {
    return nullptr;
  }
  return type;
}

constexpr int kMaxNesting = 32;

// Calls `on_scalar()` for each element of JSON `data`, flattened as the general path
// flattens it: a flat array, or (when its first item is an array) nested arrays to any
// mix of depths. False: not an array, a scalar before a nested array at the top, or
// `on_scalar` refused.
template <typename OnScalar>
bool walk_nested(JsonReader& reader, int depth, OnScalar& on_scalar) {
  if (reader.peek() != '[') return on_scalar();
  if (depth > kMaxNesting) return false;
  return reader.array([&] { return walk_nested(reader, depth + 1, on_scalar); });
}

template <typename OnScalar>
bool walk_data(JsonReader& reader, OnScalar&& on_scalar) {
  if (reader.peek() != '[') return false;
  JsonReader probe = reader;
  probe.consume('[');
  if (probe.peek() == '[') return walk_nested(reader, 0, on_scalar);
  return reader.array([&] { return reader.peek() != '[' && on_scalar(); });
}

template <typename T>
void put_value(T value, std::vector<uint8_t>* out) {
  uint8_t bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // little-endian hosts only (as the arena)
  out->insert(out->end(), bytes, bytes + sizeof(T));
}

bool parse_int(std::string_view text, int64_t* value) {
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), *value);
  return error == std::errc() && end == text.data() + text.size();
}

bool parse_double(std::string_view text, double* value) {
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), *value);
  return error == std::errc() && end == text.data() + text.size() && std::isfinite(*value);
}

bool put_integer(int64_t value, const Datatype& type, std::vector<uint8_t>* out) {
  // Out of the type's range: numpy would wrap it; the general path decides.
  if (type.kind == Kind::kUnsigned) {
    if (value < 0) return false;
    switch (type.size) {
      case 1:
        if (value > UINT8_MAX) return false;
        put_value(static_cast<uint8_t>(value), out);
        return true;
      case 2:
        if (value > UINT16_MAX) return false;
        put_value(static_cast<uint16_t>(value), out);
        return true;
      case 4:
        if (value > UINT32_MAX) return false;
        put_value(static_cast<uint32_t>(value), out);
        return true;
      default:
        put_value(static_cast<uint64_t>(value), out);
        return true;
    }
  }
  switch (type.size) {
    case 1:
      if (value < INT8_MIN || value > INT8_MAX) return false;
      put_value(static_cast<int8_t>(value), out);
      return true;
    case 2:
      if (value < INT16_MIN || value > INT16_MAX) return false;
      put_value(static_cast<int16_t>(value), out);
      return true;
    case 4:
      if (value < INT32_MIN || value > INT32_MAX) return false;
      put_value(static_cast<int32_t>(value), out);
      return true;
    default:
      put_value(value, out);
      return true;
  }
}

}  // namespace

bool read_tensor_data(JsonReader data, std::string_view datatype, uint64_t count,
                      std::vector<uint8_t>* out) {
  const Datatype* found = json_datatype(datatype);
  if (found == nullptr) return false;
  const Datatype& type = *found;
  uint64_t seen = 0;
  if (type.kind == Kind::kBytes) {
    std::string text;
    bool ok = walk_data(data, [&] {
      text.clear();
      if (data.peek() != '"') return false;
      if (!data.string_into(&text) || text.size() > UINT32_MAX) return false;
      put_value(static_cast<uint32_t>(text.size()), out);
      out->insert(out->end(), text.begin(), text.end());
      ++seen;
      return true;
    });
    return ok && seen == count;
  }
  if (type.kind == Kind::kBool) {
    bool ok = walk_data(data, [&] {
      bool value;
      if (!data.boolean(&value)) return false;
      out->push_back(value ? 1 : 0);
      ++seen;
      return true;
    });
    return ok && seen == count;
  }
  // Numbers: a first pass counts them and sees whether any has a fraction or an
  // exponent (then numpy reads them all as float64, as this does); booleans, strings
  // and nulls are the general path's.
  bool any_float = false;
  JsonReader first = data;
  bool ok = walk_data(first, [&] {
    std::string_view text;
    bool integral;
    if (!first.number(&text, &integral)) return false;
    any_float |= !integral;
    ++seen;
    return true;
  });
  if (!ok || seen != count) return false;
  if (count > (SIZE_MAX - out->size()) / type.size) return false;
  out->reserve(out->size() + count * type.size);
  return walk_data(data, [&] {
    std::string_view text;
    bool integral;
    if (!data.number(&text, &integral)) return false;
    if (type.kind != Kind::kFloat) {
      int64_t value;
      // A fraction anywhere makes them all float64: numpy refuses that for integers.
      return !any_float && parse_int(text, &value) && put_integer(value, type, out);
    }
    double value;
    if (!any_float) {
      // All integers: numpy's int64 array cast to the float type.
      int64_t integer;
      if (!parse_int(text, &integer)) return false;
      if (type.size == 4) {
        put_value(static_cast<float>(integer), out);
      } else {
        put_value(static_cast<double>(integer), out);
      }
      return true;
    }
    if (!parse_double(text, &value)) return false;
    if (type.size == 8) {
      put_value(value, out);
      return true;
    }
    if (std::fabs(value) > std::numeric_limits<float>::max()) return false;
    put_value(static_cast<float>(value), out);
    return true;
  });
}

bool read_infer_header(const uint8_t* body, size_t body_size, size_t header_size,
                       ParsedRequest* out) {
  if (header_size > body_size) return false;
  return read_infer_header(body, header_size, body + header_size, body_size - header_size, out);
}

bool read_infer_header(const uint8_t* header, size_t header_size, const uint8_t* binary,
                       size_t binary_size, ParsedRequest* out) {
  if (header_size == 0) return false;
  JsonReader reader(reinterpret_cast<const char*>(header), header_size);
  bool has_id = false, has_inputs = false, has_outputs = false, has_parameters = false;
  bool binary_output = false;
  uint64_t binary_used = 0;
  bool ok = reader.object([&](std::string_view key) {
    if (key == "id") return once(&has_id, [&] { return reader.plain_string(&out->id); });
    if (key == "inputs") {
      return once(&has_inputs, [&] {
        return read_inputs(reader, header, binary, binary_size, &binary_used, out);
      });
    }
    if (key == "outputs") return once(&has_outputs, [&] { return read_outputs(reader, out); });
    if (key == "parameters") {
      return once(&has_parameters, [&] { return read_parameters(reader, out, &binary_output); });
    }
    return reader.skip_value();
  });
  if (!ok) return false;
  if (!reader.at_end() || !has_inputs || binary_used != binary_size) return false;
  // Outputs not listed go back as binary data if `binary_data_output` says so.
  out->json_unlisted = !binary_output;
  return true;
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

std::string_view json_output_error(const ResponseOutput& output, ErrorKind* kind) {
  *kind = ErrorKind::kInvalidArgument;
  if (output.datatype == "FP16") {
    return "sending FP16 data via JSON is not supported. Please use the binary data format "
           "for output";
  }
  if (output.datatype == "BF16") {
    return "sending BF16 data via JSON is not supported. Please use the binary data format "
           "for output";
  }
  const Datatype* type = json_datatype(output.datatype);
  if (type == nullptr) return "Invalid data type for output tensor";
  if (type->kind != Kind::kBytes && output.size % type->size != 0) {
    *kind = ErrorKind::kInternal;  // numpy's complaint, as the general path's 500
    return "buffer size must be a multiple of element size";
  }
  *kind = ErrorKind::kNone;
  return {};
}

namespace {

template <typename Sink, typename T>
void put_integer_text(Sink& sink, T value) {
  char buffer[24];
  auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  sink.put(std::string_view(buffer, static_cast<size_t>(result.ptr - buffer)));
}

// Shortest text that reads back as `value`: the fewest significant digits that round
// trip (as the general path's encoder picks them), in fixed notation for decimal
// exponents -5 < x < 16 ("0.1", "546404030.0") and in scientific notation otherwise
// ("1e-07", "1e+20"); NaN and infinities as null, as the general path writes them.
template <typename Sink, typename T>
void put_float_text(Sink& sink, T value) {
  if (!std::isfinite(value)) {
    sink.put("null");
    return;
  }
  char sci[48];
  auto result = std::to_chars(sci, sci + sizeof(sci), value, std::chars_format::scientific);
  std::string_view text(sci, static_cast<size_t>(result.ptr - sci));
  // text: [-]d[.ddd]e(+|-)xx
  const size_t e = text.find('e');
  int exponent = 0;
  std::from_chars(text.data() + e + (text[e + 1] == '+' ? 2 : 1), text.data() + text.size(),
                  exponent);
  if (exponent <= -5 || exponent >= 16) {
    sink.put(text);
    return;
  }
  char digits[24];
  size_t count = 0;
  const bool negative = text[0] == '-';
  for (size_t i = negative ? 1 : 0; i < e; ++i) {
    if (text[i] != '.') digits[count++] = text[i];
  }
  char out[64];
  size_t size = 0;
  if (negative) out[size++] = '-';
  if (exponent < 0) {
    out[size++] = '0';
    out[size++] = '.';
    for (int i = -1; i > exponent; --i) out[size++] = '0';
    for (size_t i = 0; i < count; ++i) out[size++] = digits[i];
  } else {
    const size_t integer = static_cast<size_t>(exponent) + 1;
    for (size_t i = 0; i < integer; ++i) out[size++] = i < count ? digits[i] : '0';
    out[size++] = '.';
    if (count > integer) {
      for (size_t i = integer; i < count; ++i) out[size++] = digits[i];
    } else {
      out[size++] = '0';
    }
  }
  sink.put(std::string_view(out, size));
}

// Appends `text` (bytes) decoded as UTF-8 with each invalid sequence replaced by
// U+FFFD (the longest valid prefix of a sequence counts as one, as Python's
// decode("utf-8", "replace") does), then JSON-escaped.
template <typename Sink>
void put_utf8_replacing(Sink& sink, const uint8_t* p, size_t size) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  static constexpr char kHex[] = "0123456789abcdef";
  size_t i = 0;
  while (i < size) {
    const uint8_t c = p[i];
    if (c < 0x80) {
      switch (c) {
        case '"':
          sink.put("\\\"");
          break;
        case '\\':
          sink.put("\\\\");
          break;
        case '\b':
          sink.put("\\b");
          break;
        case '\f':
          sink.put("\\f");
          break;
        case '\n':
          sink.put("\\n");
          break;
        case '\r':
          sink.put("\\r");
          break;
        case '\t':
          sink.put("\\t");
          break;
        default:
          if (c < 0x20) {
            sink.put("\\u00");
            sink.put(kHex[c >> 4]);
            sink.put(kHex[c & 0xF]);
          } else {
            sink.put(static_cast<char>(c));
          }
      }
      ++i;
      continue;
    }
    size_t length = 0;
    uint8_t low = 0x80, high = 0xBF;  // the second byte's range
    if (c >= 0xC2 && c <= 0xDF) {
      length = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      length = 3;
      if (c == 0xE0) low = 0xA0;
      if (c == 0xED) high = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      length = 4;
      if (c == 0xF0) low = 0x90;
      if (c == 0xF4) high = 0x8F;
    }
    if (length == 0) {
      sink.put(kReplacement);
      ++i;
      continue;
    }
    size_t valid = 1;
    while (valid < length && i + valid < size) {
      const uint8_t next = p[i + valid];
      const uint8_t lo = valid == 1 ? low : 0x80;
      const uint8_t hi = valid == 1 ? high : 0xBF;
      if (next < lo || next > hi) break;
      ++valid;
    }
    if (valid == length) {
      sink.put(std::string_view(reinterpret_cast<const char*>(p + i), length));
    } else {
      sink.put(kReplacement);
    }
    i += valid;
  }
}

template <typename Sink>
void put_json_data(Sink& sink, const ResponseOutput& output) {
  const Datatype* type = json_datatype(output.datatype);
  const uint8_t* p = output.data;
  sink.put('[');
  if (type == nullptr) {  // json_output_error refused it: no values
    sink.put(']');
    return;
  }
  if (type->kind == Kind::kBytes) {
    // u32 length + bytes per element, as the general path reads them (a length past
    // the end takes what is left; a tail under 4 bytes is ignored).
    uint64_t offset = 0;
    bool first = true;
    while (offset + 4 <= output.size) {
      uint64_t length = load_unaligned<uint32_t>(p + offset);
      offset += 4;
      if (length > output.size - offset) length = output.size - offset;
      if (!first) sink.put(',');
      first = false;
      sink.put('"');
      put_utf8_replacing(sink, p + offset, length);
      sink.put('"');
      offset += length;
    }
    sink.put(']');
    return;
  }
  const uint64_t count = output.size / type->size;
  if (type->kind == Kind::kBool) {
    for (uint64_t i = 0; i < count; ++i) {
      if (i) sink.put(',');
      sink.put(p[i] ? std::string_view("true") : std::string_view("false"));
    }
  } else {
    visit_number_type(*type, [&](auto zero) {
      using T = decltype(zero);
      for (uint64_t i = 0; i < count; ++i) {
        if (i) sink.put(',');
        if constexpr (std::is_floating_point_v<T>) {
          put_float_text(sink, load_unaligned<T>(p + i * sizeof(T)));
        } else {
          put_integer_text(sink, load_unaligned<T>(p + i * sizeof(T)));
        }
      }
    });
  }
  sink.put(']');
}

}  // namespace

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
    if (output.in_shm) {  // in the client's shm region: metadata only, as Triton
      sink.put('}');
      continue;
    }
    if (output.json) {
      sink.put(",\"data\":");
      put_json_data(sink, output);
      sink.put('}');
      continue;
    }
    sink.put(",\"parameters\":{\"binary_data_size\":");
    sink.number(output.size);
    sink.put("}}");
  }
  sink.put("]}");
  const size_t json_size = sink.size() - start;
  for (const ResponseOutput& output : response.outputs) {
    if (!output.json && !output.in_shm) sink.put(output.data, output.size);
  }
  return json_size;
}

template size_t write_response_body<ByteCounter>(const InferResponse&, ByteCounter&);
template size_t write_response_body<ByteWriter>(const InferResponse&, ByteWriter&);
template size_t write_response_body<StringSink>(const InferResponse&, StringSink&);

}  // namespace naiad
