#include "fast_lane.h"

#include <charconv>
#include <cstring>

#include "http_scan.h"
#include "json_reader.h"
#include "response_block.h"

namespace naiad {

namespace {

constexpr size_t kMaxRank = 32;
constexpr size_t kMaxInputs = 64;  // beyond this, the input order key covers the first 64

// Finds `name` among `names` (by a member accessor); -1 if absent.
template <typename Items, typename Name>
int find_index(const Items& items, std::string_view name, Name name_of) {
  for (size_t i = 0; i < items.size(); ++i) {
    if (name_of(items[i]) == name) return static_cast<int>(i);
  }
  return -1;
}

bool parse_shape(JsonReader& reader, std::vector<int64_t>* shape) {
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
bool parse_input_parameters(JsonReader& reader, uint64_t* binary_size) {
  bool seen = false;
  bool ok = reader.object([&](std::string_view key) {
    return key == "binary_data_size" && once(&seen, [&] { return reader.uint(binary_size); });
  });
  return ok && seen;
}

bool parse_input(const FastModel& model, JsonReader& reader, FastInputRef* ref,
                 uint64_t* binary_size) {
  bool has_name = false, has_datatype = false, has_shape = false, has_size = false;
  std::string_view name;
  bool ok = reader.object([&](std::string_view key) {
    if (key == "name") return once(&has_name, [&] { return reader.plain_string(&name); });
    if (key == "datatype") {
      return once(&has_datatype, [&] { return reader.plain_string(&ref->datatype); });
    }
    if (key == "shape") return once(&has_shape, [&] { return parse_shape(reader, &ref->shape); });
    if (key == "parameters") {
      return once(&has_size, [&] { return parse_input_parameters(reader, binary_size); });
    }
    if (key == "data") return false;  // JSON tensor data: the general path converts it
    return reader.skip_value();
  });
  if (!ok || !has_name || !has_datatype || !has_shape || !has_size) return false;
  int spec = find_index(model.inputs, name,
                        [](const FastInput& input) -> std::string_view { return input.name; });
  if (spec < 0) return false;
  ref->spec = static_cast<uint32_t>(spec);
  return true;
}

bool parse_inputs(const FastModel& model, JsonReader& reader, uint64_t* data_offset,
                  size_t body_size, FastRequest* out) {
  bool ok = reader.array([&] {
    FastInputRef ref;
    uint64_t binary_size = 0;
    if (!parse_input(model, reader, &ref, &binary_size)) return false;
    if (binary_size > body_size - *data_offset) return false;
    ref.body_offset = *data_offset;
    ref.size = binary_size;
    *data_offset += binary_size;
    out->inputs.push_back(std::move(ref));
    return true;
  });
  return ok && !out->inputs.empty();
}

// {"name": ..., "parameters": {"binary_data": true}}: only binary outputs, since the
// lane writes no JSON tensor data.
bool parse_output(const FastModel& model, JsonReader& reader, uint32_t* index) {
  bool has_name = false, has_parameters = false, has_binary = false, binary = false;
  std::string_view name;
  auto parameters = [&] {
    return reader.object([&](std::string_view key) {
      return key == "binary_data" && once(&has_binary, [&] { return reader.boolean(&binary); });
    });
  };
  bool ok = reader.object([&](std::string_view key) {
    if (key == "name") return once(&has_name, [&] { return reader.plain_string(&name); });
    if (key == "parameters") return once(&has_parameters, parameters);
    return reader.skip_value();
  });
  if (!ok || !has_name || !binary) return false;
  int found = find_index(model.outputs, name,
                         [](const std::string& output) -> std::string_view { return output; });
  if (found < 0) return false;
  *index = static_cast<uint32_t>(found);
  return true;
}

bool parse_outputs(const FastModel& model, JsonReader& reader, FastRequest* out) {
  // An empty list asks for every output, as no list does.
  return reader.array([&] {
    uint32_t index;
    if (!parse_output(model, reader, &index)) return false;
    for (uint32_t seen : out->outputs) {
      if (seen == index) return false;
    }
    out->outputs_listed = true;
    out->outputs.push_back(index);
    return true;
  });
}

// Request parameters: only {"binary_data_output": bool}. `priority`, `timeout` and
// custom parameters go the general way.
bool parse_parameters(JsonReader& reader, FastRequest* out, bool* binary_output) {
  const char* start = nullptr;
  JsonReader probe = reader;
  if (!probe.skip_value(&start)) return false;
  bool seen = false;
  bool ok = reader.object([&](std::string_view key) {
    return key == "binary_data_output" &&
           once(&seen, [&] { return reader.boolean(binary_output); });
  });
  if (!ok) return false;
  out->parameters = std::string_view(start, static_cast<size_t>(reader.position() - start));
  return true;
}

// Counts the elements of a BYTES tensor (u32 length, bytes, ...); -1 when malformed.
int64_t count_bytes_elements(const uint8_t* data, uint64_t size) {
  uint64_t offset = 0;
  int64_t count = 0;
  while (offset < size) {
    if (size - offset < 4) return -1;
    uint32_t length;
    std::memcpy(&length, data + offset, 4);
    offset += 4;
    if (length > size - offset) return -1;
    offset += length;
    ++count;
  }
  return count;
}

// RequestValidator.validate's checks, in its order; false wherever it would raise.
bool validate(const FastModel& model, const uint8_t* body, FastRequest* request) {
  const size_t n_specs = model.inputs.size();
  std::vector<bool> present(n_specs, false);
  for (const FastInputRef& ref : request->inputs) {
    if (present[ref.spec]) return false;  // duplicate input
    present[ref.spec] = true;
  }
  for (size_t i = 0; i < n_specs; ++i) {
    if (!present[i] && !model.inputs[i].optional) return false;
  }
  const bool batching = model.max_batch_size > 0;
  int64_t batch = -1;
  if (batching) {
    for (const FastInputRef& ref : request->inputs) {
      if (ref.shape.empty()) return false;
      if (batch < 0) {
        batch = ref.shape[0];
      } else if (ref.shape[0] != batch) {
        return false;
      }
    }
    // A zero batch takes the validator's special shape rules: leave it to them.
    if (batch < 1 || batch > model.max_batch_size) return false;
  }
  for (const FastInputRef& ref : request->inputs) {
    const FastInput& spec = model.inputs[ref.spec];
    if (ref.datatype != spec.datatype) return false;
    const size_t skip = batching ? 1 : 0;
    if (ref.shape.size() != spec.dims.size() + skip) return false;
    uint64_t elements = 1;
    for (size_t d = 0; d < ref.shape.size(); ++d) {
      int64_t dim = ref.shape[d];
      if (d >= skip) {
        int64_t want = spec.dims[d - skip];
        if (want != -1 && want != dim) return false;
      }
      // Shapes this large are not for the lane (and would overflow the product).
      if (dim > (int64_t{1} << 40)) return false;
      elements *= static_cast<uint64_t>(dim);
      if (elements > (uint64_t{1} << 40)) return false;
    }
    if (spec.element_size != 0) {
      if (elements * spec.element_size != ref.size) return false;
    } else if (count_bytes_elements(body + ref.body_offset, ref.size) !=
               static_cast<int64_t>(elements)) {
      return false;
    }
  }
  request->batch_size = batching ? static_cast<uint32_t>(batch) : 1;
  ShapeKey key;
  bool keyed = false;
  for (size_t i = 0; i < n_specs; ++i) {
    if (!model.inputs[i].shape_keyed || !present[i]) continue;
    for (const FastInputRef& ref : request->inputs) {
      if (ref.spec != i) continue;
      const size_t skip = batching ? 1 : 0;
      key.add(static_cast<uint32_t>(i), ref.shape.data() + skip, ref.shape.size() - skip);
      keyed = true;
    }
  }
  request->shape_key = keyed ? key.value() : 0;
  return true;
}

void append_uint(std::string* out, uint64_t value) {
  char buffer[24];
  std::to_chars_result end = std::to_chars(buffer, buffer + sizeof(buffer), value);
  out->append(buffer, end.ptr);
}

const char* status_line(int status) {
  switch (status) {
    case 200:
      return "HTTP/1.1 200 OK\r\n";
    case 400:
      return "HTTP/1.1 400 Bad Request\r\n";
    case 404:
      return "HTTP/1.1 404 Not Found\r\n";
    case 501:
      return "HTTP/1.1 501 Not Implemented\r\n";
    case 503:
      return "HTTP/1.1 503 Service Unavailable\r\n";
    default:
      return "HTTP/1.1 500 Internal Server Error\r\n";
  }
}

// pb_utils.TritonError code -> HTTP status, as the general path maps it
// (scheduling/manager.py _ERROR_OF_CODE, http/routes.py _status_for).
int status_of_code(int64_t code) {
  switch (code) {
    case 2:
      return 404;  // NOT_FOUND
    case 3:
    case 6:
      return 400;  // INVALID_ARG, ALREADY_EXISTS
    case 4:
      return 503;  // UNAVAILABLE
    case 5:
      return 501;  // UNSUPPORTED
    default:
      return 500;
  }
}

// A response's JSON: {"outputs": [[name, datatype, shape], ...], "error": message,
// ...}; sizes and offsets come from the block's OutputSlots.
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
        const char* shape_start = nullptr;
        if (!reader.consume('[') || !reader.raw_string(&output.name) || !reader.consume(',') ||
            !reader.raw_string(&output.datatype) || !reader.consume(',') ||
            !reader.skip_value(&shape_start) || *shape_start != '[') {
          return false;
        }
        output.shape =
            std::string_view(shape_start, static_cast<size_t>(reader.position() - shape_start));
        output.size = slot.size;
        output.offset = slot.offset;
        out->outputs.push_back(output);
        return reader.consume(']');
      });
    }
    if (key == "error") return reader.raw_string(&outcome->message);
    return reader.skip_value();
  });
  return ok && reader.at_end() && listed == record.n_outputs;
}

}  // namespace

