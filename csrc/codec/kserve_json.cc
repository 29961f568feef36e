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

// Where the unescaped text of escaped strings goes (ParsedRequest::unescaped).
using Owned = std::forward_list<std::string>;

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

// An input as read: its JSON `data` is converted once the datatype and shape are known
// (they may come after it).
struct InputRead {
  bool has_region = false;    // `shared_memory_region` in its parameters
  bool has_offset = false;    // `shared_memory_offset`
  bool has_shm_size = false;  // `shared_memory_byte_size`
  bool has_size = false;      // `binary_data_size`
  uint64_t binary_size = 0;
  bool has_data = false;
  JsonReader data{nullptr, 0};
};

// A string member's text, unless it holds a NUL: Triton reads names and ids as C
// strings (cut there), which the general path words.
bool read_text(JsonReader& reader, std::string_view* out, Owned* owned) {
  return reader.string(out, owned) && out->find('\0') == std::string_view::npos;
}

// {"binary_data_size": N} or {}, or Triton's shm parameters (shared_memory_region,
// _offset, _byte_size; the tensor's bytes are in the client's region, resolved by the
// codec); anything else in an input's parameters (unknown keys) is for the general path.
bool read_input_parameters(JsonReader& reader, RequestInput* input, InputRead* read, Owned* owned) {
  return reader.object([&](std::string_view key) {
    if (key == "binary_data_size") {
      return once(&read->has_size, [&] { return reader.uint(&read->binary_size); });
    }
    if (key == "shared_memory_region") {
      return once(&read->has_region, [&] { return read_text(reader, &input->shm_region, owned); });
    }
    if (key == "shared_memory_offset") {
      return once(&read->has_offset, [&] { return reader.uint(&input->shm_offset); });
    }
    if (key == "shared_memory_byte_size") {
      return once(&read->has_shm_size, [&] { return reader.uint(&input->size); });
    }
    return false;
  });
}

// What read_input made of an input.
enum class InputOutcome : uint8_t { kRead, kRefused, kNotRead };

// Triton's first check of each input (ValidateInputContentType): it carries exactly one
// of `data`, `binary_data_size` and `shared_memory_region`.
std::string content_type_message(const InputRead& read) {
  std::string text =
      "Input must set only one of the following fields: 'data', 'binary_data_size' in "
      "'parameters', 'shared_memory_region' in 'parameters'. But";
  if (!read.has_data && !read.has_size && !read.has_region) return text + " no field is set";
  text += " set";
  if (read.has_data) text += " 'data'";
  if (read.has_size) text += " 'binary_data_size'";
  if (read.has_region) text += " 'shared_memory_region'";
  return text;
}

InputOutcome read_input(JsonReader& reader, RequestInput* input, InputRead* read, Owned* owned,
                        Refusal* refusal) {
  bool has_name = false, has_datatype = false, has_shape = false, has_parameters = false;
  bool ok = reader.object([&](std::string_view key) {
    if (key == "name")
      return once(&has_name, [&] { return read_text(reader, &input->name, owned); });
    if (key == "datatype") {
      return once(&has_datatype, [&] { return read_text(reader, &input->datatype, owned); });
    }
    if (key == "shape") return once(&has_shape, [&] { return read_shape(reader, &input->shape); });
    if (key == "parameters") {
      return once(&has_parameters,
                  [&] { return read_input_parameters(reader, input, read, owned); });
    }
    if (key == "data") {
      return once(&read->has_data, [&] {
        read->data = reader;
        return reader.skip_value();
      });
    }
    return reader.skip_value();
  });
  if (!ok) return InputOutcome::kNotRead;
  if (read->has_data + read->has_size + read->has_region != 1) {
    refusal->kind = ErrorKind::kInvalidArgument;
    refusal->message = content_type_message(*read);
    return InputOutcome::kRefused;
  }
  if (!has_name || !has_datatype || !has_shape) return InputOutcome::kNotRead;
  if (read->has_region || read->has_offset || read->has_shm_size) {
    // In a client shm region: its size too (without, or with shm keys beside `data` or
    // `binary_data_size`, the general path words it).
    input->in_shm = true;
    return read->has_region && read->has_shm_size ? InputOutcome::kRead : InputOutcome::kNotRead;
  }
  return InputOutcome::kRead;
}

