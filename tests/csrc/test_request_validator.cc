// The validator's checks, order and messages: Triton 2.51's, as tests/test_validation.py
// pins them for the Python entry point (which calls this same code).
#include <cstring>
#include <string>
#include <vector>

#include "add_sub_model.h"
#include "codec/request_validator.h"
#include "testing.h"

using namespace naiad;

namespace {

const std::string P = "[request id: <id_unknown>] ";
const std::string kNote =
    "NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to "
    "be prepended to each input shape. If you want to specify the full shape including the "
    "batch dim in your input dims config, try setting max_batch_size to zero. See the model "
    "configuration docs for more info on max_batch_size.";

// Keeps the tensors' bytes alive for the request's views.
struct Request {
  ParsedRequest parsed;
  std::vector<std::string> storage;

  Request& input(const char* name, const char* datatype, std::vector<int64_t> shape,
                 std::string data) {
    storage.reserve(16);
    storage.push_back(std::move(data));
    RequestInput in;
    in.name = name;
    in.datatype = datatype;
    in.shape = std::move(shape);
    in.data = reinterpret_cast<const uint8_t*>(storage.back().data());
    in.size = storage.back().size();
    parsed.inputs.push_back(in);
    return *this;
  }
  Request& fp32(const char* name, std::vector<int64_t> shape, size_t count) {
    return input(name, "FP32", std::move(shape), std::string(4 * count, '\0'));
  }
};

Request add_sub_request(int64_t batch = 1) {
  Request r;
  r.fp32("INPUT0", {batch, 16}, 16 * static_cast<size_t>(batch));
  r.fp32("INPUT1", {batch, 16}, 16 * static_cast<size_t>(batch));
  return r;
}

std::string error_of(const ModelSpec& model, Request& request) {
  std::string error;
  if (validate_request(model, &request.parsed, &error)) return "<valid>";
  return error;
}

ModelSpec nobatch_model() {
  ModelSpec model;
  model.name = "nobatch";
  model.max_batch_size = 0;
  model.inputs.resize(3);
  model.inputs[0].name = "H";
  model.inputs[0].datatype = "FP16";
  model.inputs[0].dims = {2, 2};
  model.inputs[0].element_size = 2;
  model.inputs[1].name = "B";
  model.inputs[1].datatype = "BOOL";
  model.inputs[1].dims = {-1};
  model.inputs[1].element_size = 1;
  model.inputs[2].name = "OPT";
  model.inputs[2].datatype = "INT32";
  model.inputs[2].dims = {1};
  model.inputs[2].element_size = 4;
  model.inputs[2].optional = true;
  model.outputs = {"HO"};
  return model;
}

ModelSpec bytes_model() {
  ModelSpec model;
  model.name = "identity_bytes";
  model.max_batch_size = 8;
  model.inputs.resize(1);
  model.inputs[0].name = "INPUT0";
  model.inputs[0].datatype = "BYTES";
  model.inputs[0].dims = {-1};
  model.outputs = {"OUTPUT0"};
  return model;
}

std::string strings(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) {
    uint32_t length = static_cast<uint32_t>(item.size());
    out.append(reinterpret_cast<const char*>(&length), 4);
    out += item;
  }
  return out;
}

}  // namespace

TEST(validator_accepts_and_sizes_batches) {
  ModelSpec model = add_sub_model(64);
  Request one = add_sub_request(1);
  CHECK(error_of(model, one) == "<valid>" && one.parsed.batch_size == 1);
  Request many = add_sub_request(64);
  many.parsed.output_names = {"OUTPUT1"};
  CHECK(error_of(model, many) == "<valid>" && many.parsed.batch_size == 64);
  CHECK(many.parsed.outputs.size() == 1 && many.parsed.outputs[0] == 1);
  CHECK(many.parsed.inputs[1].spec == 1);
  Request nb;
  nb.input("H", "FP16", {2, 2}, std::string(8, '\0')).input("B", "BOOL", {5}, "\1\1\1\1\1");
  CHECK(error_of(nobatch_model(), nb) == "<valid>" && nb.parsed.batch_size == 1);
}

