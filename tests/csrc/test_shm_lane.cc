// Tensors in client shm regions through the C++ lanes: what the KServe reader takes
// (and leaves to the general path), the codec resolving and pinning regions, the
// core's one copy out of the region, responses with metadata only for outputs written
// into regions, pins released on answer and on forget, and damaged requests.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "add_sub_model.h"
#include "codec/kserve_json.h"
#include "http1/http_framer.h"
#include "ipc/response_block.h"
#include "shm/shm_registry.h"
#include "testing.h"

using namespace naiad;

namespace {

struct Object {
  std::string key;
  explicit Object(size_t size) {
    key = "/naiad_lane_test_" + std::to_string(::getpid());
    ::shm_unlink(key.c_str());
    int fd = ::shm_open(key.c_str(), O_CREAT | O_RDWR, 0600);
    if (fd >= 0) {
      (void)!::ftruncate(fd, static_cast<off_t>(size));
      ::close(fd);
    }
  }
  ~Object() { ::shm_unlink(key.c_str()); }
};

bool read(const std::string& json, ParsedRequest* out) {
  return read_infer_header(reinterpret_cast<const uint8_t*>(json.data()), json.size(), json.size(),
                           out);
}

std::string shm_input(const char* name, const char* region, int offset, int size) {
  return std::string("{\"name\":\"") + name +
         "\",\"datatype\":\"FP32\",\"shape\":[1,16],\"parameters\":{\"shared_memory_region\":\"" +
         region + "\",\"shared_memory_offset\":" + std::to_string(offset) +
         ",\"shared_memory_byte_size\":" + std::to_string(size) + "}}";
}

std::string shm_output(const char* name, const char* region, int offset, int size) {
  return std::string("{\"name\":\"") + name + "\",\"parameters\":{\"shared_memory_region\":\"" +
         region + "\",\"shared_memory_offset\":" + std::to_string(offset) +
         ",\"shared_memory_byte_size\":" + std::to_string(size) + "}}";
}

// What perf_analyzer --shared-memory system sends for add_sub.
std::string shm_request(const char* region = "r", int in1_offset = 64, int in1_size = 64) {
  return "{\"inputs\":[" + shm_input("INPUT0", region, 0, 64) + "," +
         shm_input("INPUT1", region, in1_offset, in1_size) + "],\"outputs\":[" +
         shm_output("OUTPUT0", region, 128, 64) + "," + shm_output("OUTPUT1", region, 192, 64) +
         "]}";
}

}  // namespace