// `binary`: the bytes after the header, of which `*binary_used` are taken so far.
bool read_inputs(JsonReader& reader, const uint8_t* header, const uint8_t* binary,
                 size_t binary_size, uint64_t* binary_used, ParsedRequest* out, Refusal* refusal) {
  // Where each JSON input's bytes start in out->converted (SIZE_MAX: a binary input);
  // the views are set once every input is read (converted may grow meanwhile).
  std::vector<size_t> converted_at;
  converted_at.reserve(kTypicalCount);
  out->inputs.reserve(kTypicalCount);
  bool ok = reader.array([&] {
    RequestInput input;
    InputRead read;
    Refusal found;
    switch (read_input(reader, &input, &read, &out->unescaped, &found)) {
      case InputOutcome::kNotRead:
        return false;
      case InputOutcome::kRefused:
        // Triton stops at the first input it refuses (as for `data` below).
        if (refusal->kind == ErrorKind::kNone) *refusal = std::move(found);
        return true;
      default:
        break;
    }
    // Triton reads no input after one it refuses.
    if (refusal->kind != ErrorKind::kNone) return true;
    if (input.in_shm) {  // its bytes are in a client region (the codec resolves it)
      converted_at.push_back(SIZE_MAX);
    } else if (read.has_data) {
      uint64_t count = 0;
      if (!element_count(input.shape, &count)) return false;
      const size_t start = out->converted.size();
      switch (
          read_tensor_data(read.data, input.datatype, input.name, count, &out->converted, &found)) {
        case DataRead::kNotRead:
          return false;
        case DataRead::kRefused:
          // Triton stops at the first input it refuses; reading on checks that nothing
          // before it in Triton's order (the rest of the document) is the general path's.
          out->converted.resize(start);
          *refusal = std::move(found);
          break;
        default:
          break;
      }
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
  if (!ok || (out->inputs.empty() && refusal->kind == ErrorKind::kNone)) return false;
  for (size_t i = 0; i < out->inputs.size(); ++i) {
    if (converted_at[i] == SIZE_MAX) continue;
    // A non-null pointer even for an empty tensor.
    out->inputs[i].data = out->converted.data() + converted_at[i];
    if (out->converted.empty()) out->inputs[i].data = header;
  }
  return true;
}

// {"name": ..., "parameters": {"binary_data": bool, "classification": count}}: binary
// or JSON outputs, classified or not, or outputs in a client shm region
// ({"shared_memory_region", "shared_memory_byte_size" [, "shared_memory_offset"]}, not
// with binary_data true nor classification); other keys are ignored, as Triton's.
bool read_output(JsonReader& reader, std::string_view* name, bool* json, uint64_t* classes,
                 OutputRegion* shm, bool* in_shm, Owned* owned) {
  bool has_name = false, has_parameters = false, has_binary = false, binary = false;
  bool has_region = false, has_offset = false, has_size = false, has_classes = false;
  auto parameters = [&] {
    return reader.object([&](std::string_view key) {
      if (key == "binary_data") return once(&has_binary, [&] { return reader.boolean(&binary); });
      if (key == "classification") return once(&has_classes, [&] { return reader.uint(classes); });
      if (key == "shared_memory_region") {
        return once(&has_region, [&] { return read_text(reader, &shm->region, owned); });
      }
      if (key == "shared_memory_offset") {
        return once(&has_offset, [&] { return reader.uint(&shm->offset); });
      }
      if (key == "shared_memory_byte_size") {
        return once(&has_size, [&] { return reader.uint(&shm->size); });
      }
      return reader.skip_value();  // Triton reads no other key
    });
  };
  bool ok = reader.object([&](std::string_view key) {
    if (key == "name") return once(&has_name, [&] { return read_text(reader, name, owned); });
    if (key == "parameters") return once(&has_parameters, parameters);
    return reader.skip_value();
  });
  *json = !binary;
  if (ok && (has_region || has_offset || has_size)) {
    *in_shm = true;
    *json = false;
    // The general path words the rest.
    return has_name && has_region && has_size && !binary && !has_classes;
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
    uint64_t classes = 0;
    OutputRegion shm;
    bool in_shm = false;
    if (!read_output(reader, &name, &json, &classes, &shm, &in_shm, &out->unescaped)) return false;
    for (std::string_view seen : out->output_names) {
      if (seen == name) return false;  // the general path decides what a repeat means
    }
    if (in_shm) {
      shm.output = out->output_names.size();
      out->output_shm.push_back(shm);
    }
    if (classes != 0 || !out->output_classes.empty()) {
      out->output_classes.resize(out->output_names.size());  // those before: 0
      out->output_classes.push_back(classes);
    }
    out->output_names.push_back(name);
    out->output_json.push_back(json);
    return true;
  });
}

// Request parameters: `binary_data_output` (bool), `priority` and `timeout`
// (non-negative integers, as the general path requires) and custom scalars; a custom
// parameter of another type is Triton's refusal (`refusal`, the first). Repeated keys
// and known keys with other values go the general way.
bool read_parameters(JsonReader& reader, ParsedRequest* out, bool* binary_output,
                     Refusal* refusal) {
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
        return reader.uint(&out->sequence_id) ||
               read_text(reader, &out->sequence_key, &out->unescaped);
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
    // Triton refuses null, objects and arrays (the first, in the document's order).
    const char* value = nullptr;
    if (!reader.skip_value(&value) || key.find('\0') != std::string_view::npos) return false;
    if ((*value == 'n' || *value == '{' || *value == '[') && refusal->kind == ErrorKind::kNone) {
      refusal->kind = ErrorKind::kInvalidArgument;
      refusal->message = "parameter '" + std::string(key) +
                         "' has invalid type. It should be either 'int', 'bool', or 'string'.";
    }
    return true;
  });
  if (!ok) return false;
  out->parameters = std::string_view(start, static_cast<size_t>(reader.position() - start));
  return true;
}

}  // namespace

