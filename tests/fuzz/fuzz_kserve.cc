// libFuzzer target: one KServe REST infer body (the JSON inference header, then binary
// tensors) through the C++ reader (kserve_json, json_reader), the validator with its
// BYTES length prefixes, the request block layout and the codec, for both example
// models. The header ends where the input's first JSON value ends, so a captured body
// is a seed as it is (tests/fuzz/corpus/kserve, tools/capture_traffic.py).
// The contract: the reader takes the body with every tensor inside it (binary ones back
// to back after the header) or leaves it; the validator accepts it, and the block the
// worker gets is consistent, or refuses it with Triton's message naming the model,
// input or output; the lane
// answers with a well-formed 400 or queues it.
#include <cstdint>
#include <cstring>
#include <string>

#include "codec/request_validator.h"
#include "fuzz_support.h"
#include "ipc/request_block.h"

using namespace naiad;

namespace {

// A BYTES tensor's elements walked by hand: u32 little-endian length, then the bytes.
int64_t walk_bytes(const uint8_t* data, uint64_t size) {
  int64_t count = 0;
  uint64_t pos = 0;
  while (pos < size) {
    if (size - pos < 4) return -1;
    uint32_t n;
    std::memcpy(&n, data + pos, 4);
    if (size - pos - 4 < n) return -1;
    pos += 4 + uint64_t{n};
    ++count;
  }
  return count;
}

void check_model(fuzz::Lanes& lanes, uint32_t model_index, const uint8_t* body, size_t size,
                 size_t header_size, const std::string& target) {
  const ModelSpec& model = lanes.codec().model(model_index);
  ParsedRequest request;
  Refusal refusal;
  if (!read_infer_header(body, size, header_size, &request, &refusal)) {
    // A refusal is Triton's: a kind it answers with and the message naming what is wrong
    // (the tensor's data, an input, or a request parameter of the wrong type).
    FUZZ_CHECK(
        refusal.kind == ErrorKind::kNone ||
        ((refusal.kind == ErrorKind::kInternal || refusal.kind == ErrorKind::kInvalidArgument) &&
         (refusal.message.find("'data'") != std::string::npos ||
          refusal.message.find("input ") != std::string::npos ||
          refusal.message.find("parameter '") != std::string::npos ||
          refusal.message.find("bytes array") != std::string::npos)));
    return;
  }
  FUZZ_CHECK(refusal.kind == ErrorKind::kNone);
  const uint8_t* binary = body + header_size;
  const uint8_t* converted = request.converted.data();
  for (const RequestInput& input : request.inputs) {
    if (input.in_shm) continue;
    const bool in_body = input.data >= body && input.data + input.size <= body + size;
    const bool in_converted =
        input.data >= converted && input.data + input.size <= converted + request.converted.size();
    FUZZ_CHECK(in_body || in_converted || input.size == 0);
    if (in_body && input.size != 0) {
      FUZZ_CHECK(input.data == binary);  // binary tensors follow one another
      binary += input.size;
    }
  }
  FUZZ_CHECK(binary <= body + size);
  std::string error;
  if (!validate_request(model, &request, &error)) {
    // Triton's message, naming the model or the input or output at fault.
    FUZZ_CHECK(error.find("'" + model.name + "'") != std::string::npos ||
               error.find("input '") != std::string::npos ||
               error.find("output '") != std::string::npos);
  } else {
    FUZZ_CHECK(request.batch_size <= 8);
    for (const RequestInput& input : request.inputs) {
      if (input.in_shm || model.inputs[input.spec].datatype != "BYTES") continue;
      // Triton counts a batching model's batch dim only when it is not 0 (its
      // ShapeWithBatchDim; request_validator.cc does the same).
      const bool skip_batch =
          model.max_batch_size > 0 && !input.shape.empty() && input.shape[0] == 0;
      int64_t elements = 1;
      for (size_t d = skip_batch ? 1 : 0; d < input.shape.size(); ++d) elements *= input.shape[d];
      FUZZ_CHECK(count_bytes_elements(input.data, input.size) == elements);
      FUZZ_CHECK(walk_bytes(input.data, input.size) == elements);
    }
    RequestBlock block;
    layout_request_block(model, request, &block);
    FUZZ_CHECK(block.inputs.size() == request.inputs.size());
    FUZZ_CHECK(fuzz::is_json(block.metadata));
  }

  HttpLane::Taken taken;
  if (!lanes.fixture.lane.submit_to(target, body, size, header_size, 1, &taken)) return;
  if (taken.request_id == 0) {
    // 500 where Triton answers JSON tensor data it cannot read with INTERNAL.
    const int status = fuzz::check_http_response(taken.reply);
    FUZZ_CHECK(status == 400 || status == 500);
    return;
  }
  std::string result;
  for (const KServeCodec::Answer& answer :
       lanes.answer({taken.request_id}, {taken.model}, &result)) {
    fuzz::check_http_response(lanes.fixture.lane.writer().text(answer.response));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Any bytes as a BYTES tensor: the counter and a plain walk agree.
  FUZZ_CHECK(count_bytes_elements(data, size) == walk_bytes(data, size));

  JsonReader reader(reinterpret_cast<const char*>(data), size);
  size_t header_size = size;
  if (reader.skip_value()) header_size = reader.position() - reinterpret_cast<const char*>(data);
  fuzz::Lanes lanes;
  check_model(lanes, lanes.fixture.lane_model, data, size, header_size, "/v2/models/add_sub/infer");
  check_model(lanes, lanes.bytes_model, data, size, header_size, "/v2/models/identity_bytes/infer");
  return 0;
}
