#include "http2/grpc_lane.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <system_error>

#include "codec/json_reader.h"
#include "http2/grpc_contents.h"
#include "http2/grpc_infer_message.h"

namespace naiad {

namespace {

// The one `triton_` request parameter Triton 2.51 accepts (decoupled streams: an empty
// final response, grpc/decoupled.py).
constexpr std::string_view kEmptyFinalResponse = "triton_enable_empty_final_response";

constexpr const char kUnparsable[] = "Unable to parse request";

// Four hex digits of a \u escape; the worker writes valid JSON, so bad digits are 0.
uint32_t hex4(std::string_view digits) {
  uint32_t v = 0;
  for (char c : digits) {
    v <<= 4;
    if (c >= '0' && c <= '9') v |= c - '0';
    if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
    if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
  }
  return v;
}

// JSON string text (escapes kept, as the result block holds it) as plain UTF-8.
std::string unescape_json(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c != '\\' || i + 1 >= text.size()) {
      out.push_back(c);
      continue;
    }
    char e = text[++i];
    switch (e) {
      case 'b':
        out.push_back('\b');
        break;
      case 'f':
        out.push_back('\f');
        break;
      case 'n':
        out.push_back('\n');
        break;
      case 'r':
        out.push_back('\r');
        break;
      case 't':
        out.push_back('\t');
        break;
      case 'u': {
        if (i + 4 >= text.size()) return out;
        uint32_t cp = hex4(text.substr(i + 1, 4));
        i += 4;
        // A surrogate pair: \uD8xx\uDCxx.
        if (cp >= 0xd800 && cp < 0xdc00 && i + 6 < text.size() && text[i + 1] == '\\' &&
            text[i + 2] == 'u') {
          uint32_t low = hex4(text.substr(i + 3, 4));
          cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
          i += 6;
        }
        if (cp < 0x80) {
          out.push_back(static_cast<char>(cp));
        } else if (cp < 0x800) {
          out.push_back(static_cast<char>(0xc0 | (cp >> 6)));
          out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
        } else if (cp < 0x10000) {
          out.push_back(static_cast<char>(0xe0 | (cp >> 12)));
          out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
          out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
        } else {
          out.push_back(static_cast<char>(0xf0 | (cp >> 18)));
          out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
          out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
          out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
        }
        break;
      }
      default:  // \" \\ \/
        out.push_back(e);
    }
  }
  return out;
}

// What a tensor's parameters say of shared memory, read as Triton 2.51 reads them
// (ParseSharedMemoryParams), in its order: shared_memory_region a string_param, then
// shared_memory_offset and shared_memory_byte_size int64_params that need the region,
// the byte size required with it. Negative numbers pass as their 64-bit pattern: the
// registry refuses them as Triton's shm manager does (offset, then offset + size). The
// other keys are ignored (Triton's gRPC front end passes no other tensor parameter on),
// but an output's `classification` (output_classes, read after these). kRefused:
// `error` holds Triton's message.
enum class TensorShm { kNone, kRegion, kRefused };

const grpc::Parameter* find_parameter(const std::vector<grpc::Parameter>& parameters,
                                      std::string_view key) {
  for (const grpc::Parameter& p : parameters) {
    if (p.key == key) return &p;
  }
  return nullptr;
}

TensorShm tensor_shm(const std::vector<grpc::Parameter>& parameters, std::string_view tensor,
                     std::string_view* region, uint64_t* offset, uint64_t* size,
                     std::string* error) {
  using Kind = grpc::Parameter::Kind;
  const std::string for_tensor = " parameter for tensor '" + std::string(tensor) + "'";
  const grpc::Parameter* p = find_parameter(parameters, "shared_memory_region");
  const bool has_region = p != nullptr;
  if (has_region) {
    if (p->kind != Kind::kString) {
      *error =
          "invalid value type for 'shared_memory_region'" + for_tensor + ", expected string_param.";
      return TensorShm::kRefused;
    }
    *region = p->string_value;
  }
  for (std::string_view key : {"shared_memory_offset", "shared_memory_byte_size"}) {
    p = find_parameter(parameters, key);
    const std::string quoted = "'" + std::string(key) + "'";
    if (p == nullptr) {
      if (has_region && key == "shared_memory_byte_size") {
        *error = quoted + " must be specified along with 'shared_memory_region'" + for_tensor;
        return TensorShm::kRefused;
      }
      continue;
    }
    if (!has_region) {
      *error = quoted + " can not be specified without 'shared_memory_region'" + for_tensor;
      return TensorShm::kRefused;
    }
    if (p->kind != Kind::kInt64) {
      *error = "invalid value type for " + quoted + for_tensor + ", expected int64_param.";
      return TensorShm::kRefused;
    }
    *(key == "shared_memory_offset" ? offset : size) = static_cast<uint64_t>(p->int64_value);
  }
  return has_region ? TensorShm::kRegion : TensorShm::kNone;
}