TEST(validator_messages_in_tritons_order) {
  ModelSpec model = add_sub_model(64);
  Request unknown = add_sub_request();
  unknown.parsed.inputs[0].name = "BOGUS";
  CHECK(error_of(model, unknown) == "unexpected inference input 'BOGUS' for model 'add_sub'");
  unknown.parsed.output_names = {"BAD"};
  CHECK(error_of(model, unknown) == "unexpected inference output 'BAD' for model 'add_sub'");

  Request missing = add_sub_request();
  missing.parsed.inputs.pop_back();
  CHECK(error_of(model, missing) ==
        P + "expected 2 inputs but got 1 inputs for model 'add_sub'. Got input(s) ['INPUT0'], "
            "but missing required input(s) ['INPUT1']. Please provide all required input(s).");
  Request optional;
  optional.input("B", "BOOL", {3}, "\1\0\1").input("OPT", "INT32", {1}, std::string(4, '\0'));
  CHECK(error_of(nobatch_model(), optional) ==
        P + "expected number of inputs between 2 and 3 but got 2 inputs for model 'nobatch'. "
            "Got input(s) ['B','OPT'], but missing required input(s) ['H']. Please provide all "
            "required input(s).");

  Request duplicate = add_sub_request();
  duplicate.fp32("INPUT0", {1, 16}, 16);
  CHECK(error_of(model, duplicate) == P + "input 'INPUT0' already exists in request");

  Request datatype = add_sub_request();
  datatype.parsed.id = "myid";
  datatype.parsed.inputs[0].datatype = "INT32";
  CHECK(error_of(model, datatype) ==
        "[request id: myid] inference input 'INPUT0' data-type is 'INT32', but model 'add_sub' "
        "expects 'FP32'");

  Request shape = add_sub_request();
  shape.parsed.inputs[0].shape = {1, 8};
  CHECK(error_of(model, shape) == P +
                                      "unexpected shape for input 'INPUT0' for model 'add_sub'. "
                                      "Expected [-1,16], got [1,8]. " +
                                      kNote);
  Request nb_shape;
  nb_shape.input("H", "FP16", {1, 2, 2}, std::string(8, '\0')).input("B", "BOOL", {1}, "\1");
  CHECK(error_of(nobatch_model(), nb_shape) ==
        P + "unexpected shape for input 'H' for model 'nobatch'. Expected [2,2], got [1,2,2]. ");

  Request big = add_sub_request(65);
  big.parsed.inputs[0].datatype = "INT32";
  CHECK(error_of(model, big) == P + "inference request batch-size must be <= 64 for 'add_sub'");
  Request mixed = add_sub_request();
  mixed.parsed.inputs[1].shape = {2, 16};
  CHECK(error_of(model, mixed) ==
        P + "input 'INPUT1' batch size does not match other inputs for 'add_sub'");
  Request flat = add_sub_request();
  flat.parsed.inputs[0].shape = {};
  CHECK(error_of(model, flat) ==
        P + "input 'INPUT0' has no shape but model requires batch dimension for 'add_sub'");

  Request size = add_sub_request();
  size.parsed.inputs[1].size = 96;
  CHECK(error_of(model, size) == P + "input byte size mismatch for input 'INPUT1' for model "
                                     "'add_sub'. Expected 64, got 96");
  Request zero = add_sub_request(0);
  CHECK(error_of(model, zero) == P + "input byte size mismatch for input 'INPUT0' for model "
                                     "'add_sub'. Expected 64, got 0");
  // A negative dim (gRPC shapes are int64) is refused by name, never read as a size.
  for (std::vector<int64_t> dims : {std::vector<int64_t>{-1, 16}, {-3, 16}}) {
    Request negative = add_sub_request();
    negative.parsed.inputs[0].shape = dims;
    negative.parsed.inputs[1].shape = dims;
    CHECK(error_of(model, negative) == P +
                                           "All input dimensions should be specified for input "
                                           "'INPUT0' for model 'add_sub', got [" +
                                           std::to_string(dims[0]) + ",16]");
  }
  ModelSpec variable = add_sub_model(64);
  variable.inputs[0].dims = {-1};
  Request wildcard = add_sub_request();
  wildcard.parsed.inputs[0].shape = {1, -4};
  CHECK(error_of(variable, wildcard) ==
        P + "All input dimensions should be specified for input 'INPUT0' for model 'add_sub', "
            "got [1,-4]");
  // A product past 64 bits is named exactly, as Triton's (and Python's) arithmetic does.
  Request huge = add_sub_request();
  huge.parsed.inputs[0].shape = {1, 16};
  ModelSpec wide = add_sub_model(64);
  wide.inputs[0].dims = {-1, -1};
  huge.parsed.inputs[0].shape = {1, 4294967296, 4294967296};
  CHECK(error_of(wide, huge) == P + "input byte size mismatch for input 'INPUT0' for model "
                                    "'add_sub'. Expected 73786976294838206464, got 64");
}

