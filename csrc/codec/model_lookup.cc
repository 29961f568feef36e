#include "codec/model_lookup.h"

#include <limits>
#include <utility>

namespace naiad {

bool parse_model_version(std::string_view text, int64_t* version, std::string* error) {
  if (text.empty()) {
    *version = -1;
    return true;
  }
  // std::stol: isspace() white space, an optional sign, at least one digit.
  size_t i = 0;
  while (i < text.size() && (text[i] == ' ' || (text[i] >= '\t' && text[i] <= '\r'))) ++i;
  bool negative = false;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) negative = text[i++] == '-';
  const size_t digits = i;
  // Accumulated as a negative number: LONG_MIN has no positive counterpart.
  int64_t value = 0;
  bool in_range = true;
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    const int digit = text[i] - '0';
    if (value < (kMin + digit) / 10) in_range = false;
    if (in_range) value = value * 10 - digit;
  }
  if (i > digits && in_range && !negative && value == kMin) in_range = false;
  if (i == digits || !in_range) {
    *error = "failed to get model version from specified version string '" + std::string(text) +
             "' (details: stol), version should be an integral value > 0";
    return false;
  }
  *version = negative ? value : -value;
  if (*version < 0) {
    *error = "invalid model version specified '" + std::string(text) +
             "' , version should be an integral value > 0";
    return false;
  }
  return true;
}

void ModelLookup::set_model(const std::string& name, std::vector<ModelVersionState> versions) {
  if (versions.empty()) {
    models_.erase(name);
    return;
  }
  Versions& entry = models_[name];
  entry.by_number.clear();
  entry.latest_ready = nullptr;
  for (const ModelVersionState& v : versions) entry.by_number[v.version] = v;
  for (const auto& [number, state] : entry.by_number) {
    if (state.ready) entry.latest_ready = &state;
  }
}

void ModelLookup::remove_lane_model(uint32_t lane_model) {
  for (auto& [name, entry] : models_) {
    for (auto& [number, state] : entry.by_number) {
      if (state.lane_model == lane_model) state.lane_model = kNoLaneModel;
    }
  }
}

ModelLookup::Found ModelLookup::find(std::string_view name, std::string_view version,
                                     uint32_t* lane_model, ErrorKind* kind,
                                     std::string* message) const {
  // Triton reads the version string before it looks the model up.
  int64_t number = -1;
  if (!parse_model_version(version, &number, message)) {
    *kind = ErrorKind::kInvalidArgument;
    return Found::kRefused;
  }
  auto refuse = [&](ErrorKind refused, const std::string& what) {
    *kind = refused;
    *message = "Request for unknown model: '" + std::string(name) + "'" + what;
    return Found::kRefused;
  };
  auto model = models_.find(name);
  if (model == models_.end()) return refuse(ErrorKind::kNotFound, " is not found");
  const ModelVersionState* state = model->second.latest_ready;
  if (number == -1) {
    if (state == nullptr) return refuse(ErrorKind::kNotFound, " has no available versions");
  } else {
    auto found = model->second.by_number.find(number);
    if (found == model->second.by_number.end()) {
      return refuse(ErrorKind::kNotFound, " version " + std::to_string(number) + " is not found");
    }
    state = &found->second;
    if (!state->ready) {
      return refuse(ErrorKind::kUnavailable,
                    " version " + std::to_string(number) + " is not at ready state");
    }
  }
  if (state->lane_model == kNoLaneModel) return Found::kGeneral;
  *lane_model = state->lane_model;
  return Found::kLane;
}

}  // namespace naiad
