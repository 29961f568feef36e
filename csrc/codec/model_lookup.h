// A request's model name and version string looked up as Triton 2.51 looks them up
// (GetModelVersionFromString, then ModelLifeCycle::GetModel), over the versions the
// control plane (Python) reports: the lane model that serves it, the general path's
// (served, but not by a lane), or Triton's refusal with its status and message. The
// control plane knows which versions are loading, failed or unloaded; the lane knows it
// from this table, without asking Python per request.
//
// Threads and locks: as the lane that owns it (grpc_lane.h): one thread at a time,
// changed only between requests.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "codec/infer_types.h"

namespace naiad {

// The version a request names, read as Triton reads it (std::stol: leading white
// space, a sign and digits, anything after them ignored); "" is -1, the latest ready
// version. False: `error` holds Triton's INVALID_ARGUMENT message (no number, out of
// range, or negative).
bool parse_model_version(std::string_view text, int64_t* version, std::string* error);

// A version served by no lane: requests for it are the general path's.
constexpr uint32_t kNoLaneModel = UINT32_MAX;

struct ModelVersionState {
  int64_t version = 0;
  bool ready = false;
  uint32_t lane_model = kNoLaneModel;
};

class ModelLookup {
 public:
  // Every version the control plane knows of `name`, ready or not; replaces what was
  // known of it. No versions: the name is unknown.
  void set_model(const std::string& name, std::vector<ModelVersionState> versions);
  // Forgets every name.
  void clear() { models_.clear(); }
  // `lane_model` serves nothing any more (its versions become the general path's).
  void remove_lane_model(uint32_t lane_model);

  enum class Found { kLane, kGeneral, kRefused };
  // kLane: `lane_model` serves it. kRefused: `kind` and `message` are Triton's answer
  // (not found, not ready, a version string that is no version).
  Found find(std::string_view name, std::string_view version, uint32_t* lane_model, ErrorKind* kind,
             std::string* message) const;

 private:
  struct Versions {
    std::map<int64_t, ModelVersionState> by_number;
    const ModelVersionState* latest_ready = nullptr;  // into by_number
  };
  std::map<std::string, Versions, std::less<>> models_;
};

}  // namespace naiad
