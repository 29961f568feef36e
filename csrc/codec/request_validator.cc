#include "codec/request_validator.h"

#include <cstring>
#include <string_view>

namespace naiad {

namespace {

constexpr std::string_view kShapeNote =
    "NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension "
    "to be prepended to each input shape. If you want to specify the full shape including "
    "the batch dim in your input dims config, try setting max_batch_size to zero. See the "
    "model configuration docs for more info on max_batch_size.";

// An element or byte count of any size: shapes are the client's, and Triton's message
// names the exact product even when it does not fit 64 bits. Base-1e9 limbs, least
// significant first.
class Count {
 public:
  explicit Count(uint64_t value = 1) {
    do {
      limbs_.push_back(static_cast<uint32_t>(value % kBase));
      value /= kBase;
    } while (value != 0);
  }
  void multiply(uint64_t factor) {
    unsigned __int128 carry = 0;
    for (uint32_t& limb : limbs_) {
      unsigned __int128 product = static_cast<unsigned __int128>(limb) * factor + carry;
      limb = static_cast<uint32_t>(product % kBase);
      carry = product / kBase;
    }
    while (carry != 0) {
      limbs_.push_back(static_cast<uint32_t>(carry % kBase));
      carry /= kBase;
    }
    while (limbs_.size() > 1 && limbs_.back() == 0) limbs_.pop_back();
  }
  std::string text() const {
    std::string out = std::to_string(limbs_.back());
    for (size_t i = limbs_.size() - 1; i-- > 0;) {
      std::string part = std::to_string(limbs_[i]);
      out.append(9 - part.size(), '0');
      out += part;
    }
    return out;
  }

