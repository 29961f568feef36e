#include "codec/kserve_codec.h"

#include <unistd.h>

#include <algorithm>
#include <deque>
#include <iterator>
#include <memory>

#include "codec/error_status.h"
#include "codec/kserve_json.h"
#include "codec/request_validator.h"
#include "ipc/request_block.h"

namespace naiad {

int http_status_of(ErrorKind kind) { return error_status_of(kind).http_status; }

uint32_t KServeCodec::add_model(ModelSpec model) {
  models_.push_back(std::move(model));
  accepting_.push_back(true);
  trace_rate_.push_back(0);
  trace_sampler_.push_back(0);
  trace_tensors_.push_back(0);
  return static_cast<uint32_t>(models_.size() - 1);
}

void KServeCodec::set_trace_rate(uint32_t model, uint32_t rate, uint32_t sampler) {
  if (model >= trace_rate_.size()) return;
  trace_rate_[model] = rate;
  trace_sampler_[model] = sampler;
  trace_seen_.emplace(sampler, 0);  // a new sampler counts from 0, a known one goes on
  for (auto it = trace_seen_.begin(); it != trace_seen_.end();) {
    bool named = false;
    for (size_t m = 0; m < trace_rate_.size() && !named; ++m) {
      named = trace_rate_[m] != 0 && trace_sampler_[m] == it->first;
    }
    it = named || it->first == sampler ? std::next(it) : trace_seen_.erase(it);
  }
}

void KServeCodec::set_trace_tensors(uint32_t model, bool on) {
  if (model < trace_tensors_.size()) trace_tensors_[model] = on;
}

KServeCodec::TensorRecords KServeCodec::take_trace_tensors(uint64_t request_id) {
  TensorRecords taken;
  auto found = tensor_records_.find(request_id);
  if (found == tensor_records_.end()) return taken;
  taken.swap(found->second);
  tensor_records_.erase(found);
  return taken;
}

bool KServeCodec::sample_trace(uint32_t model) {
  if (model >= trace_rate_.size() || trace_rate_[model] == 0) return false;
  return ++trace_seen_[trace_sampler_[model]] % trace_rate_[model] == 0;
}

void KServeCodec::set_accepting(uint32_t model, bool accepting) {
  if (model < accepting_.size()) accepting_[model] = accepting;
}

SubmitOutcome KServeCodec::submit(uint32_t lane_model, ParsedRequest& request, uint64_t request_id,
                                  uint64_t now_ns, std::string* error, CachedAnswer* cached,
                                  ErrorKind* shm_refusal) {
  if (lane_model >= models_.size() || !accepting_[lane_model]) return SubmitOutcome::kFallback;
  const ModelSpec& model = models_[lane_model];
  // Tensors in client shm regions: resolved and pinned (shm_registry.h), or refused
  // with the registry's (Triton's) error, or the general path's (CUDA regions).
  std::vector<uint64_t> pins;
  std::vector<RegionRef> shm_inputs;
  std::string regions_json;
  bool has_shm = !request.output_shm.empty();
  for (const RequestInput& input : request.inputs) has_shm = has_shm || input.in_shm;
  ErrorKind refused = ErrorKind::kNone;
  if (has_shm && !resolve_shm(model, request, &pins, &shm_inputs, &refused, error)) {
    if (refused == ErrorKind::kNone || shm_refusal == nullptr) return SubmitOutcome::kFallback;
    *shm_refusal = refused;
    return SubmitOutcome::kRefused;
  }
  if (!validate_request(model, &request, error)) {
    unpin(pins);
    return SubmitOutcome::kInvalid;
  }
  std::string cache_key;
  uint64_t lookup_ns = 0;
  if (cached != nullptr && request.output_shm.empty() &&
      lookup_cached(lane_model, request, now_ns, cached, &cache_key, &lookup_ns)) {
    unpin(pins);  // shm inputs were read for the key; nothing is queued
    return SubmitOutcome::kCached;
  }
  RequestBlock& block = block_;
  if (has_shm) {
    // The outputs' JSON names the model's (escaped) names: built after validation.
    regions_json = "{\"outputs\":{";
    for (size_t i = 0; i < request.output_shm.size(); ++i) {
      const RegionRef& ref = shm_inputs[request.inputs.size() + i];
      if (i) regions_json += ',';
      regions_json += '"';
      regions_json += model.outputs_json[request.outputs[request.output_shm[i].output]];
      regions_json += "\":[" + std::to_string(ref.id) + ",1,\"/proc/" + std::to_string(::getpid()) +
                      "/fd/" + std::to_string(ref.fd) + "\"," + std::to_string(ref.region_offset) +
                      "," + std::to_string(ref.region_size) + "," +
                      std::to_string(ref.object_offset - ref.region_offset) + "," +
                      std::to_string(ref.size) + "]";
    }
    // The region names by id: a worker names the region in its error when one is
    // truncated while it reads or writes it (worker/shm_outputs.py).
    regions_json += "},\"cuda_inputs\":[],\"names\":{";
    bool first = true;
    auto name = [&](uint64_t id, std::string_view region) {
      if (!first) regions_json += ',';
      first = false;
      regions_json += "\"" + std::to_string(id) + "\":\"" + json_string_text(region) + "\"";
    };
    for (size_t i = 0; i < request.inputs.size(); ++i) {
      if (request.inputs[i].in_shm) name(shm_inputs[i].id, request.inputs[i].shm_region);
    }
    for (size_t i = 0; i < request.output_shm.size(); ++i) {
      name(shm_inputs[request.inputs.size() + i].id, request.output_shm[i].region);
    }
    regions_json += "}}";
    request.output_regions = regions_json;
  }
  lay_out(model, request, &block);
  for (size_t i = 0; i < request.inputs.size() && has_shm; ++i) {
    if (!request.inputs[i].in_shm) continue;
    // A typed source: left in the client's region (batch_assembler.h).
    const RegionRef& ref = shm_inputs[i];
    block.inputs[i].kind = InputKind::kSystemShm;
    block.inputs[i].region = ref.id;
    block.inputs[i].offset = ref.object_offset - ref.region_offset;
    block.inputs[i].data = nullptr;
  }
  SubmitRequest& submit = submit_;
  submit_request_of(request, &block, request_id, &submit);
  if (trace_rate_[lane_model] != 0) {
    submit.options.traced = sample_trace(lane_model);
    submit.options.trace_tensors = submit.options.traced && trace_tensors_[lane_model] != 0;
  }
  if (core_.submit(model.core_model_id, submit) != SubmitResult::kOk) {
    unpin(pins);
    return SubmitOutcome::kFallback;
  }
  if (submit.options.traced) {
    traced_.push_back(request_id);
    if (trace_tensors_[lane_model]) {
      TensorRecords& records = tensor_records_[request_id];
      for (const RequestInput& input : request.inputs) {
        records.emplace_back(TensorActivity::kQueueInput, std::string());
        append_trace_tensor(&records.back().second, input.name, input.datatype, input.shape.data(),
                            input.shape.size(), input.data, input.size);
      }
    }
  }
  Recipe& recipe = keep_recipe(lane_model, request, request_id, now_ns);
  recipe.cache_key = std::move(cache_key);
  recipe.lookup_ns = lookup_ns;
  if (has_shm) {
    // Every region stays pinned until the answer: inputs are read at dispatch (copied
    // into a shared batch) or in place by the worker, outputs written by it.
    recipe.pins = std::move(pins);
    for (size_t i = 0; i < request.output_shm.size(); ++i) {
      recipe.shm_outputs.push_back(request.outputs[request.output_shm[i].output]);
      const RegionRef& ref = shm_inputs[request.inputs.size() + i];
      recipe.shm_places.push_back({ref.id, ref.object_offset - ref.region_offset, ref.size});
    }
  }
  return SubmitOutcome::kQueued;
}

void KServeCodec::lay_out(const ModelSpec& model, ParsedRequest& request, RequestBlock* block) {
  // The block's header is JSON: an id with characters to escape goes in escaped (the
  // validator's messages and the answer keep the client's plain id).
  const std::string_view plain_id = request.id;
  std::string id_json;
  if (needs_json_escape(plain_id)) {
    id_json = json_string_text(plain_id);
    request.id = id_json;
  }
  layout_request_block(model, request, block);
  request.id = plain_id;
}

KServeCodec::Recipe& KServeCodec::keep_recipe(uint32_t lane_model, const ParsedRequest& request,
                                              uint64_t request_id, uint64_t now_ns) {
  Recipe& recipe = spare_recipes_.insert(in_flight_, request_id);
  recipe.model = lane_model;
  recipe.id.assign(request.id.data(), request.id.size());
  // Copied, not moved: the lane's request and a recycled recipe both keep their room.
  recipe.ask(request);
  recipe.batch_size = request.batch_size;
  recipe.submit_ns = now_ns;
  return recipe;
}

SubmitOutcome KServeCodec::place(uint32_t lane_model, ParsedRequest& request, uint64_t request_id,
                                 uint64_t now_ns, std::string* error, Placed* placed) {
  if (lane_model >= models_.size() || !accepting_[lane_model]) return SubmitOutcome::kFallback;
  const ModelSpec& model = models_[lane_model];
  // Tensors in client regions are not received; a cached model's key and a traced
  // request's records read the inputs at submit, before these bytes are here.
  bool plain = request.output_shm.empty() && trace_rate_[lane_model] == 0 &&
               !(cache_ != nullptr && model.response_cache);
  for (const RequestInput& input : request.inputs)
    plain = plain && !input.in_shm && !input.on_device;
  if (!plain) return SubmitOutcome::kFallback;
  if (!validate_request(model, &request, error)) return SubmitOutcome::kInvalid;
  // A sequence request's key is a view into the received bytes: submitted whole.
  if (request.sequence_id != 0 || !request.sequence_key.empty() || request.sequence_flags != 0) {
    return SubmitOutcome::kFallback;
  }
  RequestBlock& block = block_;
  lay_out(model, request, &block);
  SubmitRequest& submit = submit_;
  submit_request_of(request, &block, request_id, &submit);
  placed->offset = core_.place(model.core_model_id, submit);
  if (placed->offset == 0) return SubmitOutcome::kFallback;
  placed->handle = model.core_model_id;
  placed->options = submit.options;
  placed->inputs.clear();
  const Arena& arena = core_.arena();
  const auto* slots = arena.at<InputSlot>(placed->offset + sizeof(RequestHeader));
  for (size_t i = 0; i < submit.inputs.size(); ++i) {
    placed->inputs.push_back({static_cast<const uint8_t*>(submit.inputs[i].data),
                              submit.inputs[i].size, slots[i].offset});
  }
  keep_recipe(lane_model, request, request_id, now_ns);
  return SubmitOutcome::kPlaced;
}

SubmitOutcome KServeCodec::queue_placed(uint64_t request_id, const Placed& placed) {
  if (core_.queue_placed(placed.handle, request_id, placed.options, placed.offset) ==
      SubmitResult::kOk) {
    return SubmitOutcome::kQueued;
  }
  return SubmitOutcome::kFallback;
}

void KServeCodec::abandon_placed(uint64_t request_id, const Placed& placed) {
  core_.release_placed(placed.offset);
  forget(request_id);
}

void KServeCodec::Recipe::ask(const ParsedRequest& request) {
  outputs.assign(request.outputs.begin(), request.outputs.end());
  json.assign(request.output_json.begin(), request.output_json.end());
  json_all = request.json_unlisted;
  classify.clear();
  for (size_t i = 0; i < request.output_classes.size() && i < request.outputs.size(); ++i) {
    if (request.output_classes[i] != 0) classify.push_back({outputs[i], request.output_classes[i]});
  }
}

bool KServeCodec::lookup_cached(uint32_t lane_model, const ParsedRequest& request, uint64_t now_ns,
                                CachedAnswer* cached, std::string* key, uint64_t* lookup_ns) {
  key->clear();
  *lookup_ns = 0;
  if (cache_ == nullptr || lane_model >= models_.size()) return false;
  const ModelSpec& model = models_[lane_model];
  if (!model.response_cache) return false;
  cache_key(model, request, key);
  ResponseCache::Found found = cache_->lookup(*key);
  *lookup_ns = found.end_ns - found.start_ns;
  if (!found.entry) return false;
  Recipe recipe;
  recipe.ask(request);
  InferResponse& response = cached->response;
  response = InferResponse();
  response.id.assign(request.id.data(), request.id.size());
  response.model_name = model.name_json;
  response.model_version = model.version;
  const CacheEntry& entry = *found.entry;
  answer_outputs(model, recipe, entry.outputs.data(), entry.outputs.size(), entry.data(),
                 entry.parameters, &response);
  cached->entry = std::move(found.entry);
  cached->batch_size = request.batch_size;
  key->clear();
  // Triton's hit statistics: the request ends when the lookup does; it queued from its
  // arrival to the lookup's start.
  cache_->count_hit(lane_model, *lookup_ns, found.end_ns > now_ns ? found.end_ns - now_ns : 0,
                    found.start_ns > now_ns ? found.start_ns - now_ns : 0);
  return true;
}

void KServeCodec::keep_result(uint32_t lane_model, Recipe& recipe, const ResultBlock& result,
                              const ResultOutcome& outcome, const uint8_t* block) {
  // Only successful responses are kept, as in Triton; an error counts no miss. Nor is
  // the result of a model that stopped taking requests (unloading: its entries are
  // dropped, and a reload must not find this one).
  if (recipe.cache_key.empty() || cache_ == nullptr || outcome.error) return;
  if (lane_model >= accepting_.size() || !accepting_[lane_model]) return;
  const uint64_t start_ns = monotonic_ns();
  auto entry =
      CacheEntry::from_result(std::move(recipe.cache_key), lane_model, result, outcome, block);
  uint64_t insert_ns = 0;
  // A key another request filled meanwhile is no miss of this one (Triton's ALREADY_EXISTS).
  if (cache_->insert(std::move(entry), start_ns, &insert_ns) != ResponseCache::Inserted::kExists) {
    cache_->count_miss(lane_model, recipe.lookup_ns + insert_ns);
  }
}

bool KServeCodec::insert_cached(uint32_t lane_model, std::string key, uint64_t lookup_ns,
                                const uint8_t* block, uint64_t block_size, uint32_t request_index) {
  ResultBlock result;
  if (!parse_result_block(block, block_size, &result)) return false;
  Recipe recipe;
  recipe.cache_key = std::move(key);
  recipe.lookup_ns = lookup_ns;
  for (const ResultOutcome& outcome : result.outcomes) {
    if (outcome.request_index == request_index && outcome.final) {
      keep_result(lane_model, recipe, result, outcome, block);
      break;
    }
  }
  return true;
}

bool KServeCodec::write_shm_output(const Recipe::ShmPlace& place, const ResponseOutput& output,
                                   InferResponse* response) const {
  // A recipe has shm places only when resolve_shm found its regions in regions_.
  std::string message = regions_->write_output(place.region, place.offset, place.size, output.name,
                                               output.data, output.size);
  if (message.empty()) return true;
  response->error = ErrorKind::kInternal;
  response->owned_error_message = std::make_shared<const std::string>(json_string_text(message));
  response->error_message = *response->owned_error_message;
  response->id.clear();
  response->outputs.clear();
  response->parameters = {};
  return false;
}

bool KServeCodec::refuse_truncated(const Recipe& recipe, InferResponse* response) const {
  std::string message = regions_->truncated(recipe.pins);
  if (message.empty()) return false;
  response->error = ErrorKind::kInvalidArgument;
  response->owned_error_message = std::make_shared<const std::string>(json_string_text(message));
  response->error_message = *response->owned_error_message;
  response->id.clear();
  response->outputs.clear();
  response->parameters = {};
  return true;
}

void KServeCodec::answer_outputs(const ModelSpec& model, const Recipe& recipe,
                                 const ResultOutput* outputs, size_t count, const uint8_t* base,
                                 std::string_view parameters, InferResponse* response) {
  response->parameters = parameters;
  if (response->outputs.capacity() == 0 && !spare_outputs_.empty()) {
    response->outputs = std::move(spare_outputs_.back());
    spare_outputs_.pop_back();
  }
  response->outputs.reserve(count);
  for (size_t j = 0; j < count; ++j) {
    const ResultOutput& output = outputs[j];
    bool json = recipe.json_all;
    bool classified = false;
    if (!recipe.outputs.empty()) {
      bool wanted = false;
      for (size_t k = 0; k < recipe.outputs.size(); ++k) {
        if (model.outputs[recipe.outputs[k]] == output.name) {
          wanted = true;
          json = k < recipe.json.size() && recipe.json[k];
        }
      }
      if (!wanted) continue;
      for (const ClassifiedOutput& c : recipe.classify) {
        classified = classified || model.outputs[c.output] == output.name;
      }
    }
    ResponseOutput out{output.name,          output.datatype, output.shape,
                       base + output.offset, output.size,     json};
    bool in_shm = false;
    for (size_t k = 0; k < recipe.shm_outputs.size() && !in_shm; ++k) {
      if (model.outputs[recipe.shm_outputs[k]] != output.name) continue;
      in_shm = true;
      // A worker writes its outputs into the region and leaves none here; an ensemble's
      // answer still holds them: the frontend writes them.
      if (output.size != 0 && !write_shm_output(recipe.shm_places[k], out, response)) return;
    }
    if (in_shm) {
      out.in_shm = true;  // in the client's region: metadata only
      out.json = false;
      out.data = base;  // (no bytes: a valid pointer for writers that copy 0)
      out.size = 0;
    } else if (json && !classified) {  // a classification is BYTES, which JSON carries
      // What the general path answers when it cannot write an output as JSON.
      std::string_view refusal = json_output_error(out, &response->error);
      if (!refusal.empty()) {
        response->error_message = refusal;
        response->id.clear();
        response->outputs.clear();
        response->parameters = {};
        return;
      }
    }
    response->outputs.push_back(out);
  }
  if (recipe.classify.empty()) return;
  auto kept = std::make_shared<std::deque<Classification>>();
  std::string error;
  if (!classify_outputs(model, recipe.classify, response, kept.get(), &error)) {
    response->error = ErrorKind::kInvalidArgument;
    response->error_in_writing = true;
    response->owned_error_message = std::make_shared<const std::string>(json_string_text(error));
    response->error_message = *response->owned_error_message;
    response->id.clear();
    response->outputs.clear();
    response->parameters = {};
    return;
  }
  response->classified = std::move(kept);
}

bool KServeCodec::complete(const uint8_t* block, uint64_t block_size,
                           const std::vector<uint64_t>& request_ids, uint64_t dispatch_ns,
                           uint64_t end_ns, std::vector<Answer>* answers, uint64_t timings[4],
                           bool partial) {
  ResultBlock& result = result_;
  result.outcomes.clear();
  result.outputs.clear();
  if (!parse_result_block(block, block_size, &result)) return false;
  for (const ResultOutcome& outcome : result.outcomes) {
    if (outcome.request_index >= request_ids.size()) return false;
  }
  for (int i = 0; i < 4; ++i) timings[i] = result.timings[i];
  const uint64_t worker_start = std::max(dispatch_ns, timings[0]);
  for (const ResultOutcome& outcome : result.outcomes) {
    // HTTP answers once: a non-final response of a decoupled model has no HTTP form yet.
    if (!outcome.final && !partial) continue;
    const uint64_t request_id = request_ids[outcome.request_index];
    auto found = in_flight_.find(request_id);
    if (found == in_flight_.end()) continue;
    Recipe& recipe = found->second;
    const ModelSpec& model = models_[recipe.model];
    Answer answer;
    answer.final = outcome.final;
    answer.counted_failure = outcome.counted_failure;
    answer.batch_size = recipe.batch_size;
    answer.request_ns = end_ns - recipe.submit_ns;
    // The queue ends where Triton's does, when the backend starts the batch (its
    // exec_start): the worker's start, past the ring's hand-off and the worker's
    // wake-up, unless the block gives the request a start of its own.
    const uint64_t started = outcome.started_ns != 0 ? outcome.started_ns : worker_start;
    answer.queue_ns = started > recipe.submit_ns ? started - recipe.submit_ns : 0;
    InferResponse& response = answer.response;
    response.request_id = request_id;
    bool truncated = false;
    if (outcome.error) {
      response.error = error_kind_of_triton_code(outcome.code);
      response.error_message = outcome.message;
    } else {
      response.id = outcome.final ? std::move(recipe.id) : recipe.id;
      response.model_name = model.name_json;
      response.model_version = model.version;
      answer_outputs(model, recipe, result.outputs.data() + outcome.first_output,
                     outcome.output_count, block, outcome.parameters, &response);
      truncated = !recipe.pins.empty() && refuse_truncated(recipe, &response);
      // Counted as the general path counts it: a failure (ModelManager._resolve).
      if (truncated) answer.counted_failure = true;
      if (!tensor_records_.empty()) record_outputs(response);
    }
    if (outcome.final) {
      // A result refused for a truncated region is not kept: its inputs may be zeros.
      if (!truncated) keep_result(recipe.model, recipe, result, outcome, block);
      unpin(recipe.pins);  // the last response: the output regions are written
      spare_recipes_.erase(in_flight_, found, [](Recipe& kept) { kept.clear(); });
    }
    answers->push_back(std::move(answer));
  }
  return true;
}

void KServeCodec::record_outputs(const InferResponse& response) {
  auto found = tensor_records_.find(response.request_id);
  if (found == tensor_records_.end()) return;
  for (const ResponseOutput& output : response.outputs) {
    std::vector<int64_t> dims = shape_dims(output.shape);
    found->second.emplace_back(TensorActivity::kBackendOutput, std::string());
    append_trace_tensor(&found->second.back().second, output.name, output.datatype, dims.data(),
                        dims.size(), output.data, output.size);
  }
}

size_t KServeCodec::in_flight_of(uint32_t model) const {
  size_t count = 0;
  for (const auto& entry : in_flight_) count += entry.second.model == model ? 1 : 0;
  return count;
}

void KServeCodec::forget(uint64_t request_id) {
  tensor_records_.erase(request_id);
  auto found = in_flight_.find(request_id);
  if (found == in_flight_.end()) return;
  unpin(found->second.pins);
  spare_recipes_.erase(in_flight_, found, [](Recipe& kept) { kept.clear(); });
}

void KServeCodec::unpin(const std::vector<uint64_t>& pins) {
  for (uint64_t id : pins) regions_->release(id);
}

bool KServeCodec::resolve_shm(const ModelSpec& /*model*/, ParsedRequest& request,
                              std::vector<uint64_t>* pins, std::vector<RegionRef>* refs,
                              ErrorKind* refused, std::string* error) {
  *refused = ErrorKind::kNone;
  if (regions_ == nullptr) return false;
  refs->resize(request.inputs.size() + request.output_shm.size());
  auto take = [&](std::string_view region, uint64_t offset, uint64_t size, RegionRef* ref) {
    *refused = regions_->resolve(region, offset, size, ref, error);
    if (*refused != ErrorKind::kNone) return false;
    pins->push_back(ref->id);
    // System memory only here; CUDA regions take the general path.
    return ref->kind == InputKind::kSystemShm;
  };
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    RequestInput& input = request.inputs[i];
    if (!input.in_shm) continue;
    if (!take(input.shm_region, input.shm_offset, input.size, &(*refs)[i])) {
      unpin(*pins);
      pins->clear();
      return false;
    }
    input.data = (*refs)[i].data;
  }
  for (size_t i = 0; i < request.output_shm.size(); ++i) {
    const OutputRegion& output = request.output_shm[i];
    if (!take(output.region, output.offset, output.size, &(*refs)[request.inputs.size() + i])) {
      unpin(*pins);
      pins->clear();
      return false;
    }
  }
  return true;
}

}  // namespace naiad
