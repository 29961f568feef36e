// What the request path's C++ tests and fuzz targets (tests/fuzz/) build on: an infer
// body, a response block as a worker writes it, and a core + HTTP lane with add_sub
// registered and no instance (queued requests stay in the core's queue).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "add_sub_model.h"
#include "codec/kserve_json.h"
#include "core/core.h"
#include "core/response_cache.h"
#include "http1/http_framer.h"
#include "ipc/ipc_schema.h"
#include "ipc/response_block.h"

namespace naiad {

// A body: the JSON header, then `binary` bytes of input data.
struct Body {
  std::string bytes;
  size_t header_size;
};

inline Body make_body(const std::string& json, size_t binary) {
  Body body{json, json.size()};
  for (size_t i = 0; i < binary; ++i) body.bytes.push_back(static_cast<char>(i & 0xFF));
  return body;
}

// A response block as the worker writes it (WorkerEndpoint::respond).
inline std::string result_block(const std::vector<ResponseEntry>& entries,
                                const uint64_t (&timings)[4] = {10, 20, 30, 40}) {
  std::string block(response_block_size(entries), '\0');
  write_response_block(reinterpret_cast<uint8_t*>(&block[0]), entries, timings);
  return block;
}

inline ResponseEntry ok_entry(uint32_t index, std::string_view json,
                              const std::vector<const std::string*>& outputs) {
  ResponseEntry entry;
  entry.request_index = index;
  entry.json = json;
  for (const std::string* output : outputs) {
    entry.outputs.push_back(OutputBytes{output->data(), output->size()});
  }
  return entry;
}

inline ResponseEntry error_entry(uint32_t index, std::string_view json, int32_t code) {
  ResponseEntry entry;
  entry.request_index = index;
  entry.flags = kResponseFinal | kResponseError;
  entry.error_code = code;
  entry.json = json;
  return entry;
}

// A core without a timer thread, with add_sub registered in the core and the codec;
// with `cache`, the codec looks requests up in it and add_sub has `response_cache`.
struct LaneFixture {
  explicit LaneFixture(uint64_t arena_bytes = 1 << 20, ResponseCache* cache = nullptr)
      : core(arena_bytes, nullptr, false), lane(core) {
    BatcherConfig config;
    config.max_batch_size = 8;
    model = add_sub_model();
    model.core_model_id = core.add_model(config);
    if (cache != nullptr) {
      lane.codec().set_cache(cache);
      model.response_cache = true;
    }
    lane_model = lane.codec().add_model(model);
  }
  // Reads and queues `body` under `request_id`.
  SubmitOutcome submit(const Body& body, uint64_t request_id, std::string* error = nullptr) {
    ParsedRequest request;
    std::string ignored;
    if (!read_infer_header(reinterpret_cast<const uint8_t*>(body.bytes.data()), body.bytes.size(),
                           body.header_size, &request)) {
      return SubmitOutcome::kFallback;
    }
    return lane.codec().submit(lane_model, request, request_id, 1000,
                               error != nullptr ? error : &ignored);
  }
  Core core;
  HttpLane lane;
  ModelSpec model;
  uint32_t lane_model = 0;
};

}  // namespace naiad