void ShapeKey::mix(uint64_t word) {
  for (int i = 0; i < 8; ++i) {
    hash_ ^= (word >> (8 * i)) & 0xFF;
    hash_ *= 1099511628211ULL;
  }
}

void ShapeKey::add(uint32_t index, const int64_t* dims, size_t rank) {
  mix(index);
  mix(rank);
  for (size_t i = 0; i < rank; ++i) mix(static_cast<uint64_t>(dims[i]));
}

bool parse_fast_request(const FastModel& model, const uint8_t* body, size_t body_size,
                        size_t header_size, FastRequest* out) {
  if (header_size == 0 || header_size > body_size) return false;
  JsonReader reader(reinterpret_cast<const char*>(body), header_size);
  bool has_id = false, has_inputs = false, has_outputs = false, has_parameters = false;
  bool binary_output = false;
  uint64_t data_offset = header_size;
  bool ok = reader.object([&](std::string_view key) {
    if (key == "id") return once(&has_id, [&] { return reader.plain_string(&out->id); });
    if (key == "inputs") {
      return once(&has_inputs,
                  [&] { return parse_inputs(model, reader, &data_offset, body_size, out); });
    }
    if (key == "outputs") {
      return once(&has_outputs, [&] { return parse_outputs(model, reader, out); });
    }
    if (key == "parameters") {
      return once(&has_parameters, [&] { return parse_parameters(reader, out, &binary_output); });
    }
    return reader.skip_value();
  });
  if (!ok) return false;
  if (!reader.at_end() || !has_inputs || data_offset != body_size) return false;
  // Every output goes back as binary data, or the general path writes JSON data.
  if (!out->outputs_listed && !binary_output) return false;
  return validate(model, body, out);
}