namespace {

using Kind = ElementKind;

// The datatype row of `datatype` when JSON can carry its values; nullptr for FP16, BF16
// and unknown names.
const Datatype* json_datatype(std::string_view datatype) {
  const Datatype* type = find_datatype(datatype);
  if (type == nullptr || type->kind == Kind::kFloat16 || type->kind == Kind::kBFloat16) {
    return nullptr;
  }
  return type;
}

// The document's own limit (a deeper `data` was not skipped as a value).
constexpr int kMaxNesting = JsonReader::kMaxDepth;

// What became of one element of JSON `data`.
enum class Element : uint8_t {
  kTaken,      // converted and appended
  kWrongKind,  // not a value of the datatype: Triton's "attempt to access JSON non-..."
  kTooMany,    // past the shape's element count: Triton's shape mismatch
  kNotRead,    // beyond this reader (a number past a double, deep nesting, bad JSON)
};

// Calls `on_scalar()` for each element of the array at `reader`, nested arrays of any
// mix of depths flattened in order, as Triton reads them; stops at the first element
// not taken.
template <typename OnScalar>
Element walk_elements(JsonReader& reader, int depth, OnScalar& on_scalar) {
  Element result = Element::kTaken;
  bool ok = reader.array([&] {
    if (reader.peek() == '[') {
      result =
          depth < kMaxNesting ? walk_elements(reader, depth + 1, on_scalar) : Element::kNotRead;
    } else {
      result = on_scalar();
    }
    return result == Element::kTaken;
  });
  return !ok && result == Element::kTaken ? Element::kNotRead : result;
}

template <typename T>
void put_value(T value, std::vector<uint8_t>* out) {
  uint8_t bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // little-endian hosts only (as the arena)
  out->insert(out->end(), bytes, bytes + sizeof(T));
}

template <typename T>
bool parse_exact(std::string_view text, T* value) {
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), *value);
  return error == std::errc() && end == text.data() + text.size();
}

// An integer of the type's size, cut to its low bytes as Triton casts it.
void put_integer(uint64_t bits, const Datatype& type, std::vector<uint8_t>* out) {
  switch (type.size) {
    case 1:
      put_value(static_cast<uint8_t>(bits), out);
      return;
    case 2:
      put_value(static_cast<uint16_t>(bits), out);
      return;
    case 4:
      put_value(static_cast<uint32_t>(bits), out);
      return;
    default:
      put_value(bits, out);
  }
}