TEST(validator_counts_bytes_elements) {
  ModelSpec model = bytes_model();
  Request fewer;
  fewer.parsed.id = "s";
  fewer.input("INPUT0", "BYTES", {1, 3}, strings({"abc", "x"}));
  CHECK(error_of(model, fewer) ==
        "[request id: s] expected 3 string elements for inference input 'INPUT0' for model "
        "'identity_bytes', got 2");
  Request more;
  more.input("INPUT0", "BYTES", {1, 3}, strings({"a", "b", "c", "d"}));
  CHECK(error_of(model, more) ==
        P + "unexpected number of string elements 4 for inference input 'INPUT0' for model "
            "'identity_bytes', expecting 3");
  Request truncated;
  truncated.input("INPUT0", "BYTES", {1, 3}, std::string("\1\0\0\0a\1\0\0\0b\1\0\0\0c\2\0", 17));
  CHECK(error_of(model, truncated) ==
        P + "incomplete string length indicator for inference input 'INPUT0' for model "
            "'identity_bytes', expecting 4 bytes but only 2 bytes available. Please make sure "
            "the string length indicator is in one buffer.");
  Request short_data;
  short_data.input("INPUT0", "BYTES", {1, 1}, std::string("\5\0\0\0ab", 6));
  CHECK(error_of(model, short_data) ==
        "incomplete string data for inference input 'INPUT0', expecting string of length 5 but "
        "only 2 bytes available");
  Request good;
  good.input("INPUT0", "BYTES", {1, 2}, strings({"a", ""}));
  CHECK(error_of(model, good) == "<valid>");
  CHECK(count_bytes_elements(reinterpret_cast<const uint8_t*>(good.storage[0].data()),
                             good.storage[0].size()) == 2);
  CHECK(count_bytes_elements(reinterpret_cast<const uint8_t*>("\5\0\0\0ab"), 6) == -1);
}

TEST(validator_leaves_device_bytes_to_the_worker_which_checks_them_the_same_way) {
  // A BYTES input in a client's CUDA region (no host bytes): only its size reaches the
  // validator, which leaves the elements, as Triton 2.51 leaves GPU tensors to backends.
  ModelSpec model = bytes_model();
  Request on_device;
  on_device.parsed.id = "d";
  on_device.input("INPUT0", "BYTES", {1, 3}, "");
  on_device.parsed.inputs[0].data = nullptr;
  on_device.parsed.inputs[0].size = 40;
  on_device.parsed.inputs[0].on_device = true;
  CHECK(error_of(model, on_device) == "<valid>");
  // The worker's check of the bytes it copied to the host gives the validator's messages.
  const int64_t shape[] = {1, 3};
  for (const std::string& data :
       {strings({"abc", "x"}), strings({"a", "b", "c", "d"}), strings({"a", "b", "c"}),
        std::string("\1\0\0\0a\1\0\0\0b\1\0\0\0c\2\0", 17), std::string("\5\0\0\0ab", 6)}) {
    Request in_body;
    in_body.parsed.id = "d";
    in_body.input("INPUT0", "BYTES", {1, 3}, data);
    std::string error;
    const bool ok =
        check_bytes_input("identity_bytes", "d", "INPUT0", shape, 2, true,
                          reinterpret_cast<const uint8_t*>(data.data()), data.size(), &error);
    CHECK((ok ? std::string("<valid>") : error) == error_of(model, in_body));
  }
  // A zero batch is not counted, as the validator's ShapeWithBatchDim.
  const int64_t zero_batch[] = {0, 2};
  const std::string two = strings({"a", "b"});
  std::string error;
  CHECK(check_bytes_input("m", "", "T", zero_batch, 2, true,
                          reinterpret_cast<const uint8_t*>(two.data()), two.size(), &error));
  CHECK(!check_bytes_input("m", "", "T", zero_batch, 2, false,
                           reinterpret_cast<const uint8_t*>(two.data()), two.size(), &error));
  CHECK(error ==
        "[request id: <id_unknown>] unexpected number of string elements 2 for "
        "inference input 'T' for model 'm', expecting 0");
}