// An output's `classification` as Triton 2.51 reads it: an int64_param above 0, not
// with a shm region. 0 when it has none; false with `error` for Triton's refusal.
bool output_classes(const std::vector<grpc::Parameter>& parameters, bool in_shm, uint64_t* count,
                    std::string* error) {
  *count = 0;
  const grpc::Parameter* p = find_parameter(parameters, "classification");
  if (p == nullptr) return true;
  if (p->kind != grpc::Parameter::Kind::kInt64) {
    *error = "invalid value type for 'classification' parameter, expected int64_param";
    return false;
  }
  if (p->int64_value <= 0) {
    *error = "invalid value for 'classification' parameter, expected >= 0";
    return false;
  }
  if (in_shm) {
    *error = "output can't set both 'shared_memory_region' and 'classification'";
    return false;
  }
  *count = static_cast<uint64_t>(p->int64_value);
  return true;
}

bool needs_unescape(std::string_view text) { return text.find('\\') != std::string_view::npos; }

// "[1,16]" -> {1, 16}. The worker writes shapes as a JSON array of integers.
std::vector<int64_t> parse_shape(std::string_view text) {
  std::vector<int64_t> dims;
  int64_t value = 0;
  bool negative = false, in_number = false;
  for (char c : text) {
    if (c == '-') {
      negative = true;
    } else if (c >= '0' && c <= '9') {
      value = value * 10 + (c - '0');
      in_number = true;
    } else if (in_number) {
      dims.push_back(negative ? -value : value);
      value = 0;
      negative = false;
      in_number = false;
    }
  }
  return dims;
}

// `text` is all one integer that `out`'s type holds.
template <typename Integer>
bool whole_number(std::string_view text, Integer* out) {
  const char* end = text.data() + text.size();
  const std::from_chars_result read = std::from_chars(text.data(), end, *out);
  return read.ec == std::errc() && read.ptr == end;
}

// The response parameters (a raw JSON object of bools, numbers and strings, as the
// result block holds them) as the protobuf map's entries, typed as the general path
// types them (grpc/tensors.py set_parameters): a bool, an integer as int64 (above its
// range as uint64), another number as double, a string; other values are left out.
// `plain` turns a JSON string's text into its bytes. False when the text is not an
// object of that shape.
template <typename Plain>
bool response_parameters(std::string_view json, Plain&& plain, std::vector<grpc::Parameter>* out) {
  JsonReader reader(json.data(), json.size());
  if (!reader.consume('{')) return false;
  if (reader.consume('}')) return true;
  do {
    grpc::Parameter p;
    std::string_view key;
    if (!reader.raw_string(&key) || !reader.consume(':')) return false;
    p.key = plain(key);
    const char next = reader.peek();
    if (next == '"') {
      std::string_view text;
      if (!reader.raw_string(&text)) return false;
      p.kind = grpc::Parameter::Kind::kString;
      p.string_value = plain(text);
    } else if (next == 't' || next == 'f') {
      if (!reader.boolean(&p.bool_value)) return false;
      p.kind = grpc::Parameter::Kind::kBool;
    } else if (next == '-' || (next >= '0' && next <= '9')) {
      std::string_view text;
      bool integral = false;
      if (!reader.number(&text, &integral)) return false;
      if (integral && whole_number(text, &p.int64_value)) {
        p.kind = grpc::Parameter::Kind::kInt64;
      } else if (integral && whole_number(text, &p.uint64_value)) {
        p.kind = grpc::Parameter::Kind::kUint64;
      } else {
        p.kind = grpc::Parameter::Kind::kDouble;
        p.double_value = std::strtod(std::string(text).c_str(), nullptr);
      }
    } else {
      if (!reader.skip_value()) return false;
      continue;  // null, an object or an array: no InferParameter holds it
    }
    // A key given twice is one map entry, the last value (as a protobuf map parses it).
    bool replaced = false;
    for (grpc::Parameter& existing : *out) {
      if (existing.key == p.key) {
        existing = p;
        replaced = true;
      }
    }
    if (!replaced) out->push_back(p);
  } while (reader.consume(','));
  return reader.consume('}');
}