void layout_request_block(const FastModel& model, const FastRequest& request, const uint8_t* body,
                          RequestBlock* out) {
  std::string header;
  header.reserve(128 + 64 * request.inputs.size());
  header += "{\"id\":\"";
  header += request.id;
  header += "\",\"inputs\":[";
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    const FastInputRef& ref = request.inputs[i];
    const FastInput& spec = model.inputs[ref.spec];
    if (i) header += ',';
    header += "[\"";
    header += spec.name;
    header += "\",\"";
    header += spec.datatype;
    header += "\",[";
    for (size_t d = 0; d < ref.shape.size(); ++d) {
      if (d) header += ',';
      append_uint(&header, static_cast<uint64_t>(ref.shape[d]));
    }
    header += "]]";
  }
  header += "],\"outputs\":";
  if (request.outputs_listed) {
    header += '[';
    for (size_t i = 0; i < request.outputs.size(); ++i) {
      if (i) header += ',';
      header += '"';
      header += model.outputs[request.outputs[i]];
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

  out->metadata = std::move(header);
  out->inputs.clear();
  uint32_t order[kMaxInputs];
  size_t n_order = 0;
  for (const FastInputRef& ref : request.inputs) {
    InputSource source;
    source.data = body + ref.body_offset;
    source.size = ref.size;
    out->inputs.push_back(source);
    if (n_order < kMaxInputs) order[n_order++] = ref.spec;
  }
  out->input_order = input_order_key(order, n_order);
}

bool parse_result_block(const uint8_t* block, uint64_t block_size, ResultBlock* out) {
  ResponseBlockView view;
  if (!view_response_block(block, block_size, &view)) return false;
  for (int i = 0; i < 4; ++i) out->timings[i] = view.header->timings[i];
  for (uint32_t r = 0; r < view.header->n_responses; ++r) {
    const ResponseRecord& record = view.records[r];
    ResultOutcome outcome;
    outcome.request_index = record.request_index;
    outcome.final = (record.flags & kResponseFinal) != 0;
    outcome.error = (record.flags & kResponseError) != 0;
    outcome.code = record.error_code;
    outcome.first_output = out->outputs.size();
    if (!parse_response_json(view, record, &outcome, out)) return false;
    outcome.output_count = out->outputs.size() - outcome.first_output;
    out->outcomes.push_back(outcome);
  }
  return true;
}

bool encode_fast_reply(const FastModel& model, const FastRecipe& recipe, const ResultBlock& result,
                       size_t index, const uint8_t* block, std::string* out) {
  const ResultOutcome& outcome = result.outcomes[index];
  out->clear();
  if (outcome.error) {
    std::string body = "{\"error\":\"";
    body += outcome.message;
    body += "\"}";
    *out += status_line(status_of_code(outcome.code));
    *out += "Content-Length: ";
    append_uint(out, body.size());
    *out += "\r\nContent-Type: application/json\r\n\r\n";
    *out += body;
    return false;
  }
  std::string json;
  json.reserve(256);
  json += '{';
  if (!recipe.id.empty()) {
    json += "\"id\":\"";
    json += recipe.id;
    json += "\",";
  }
  json += "\"model_name\":\"";
  json += model.name;
  json += "\",\"model_version\":\"";
  json += model.version;
  json += "\",\"outputs\":[";
  uint64_t binary_size = 0;
  std::vector<const ResultOutput*> sent;
  for (size_t j = 0; j < outcome.output_count; ++j) {
    const ResultOutput& output = result.outputs[outcome.first_output + j];
    if (recipe.outputs_listed) {
      bool wanted = false;
      for (uint32_t requested : recipe.outputs) {
        if (model.outputs[requested] == output.name) wanted = true;
      }
      if (!wanted) continue;
    }
    if (!sent.empty()) json += ',';
    json += "{\"name\":\"";
    json += output.name;
    json += "\",\"datatype\":\"";
    json += output.datatype;
    json += "\",\"shape\":";
    json += output.shape;
    json += ",\"parameters\":{\"binary_data_size\":";
    append_uint(&json, output.size);
    json += "}}";
    sent.push_back(&output);
    binary_size += output.size;
  }
  json += "]}";
  out->reserve(160 + json.size() + binary_size);
  *out += status_line(200);
  *out += "Content-Length: ";
  append_uint(out, json.size() + binary_size);
  if (sent.empty()) {
    *out += "\r\nContent-Type: application/json\r\n\r\n";
  } else {
    *out += "\r\nContent-Type: application/octet-stream\r\nInference-Header-Content-Length: ";
    append_uint(out, json.size());
    *out += "\r\n\r\n";
  }
  *out += json;
  for (const ResultOutput* output : sent) {
    out->append(reinterpret_cast<const char*>(block + output->offset), output->size);
  }
  return true;
}

uint32_t FastLane::add_model(FastModel model) {
  models_.push_back(std::move(model));
  accepting_.push_back(true);
  return static_cast<uint32_t>(models_.size() - 1);
}

void FastLane::add_route(const std::string& target, uint32_t lane_model) {
  if (lane_model >= models_.size()) return;
  auto found = routes_.find(target);
  if (found != routes_.end()) {
    found->second = lane_model;
    return;
  }
  targets_.push_back(target);
  routes_.emplace(targets_.back(), lane_model);
}

void FastLane::set_accepting(uint32_t lane_model, bool accepting) {
  if (lane_model < accepting_.size()) accepting_[lane_model] = accepting;
}

size_t FastLane::take_http(const uint8_t* data, size_t size, size_t max_body, uint64_t now_ns,
                           std::vector<Taken>* taken) {
  size_t consumed = 0;
  while (consumed < size) {
    const char* start = reinterpret_cast<const char*>(data + consumed);
    ScannedRequest request;
    if (scan_request(start, size - consumed, max_body, &request) != ScanResult::kRequest) break;
    if (!request.has_header_length) break;
    Taken one;
    if (!submit_to(request.target, data + consumed + request.body_offset, request.body_size,
                   request.header_length, now_ns, &one)) {
      break;
    }
    taken->push_back(one);
    consumed += request.total;
  }
  return consumed;
}

bool FastLane::submit_to(std::string_view target, const uint8_t* body, size_t body_size,
                         size_t header_size, uint64_t now_ns, Taken* taken) {
  auto route = routes_.find(target);
  if (route == routes_.end()) return false;
  uint64_t request_id = next_request_id_;
  uint32_t batch_size = 0;
  if (submit(route->second, request_id, body, body_size, header_size, now_ns, &batch_size) !=
      static_cast<int>(SubmitResult::kOk)) {
    return false;
  }
  ++next_request_id_;
  *taken = Taken{route->second, request_id, batch_size};
  return true;
}

int FastLane::submit(uint32_t lane_model, uint64_t request_id, const uint8_t* body,
                     size_t body_size, size_t header_size, uint64_t now_ns, uint32_t* batch_size) {
  if (lane_model >= models_.size() || !accepting_[lane_model]) return kFallback;
  const FastModel& model = models_[lane_model];
  FastRequest request;
  if (!parse_fast_request(model, body, body_size, header_size, &request)) return kFallback;
  RequestBlock block;
  layout_request_block(model, request, body, &block);
  SubmitRequest submit;
  submit.request_id = request_id;
  submit.metadata = block.metadata;
  submit.inputs = std::move(block.inputs);
  submit.options.batch_size = request.batch_size;
  submit.options.shape_key = request.shape_key;
  submit.options.input_order = block.input_order;
  SubmitResult result = core_.submit(model.core_model_id, submit);
  if (result != SubmitResult::kOk) return static_cast<int>(result);
  FastRecipe& recipe = recipes_[request_id];
  recipe.model = lane_model;
  recipe.id.assign(request.id.data(), request.id.size());
  recipe.outputs_listed = request.outputs_listed;
  recipe.outputs = std::move(request.outputs);
  recipe.batch_size = request.batch_size;
  recipe.submit_ns = now_ns;
  *batch_size = request.batch_size;
  return static_cast<int>(SubmitResult::kOk);
}

bool FastLane::complete(const uint8_t* block, uint64_t block_size,
                        const std::vector<uint64_t>& request_ids, uint64_t dispatch_ns,
                        uint64_t end_ns, std::vector<Reply>* replies, uint64_t timings[4]) {
  ResultBlock result;
  if (!parse_result_block(block, block_size, &result)) return false;
  for (const ResultOutcome& outcome : result.outcomes) {
    if (outcome.request_index >= request_ids.size()) return false;
  }
  for (int i = 0; i < 4; ++i) timings[i] = result.timings[i];
  for (size_t i = 0; i < result.outcomes.size(); ++i) {
    const ResultOutcome& outcome = result.outcomes[i];
    if (!outcome.final) continue;
    const uint64_t request_id = request_ids[outcome.request_index];
    auto found = recipes_.find(request_id);
    if (found == recipes_.end()) continue;
    const FastRecipe& recipe = found->second;
    Reply reply;
    reply.request_id = request_id;
    reply.batch_size = recipe.batch_size;
    reply.request_ns = end_ns - recipe.submit_ns;
    reply.queue_ns = dispatch_ns > recipe.submit_ns ? dispatch_ns - recipe.submit_ns : 0;
    reply.ok = encode_fast_reply(models_[recipe.model], recipe, result, i, block, &reply.http);
    recipes_.erase(found);
    replies->push_back(std::move(reply));
  }
  return true;
}

}  // namespace naiad