TEST(shm_lane_reader_takes_region_parameters) {
  ParsedRequest request;
  const std::string json = shm_request();  // the request's views point into it
  CHECK(read(json, &request));
  CHECK(request.inputs.size() == 2 && request.inputs[1].in_shm);
  CHECK(request.inputs[1].shm_region == "r" && request.inputs[1].shm_offset == 64);
  CHECK(request.inputs[1].size == 64 && request.inputs[1].data == nullptr);
  CHECK(request.output_shm.size() == 2 && request.output_shm[1].output == 1);
  CHECK(request.output_shm[1].offset == 192 && request.output_shm[1].size == 64);
  // Mixed: one input in shm, one binary after the header.
  std::string mixed =
      "{\"inputs\":[" + shm_input("INPUT0", "r", 0, 64) +
      ",{\"name\":\"INPUT1\",\"datatype\":\"FP32\",\"shape\":[1,16],"
      "\"parameters\":{\"binary_data_size\":64}}],\"outputs\":[{\"name\":\"OUTPUT0\","
      "\"parameters\":{\"binary_data\":true}}," +
      shm_output("OUTPUT1", "r", 0, 64) + "]}";
  std::string body = mixed + std::string(64, 'x');
  ParsedRequest second;
  CHECK(read_infer_header(reinterpret_cast<const uint8_t*>(body.data()), body.size(), mixed.size(),
                          &second));
  CHECK(second.inputs[0].in_shm && !second.inputs[1].in_shm && second.inputs[1].size == 64);
  CHECK(second.output_shm.size() == 1 && second.output_shm[0].output == 1);
  // What the general path words: shm with binary_data_size, no byte size, bad types,
  // unknown keys, an output both binary and in shm.
  const std::string refused[] = {
      "{\"inputs\":[{\"name\":\"INPUT0\",\"datatype\":\"FP32\",\"shape\":[1,16],\"parameters\":"
      "{\"shared_memory_region\":\"r\",\"shared_memory_byte_size\":64,\"binary_data_size\":64}}]}",
      "{\"inputs\":[{\"name\":\"INPUT0\",\"datatype\":\"FP32\",\"shape\":[1,16],\"parameters\":"
      "{\"shared_memory_region\":\"r\"}}]}",
      "{\"inputs\":[{\"name\":\"INPUT0\",\"datatype\":\"FP32\",\"shape\":[1,16],\"parameters\":"
      "{\"shared_memory_region\":1,\"shared_memory_byte_size\":64}}]}",
      "{\"inputs\":[{\"name\":\"INPUT0\",\"datatype\":\"FP32\",\"shape\":[1,16],\"parameters\":"
      "{\"shared_memory_region\":\"r\",\"shared_memory_byte_size\":-1}}]}",
      "{\"inputs\":[{\"name\":\"INPUT0\",\"datatype\":\"FP32\",\"shape\":[1,16],\"parameters\":"
      "{\"shared_memory_region\":\"r\",\"shared_memory_byte_size\":64,\"x\":1}}]}",
      "{\"inputs\":[" + shm_input("INPUT0", "r", 0, 64) +
          "],\"outputs\":[{\"name\":\"OUTPUT0\",\"parameters\":{\"binary_data\":true,"
          "\"shared_memory_region\":\"r\",\"shared_memory_byte_size\":64}}]}",
      "{\"inputs\":[" + shm_input("INPUT0", "r", 0, 64) +
          "],\"outputs\":[{\"name\":\"OUTPUT0\",\"parameters\":{\"shared_memory_offset\":0}}]}",
  };
  for (const std::string& json : refused) {
    ParsedRequest out;
    CHECK(!read(json, &out));
  }
}

