// The infer fast lane's own cost per request, single thread, for add_sub as
// perf_analyzer sends it: received HTTP bytes -> scanned, parsed, validated, laid out
// and queued (HttpLane::take_http) -> batch -> a worker's result block -> the HTTP
// response bytes (KServeCodec::complete, HttpResponseWriter). No socket, wake-up or Python is
// counted: this is the C++ work the front end does per request instead of Python. Run: make
// bench-core.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "add_sub_model.h"
#include "bench_support.h"
#include "http1/http_framer.h"
#include "ipc/response_block.h"

using namespace naiad;

namespace {

std::string perf_analyzer_request() {
  std::string header =
      "{\"id\":\"\",\"inputs\":[{\"name\":\"INPUT0\",\"datatype\":\"FP32\",\"shape\":[1,16],"
      "\"parameters\":{\"binary_data_size\":64}},{\"name\":\"INPUT1\",\"datatype\":\"FP32\","
      "\"shape\":[1,16],\"parameters\":{\"binary_data_size\":64}}],\"outputs\":[{\"name\":"
      "\"OUTPUT0\",\"parameters\":{\"binary_data\":true}},{\"name\":\"OUTPUT1\",\"parameters\":"
      "{\"binary_data\":true}}]}";
  std::string body = header + std::string(128, '\x01');
  return "POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: 127.0.0.1:8000\r\n"
         "User-Agent: libcurl-agent/1.0\r\nAccept: */*\r\nInference-Header-Content-Length: " +
         std::to_string(header.size()) +
         "\r\nContent-Type: application/octet-stream\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

}  // namespace

int main(int argc, char** argv) {
  const uint32_t batch = argc > 1 ? static_cast<uint32_t>(std::stoul(argv[1])) : 8;
  const int rounds = argc > 2 ? std::stoi(argv[2]) : 20000;
  OneInstanceCore bench(batch);
  Core& core = bench.core;
  WorkerEndpoint& worker = *bench.worker;
  ModelSpec model = add_sub_model(64);
  model.core_model_id = bench.model;
  HttpLane lane(core);
  lane.add_route("/v2/models/add_sub/infer", lane.codec().add_model(model));

  std::string received;
  for (uint32_t i = 0; i < batch; ++i) received += perf_analyzer_request();
  const std::string result = add_sub_result_block(batch);
  std::vector<HttpLane::Taken> taken;
  std::vector<KServeCodec::Answer> answers;
  std::string response;
  uint64_t timings[4];
  size_t answered = 0;
  size_t response_bytes = 0;
  auto start = std::chrono::steady_clock::now();
  for (int round = 0; round < rounds; ++round) {
    taken.clear();
    lane.take_http(reinterpret_cast<const uint8_t*>(received.data()), received.size(), 1 << 20,
                   monotonic_ns(), &taken);
    core.flush();
    BatchMessage message = worker.next();
    uint64_t offset = worker.arena().alloc(result.size(), message.batch_id);
    std::memcpy(worker.arena().base() + offset, result.data(), result.size());
    worker.complete(message.batch_id, offset, result.size(), kCompletionOk);
    for (Completion& done : core.poll()) {
      answers.clear();
      lane.codec().complete(core.arena().base() + done.result_offset, done.result_size,
                            done.request_ids, done.dispatch_ns, monotonic_ns(), &answers, timings);
      // As _core.pyx does: size the response, allocate it once, write it.
      for (const KServeCodec::Answer& answer : answers) {
        response.resize(lane.writer().size(answer.response));
        lane.writer().write(answer.response, response.data());
        response_bytes += response.size();
      }
      answered += answers.size();
      core.arena().free(done.result_offset);
    }
  }
  double ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "fast lane, batch %u: %.3f us per request, HTTP bytes in to HTTP bytes out (%zu "
      "requests, %zu response bytes each)\n",
      batch, ns / 1000.0 / static_cast<double>(answered), answered,
      answered ? response_bytes / answered : 0);
  return answered == static_cast<size_t>(rounds) * batch ? 0 : 1;
}
