// Triton's classification extension: an output requested with `classification: N`
// (HTTP) or `class_count` (gRPC) comes back as BYTES strings "value:index[:label]", the
// N largest of each batch item, instead of its tensor. One definition for both front
// ends (they call it through _core.pyx), written the way Triton's is so that answers
// match byte for byte: the order of equal values is that of std::sort over the indices
// (not stable), values print as std::to_string does (%f for FP32/FP64, integers as
// integers), and an index past the labels or with an empty label line has no label.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "codec/infer_types.h"

namespace naiad {

struct Classification {
  std::string data;            // the BYTES tensor: 4-byte length + text per entry
  std::vector<int64_t> shape;  // [batch, k] for a batching model's output, else [k]
  std::string shape_json;      // the same as a JSON array (classify_outputs)
};

// Classifies the raw output `data` (wire `datatype`, `shape`) of a model that batches
// (`batching`: max_batch_size > 0, so the first dimension is the batch) or not, keeping
// the top `count` of each item. False with `error` set (Triton's message) for a
// datatype that has no order: BOOL, FP16, BF16, BYTES.
bool classify(std::string_view datatype, const uint8_t* data, size_t size,
              const std::vector<int64_t>& shape, bool batching, uint64_t count,
              const std::vector<std::string>& labels, Classification* out, std::string* error);

// An output a request asks to classify: its index in ModelSpec::outputs, and how many
// classes (gRPC `classification`, HTTP `classification`).
struct ClassifiedOutput {
  uint32_t output = 0;
  uint64_t count = 0;
};

// Replaces each output of `response` that `wanted` names by its classification, with the
// model's labels for it (ModelSpec::output_labels); the BYTES tensors are kept in `kept`,
// which the response then views (keep it until the response is written). False with
// `error` (Triton's message) for an output whose datatype has no order.
bool classify_outputs(const ModelSpec& model, const std::vector<ClassifiedOutput>& wanted,
                      InferResponse* response, std::deque<Classification>* kept,
                      std::string* error);

}  // namespace naiad