TEST(shm_lane_codec_resolves_pins_and_answers_metadata_only) {
  Object object(4096);
  Core core(1 << 20, nullptr, false);
  ShmRegistry registry(&core.arena());
  attach_registry(core, &registry);
  HttpLane lane(core);
  KServeCodec& codec = lane.codec();
  BatcherConfig config;
  config.max_batch_size = 8;
  ModelSpec model = add_sub_model();
  model.core_model_id = core.add_model(config);
  uint32_t lane_model = codec.add_model(model);
  std::string error;
  auto submit = [&](const std::string& json, uint64_t id) {
    ParsedRequest request;
    if (!read(json, &request)) return SubmitOutcome::kFallback;
    return codec.submit(lane_model, request, id, 1000, &error);
  };
  // No registry on the codec yet: the general path's.
  CHECK(submit(shm_request(), 1) == SubmitOutcome::kFallback);
  codec.set_regions(&registry);
  CHECK(registry.register_system("r", object.key, 0, 4096, &error) == ErrorKind::kNone);
  // Unknown region, out of bounds: the general path's unless the framer asks for the
  // registry's refusal (HTTP), Triton's kind and message; nothing stays pinned (checked
  // below through unregister).
  CHECK(submit(shm_request("zz"), 2) == SubmitOutcome::kFallback);
  CHECK(submit(shm_request("r", 4090, 64), 3) == SubmitOutcome::kFallback);
  auto refusal_of = [&](const std::string& json, uint64_t id) {
    ParsedRequest request;
    ErrorKind kind = ErrorKind::kNone;
    CHECK(read(json, &request));
    CHECK(codec.submit(lane_model, request, id, 1000, &error, nullptr, &kind) ==
          SubmitOutcome::kRefused);
    return std::to_string(http_status_of(kind)) + " " + error;
  };
  CHECK(refusal_of(shm_request("zz"), 2) == "404 Unable to find shared memory region: 'zz'");
  CHECK(refusal_of(shm_request("r", 4090, 64), 3)
            .find("400 Invalid offset + byte size for shared memory region: 'r'") == 0);
  CHECK(submit(shm_request("r", 64, 60), 4) == SubmitOutcome::kInvalid);  // 60 != 64 bytes
  CHECK(error.find("input byte size mismatch") != std::string::npos);
  CHECK(registry.copies() == 0);
  CHECK(submit(shm_request(), 5) == SubmitOutcome::kQueued);
  // Left in the region at submit: read in place if it runs alone, else copied once at
  // dispatch (test_region_inputs.cc).
  CHECK(registry.copies() == 0);
  CHECK(codec.owns(5));
  // Unregistered while the request is in flight: its output region stays mapped.
  CHECK(registry.unregister(InputKind::kSystemShm, "r", &error) == ErrorKind::kNone);
  CHECK(registry.mapped() == 1);

  const std::string bytes = "0123456789abcdef";
  ResponseEntry entry;
  entry.request_index = 0;
  entry.flags = kResponseFinal;
  entry.json = "{\"outputs\":[[\"OUTPUT0\",\"FP32\",[1,16]],[\"OUTPUT1\",\"FP32\",[1,16]]]}";
  // The worker wrote both into the region: no bytes in the block.
  entry.outputs.push_back(OutputBytes{bytes.data(), 0});
  entry.outputs.push_back(OutputBytes{bytes.data(), 0});
  std::vector<ResponseEntry> entries{entry};
  std::string block(response_block_size(entries), '\0');
  const uint64_t timings[4] = {1, 2, 3, 4};
  write_response_block(reinterpret_cast<uint8_t*>(&block[0]), entries, timings);
  std::vector<KServeCodec::Answer> answers;
  uint64_t got[4];
  CHECK(codec.complete(reinterpret_cast<const uint8_t*>(block.data()), block.size(), {5}, 1500,
                       4000, &answers, got));
  CHECK(answers.size() == 1 && answers[0].response.outputs.size() == 2);
  CHECK(answers[0].response.outputs[0].in_shm && answers[0].response.outputs[1].in_shm);
  std::string text = lane.writer().text(answers[0].response);
  CHECK(text.find("\"outputs\":[{\"name\":\"OUTPUT0\",\"datatype\":\"FP32\",\"shape\":[1,16]},"
                  "{\"name\":\"OUTPUT1\",\"datatype\":\"FP32\",\"shape\":[1,16]}]}") !=
        std::string::npos);
  CHECK(text.find("binary_data_size") == std::string::npos);
  CHECK(registry.mapped() == 0);  // the answer released the last pin

  // The next request is queued on the recipe request 5 left (KServeCodec recycles
  // them): a plain one, whose outputs come back as bytes, none in a region.
  const std::string plain =
      "{\"inputs\":[{\"name\":\"INPUT0\",\"datatype\":\"FP32\",\"shape\":[1,16],\"data\":[" +
      std::string("0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0") +
      "]},{\"name\":\"INPUT1\",\"datatype\":\"FP32\",\"shape\":[1,16],\"data\":[" +
      "0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0" + "]}],\"parameters\":{\"binary_data_output\":true}}";
  CHECK(submit(plain, 7) == SubmitOutcome::kQueued);
  const std::string sixty_four(64, 'x');
  entries[0].outputs = {OutputBytes{sixty_four.data(), 64}, OutputBytes{sixty_four.data(), 64}};
  block.assign(response_block_size(entries), '\0');
  write_response_block(reinterpret_cast<uint8_t*>(&block[0]), entries, timings);
  answers.clear();
  CHECK(codec.complete(reinterpret_cast<const uint8_t*>(block.data()), block.size(), {7}, 1500,
                       4000, &answers, got));
  CHECK(answers.size() == 1 && answers[0].response.outputs.size() == 2);
  CHECK(!answers[0].response.outputs[0].in_shm && !answers[0].response.outputs[1].in_shm);
  text = lane.writer().text(answers[0].response);
  CHECK(text.find("\"binary_data_size\":64") != std::string::npos);
  CHECK(text.substr(text.size() - 128) == sixty_four + sixty_four);

  // forget() releases pins too (a failed batch, shutdown).
  CHECK(registry.register_system("r", object.key, 0, 4096, &error) == ErrorKind::kNone);
  CHECK(submit(shm_request(), 6) == SubmitOutcome::kQueued);
  CHECK(registry.unregister(InputKind::kSystemShm, "", &error) == ErrorKind::kNone);
  CHECK(registry.mapped() == 1);
  codec.forget(6);
  CHECK(registry.mapped() == 0);
  core.remove_model(model.core_model_id);
  core.poll();
  codec.set_regions(nullptr);
  attach_registry(core, nullptr);
}