// The protobuf response's fields, from the codec's answer. Strings are the result
// block's JSON text; plain in the common case, unescaped into `scratch` otherwise (a
// deque: the views of earlier strings stay valid as it grows).
grpc::ResponseToWrite to_write(const InferResponse& r, std::deque<std::string>* scratch) {
  auto plain = [scratch](std::string_view text) -> std::string_view {
    if (!needs_unescape(text)) return text;
    scratch->push_back(unescape_json(text));
    return scratch->back();
  };
  grpc::ResponseToWrite out;
  out.model_name = plain(r.model_name);
  out.model_version = r.model_version;
  out.id = r.id;
  if (!r.parameters.empty() && !response_parameters(r.parameters, plain, &out.parameters)) {
    out.parameters.clear();  // not JSON the result block reader would have passed on
  }
  for (const ResponseOutput& o : r.outputs) {
    grpc::OutputToWrite w;
    w.name = plain(o.name);
    w.datatype = o.datatype;
    w.shape = parse_shape(o.shape);
    w.data = o.data;
    w.size = o.size;
    out.outputs.push_back(std::move(w));
  }
  return out;
}

void put_json_string(std::string_view s, std::string* out) {
  static const char kHex[] = "0123456789abcdef";
  out->push_back('"');
  for (char ch : s) {
    uint8_t c = static_cast<uint8_t>(ch);
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(ch);
    } else if (c < 0x20) {
      *out += "\\u00";
      out->push_back(kHex[c >> 4]);
      out->push_back(kHex[c & 15]);
    } else {
      out->push_back(ch);
    }
  }
  out->push_back('"');
}

// A double as the general path's encoder (orjson) writes it: shortest round-trip
// digits, a whole number with ".0", and null for NaN and the infinities, which JSON has
// no number for.
void put_json_double(double value, std::string* json) {
  if (!std::isfinite(value)) {
    *json += "null";
    return;
  }
  char text[32];
  const std::to_chars_result end = std::to_chars(text, text + sizeof text, value);
  json->append(text, end.ptr);
  // A whole number keeps its ".0": the model reads a float, not an int.
  if (std::string_view(text, end.ptr - text).find_first_of(".e") == std::string_view::npos) {
    *json += ".0";
  }
}

// Request parameters with Triton's rules (SetInferenceRequestMetadata): `sequence_id`
// an int64 or a string, `sequence_start`/`sequence_end` bools, `priority` a non-negative
// int64 or a uint64, `timeout` an int64, keys starting with `triton_` only those Triton
// reserves, any other an int64, bool, string or double. Taken into `out` for the scheduler and
// passed to the model as a JSON object `json`. False: `error` holds Triton's refusal.
bool take_parameters(const std::vector<grpc::Parameter>& parameters, ParsedRequest* out,
                     std::string* json, std::string* error) {
  using Kind = grpc::Parameter::Kind;
  if (parameters.empty()) return true;
  json->push_back('{');
  for (const grpc::Parameter& p : parameters) {
    const std::string quoted_key = "'" + std::string(p.key) + "'";
    if (p.key == "sequence_id") {
      if (p.kind == Kind::kInt64) {
        out->sequence_id = static_cast<uint64_t>(p.int64_value);
      } else if (p.kind == Kind::kString) {
        out->sequence_key = p.string_value;
      } else {
        *error =
            "invalid value type for 'sequence_id' parameter, expected int64_param or "
            "string_param.";
        return false;
      }
    } else if (p.key == "sequence_start" || p.key == "sequence_end") {
      if (p.kind != Kind::kBool) {
        *error = "invalid value type for " + quoted_key + " parameter, expected bool_param.";
        return false;
      }
      if (p.bool_value) {
        out->sequence_flags |= p.key == "sequence_start" ? kSequenceFlagStart : kSequenceFlagEnd;
      }
    } else if (p.key == "priority") {
      if (p.kind == Kind::kInt64 && p.int64_value < 0) {
        *error = "invalid value for 'priority', expected value >= 0.";
        return false;
      }
      if (p.kind != Kind::kInt64 && p.kind != Kind::kUint64) {
        *error =
            "invalid value type for 'priority' parameter, expected int64_param or "
            "uint64_param.";
        return false;
      }
      const uint64_t priority =
          p.kind == Kind::kUint64 ? p.uint64_value : static_cast<uint64_t>(p.int64_value);
      // Past every priority level: the model's default level, as the batcher takes 0.
      out->priority = priority > UINT32_MAX ? 0 : static_cast<uint32_t>(priority);
    } else if (p.key == "timeout") {
      if (p.kind != Kind::kInt64) {
        *error = "invalid value type for 'timeout' parameter, expected int64_param.";
        return false;
      }
      out->timeout_us = static_cast<uint64_t>(p.int64_value);
    } else if (p.key.substr(0, 7) == "triton_") {
      if (p.key != kEmptyFinalResponse) {
        *error =
            "parameter keys starting with 'triton_' are reserved for Triton usage. Only the "
            "following keys starting with 'triton_' are allowed: " +
            std::string(kEmptyFinalResponse);
        return false;
      }
      if (p.kind != Kind::kBool) {
        *error = "invalid value type for " + quoted_key + " parameter, expected bool_param.";
        return false;
      }
    } else if (p.kind == Kind::kUint64 || p.kind == Kind::kNone) {
      // Triton 2.51 takes doubles too, though its message does not name them.
      *error = "invalid value type for " + quoted_key +
               " parameter, expected int64_param, bool_param, or string_param.";
      return false;
    }
    if (json->size() > 1) json->push_back(',');
    put_json_string(p.key, json);
    json->push_back(':');
    switch (p.kind) {
      case Kind::kBool:
        *json += p.bool_value ? "true" : "false";
        break;
      case Kind::kInt64:
        *json += std::to_string(p.int64_value);
        break;
      case Kind::kUint64:
        *json += std::to_string(p.uint64_value);
        break;
      case Kind::kDouble:
        put_json_double(p.double_value, json);
        break;
      default:  // kString: every other kind was refused above
        put_json_string(p.string_value, json);
    }
  }
  json->push_back('}');
  return true;
}

}  // namespace