// One number of JSON `data` as Triton's reader (rapidjson) takes it: integer types take
// integers written without fraction or exponent that fit int64 (signed) or uint64
// (unsigned), cut to the type's size; FP32/FP64 take any number, read as a double.
Element put_number(JsonReader& data, const Datatype& type, std::vector<uint8_t>* out) {
  const char first = data.peek();
  if (first != '-' && (first < '0' || first > '9')) return Element::kWrongKind;
  std::string_view text;
  bool integral;
  if (!data.number(&text, &integral)) return Element::kNotRead;
  if (type.kind == Kind::kFloat) {
    double value;
    int64_t signed_value;
    uint64_t unsigned_value;
    if (integral && parse_exact(text, &signed_value)) {
      value = static_cast<double>(signed_value);
    } else if (integral && parse_exact(text, &unsigned_value)) {
      value = static_cast<double>(unsigned_value);
    } else if (!parse_exact(text, &value) || !std::isfinite(value)) {
      return Element::kNotRead;  // Triton refuses the document: a number too big
    }
    if (type.size == 4) {
      put_value(static_cast<float>(value), out);
    } else {
      put_value(value, out);
    }
    return Element::kTaken;
  }
  if (!integral) return Element::kWrongKind;
  if (type.kind == Kind::kSigned) {
    int64_t value;
    if (!parse_exact(text, &value)) return Element::kWrongKind;  // past int64
    put_integer(static_cast<uint64_t>(value), type, out);
    return Element::kTaken;
  }
  uint64_t value;
  if (text[0] == '-') {  // "-0" is zero; any other negative is no unsigned integer
    if (text.find_first_not_of("-0") != std::string_view::npos) return Element::kWrongKind;
    value = 0;
  } else if (!parse_exact(text, &value)) {
    return Element::kWrongKind;  // past uint64
  }
  put_integer(value, type, out);
  return Element::kTaken;
}

DataRead refuse(ErrorKind kind, std::string message, Refusal* refusal) {
  refusal->kind = kind;
  refusal->message = std::move(message);
  return DataRead::kRefused;
}

// Triton's complaint about an element of `data` that is not a value of `type`.
std::string_view wrong_kind_message(const Datatype& type) {
  switch (type.kind) {
    case Kind::kBool:
      return "Unable to parse 'data': attempt to access JSON non-boolean as boolean";
    case Kind::kUnsigned:
      return "Unable to parse 'data': attempt to access JSON non-unsigned-integer as "
             "unsigned-integer";
    case Kind::kSigned:
      return "Unable to parse 'data': attempt to access JSON non-signed-integer as "
             "signed-integer";
    case Kind::kBytes:
      return "Unable to parse JSON bytes array: attempt to access JSON non-string as string";
    default:
      return "Unable to parse 'data': attempt to access JSON non-number as double";
  }
}

}  // namespace

DataRead read_tensor_data(JsonReader data, std::string_view datatype, std::string_view name,
                          uint64_t count, std::vector<uint8_t>* out, Refusal* refusal) {
  // Triton reads no `data` at all for a tensor of no elements: the validator speaks.
  if (count == 0 && datatype != "BYTES") return DataRead::kConverted;
  // Triton's order: an array, then a datatype JSON can carry, then each element, then
  // the count (BYTES counts are the validator's).
  if (data.peek() != '[') {
    return refuse(ErrorKind::kInternal,
                  "Unable to parse 'data': attempt to access JSON non-array as array", refusal);
  }
  const Datatype* found = find_datatype(datatype);
  if (found == nullptr) {
    return refuse(ErrorKind::kInvalidArgument, "invalid datatype for input " + std::string(name),
                  refusal);
  }
  if (found->kind == Kind::kFloat16 || found->kind == Kind::kBFloat16) {
    return refuse(ErrorKind::kInvalidArgument,
                  "receiving " + std::string(datatype) +
                      " data via JSON is not supported. Please use the binary data format for "
                      "input " +
                      std::string(name),
                  refusal);
  }
  const Datatype& type = *found;
  if (type.kind != Kind::kBytes) {
    if (count > (SIZE_MAX - out->size()) / type.size) return DataRead::kNotRead;
    out->reserve(out->size() + count * type.size);
  }
  uint64_t seen = 0;
  std::string text;
  auto element = [&] {
    if (type.kind == Kind::kBytes) {
      if (data.peek() != '"') return Element::kWrongKind;
      text.clear();
      if (!data.string_into(&text) || text.size() > UINT32_MAX) return Element::kNotRead;
      put_value(static_cast<uint32_t>(text.size()), out);
      out->insert(out->end(), text.begin(), text.end());
      return Element::kTaken;
    }
    if (seen++ == count) return Element::kTooMany;
    if (type.kind == Kind::kBool) {
      bool value;
      if (!data.boolean(&value)) return Element::kWrongKind;
      out->push_back(value ? 1 : 0);
      return Element::kTaken;
    }
    return put_number(data, type, out);
  };
  constexpr std::string_view kShapeMismatch =
      "Unable to parse 'data': Shape does not match true shape of 'data' field";
  switch (walk_elements(data, 0, element)) {
    case Element::kTaken:
      if (type.kind != Kind::kBytes && seen != count) {
        return refuse(ErrorKind::kInternal, std::string(kShapeMismatch), refusal);
      }
      return DataRead::kConverted;
    case Element::kWrongKind:
      return refuse(ErrorKind::kInternal, std::string(wrong_kind_message(type)), refusal);
    case Element::kTooMany:
      return refuse(ErrorKind::kInternal, std::string(kShapeMismatch), refusal);
    default:
      return DataRead::kNotRead;
  }
}

