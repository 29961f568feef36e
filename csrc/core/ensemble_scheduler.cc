#include "core/ensemble_scheduler.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <iterator>
#include <system_error>

#include "codec/error_status.h"
#include "codec/json_reader.h"
#include "codec/kserve_json.h"
#include "codec/request_validator.h"
#include "core/core.h"
#include "core/ensemble_graph.h"
#include "ipc/channel.h"
#include "ipc/ipc_schema.h"
#include "ipc/request_block.h"
#include "ipc/result_block.h"

namespace naiad {

namespace {

// What a step's failure answers with (a pb_utils.TritonError code).
constexpr int32_t kCodeInternal = static_cast<int32_t>(TritonCode::kInternal);
constexpr int32_t kCodeInvalidArgument = 3;
constexpr int32_t kCodeUnavailable = 4;

// A JSON string's text (escapes kept) as plain text.
std::string unescape(std::string_view raw) {
  if (raw.find('\\') == std::string_view::npos) return std::string(raw);
  std::string quoted;
  quoted.reserve(raw.size() + 2);
  quoted += '"';
  quoted += raw;
  quoted += '"';
  std::string out;
  JsonReader reader(quoted.data(), quoted.size());
  if (!reader.string_into(&out)) return std::string(raw);
  return out;
}

// "[1,16]" as dims; false when it is not an array of non-negative integers.
bool parse_shape(std::string_view text, std::vector<int64_t>* out) {
  out->clear();
  JsonReader reader(text.data(), text.size());
  return reader.array([&] {
    uint64_t dim = 0;
    if (!reader.uint(&dim)) return false;
    out->push_back(static_cast<int64_t>(dim));
    return true;
  });
}

// A request the step's model refused, as the caller of a BLS request hears it
// (worker/bls.py refusal(), Triton's Python backend's words).
std::string refusal_message(const std::string& model, uint32_t status, int32_t* code,
                            const EnsembleOptions* sequence = nullptr) {
  *code = kCodeInternal;
  const std::string prefix = "Model " + model + " - Error when running inference: ";
  if ((status & kRefusedQueued) != 0) {
    const int32_t completion = static_cast<int32_t>(status & ~kRefusedQueued);
    if (completion == kCompletionTimedOut) {
      *code = kCodeUnavailable;
      return "Request timeout expired";
    }
    if (completion == kCompletionModelGone) {
      *code = kCodeUnavailable;
      return "Request for unknown model: '" + model + "' is not at ready state";
    }
    if (completion == kCompletionCancelled) return "Request was cancelled";
    if (completion == kCompletionInstanceDied) {
      return "Failed to process the request(s) for model '" + model +
             "': the model instance's worker process exited while running it; it is being "
             "restarted";
    }
    return "Failed to process the request(s) for model '" + model +
           "': the worker could not run the batch (see the server log)";
  }
  switch (static_cast<SubmitResult>(status)) {
    case SubmitResult::kQueueFull:
      return prefix + "Exceeds maximum queue size";
    case SubmitResult::kArenaFull:
      return prefix + "the shared-memory arena has no room for the request";
    case SubmitResult::kModelGone:
      return prefix + "Failed for execute the inference request. Model '" + model +
             "' is not ready.";
    // The sequence batcher's refusals, in its words (sequence_parameters.py refusal).
    case SubmitResult::kSequenceBatchSize:
      *code = kCodeInvalidArgument;
      return "inference request to model '" + model +
             "' must specify batch-size 1 due to requirements of sequence batcher";
    case SubmitResult::kNoSequenceId:
      *code = kCodeInvalidArgument;
      return "inference request to model '" + model +
             "' must specify a non-zero or non-empty correlation ID";
    case SubmitResult::kSequenceNotStarted: {
      *code = kCodeInvalidArgument;
      std::string corrid;
      if (sequence != nullptr) {
        corrid = sequence->sequence_key.empty() ? std::to_string(sequence->sequence_id)
                                                : sequence->sequence_key;
      }
      return "inference request for sequence " + corrid + " to model '" + model +
             "' must specify the START flag on the first request of the sequence";
    }
    default:
      return prefix + "the request's inputs cannot be read";
  }
}

// Request parameters (a raw JSON object, or empty) with `sequence_id`,
// `sequence_start` and `sequence_end` replaced by the given sequence's (left out where
// they are 0 or false, as a request without them). Empty when `parameters` is not an
// object this reader walks (the request's own then stay).
std::string with_sequence(std::string_view parameters, uint64_t id, bool string,
                          const std::string& key, uint32_t flags) {
  std::string out = "{";
  auto member = [&out](std::string_view name, std::string_view value) {
    if (out.size() > 1) out += ',';
    out += '"';
    out += name;
    out += "\":";
    out += value;
  };
  if (!parameters.empty()) {
    JsonReader reader(parameters.data(), parameters.size());
    const bool read = reader.object([&](std::string_view name) {
      const char* start = nullptr;
      if (!reader.skip_value(&start)) return false;
      if (name == "sequence_id" || name == "sequence_start" || name == "sequence_end") {
        return true;
      }
      member(name, std::string_view(start, static_cast<size_t>(reader.position() - start)));
      return true;
    });
    if (!read) return std::string();
  }
  if (string) {
    member("sequence_id", "\"" + json_string_text(key) + "\"");
  } else if (id != 0) {
    member("sequence_id", std::to_string(id));
  }
  if ((flags & kSequenceFlagStart) != 0) member("sequence_start", "true");
  if ((flags & kSequenceFlagEnd) != 0) member("sequence_end", "true");
  out += '}';
  return out;
}

// A final flag sent alone, as a decoupled model's worker writes it
// (worker/decoupled.py) and the stream consumers read it (scheduling/streaming.py).
constexpr std::string_view kFlagsOnly = "{\"empty\":true}";

bool flags_only(std::string_view json) {
  bool empty = false;
  JsonReader reader(json.data(), json.size());
  const bool read = reader.object([&](std::string_view key) {
    if (key == "empty") return reader.boolean(&empty);
    return reader.skip_value();
  });
  return read && empty;
}

}  // namespace

void EnsembleScheduler::set_graph(uint64_t model, std::shared_ptr<const EnsembleGraph> graph) {
  graphs_[model] = std::move(graph);
}

SubmitResult EnsembleScheduler::start(uint64_t model, const QueuedRequest& request,
                                      const EnsembleOrigin& origin,
                                      const EnsembleOptions& options) {
  auto graph = graphs_.find(model);
  if (graph == graphs_.end()) return SubmitResult::kModelGone;
  Arena& arena = host_.ensemble_arena();
  const uint8_t* block = arena.base() + request.offset;
  RequestHeader header;
  std::memcpy(&header, block, sizeof header);
  const std::string_view metadata(
      reinterpret_cast<const char*>(block + request_metadata_offset(header.n_inputs)),
      header.metadata_size);

  Run run;
  run.model = model;
  run.graph = graph->second;
  run.request = request;
  run.origin = origin;
  run.options = options;
  run.start_ns = host_.ensemble_now();
  run.traced = host_.traced(request.id);
  run.sent.assign(run.graph->steps.size(), {});
  Updated updated;  // the request's inputs, iteration 0 of their tensors
  // The block's metadata, as layout_request_block wrote it.
  uint32_t input = 0;
  JsonReader reader(metadata.data(), metadata.size());
  const bool read = reader.object([&](std::string_view key) {
    if (key == "id") {  // kept as JSON text: the steps' blocks carry it as it came
      std::string_view id;
      if (!reader.raw_string(&id)) return false;
      run.id = std::string(id);
      return true;
    }
    if (key == "inputs") {
      return reader.array([&] {
        std::string name;
        std::string_view datatype;
        const char* shape = nullptr;
        if (!reader.consume('[') || !reader.string_into(&name) || !reader.consume(',') ||
            !reader.raw_string(&datatype) || !reader.consume(',') || !reader.skip_value(&shape)) {
          return false;
        }
        const char* shape_end = reader.position();
        if (!reader.consume(']') || input >= header.n_inputs) return false;
        InputSlot slot;
        std::memcpy(&slot, block + sizeof(RequestHeader) + uint64_t{input} * sizeof(InputSlot),
                    sizeof slot);
        ++input;
        Tensor tensor;
        tensor.datatype = std::string(datatype);
        tensor.shape = std::string(shape, static_cast<size_t>(shape_end - shape));
        tensor.offset = slot.offset;
        tensor.size = slot.size;
        updated.emplace_back(name, run.tensors[name].add(std::move(tensor)));
        return true;
      });
    }
    if (key == "outputs") {
      if (reader.peek() == 'n') return reader.skip_value();
      return reader.array([&] {
        run.requested.emplace_back();
        return reader.string_into(&run.requested.back());
      });
    }
    if (key == "parameters") {
      const char* start = nullptr;
      if (!reader.skip_value(&start)) return false;
      run.parameters.assign(start, static_cast<size_t>(reader.position() - start));
      return true;
    }
    return reader.skip_value();
  });
  // A traced request's steps carry the client's tracestate to their models' contexts.
  if (run.traced) run.trace_state = request_trace_state(metadata);
  const uint64_t id = request.id;
  Run& placed = runs_[id] = std::move(run);
  if (!read) fail(placed, "the request block could not be read", kCodeInternal);
  advance(id, updated);
  return SubmitResult::kOk;
}

void EnsembleScheduler::fail(Run& run, const std::string& message, int32_t code) {
  fail_raw(run, json_string_text(message), code);
}

void EnsembleScheduler::fail_raw(Run& run, std::string_view raw_message, int32_t code) {
  if (!run.error_json.empty()) return;  // the first error is the request's
  run.error_json = "{\"error\":\"in ensemble '" + json_string_text(run.graph->name) + "', ";
  run.error_json += raw_message;
  run.error_json += "\"}";
  run.error_code = code;
}

void EnsembleScheduler::advance(uint64_t request_id, const Updated& updated) {
  auto found = runs_.find(request_id);
  if (found == runs_.end()) return;
  Run& run = found->second;
  const std::vector<EnsembleStep>& steps = run.graph->steps;
  int64_t complete = -1;
  if (run.error_json.empty() && !run.cancelled) {
    // The steps `updated` makes ready, by step then iteration (Triton's order).
    std::vector<std::pair<size_t, uint64_t>> ready;
    for (const auto& [name, iteration] : updated) {
      for (size_t s = 0; s < steps.size(); ++s) {
        bool consumes = false;
        bool inputs = true;
        for (const auto& mapping : steps[s].inputs) {
          consumes |= mapping.second == name;
          auto values = run.tensors.find(mapping.second);
          inputs &= values != run.tensors.end() && values->second.by_iteration.count(iteration);
        }
        if (!consumes || !inputs) continue;
        const std::vector<uint64_t>& ran = run.sent[s];
        if (std::find(ran.begin(), ran.end(), iteration) != ran.end()) continue;
        if (std::find(ready.begin(), ready.end(), std::make_pair(s, iteration)) != ready.end()) {
          continue;
        }
        ready.emplace_back(s, iteration);
      }
    }
    std::sort(ready.begin(), ready.end());
    for (const auto& [s, iteration] : ready) {
      send_step(run, request_id, s, iteration);
      if (!run.error_json.empty()) break;
    }
    if (run.graph->decoupled && run.error_json.empty()) complete = complete_iteration(run, updated);
  }
  if (!run.steps.empty()) {  // answered when its running steps are done
    if (complete >= 0) respond(run, complete);
    if (run.graph->decoupled) release_spent(run);
    return;
  }
  if (run.error_json.empty() && !run.cancelled && !run.graph->decoupled) {
    std::string waiting;
    for (size_t s = 0; s < steps.size(); ++s) {
      if (!run.sent[s].empty()) continue;
      if (!waiting.empty()) waiting += ", ";
      waiting += "'" + steps[s].spec.name + "'";
    }
    if (!waiting.empty()) {
      fail(run, "step(s) " + waiting + " never received all their inputs", kCodeInternal);
    }
  }
  finish(request_id, complete);
}

int64_t EnsembleScheduler::complete_iteration(const Run& run, const Updated& updated) const {
  const std::vector<std::string>& names =
      run.requested.empty() ? run.graph->outputs : run.requested;
  for (const auto& [name, iteration] : updated) {
    if (std::find(names.begin(), names.end(), name) == names.end()) continue;
    bool all = true;
    for (const std::string& output : names) {
      auto values = run.tensors.find(output);
      all &= values != run.tensors.end() && values->second.by_iteration.count(iteration) != 0;
    }
    if (all) return static_cast<int64_t>(iteration);
  }
  return -1;
}

void EnsembleScheduler::send_step(Run& run, uint64_t request_id, size_t s, uint64_t iteration) {
  run.sent[s].push_back(iteration);
  const EnsembleStep& step = run.graph->steps[s];
  if (step.model.value == 0) {  // the control plane found no version of it served
    int32_t code = kCodeInternal;
    const std::string message =
        refusal_message(step.spec.name, static_cast<uint32_t>(SubmitResult::kModelGone), &code);
    fail(run, message, code);
    return;
  }
  Arena& arena = host_.ensemble_arena();
  const SequenceTag sequence = step_sequence(run, s, iteration);
  // A step of another sequence than the request's (a step before it named one) has its
  // parameters say so: the worker reads the correlation id and flags from them.
  std::string parameters;
  if (!(sequence == request_sequence(run))) {
    parameters =
        with_sequence(run.parameters, sequence.id, sequence.string, sequence.key, sequence.flags);
  }
  ParsedRequest parsed;
  parsed.id = run.id;
  parsed.parameters = parameters.empty() ? std::string_view(run.parameters) : parameters;
  parsed.priority = run.options.priority;
  parsed.timeout_us = run.options.timeout_us;
  if (run.traced) parsed.trace_state = run.trace_state;
  parsed.sequence_id = sequence.string ? 0 : sequence.id;
  parsed.sequence_key = sequence.string ? std::string_view(sequence.key) : std::string_view();
  parsed.sequence_flags = sequence.flags;
  parsed.inputs.reserve(step.inputs.size());
  for (size_t i = 0; i < step.inputs.size(); ++i) {
    const Tensor& tensor = run.tensors.at(step.inputs[i].second).by_iteration.at(iteration);
    if (tensor.absent) continue;  // an optional input, as Triton leaves it out
    RequestInput& in = parsed.inputs.emplace_back();
    in.name = step.inputs[i].first;
    in.datatype = tensor.datatype;
    if (!parse_shape(tensor.shape, &in.shape)) {
      fail(run, "tensor '" + step.inputs[i].second + "' has an unreadable shape", kCodeInternal);
      return;
    }
    in.data = arena.base() + tensor.offset;
    in.size = tensor.size;
  }
  for (const auto& mapping : step.outputs) parsed.output_names.push_back(mapping.first);
  std::string error;
  if (!validate_request(step.spec, &parsed, &error)) {
    fail(run, error, kCodeInvalidArgument);
    return;
  }
  RequestBlock laid;
  layout_request_block(step.spec, parsed, &laid);
  SubmitRequest request;
  submit_request_of(parsed, &laid, host_.new_step_id(), &request);
  const SubmitResult result = host_.queue_step(step.model, request, run.traced ? request_id : 0);
  if (result != SubmitResult::kOk) {
    EnsembleOptions named = run.options;  // the correlation id the refusal names
    named.sequence_id = parsed.sequence_id;
    named.sequence_key = sequence.string ? sequence.key : std::string();
    int32_t code = kCodeInternal;
    const std::string message =
        refusal_message(step.spec.name, static_cast<uint32_t>(result), &code, &named);
    fail(run, message, code);
    return;
  }
  run.steps.push_back(request.request_id);
  step_of_[request.request_id] = StepRef{request_id, static_cast<uint32_t>(s), sequence};
}

EnsembleScheduler::SequenceTag EnsembleScheduler::request_sequence(const Run& run) {
  SequenceTag tag;
  tag.key = run.options.sequence_key;
  tag.string = !tag.key.empty();
  tag.id = tag.string ? 0 : run.options.sequence_id;
  tag.flags = run.options.sequence_flags;
  return tag;
}

EnsembleScheduler::SequenceTag EnsembleScheduler::step_sequence(const Run& run, size_t s,
                                                                uint64_t iteration) const {
  SequenceTag tag = request_sequence(run);
  // The first input with a tag gives it; Triton logs any other that differs and keeps
  // the first.
  for (const auto& mapping : run.graph->steps[s].inputs) {
    auto values = run.tensors.find(mapping.second);
    if (values == run.tensors.end()) continue;
    auto value = values->second.by_iteration.find(iteration);
    if (value == values->second.by_iteration.end() || !value->second.sequence.set) continue;
    tag = value->second.sequence;
    break;
  }
  tag.set = true;
  return tag;
}

bool EnsembleScheduler::override_sequence(std::string_view parameters, SequenceTag* tag,
                                          std::string* error) {
  if (parameters.empty()) return true;
  SequenceTag given = *tag;
  uint32_t flags = 0;  // as Triton: flags the response leaves out are cleared
  bool overridden = false;
  JsonReader reader(parameters.data(), parameters.size());
  const bool read = reader.object([&](std::string_view key) {
    if (key == "sequence_id") {
      const char next = reader.peek();
      if (next == '"') {
        given.key.clear();
        if (!reader.string_into(&given.key)) return false;
        given.string = true;
        given.id = 0;
        overridden = true;
        return true;
      }
      std::string_view text;
      bool integral = false;
      if ((next == '-' || (next >= '0' && next <= '9')) && reader.number(&text, &integral) &&
          integral) {
        // Triton's INT parameter is an int64 taken as the uint64 correlation id.
        int64_t negative = 0;
        uint64_t value = 0;
        const char* end = text.data() + text.size();
        const std::from_chars_result read = next == '-'
                                                ? std::from_chars(text.data(), end, negative)
                                                : std::from_chars(text.data(), end, value);
        const bool parsed = read.ec == std::errc() && read.ptr == end;
        if (parsed) {
          given.id = next == '-' ? static_cast<uint64_t>(negative) : value;
          given.key.clear();
          given.string = false;
          overridden = true;
          return true;
        }
      }
      *error =
          "expected parameter 'sequence_id' to be TRITONSERVER_PARAMETER_INT or "
          "TRITONSERVER_PARAMETER_STRING";
      return false;
    }
    if (key == "sequence_start" || key == "sequence_end") {
      const char next = reader.peek();
      bool value = false;
      if ((next != 't' && next != 'f') || !reader.boolean(&value)) {
        *error = "expect parameter '" + std::string(key) + "' to be TRITONSERVER_PARAMETER_BOOL";
        return false;
      }
      if (value) flags |= key == "sequence_start" ? kSequenceFlagStart : kSequenceFlagEnd;
      overridden = true;
      return true;
    }
    return reader.skip_value();
  });
  if (!read) return error->empty();  // keys this reader does not take: no override read
  if (overridden) {
    given.flags = flags;
    *tag = std::move(given);
  }
  return true;
}

void EnsembleScheduler::forget_step(Run& run, uint64_t step_id) {
  step_of_.erase(step_id);
  for (size_t i = 0; i < run.steps.size(); ++i) {
    if (run.steps[i] == step_id) {
      run.steps.erase(run.steps.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    }
  }
}

void EnsembleScheduler::step_response(uint64_t step_id, const ResponseBlockView& view,
                                      uint32_t index) {
  auto ref = step_of_.find(step_id);
  if (ref == step_of_.end()) return;
  const uint64_t request_id = ref->second.request_id;
  Run& run = runs_.at(request_id);
  const EnsembleStep& step = run.graph->steps[ref->second.step];
  // The step request's sequence, kept before a final response forgets the step.
  const SequenceTag step_tag = ref->second.sequence;
  const bool final = (view.records[index].flags & kResponseFinal) != 0;
  if (final) forget_step(run, step_id);
  Updated updated;
  std::vector<ResponseEntry> entries{entry_of(view, index)};
  // A failed request takes no more values; a final flag alone brings none.
  if (run.error_json.empty() && !run.cancelled && !flags_only(entries[0].json)) {
    // The response in a block of the request's own: the batch's block is shared with
    // its other requests and goes once they are answered.
    Arena& arena = host_.ensemble_arena();
    const uint64_t size = response_block_size(entries);
    const uint64_t block = arena.alloc(size, 0);
    ResultBlock result;
    if (block == 0) {
      fail(run,
           "the shared-memory arena has no room for the outputs of step '" + step.spec.name + "'",
           kCodeUnavailable);
    } else {
      write_response_block(arena.base() + block, entries, view.header->timings);
      run.blocks.push_back(block);
      if (!parse_result_block(arena.base() + block, size, &result) || result.outcomes.empty()) {
        fail(run, "the response of step '" + step.spec.name + "' could not be read", kCodeInternal);
      } else {
        const ResultOutcome& outcome = result.outcomes[0];
        SequenceTag sequence = step_tag;
        std::string sequence_error;
        if (outcome.error) {
          fail_raw(run, outcome.message, static_cast<int32_t>(outcome.code));
        } else if (!override_sequence(outcome.parameters, &sequence, &sequence_error)) {
          fail(run, sequence_error, kCodeInvalidArgument);
        } else {
          // Each mapped output gets its tensor's next value; one the response lacks, a
          // placeholder (absent), as Triton numbers them.
          std::vector<bool> given(step.outputs.size(), false);
          for (size_t o = 0; o < outcome.output_count; ++o) {
            const ResultOutput& output = result.outputs[outcome.first_output + o];
            const std::string name = unescape(output.name);
            for (size_t m = 0; m < step.outputs.size(); ++m) {
              if (step.outputs[m].first != name || given[m]) continue;
              given[m] = true;
              Tensor tensor;
              tensor.datatype = unescape(output.datatype);
              tensor.shape = std::string(output.shape);
              tensor.offset = block + output.offset;
              tensor.size = output.size;
              tensor.block = block;
              tensor.sequence = sequence;
              const std::string& target = step.outputs[m].second;
              updated.emplace_back(target, run.tensors[target].add(std::move(tensor)));
            }
          }
          for (size_t m = 0; m < step.outputs.size(); ++m) {
            if (given[m]) continue;
            Tensor placeholder;
            placeholder.absent = true;
            placeholder.sequence = sequence;
            const std::string& target = step.outputs[m].second;
            updated.emplace_back(target, run.tensors[target].add(std::move(placeholder)));
          }
        }
      }
    }
  }
  if (final || !updated.empty() || !run.error_json.empty()) advance(request_id, updated);
}

void EnsembleScheduler::step_refused(uint64_t step_id, uint32_t status) {
  auto ref = step_of_.find(step_id);
  if (ref == step_of_.end()) return;
  const uint64_t request_id = ref->second.request_id;
  Run& run = runs_.at(request_id);
  const EnsembleStep& step = run.graph->steps[ref->second.step];
  forget_step(run, step_id);
  if (!run.cancelled) {
    int32_t code = kCodeInternal;
    const std::string message = refusal_message(step.spec.name, status, &code);
    fail(run, message, code);
  }
  advance(request_id, {});
}

bool EnsembleScheduler::output_entry(Run& run, int64_t iteration, ResponseEntry* entry,
                                     std::string* json) {
  Arena& arena = host_.ensemble_arena();
  const std::vector<std::string>& names =
      run.requested.empty() ? run.graph->outputs : run.requested;
  *json = "{\"outputs\":[";
  bool first = true;
  const SequenceTag* sequence = nullptr;  // the last output's, as Triton's last one counts
  for (const std::string& name : names) {
    const Tensor* tensor = nullptr;
    auto values = run.tensors.find(name);
    if (values != run.tensors.end() && !values->second.by_iteration.empty()) {
      if (iteration >= 0) {
        auto value = values->second.by_iteration.find(static_cast<uint64_t>(iteration));
        if (value != values->second.by_iteration.end()) tensor = &value->second;
      } else {  // the last value
        auto value = values->second.by_iteration.find(values->second.next - 1);
        if (value != values->second.by_iteration.end()) tensor = &value->second;
      }
    }
    if (tensor != nullptr && tensor->absent && iteration >= 0) continue;  // as Triton: left out
    if (tensor == nullptr || tensor->absent) {
      fail(run, "no step produced output '" + name + "'", kCodeInternal);
      return false;
    }
    if (!first) *json += ',';
    first = false;
    *json +=
        "[\"" + json_string_text(name) + "\",\"" + tensor->datatype + "\"," + tensor->shape + "]";
    entry->outputs.push_back(OutputBytes{arena.base() + tensor->offset, tensor->size});
    if (tensor->sequence.set) sequence = &tensor->sequence;
  }
  *json += ']';
  if (sequence != nullptr) {
    // Triton adds these once per output (the same keys again in its JSON); once here. The
    // id has the request's type: a string request's, a number's as int64.
    *json += ",\"parameters\":{\"sequence_id\":";
    if (!run.options.sequence_key.empty()) {
      *json += '"' + json_string_text(sequence->string ? sequence->key : std::string()) + '"';
    } else {
      *json += std::to_string(static_cast<int64_t>(sequence->string ? 0 : sequence->id));
    }
    *json += ",\"sequence_start\":";
    *json += (sequence->flags & kSequenceFlagStart) != 0 ? "true" : "false";
    *json += ",\"sequence_end\":";
    *json += (sequence->flags & kSequenceFlagEnd) != 0 ? "true" : "false";
    *json += '}';
  }
  *json += '}';
  entry->json = *json;
  return true;
}

void EnsembleScheduler::respond(Run& run, int64_t iteration) {
  ResponseEntry entry;
  std::string json;
  if (!output_entry(run, iteration, &entry, &json)) return;
  entry.flags = 0;  // more to come: the request stays running
  const uint64_t none[4] = {0, 0, 0, 0};
  // The answer is a copy (answer_ensemble): the outputs' blocks may go after it.
  host_.answer_ensemble(run.model, run.request, run.origin, {entry}, none, kCompletionOk);
  run.responded.push_back(static_cast<uint64_t>(iteration));
}

void EnsembleScheduler::release_spent(Run& run) {
  const std::vector<std::string>& outputs =
      run.requested.empty() ? run.graph->outputs : run.requested;
  const std::vector<EnsembleStep>& steps = run.graph->steps;
  auto passed_on = [&](const std::string& name, uint64_t iteration) {
    for (size_t s = 0; s < steps.size(); ++s) {
      for (const auto& mapping : steps[s].inputs) {
        if (mapping.second != name) continue;
        const std::vector<uint64_t>& ran = run.sent[s];
        if (std::find(ran.begin(), ran.end(), iteration) == ran.end()) return false;
      }
    }
    const bool output = std::find(outputs.begin(), outputs.end(), name) != outputs.end();
    return !output ||
           std::find(run.responded.begin(), run.responded.end(), iteration) != run.responded.end();
  };
  // Each block still needed by a value; step requests hold copies of their inputs
  // (queue_step), so a value is needed only until its consumers are sent.
  std::vector<uint64_t> needed;
  for (const auto& [name, values] : run.tensors) {
    for (const auto& [iteration, value] : values.by_iteration) {
      if (value.block != 0 && !passed_on(name, iteration)) needed.push_back(value.block);
    }
  }
  Arena& arena = host_.ensemble_arena();
  std::vector<uint64_t> kept;
  for (uint64_t block : run.blocks) {
    if (std::find(needed.begin(), needed.end(), block) != needed.end()) {
      kept.push_back(block);
    } else {
      arena.free(block);
    }
  }
  if (kept.size() == run.blocks.size()) return;
  run.blocks = std::move(kept);
  // The values of the blocks gone go too (they point into them).
  for (auto& [name, values] : run.tensors) {
    for (auto it = values.by_iteration.begin(); it != values.by_iteration.end();) {
      const uint64_t block = it->second.block;
      const bool gone =
          block != 0 && std::find(run.blocks.begin(), run.blocks.end(), block) == run.blocks.end();
      it = gone ? values.by_iteration.erase(it) : std::next(it);
    }
  }
}

void EnsembleScheduler::finish(uint64_t request_id, int64_t iteration) {
  auto found = runs_.find(request_id);
  if (found == runs_.end()) return;
  // Out of the table first: answering may re-enter (an ensemble that is a step of
  // another answers as that step's response).
  Run run = std::move(found->second);
  runs_.erase(found);
  const uint64_t end = host_.ensemble_now();
  uint64_t timings[4] = {run.start_ns, 0, end > run.start_ns ? end - run.start_ns : 0, 0};
  std::vector<ResponseEntry> entries;
  std::string json;
  int32_t status = kCompletionOk;
  if (run.cancelled) {
    status = kCompletionCancelled;
  } else {
    ResponseEntry entry;
    entry.request_index = 0;
    entry.flags = kResponseFinal;
    if (run.error_json.empty()) {
      if (run.graph->decoupled && iteration < 0) {
        json = kFlagsOnly;  // the last step ended without completing the outputs
        entry.json = json;
      } else {
        output_entry(run, iteration, &entry, &json);
      }
    }
    if (!run.error_json.empty()) {
      entry.outputs.clear();
      entry.flags = kResponseFinal | kResponseError;
      entry.error_code = run.error_code;
      json = run.error_json;
      entry.json = json;
      // No execution of the ensemble is counted for a failed request, as in Triton
      // (the frontend counts one for a response block with timings).
      for (uint64_t& t : timings) t = 0;
    }
    entries.push_back(std::move(entry));
  }
  host_.finish_ensemble(run.model, run.request, run.origin, entries, timings, status,
                        run.graph->decoupled, std::move(run.blocks));
}

bool EnsembleScheduler::cancel(uint64_t request_id) {
  auto found = runs_.find(request_id);
  if (found == runs_.end()) return false;
  found->second.cancelled = true;
  // A copy: a dropped step is refused at once (step_refused), which edits the list.
  const std::vector<uint64_t> steps = found->second.steps;
  for (uint64_t step : steps) host_.cancel_step(step);
  return true;
}

}  // namespace naiad