 private:
  static constexpr uint64_t kBase = 1000000000;
  std::vector<uint32_t> limbs_;
};

// Triton's DimsListToString: [-1,16].
std::string dims_string(const int64_t* dims, size_t rank, bool batch_wildcard = false) {
  std::string out = "[";
  if (batch_wildcard) out += rank ? "-1," : "-1";
  for (size_t i = 0; i < rank; ++i) {
    if (i) out += ',';
    out += std::to_string(dims[i]);
  }
  out += ']';
  return out;
}

std::string quote(std::string_view name) {
  std::string out = "'";
  out += name;
  out += '\'';
  return out;
}

// Triton's list of input names: ['A','B'].
template <typename Names>
std::string names_string(const Names& names) {
  std::string out = "[";
  bool first = true;
  for (std::string_view name : names) {
    if (!first) out += ',';
    first = false;
    out += quote(name);
  }
  out += ']';
  return out;
}

int find_input(const ModelSpec& model, std::string_view name) {
  for (size_t i = 0; i < model.inputs.size(); ++i) {
    if (model.inputs[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

bool has_input(const ParsedRequest& request, std::string_view name) {
  for (const RequestInput& input : request.inputs) {
    if (input.name == name) return true;
  }
  return false;
}

std::string count_error(const ModelSpec& model, const ParsedRequest& request, size_t required) {
  const size_t total = model.inputs.size();
  std::vector<std::string_view> present, missing;
  for (const RequestInput& input : request.inputs) present.push_back(input.name);
  for (const InputSpec& spec : model.inputs) {
    if (!spec.optional && !has_input(request, spec.name)) missing.push_back(spec.name);
  }
  std::string expected = required == total
                             ? "expected " + std::to_string(total) + " inputs"
                             : "expected number of inputs between " + std::to_string(required) +
                                   " and " + std::to_string(total);
  return log_prefix(request.id) + expected + " but got " + std::to_string(present.size()) +
         " inputs for model " + quote(model.name) + ". Got input(s) " + names_string(present) +
         ", but missing required input(s) " + names_string(missing) +
         ". Please provide all required input(s).";
}

// Counts a BYTES tensor's elements as Triton does, with its messages when malformed.
bool count_strings(const RequestInput& input, std::string_view model_name,
                   std::string_view request_id, uint64_t* count, std::string* error) {
  uint64_t offset = 0;
  *count = 0;
  while (offset < input.size) {
    const uint64_t left = input.size - offset;
    if (left < 4) {
      *error = log_prefix(request_id) + "incomplete string length indicator for inference input " +
               quote(input.name) + " for model " + quote(model_name) + ", expecting 4 bytes but " +
               "only " + std::to_string(left) +
               " bytes available. Please make sure the string length indicator is in one buffer.";
      return false;
    }
    uint32_t length;
    std::memcpy(&length, input.data + offset, 4);
    offset += 4;
    if (length > input.size - offset) {
      *error = "incomplete string data for inference input " + quote(input.name) +
               ", expecting string of length " + std::to_string(length) + " but only " +
               std::to_string(input.size - offset) + " bytes available";
      return false;
    }
    offset += length;
    ++*count;
  }
  return true;
}

// The element count (times `factor`) of dims [first, rank) of `shape`, in 64 bits;
// `overflow` when it does not fit (then it cannot match, and only a message needs its
// exact value: text()).
struct ExpectedCount {
  const int64_t* shape;
  size_t first, rank;
  uint64_t factor;
  uint64_t value = 0;
  bool overflow = false;

  ExpectedCount(const int64_t* shape_, size_t first_, size_t rank_, uint64_t factor_)
      : shape(shape_), first(first_), rank(rank_), factor(factor_), value(factor_) {
    for (size_t d = first; d < rank; ++d) {
      overflow |= __builtin_mul_overflow(value, static_cast<uint64_t>(shape[d]), &value);
    }
  }
  std::string text() const {
    Count exact(factor);
    for (size_t d = first; d < rank; ++d) exact.multiply(static_cast<uint64_t>(shape[d]));
    return exact.text();
  }
};

// A BYTES input's elements against the count of its shape from dim `first` on.
bool check_strings(const RequestInput& input, std::string_view model_name,
                   std::string_view request_id, size_t first, std::string* error) {
  const ExpectedCount expected(input.shape.data(), first, input.shape.size(), 1);
  uint64_t strings = 0;
  if (!count_strings(input, model_name, request_id, &strings, error)) return false;
  if (!expected.overflow && strings > expected.value) {
    *error = log_prefix(request_id) + "unexpected number of string elements " +
             std::to_string(strings) + " for inference input " + quote(input.name) + " for model " +
             quote(model_name) + ", expecting " + expected.text();
    return false;
  }
  if (expected.overflow || strings < expected.value) {
    *error = log_prefix(request_id) + "expected " + expected.text() +
             " string elements for inference input " + quote(input.name) + " for model " +
             quote(model_name) + ", got " + std::to_string(strings);
    return false;
  }
  return true;
}

bool check_input(const ModelSpec& model, const ParsedRequest& request, const RequestInput& input,
                 int64_t batch, std::string* error) {
  const InputSpec& spec = model.inputs[input.spec];
  const bool batching = model.max_batch_size > 0;
  if (input.datatype != spec.datatype) {
    *error = log_prefix(request.id) + "inference input " + quote(input.name) + " data-type is " +
             quote(input.datatype) + ", but model " + quote(model.name) + " expects " +
             quote(spec.datatype);
    return false;
  }
  const int64_t* shape = input.shape.data();
  const size_t rank = input.shape.size();
  // A batching model's inputs carry the batch dim first, except shape tensors.
  const size_t skip = batching && !spec.shape_tensor ? 1 : 0;
  bool matches = rank >= skip && rank - skip == spec.dims.size();
  for (size_t d = 0; matches && d < spec.dims.size(); ++d) {
    if (spec.dims[d] != -1 && spec.dims[d] != shape[d + skip]) matches = false;
  }
  if (!matches) {
    *error = log_prefix(request.id) + "unexpected shape for input " + quote(input.name) +
             " for model " + quote(model.name) + ". Expected " +
             dims_string(spec.dims.data(), spec.dims.size(), batching) + ", got " +
             dims_string(shape, rank) + ". " + (batching ? std::string(kShapeNote) : "");
    return false;
  }
  // A wildcard dim (or the batch dim) matched anything above, negative values too; a
  // size computed from them would be nonsense. Triton's words for a -1 left in a shape.
  for (size_t d = 0; d < rank; ++d) {
    if (shape[d] < 0) {
      *error = log_prefix(request.id) + "All input dimensions should be specified for input " +
               quote(input.name) + " for model " + quote(model.name) + ", got " +
               dims_string(shape, rank);
      return false;
    }
  }
  // Triton's ShapeWithBatchDim prepends the batch only when it is non-zero.
  const size_t first = skip == 1 && batch == 0 ? 1 : 0;
  if (spec.element_size != 0) {
    const ExpectedCount expected(shape, first, rank, spec.element_size);
    if (expected.overflow || expected.value != input.size) {
      *error = log_prefix(request.id) + "input byte size mismatch for input " + quote(input.name) +
               " for model " + quote(model.name) + ". Expected " + expected.text() + ", got " +
               std::to_string(input.size);
      return false;
    }
    return true;
  }
  // Triton 2.51 leaves the elements of a tensor in GPU memory to the backend.
  if (input.on_device) return true;
  return check_strings(input, model.name, request.id, first, error);
}

}  // namespace

std::string log_prefix(std::string_view request_id) {
  std::string out = "[request id: ";
  out += request_id.empty() ? std::string_view("<id_unknown>") : request_id;
  out += "] ";
  return out;
}

bool check_bytes_input(std::string_view model_name, std::string_view request_id,
                       std::string_view input_name, const int64_t* shape, size_t rank,
                       bool batching, const uint8_t* data, uint64_t size, std::string* error) {
  RequestInput input;
  input.name = input_name;
  input.shape.assign(shape, shape + rank);
  input.data = data;
  input.size = size;
  // Triton's ShapeWithBatchDim prepends the batch only when it is non-zero.
  const size_t first = batching && rank > 0 && shape[0] == 0 ? 1 : 0;
  return check_strings(input, model_name, request_id, first, error);
}

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

bool validate_request(const ModelSpec& model, ParsedRequest* request, std::string* error) {
  std::vector<RequestInput>& inputs = request->inputs;
  // 1. duplicates (Triton rejects them while the request is built).
  for (size_t i = 1; i < inputs.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (inputs[j].name == inputs[i].name) {
        *error = log_prefix(request->id) + "input " + quote(inputs[i].name) +
                 " already exists in request";
        return false;
      }
    }
  }
  // 2. requested outputs.
  request->outputs.clear();
  request->outputs.reserve(request->output_names.size());
  for (std::string_view name : request->output_names) {
    size_t index = 0;
    while (index < model.outputs.size() && model.outputs[index] != name) ++index;
    if (index == model.outputs.size()) {
      *error = "unexpected inference output " + quote(name) + " for model " + quote(model.name);
      return false;
    }
    request->outputs.push_back(static_cast<uint32_t>(index));
  }
  // 3. unknown inputs.
  size_t required_present = 0;
  for (RequestInput& input : inputs) {
    int spec = find_input(model, input.name);
    if (spec < 0) {
      *error =
          "unexpected inference input " + quote(input.name) + " for model " + quote(model.name);
      return false;
    }
    input.spec = static_cast<uint32_t>(spec);
    if (!model.inputs[input.spec].optional) ++required_present;
  }
  // 4. count / required inputs (inputs are distinct and known by now).
  size_t required = 0;
  for (const InputSpec& spec : model.inputs) required += spec.optional ? 0 : 1;
  if (inputs.size() > model.inputs.size() || required_present != required) {
    *error = count_error(model, *request, required);
    return false;
  }
  // 5. batch dimension.
  const bool batching = model.max_batch_size > 0;
  int64_t batch = 0;
  if (batching) {
    bool seen = false;
    for (const RequestInput& input : inputs) {
      if (model.inputs[input.spec].shape_tensor) continue;
      if (input.shape.empty()) {
        *error = log_prefix(request->id) + "input " + quote(input.name) +
                 " has no shape but model requires batch dimension for " + quote(model.name);
        return false;
      }
      if (!seen) {
        batch = input.shape[0];
        seen = true;
      } else if (input.shape[0] != batch) {
        *error = log_prefix(request->id) + "input " + quote(input.name) +
                 " batch size does not match other inputs for " + quote(model.name);
        return false;
      }
    }
    if (batch > model.max_batch_size) {
      *error = log_prefix(request->id) +
               "inference request batch-size must be <= " + std::to_string(model.max_batch_size) +
               " for " + quote(model.name);
      return false;
    }
  }
  // 6. per input: datatype, shape, size.
  for (const RequestInput& input : inputs) {
    if (!check_input(model, *request, input, batch, error)) return false;
  }
  request->batch_size = batching ? static_cast<uint32_t>(batch) : 1;
  ShapeKey key;
  bool keyed = false;
  const size_t skip = batching ? 1 : 0;
  for (size_t i = 0; i < model.inputs.size(); ++i) {
    if (!model.inputs[i].shape_keyed) continue;
    for (const RequestInput& input : inputs) {
      if (input.spec != i || input.shape.size() < skip) continue;
      key.add(static_cast<uint32_t>(i), input.shape.data() + skip, input.shape.size() - skip);
      keyed = true;
    }
  }
  request->shape_key = keyed ? key.value() : 0;
  return true;
}

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

}  // namespace naiad