TEST(validator_skips_the_batch_dim_of_shape_tensors) {
  ModelSpec model = add_sub_model(8);
  model.inputs[1].shape_tensor = true;
  model.inputs[1].dims = {2};
  model.inputs[1].element_size = 4;
  Request request;
  request.fp32("INPUT0", {3, 16}, 48).fp32("INPUT1", {2}, 2);
  CHECK(error_of(model, request) == "<valid>" && request.parsed.batch_size == 3);
}

// Random requests of random names, datatypes, shapes (huge, empty, zero) and bytes:
// the validator never reads out of bounds (ASan/UBSan in make test), always explains a
// refusal, and what it accepts is consistent with the model.
TEST(validator_survives_random_requests) {
  ModelSpec batching = bytes_model();
  batching.inputs.push_back(add_sub_model().inputs[0]);
  batching.inputs.back().optional = true;
  ModelSpec plain = nobatch_model();
  uint64_t state = 0x2545F4914F6CDD1DULL;
  auto next = [&state] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  const char* names[] = {"INPUT0", "H", "B", "OPT", "X", ""};
  const char* datatypes[] = {"BYTES", "FP16", "BOOL", "INT32", "FP32", "?"};
  const int64_t dims[] = {0, 1, 2, 3, 4, 8, 65, int64_t{1} << 40, INT64_MAX};
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    const ModelSpec& model = i % 2 ? batching : plain;
    Request request;
    if (i % 4 == 0) {  // a valid request, then maybe one field changed
      if (i % 8 == 0) {
        request.input("H", "FP16", {2, 2}, std::string(8, '\0')).input("B", "BOOL", {2}, "ab");
      } else {
        request.input("INPUT0", "BYTES", {1, 1}, strings({"x"}));
      }
      const ModelSpec& valid_for = i % 8 == 0 ? plain : batching;
      RequestInput& input = request.parsed.inputs[0];
      switch (next() % 6) {
        case 0:
          input.shape.push_back(dims[next() % (sizeof(dims) / sizeof(dims[0]))]);
          break;
        case 1:
          input.size = next() % (input.size + 1);  // shorter: the bytes stay in bounds
          break;
        case 2:
          input.datatype = datatypes[next() % 6];
          break;
        default:
          break;
      }
      std::string error;
      if (validate_request(valid_for, &request.parsed, &error)) {
        ++accepted;
      } else {
        CHECK(!error.empty());
      }
      continue;
    }
    size_t count = next() % 4;
    for (size_t n = 0; n < count; ++n) {
      std::vector<int64_t> shape(next() % 4);
      for (int64_t& dim : shape) dim = dims[next() % (sizeof(dims) / sizeof(dims[0]))];
      std::string data(next() % 24, '\0');
      for (char& c : data) c = static_cast<char>(next() % 3);
      request.input(names[next() % 6], datatypes[next() % 6], shape, data);
    }
    if (next() % 4 == 0) request.parsed.output_names.push_back(next() % 2 ? "OUTPUT0" : "HO");
    std::string error;
    if (validate_request(model, &request.parsed, &error)) {
      ++accepted;
      for (const RequestInput& input : request.parsed.inputs) {
        CHECK(input.spec < model.inputs.size());
        CHECK(model.inputs[input.spec].name == input.name);
      }
      CHECK(model.max_batch_size > 0 || request.parsed.batch_size == 1);
    } else {
      CHECK(!error.empty());
    }
  }
  CHECK(accepted > 0);
}
