// Classification (classification.h): the strings, their order and the shapes Triton
// 2.51 answers (the expected values were read from a real tritonserver).
#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "codec/classification.h"
#include "testing.h"

using naiad::Classification;
using naiad::classify;

namespace {

std::vector<std::string> entries(const std::string& data) {
  std::vector<std::string> out;
  size_t offset = 0;
  while (offset + 4 <= data.size()) {
    uint32_t length;
    std::memcpy(&length, data.data() + offset, 4);
    out.emplace_back(data.substr(offset + 4, length));
    offset += 4 + length;
  }
  return out;
}

template <typename T>
Classification run(const char* datatype, const std::vector<T>& values,
                   const std::vector<int64_t>& shape, bool batching, uint64_t count,
                   const std::vector<std::string>& labels = {}) {
  Classification out;
  std::string error;
  CHECK(classify(datatype, reinterpret_cast<const uint8_t*>(values.data()),
                 values.size() * sizeof(T), shape, batching, count, labels, &out, &error));
  return out;
}

const std::vector<std::string> kLabels = {"cat", "dog", "", "bird label", "fish:x"};

}  // namespace

TEST(classification_batched_items_with_labels) {
  std::vector<float> values = {0.5f, 2.25f, -1, 2.25f, 7, 0.1f, 1, 2, 3, 4, 5, 6};
  Classification out = run("FP32", values, {2, 6}, true, 3, kLabels);
  CHECK((out.shape == std::vector<int64_t>{2, 3}));
  CHECK((entries(out.data) ==
         std::vector<std::string>{"7.000000:4:fish:x", "2.250000:1:dog", "2.250000:3:bird label",
                                  "6.000000:5", "5.000000:4:fish:x", "4.000000:3:bird label"}));
}

TEST(classification_count_past_the_classes_and_no_batch) {
  std::vector<float> values = {0.5f, 2.25f, -1, 2.25f, 7, 0.1f};
  Classification out = run("FP32", values, {6}, false, 10, kLabels);
  CHECK((out.shape == std::vector<int64_t>{6}));
  CHECK((entries(out.data) == std::vector<std::string>{"7.000000:4:fish:x", "2.250000:1:dog",
                                                       "2.250000:3:bird label", "0.500000:0:cat",
                                                       "0.100000:5", "-1.000000:2"}));
}

TEST(classification_ties_in_std_sort_order) {
  // Twenty equal values: std::sort's introsort, not a stable order (Triton's answer).
  std::vector<float> values(20, 1.0f);
  Classification out = run("FP32", values, {1, 20}, true, 20, kLabels);
  std::vector<std::string> expected;
  for (int index : {10, 19, 18, 17, 16, 15, 14, 13, 12, 11, 0, 9, 8, 7, 6, 5, 4, 3, 2, 1}) {
    std::string text = "1.000000:" + std::to_string(index);
    if (index < 5 && !kLabels[index].empty()) text += ":" + kLabels[index];
    expected.push_back(text);
  }
  CHECK(entries(out.data) == expected);
}

TEST(classification_integers_print_as_integers) {
  Classification ints = run<int32_t>("INT32", {3, -7, 3, 100}, {1, 4}, true, 4, kLabels);
  CHECK((entries(ints.data) ==
         std::vector<std::string>{"100:3:bird label", "3:0:cat", "3:2", "-7:1:dog"}));
  Classification bytes = run<uint8_t>("UINT8", {3, 200, 1}, {1, 3}, true, 2);
  CHECK((entries(bytes.data) == std::vector<std::string>{"200:1", "3:0"}));
  Classification doubles = run<double>("FP64", {1e20, 1e-7, -3.5}, {1, 3}, true, 3);
  CHECK((entries(doubles.data) ==
         std::vector<std::string>{"100000000000000000000.000000:0", "0.000000:1", "-3.500000:2"}));
}

TEST(classification_refuses_types_without_order) {
  for (const char* datatype : {"BOOL", "FP16", "BF16", "BYTES"}) {
    uint8_t data[4] = {1, 0, 1, 0};
    Classification out;
    std::string error;
    CHECK(!classify(datatype, data, sizeof(data), {1, 2}, true, 1, {}, &out, &error));
    CHECK(error == std::string("class result not available for output due to unsupported "
                               "type '") +
                       datatype + "'");
  }
}

TEST(classification_of_an_empty_item) {
  Classification out = run<float>("FP32", {}, {1, 0}, true, 2);
  CHECK((out.shape == std::vector<int64_t>{1, 0}));
  CHECK(out.data.empty());
}

TEST(classification_of_a_response_replaces_the_outputs_asked_for) {
  naiad::ModelSpec model;
  model.max_batch_size = 4;
  model.outputs = {"A", "B", "C"};
  model.outputs_json = model.outputs;
  model.output_labels = {kLabels};  // B and C have none
  std::vector<float> a = {0.5f, 2.25f, -1, 7};
  std::vector<int32_t> b = {3, 9};
  uint16_t c[2] = {1, 2};
  naiad::InferResponse response;
  response.outputs.push_back(
      {"A", "FP32", "[1,4]", reinterpret_cast<const uint8_t*>(a.data()), a.size() * 4});
  response.outputs.push_back(
      {"B", "INT32", "[2,1]", reinterpret_cast<const uint8_t*>(b.data()), b.size() * 4});
  response.outputs.push_back({"C", "FP16", "[1,2]", reinterpret_cast<const uint8_t*>(c), 4});
  std::deque<Classification> kept;
  std::string error;
  CHECK(naiad::classify_outputs(model, {{0, 2}, {1, 1}}, &response, &kept, &error));
  CHECK(response.outputs[0].datatype == "BYTES" && response.outputs[0].shape == "[1,2]");
  const std::string a_data(reinterpret_cast<const char*>(response.outputs[0].data),
                           response.outputs[0].size);
  CHECK((entries(a_data) == std::vector<std::string>{"7.000000:3:bird label", "2.250000:1:dog"}));
  CHECK(response.outputs[1].shape == "[2,1]");
  const std::string b_data(reinterpret_cast<const char*>(response.outputs[1].data),
                           response.outputs[1].size);
  CHECK((entries(b_data) == std::vector<std::string>{"3:0", "9:0"}));
  CHECK(response.outputs[2].datatype == "FP16");  // not asked for: as it was
  // A type without an order: Triton's message, the response left to be refused.
  CHECK(!naiad::classify_outputs(model, {{2, 1}}, &response, &kept, &error));
  CHECK(error == "class result not available for output due to unsupported type 'FP16'");
}