size_t GrpcResponseWriter::size(const InferResponse& response) const {
  std::deque<std::string> scratch;
  return grpc::infer_response_size(to_write(response, &scratch));
}

void GrpcResponseWriter::write(const InferResponse& response, char* out) const {
  std::deque<std::string> scratch;
  grpc::write_infer_response(to_write(response, &scratch), out);
}

size_t GrpcResponseWriter::stream_size(const InferResponse& response) const {
  std::deque<std::string> scratch;
  return grpc::infer_response_size(to_write(response, &scratch), true);
}

void GrpcResponseWriter::stream_write(const InferResponse& response, char* out) const {
  std::deque<std::string> scratch;
  grpc::write_infer_response(to_write(response, &scratch), out, true);
}

void GrpcResponseWriter::parts(const InferResponse& response, bool streamed, std::string* scratch,
                               std::vector<std::string_view>* parts) const {
  std::deque<std::string> strings;  // unescaped names: written into `scratch`, not viewed
  grpc::infer_response_parts(to_write(response, &strings), streamed, scratch, parts);
}

std::string grpc_error_message(const InferResponse& response) {
  return unescape_json(response.error_message);
}

std::string grpc_request_id(std::string_view message) {
  grpc::InferRequestView view;
  std::string error;
  if (!grpc::read_infer_request(message, &view, &error)) return std::string();
  return std::string(view.id);
}

