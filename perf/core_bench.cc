// The core's own cost per request, single thread: submit -> batch -> complete.
// One thread plays both sides (the frontend's submit/flush/poll and a worker's
// next/alloc/complete), so no wake-up or context switch is counted: this is the
// C++ work the core adds to each request. Run: make bench-core.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_support.h"

using namespace naiad;

int main(int argc, char** argv) {
  const uint32_t batch = argc > 1 ? static_cast<uint32_t>(std::stoul(argv[1])) : 32;
  const int rounds = argc > 2 ? std::stoi(argv[2]) : 20000;
  OneInstanceCore bench(batch);
  Core& core = bench.core;
  WorkerEndpoint& worker = *bench.worker;
  const ModelHandle model = bench.model;

  SubmitRequest request = add_sub_request();
  uint64_t id = 0;
  size_t completed = 0;
  auto start = std::chrono::steady_clock::now();
  for (int round = 0; round < rounds; ++round) {
    for (uint32_t i = 0; i < batch; ++i) {
      request.request_id = ++id;
      core.submit(model, request);
    }
    core.flush();
    BatchMessage message = worker.next();
    uint64_t result = worker.arena().alloc(batch * 128, message.batch_id);
    worker.complete(message.batch_id, result, batch * 128, kCompletionOk);
    for (Completion& done : core.poll()) {
      completed += done.request_ids.size();
      core.arena().free(done.result_offset);
    }
  }
  double ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  std::printf("batch %u: %.3f us per request (%zu requests, %.1f us per batch)\n", batch,
              ns / 1000.0 / static_cast<double>(completed), completed, ns / 1000.0 / rounds);
  return completed == static_cast<size_t>(rounds) * batch ? 0 : 1;
}
