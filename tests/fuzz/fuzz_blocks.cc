// libFuzzer target: the arena blocks another process writes, as the front end reads
// them. A worker's response block (response_block, result_block) read, re-written
// through entry_of (a BLS caller's copy) and answered through the codec and both
// writers; and the same bytes as a worker's request block (request_block_fits, the
// core's check of a BLS request) at the start of an arena's heap. Seeds are made by
// the writers themselves (NAIAD_FUZZ_SEEDS=dir: LLVMFuzzerInitialize writes them), so
// they follow the layout in ipc_schema.h.
// The contract: a block the readers take has every view inside it; its answers are
// well-formed HTTP responses and gRPC messages of exactly the size announced; a block
// they refuse is refused without reading outside it.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "ipc/ipc_schema.h"
#include "ipc/request_block.h"
#include "ipc/response_block.h"
#include "ipc/result_block.h"

using namespace naiad;

namespace {

void write_seeds(const std::string& dir) {
  const std::string a = "AAAAAAAA", b(64, 'b'), strings = std::string("\x03\0\0\0abc", 7);
  std::vector<std::string> seeds = {
      result_block({ok_entry(0,
                             "{\"outputs\":[[\"OUTPUT0\",\"FP32\",[1,2]],[\"OUTPUT1\",\"FP32\","
                             "[1,2]]],\"parameters\":{\"p\":1}}",
                             {&a, &a})}),
      result_block({ok_entry(0, "{\"outputs\":[[\"OUTPUT0\",\"FP32\",[1,16]]]}", {&b}),
                    error_entry(1, "{\"error\":\"bad \\\"x\\\"\"}", 3),
                    ok_entry(2, "{\"outputs\":[[\"OUTPUT0\",\"BYTES\",[1,1]]]}", {&strings})}),
  };
  ResponseEntry partial = ok_entry(0, "{\"outputs\":[]}", {});
  partial.flags = 0;
  seeds.push_back(result_block({partial, ok_entry(0, "{\"outputs\":[]}", {})}));
  // A request block as Core::submit writes it: header, one slot, metadata.
  std::string request(sizeof(RequestHeader) + sizeof(InputSlot), '\0');
  const std::string metadata = "{\"id\":\"\",\"inputs\":[[\"INPUT0\",\"FP32\",[1,16]]]}";
  RequestHeader header{kRequestMagic, 1, static_cast<uint32_t>(metadata.size()), 1, 0, 0, 0,
                       SpanContext{}};
  InputSlot slot{256 + 128, 64};
  std::memcpy(&request[0], &header, sizeof header);
  std::memcpy(&request[sizeof header], &slot, sizeof slot);
  seeds.push_back(request + metadata + std::string(200, '\x02'));
  for (size_t i = 0; i < seeds.size(); ++i) {
    std::ofstream(dir + "/seed" + std::to_string(i), std::ios::binary) << seeds[i];
  }
}

// The bytes as a response block: aligned as the arena aligns blocks.
void check_response_block(const uint8_t* block, size_t size) {
  ResultBlock result;
  if (parse_result_block(block, size, &result)) {
    for (const ResultOutput& output : result.outputs) {
      FUZZ_CHECK(output.offset <= size && output.size <= size - output.offset);
    }
    for (const ResultOutcome& outcome : result.outcomes) {
      FUZZ_CHECK(outcome.first_output + outcome.output_count <= result.outputs.size());
    }
  }
  ResponseBlockView view;
  if (view_response_block(block, size, &view)) {
    for (uint32_t i = 0; i < view.header->n_responses; ++i) {
      const ResponseRecord& record = view.records[i];
      FUZZ_CHECK(record.json_offset <= size && record.json_size <= size - record.json_offset);
      // A BLS caller's copy of one response reads back as the same response.
      ResponseEntry entry = entry_of(view, i);
      std::vector<uint64_t> copy((response_block_size({entry}) + 7) / 8 + 1);
      const uint64_t timings[4] = {0, 0, 0, 0};
      uint8_t* out = reinterpret_cast<uint8_t*>(copy.data());
      write_response_block(out, {entry}, timings);
      ResponseBlockView again;
      FUZZ_CHECK(view_response_block(out, response_block_size({entry}), &again));
      FUZZ_CHECK(again.header->n_responses == 1 &&
                 again.json(again.records[0]) == view.json(record));
    }
  }

  // Answered through the codec: requests queued for as many responses as the block names.
  fuzz::Lanes lanes;
  const Body body = make_body(
      "{\"inputs\":[{\"name\":\"INPUT0\",\"datatype\":\"FP32\",\"shape\":[1,16],\"parameters\":{"
      "\"binary_data_size\":64}},{\"name\":\"INPUT1\",\"datatype\":\"FP32\",\"shape\":[1,16],"
      "\"parameters\":{\"binary_data_size\":64}}]}",
      128);
  std::vector<uint64_t> ids;
  for (uint64_t id = 1; id <= 4; ++id) {
    if (lanes.fixture.submit(body, id) == SubmitOutcome::kQueued) ids.push_back(id);
  }
  FUZZ_CHECK(ids.size() == 4);
  for (bool partial : {false, true}) {
    std::vector<KServeCodec::Answer> answers;
    uint64_t timings[4];
    if (!lanes.codec().complete(block, size, ids, 0, 0, &answers, timings, partial)) continue;
    for (const KServeCodec::Answer& answer : answers) {
      const InferResponse& response = answer.response;
      fuzz::check_http_response(lanes.fixture.lane.writer().text(response));
      if (response.error != ErrorKind::kNone) {
        grpc_error_message(response);  // the model's message, unescaped (it may be empty)
        continue;
      }
      GrpcResponseWriter writer;
      std::string message(writer.size(response), '\0');
      writer.write(response, &message[0]);
      std::string scratch;
      std::vector<std::string_view> parts;
      writer.parts(response, false, &scratch, &parts);
      std::string joined;
      for (std::string_view part : parts) joined.append(part.data(), part.size());
      FUZZ_CHECK(joined == message);
    }
    if (!partial) break;  // the first pass answered every final response
  }
  for (uint64_t id : ids) lanes.codec().forget(id);
}

// The bytes as a worker's request block at the start of an arena's heap; the arena
// ends where the bytes end, so ASan catches any read past it.
void check_request_block(const uint8_t* data, size_t size) {
  constexpr uint64_t kHeap = 256;
  std::vector<uint8_t> arena(kHeap + size);
  if (size != 0) std::memcpy(arena.data() + kHeap, data, size);
  const uint8_t* base = arena.data();
  if (!request_block_fits(base, arena.size(), kHeap, kHeap)) return;
  RequestHeader header;
  std::memcpy(&header, base + kHeap, sizeof header);
  uint64_t sum = 0;
  for (uint32_t i = 0; i < header.n_inputs; ++i) {
    InputSlot slot;
    std::memcpy(&slot, base + kHeap + sizeof header + uint64_t{i} * sizeof slot, sizeof slot);
    for (uint64_t b = 0; b < slot.size; ++b) sum += base[slot.offset + b];  // the worker's read
  }
  const uint64_t metadata = kHeap + request_metadata_offset(header.n_inputs);
  for (uint64_t b = 0; b < header.metadata_size; ++b) sum += base[metadata + b];
  FUZZ_CHECK(sum != UINT64_MAX);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("NAIAD_FUZZ_SEEDS")) write_seeds(dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A heap copy of exactly `size` bytes: aligned as blocks are (malloc's 16 bytes), and
  // ASan sees a read one byte past it.
  std::vector<uint8_t> block(data, data + size);
  check_response_block(block.data(), size);
  check_request_block(data, size);
  return 0;
}