bool GrpcLane::submit(std::string_view message, uint64_t now_ns, Taken* taken, bool classifies) {
  grpc::InferRequestView view;
  std::string error;
  if (!grpc::read_infer_request(message, &view, &error)) {
    // grpc++'s answer when a request does not deserialize, before Triton sees it.
    taken->model = kNoLaneModel;
    taken->request_id = 0;
    taken->error = kUnparsable;
    taken->error_kind = ErrorKind::kInternal;
    return true;
  }
  uint32_t lane_model = kNoLaneModel;
  ErrorKind refused = ErrorKind::kInvalidArgument;
  switch (
      codec_.models().find(view.model_name, view.model_version, &lane_model, &refused, &error)) {
    case ModelLookup::Found::kGeneral:
      return false;
    case ModelLookup::Found::kRefused:
      taken->model = kNoLaneModel;
      taken->request_id = 0;
      taken->error = std::move(error);
      taken->error_kind = refused;
      return true;
    case ModelLookup::Found::kLane:
      break;
  }
  // Refused before it is queued: INVALID_ARGUMENT with Triton's message.
  auto refuse = [&](std::string message) {
    taken->model = lane_model;
    taken->request_id = 0;
    taken->error = std::move(message);
    taken->error_kind = ErrorKind::kInvalidArgument;
    return true;
  };
  ParsedRequest request;
  request.id = view.id;
  // Triton reads the request's parameters before its inputs' data.
  std::string parameters;
  if (!take_parameters(view.parameters, &request, &parameters, &error)) {
    return refuse(std::move(error));
  }
  request.parameters = parameters;
  // Each input's data as Triton's InferGRPCToInput finds it, input by input: a client
  // shm region, typed contents (converted into request.converted) or the next raw
  // contents (raw_input_contents holds the inputs not in shm, in order).
  const std::string quoted_model = "'" + std::string(view.model_name) + "'";
  const bool any_raw = !view.raw_input_contents.empty();
  std::vector<size_t> converted_at(view.inputs.size(), SIZE_MAX);
  request.inputs.reserve(view.inputs.size());
  size_t raw = 0;
  for (size_t i = 0; i < view.inputs.size(); ++i) {
    const grpc::InferInputView& in = view.inputs[i];
    const std::string quoted_input = "'" + std::string(in.name) + "'";
    RequestInput input;
    input.name = in.name;
    input.datatype = in.datatype;
    input.shape = in.shape;
    // Triton's shm parameters (the codec resolves the region); the others are ignored.
    const TensorShm shm = tensor_shm(in.parameters, in.name, &input.shm_region, &input.shm_offset,
                                     &input.size, &error);
    if (shm == TensorShm::kRefused) return refuse(std::move(error));
    if (shm == TensorShm::kRegion) {
      if (in.has_contents()) {
        return refuse("unexpected 'content' provided when using shared memory for input tensor " +
                      quoted_input + " for model " + quoted_model);
      }
      input.in_shm = true;
    } else if (in.has_contents() && any_raw) {
      return refuse("contents field must not be specified when using raw_input_contents for " +
                    quoted_input + " for model " + quoted_model);
    } else if (in.has_contents()) {
      converted_at[i] = request.converted.size();
      if (!grpc::contents_to_wire(in.contents, in.datatype, in.name, view.model_name,
                                  &request.converted, &error)) {
        return refuse(std::move(error));
      }
      input.size = request.converted.size() - converted_at[i];
    } else if (raw < view.raw_input_contents.size()) {
      input.data = reinterpret_cast<const uint8_t*>(view.raw_input_contents[raw].data());
      input.size = view.raw_input_contents[raw].size();
      ++raw;
    } else {
      return refuse("unable to find data for input tensor " + quoted_input + " for model " +
                    quoted_model + " in request.");
    }
    request.inputs.push_back(std::move(input));
  }
  // raw_input_contents past the inputs' are not read, as Triton does not read them.
  // Converted bytes are in place now that request.converted no longer grows.
  static const uint8_t kNoBytes = 0;
  for (size_t i = 0; i < converted_at.size(); ++i) {
    if (converted_at[i] == SIZE_MAX) continue;
    RequestInput& input = request.inputs[i];
    input.data = input.size ? request.converted.data() + converted_at[i] : &kNoBytes;
  }
  taken->classify.clear();
  for (const grpc::RequestedOutputView& o : view.outputs) {
    OutputRegion shm;
    const TensorShm placed =
        tensor_shm(o.parameters, o.name, &shm.region, &shm.offset, &shm.size, &error);
    if (placed == TensorShm::kRefused) return refuse(std::move(error));
    if (placed == TensorShm::kRegion) {
      shm.output = request.output_names.size();
      request.output_shm.push_back(shm);
    }
    uint64_t classes = 0;
    if (!output_classes(o.parameters, placed == TensorShm::kRegion, &classes, &error)) {
      return refuse(std::move(error));
    }
    if (classes != 0 && !classifies) return false;
    if (classes != 0) {
      // An output the model has not is the validator's refusal: nothing to classify.
      const std::vector<std::string>& names = codec_.model(lane_model).outputs;
      for (size_t k = 0; k < names.size(); ++k) {
        if (names[k] == o.name) taken->classify.push_back({static_cast<uint32_t>(k), classes});
      }
    }
    request.output_names.push_back(o.name);
  }
  uint64_t request_id = codec_.new_request_id();
  switch (codec_.submit(lane_model, request, request_id, now_ns, &taken->error, &taken->cached)) {
    case SubmitOutcome::kCached:
      taken->model = lane_model;
      taken->request_id = 0;
      taken->batch_size = taken->cached.batch_size;
      return true;
    case SubmitOutcome::kQueued:
      taken->model = lane_model;
      taken->request_id = request_id;
      taken->batch_size = request.batch_size;
      return true;
    case SubmitOutcome::kInvalid:
      taken->model = lane_model;
      taken->request_id = 0;
      return true;
    default:
      return false;
  }
}

}  // namespace naiad
