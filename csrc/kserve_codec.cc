#include "kserve_codec.h"

#include "error_status.h"
#include "kserve_json.h"
#include "request_block.h"
#include "request_validator.h"

namespace naiad {

ErrorKind error_kind_of_triton_code(int64_t code) {
  switch (code) {
    case 0:
      return ErrorKind::kUnknown;
    case 2:
      return ErrorKind::kNotFound;
    case 3:
      return ErrorKind::kInvalidArgument;
    case 4:
      return ErrorKind::kUnavailable;
    case 5:
      return ErrorKind::kUnsupported;
    case 6:
      return ErrorKind::kAlreadyExists;
    default:
      return ErrorKind::kInternal;
  }
}

int http_status_of(ErrorKind kind) { return error_status_of(kind).http_status; }

uint32_t KServeCodec::add_model(ModelSpec model) {
  models_.push_back(std::move(model));
  accepting_.push_back(true);
  return static_cast<uint32_t>(models_.size() - 1);
}

void KServeCodec::set_accepting(uint32_t model, bool accepting) {
  if (model < accepting_.size()) accepting_[model] = accepting;
}

SubmitOutcome KServeCodec::submit(uint32_t model_index, ParsedRequest& request, uint64_t request_id,
                                  uint64_t now_ns, std::string* error) {
  if (model_index >= models_.size() || !accepting_[model_index]) return SubmitOutcome::kFallback;
  const ModelSpec& model = models_[model_index];
  if (!validate_request(model, &request, error)) return SubmitOutcome::kInvalid;
  RequestBlock block;
  layout_request_block(model, request, &block);
  SubmitRequest submit;
  submit.request_id = request_id;
  submit.metadata = block.metadata;
  submit.inputs = std::move(block.inputs);
  submit.options.batch_size = request.batch_size;
  submit.options.priority = request.priority;
  submit.options.timeout_us = request.timeout_us;
  submit.options.shape_key = request.shape_key;
  submit.options.input_order = block.input_order;
  submit.options.sequence_id = request.sequence_id;
  submit.options.sequence_key = request.sequence_key;
  submit.options.sequence_flags = request.sequence_flags;
  if (core_.submit(model.core_model_id, submit) != SubmitResult::kOk) {
    return SubmitOutcome::kFallback;
  }
  Recipe& recipe = in_flight_[request_id];
  recipe.model = model_index;
  recipe.id.assign(request.id.data(), request.id.size());
  recipe.outputs = std::move(request.outputs);
  recipe.json = std::move(request.output_json);
  recipe.json_all = request.json_unlisted;
  recipe.batch_size = request.batch_size;
  recipe.submit_ns = now_ns;
  return SubmitOutcome::kQueued;
}

bool KServeCodec::complete(const uint8_t* block, uint64_t block_size,
                           const std::vector<uint64_t>& request_ids, uint64_t dispatch_ns,
                           uint64_t end_ns, std::vector<Answer>* answers, uint64_t timings[4],
                           bool partial) {
  ResultBlock result;
  if (!parse_result_block(block, block_size, &result)) return false;
  for (const ResultOutcome& outcome : result.outcomes) {
    if (outcome.request_index >= request_ids.size()) return false;
  }
  for (int i = 0; i < 4; ++i) timings[i] = result.timings[i];
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
    answer.batch_size = recipe.batch_size;
    answer.request_ns = end_ns - recipe.submit_ns;
    answer.queue_ns = dispatch_ns > recipe.submit_ns ? dispatch_ns - recipe.submit_ns : 0;
    InferResponse& response = answer.response;
    response.request_id = request_id;
    if (outcome.error) {
      response.error = error_kind_of_triton_code(outcome.code);
      response.error_message = outcome.message;
    } else {
      response.id = outcome.final ? std::move(recipe.id) : recipe.id;
      response.model_name = model.name_json;
      response.model_version = model.version;
      response.parameters = outcome.parameters;
      for (size_t j = 0; j < outcome.output_count; ++j) {
        const ResultOutput& output = result.outputs[outcome.first_output + j];
        bool json = recipe.json_all;
        if (!recipe.outputs.empty()) {
          bool wanted = false;
          for (size_t k = 0; k < recipe.outputs.size(); ++k) {
            if (model.outputs[recipe.outputs[k]] == output.name) {
              wanted = true;
              json = k < recipe.json.size() && recipe.json[k];
            }
          }
          if (!wanted) continue;
        }
        ResponseOutput out{output.name,           output.datatype, output.shape,
                           block + output.offset, output.size,     json};
        if (json) {
          // What the general path answers when it cannot write an output as JSON.
          std::string_view refusal = json_output_error(out, &response.error);
          if (!refusal.empty()) {
            response.error_message = refusal;
            response.id.clear();
            response.outputs.clear();
            response.parameters = {};
            break;
          }
        }
        response.outputs.push_back(out);
      }
    }
    if (outcome.final) in_flight_.erase(found);
    answers->push_back(std::move(answer));
  }
  return true;
}

}  // namespace naiad
