// An ensemble's graph as the core runs it (ensemble_scheduler.h): each step's model
// (its core handle and the validator's spec) and how its inputs and outputs map to the
// ensemble's tensors. Built by the control plane (scheduling/ensemble.py through
// _core.pyx) from the checked config; immutable once set, shared by the requests that
// run on it.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "codec/infer_types.h"

namespace naiad {

struct EnsembleStep {
  ModelHandle model;  // the step's model version in the core (stale: not served)
  ModelSpec spec;     // its validator spec (request_validator.h)
  std::vector<std::pair<std::string, std::string>> inputs;   // model input -> ensemble tensor
  std::vector<std::pair<std::string, std::string>> outputs;  // model output -> ensemble tensor
};

struct EnsembleGraph {
  std::string name;                  // the ensemble's name, for messages
  std::vector<std::string> outputs;  // its config outputs, in order
  std::vector<EnsembleStep> steps;
  // model_transaction_policy { decoupled: true }: the request streams a response per
  // full set of outputs (one per response of a decoupled step), then the final flag;
  // otherwise it is answered once, when nothing runs (ensemble_scheduler.h).
  bool decoupled = false;
};

}  // namespace naiad