DataRead read_tensor_data_text(std::string_view json, std::string_view datatype,
                               std::string_view name, uint64_t count, std::vector<uint8_t>* out,
                               Refusal* refusal) {
  JsonReader whole(json.data(), json.size());
  if (!whole.skip_value() || !whole.at_end()) return DataRead::kNotRead;
  return read_tensor_data(JsonReader(json.data(), json.size()), datatype, name, count, out,
                          refusal);
}

bool read_infer_header(const uint8_t* body, size_t body_size, size_t header_size,
                       ParsedRequest* out, Refusal* refusal) {
  if (header_size > body_size) return false;
  return read_infer_header(body, header_size, body + header_size, body_size - header_size, out,
                           refusal);
}

bool read_infer_header(const uint8_t* header, size_t header_size, const uint8_t* binary,
                       size_t binary_size, ParsedRequest* out, Refusal* refusal) {
  Refusal ignored;
  if (refusal == nullptr) refusal = &ignored;
  *refusal = Refusal();
  if (header_size == 0) return false;
  JsonReader reader(reinterpret_cast<const char*>(header), header_size);
  bool has_id = false, has_inputs = false, has_outputs = false, has_parameters = false;
  bool binary_output = false;
  uint64_t binary_used = 0;
  Refusal parameters_refusal;  // Triton reads the parameters before the inputs
  bool ok = reader.object([&](std::string_view key) {
    if (key == "id")
      return once(&has_id, [&] { return read_text(reader, &out->id, &out->unescaped); });
    if (key == "inputs") {
      return once(&has_inputs, [&] {
        return read_inputs(reader, header, binary, binary_size, &binary_used, out, refusal);
      });
    }
    if (key == "outputs") return once(&has_outputs, [&] { return read_outputs(reader, out); });
    if (key == "parameters") {
      return once(&has_parameters, [&] {
        return read_parameters(reader, out, &binary_output, &parameters_refusal);
      });
    }
    return reader.skip_value();
  });
  // Triton checks for binary data left over once it has read every input.
  if (!ok || !reader.at_end() || !has_inputs ||
      (binary_used != binary_size && refusal->kind == ErrorKind::kNone &&
       parameters_refusal.kind == ErrorKind::kNone)) {
    *refusal = Refusal();  // the general path's, whatever an input's data was
    return false;
  }
  if (parameters_refusal.kind != ErrorKind::kNone) *refusal = std::move(parameters_refusal);
  if (refusal->kind != ErrorKind::kNone) return false;
  // Outputs not listed go back as binary data if `binary_data_output` says so.
  out->json_unlisted = !binary_output;
  return true;
}

bool needs_json_escape(std::string_view text) {
  for (char c : text) {
    if (c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20) return true;
  }
  return false;
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
static size_t write_json_part(const InferResponse& response, Sink& sink) {
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
    // Plain text: escaped where it has to be (a client's id may hold any character).
    if (needs_json_escape(response.id)) {
      sink.put(json_string_text(response.id));
    } else {
      sink.put(response.id);
    }
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
  return sink.size() - start;
}

template <typename Sink>
size_t write_response_body(const InferResponse& response, Sink& sink) {
  const size_t json_size = write_json_part(response, sink);
  if (response.error != ErrorKind::kNone) return json_size;
  for (const ResponseOutput& output : response.outputs) {
    if (!output.json && !output.in_shm) sink.put(output.data, output.size);
  }
  return json_size;
}

size_t write_response_json(const InferResponse& response, ByteWriter& sink) {
  return write_json_part(response, sink);
}

template size_t write_response_body<ByteCounter>(const InferResponse&, ByteCounter&);
template size_t write_response_body<ByteWriter>(const InferResponse&, ByteWriter&);
template size_t write_response_body<StringSink>(const InferResponse&, StringSink&);

}  // namespace naiad
