// The C++ I/O engine on N loops, each on a thread of its own (csrc/http1/io_group.h,
// io_thread.h), serving add_sub over real TCP connections with no Python: loop 0 holds
// the listener and hands connections out round robin, each loop reads, takes, answers
// and writes its own, and whichever loop polls the core posts each completion to the
// loops that own its requests. A thread stands in for the worker (it answers each batch
// with add_sub's result block; no model, no second process). perf/io_threads.py drives
// it with wrk for 1 and 2 loops side by side.
//
// Run: make build/io_threads_bench; build/io_threads_bench PORT LOOPS. It prints
// "ready"; each line read on stdin prints a snapshot {"answered", "cpu_s",
// "worker_cpu_s"} (requests answered, the process's CPU, the stand-in worker's part);
// end of input ends it.
#include <pthread.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "add_sub_model.h"
#include "bench_support.h"
#include "http1/http_framer.h"
#include "http1/http_io.h"
#include "http1/io_group.h"
#include "http1/io_thread.h"

using namespace naiad;

namespace {

double process_cpu() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_utime.tv_usec / 1e6 + usage.ru_stime.tv_sec +
         usage.ru_stime.tv_usec / 1e6;
}

double thread_cpu(clockid_t clock) {
  timespec t{};
  clock_gettime(clock, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s PORT LOOPS\n", argv[0]);
    return 2;
  }
  const int port = std::stoi(argv[1]);
  const uint32_t loops = static_cast<uint32_t>(std::stoul(argv[2]));
  const uint32_t max_batch = 64;
  OneInstanceCore bench(max_batch);
  Core& core = bench.core;
  ModelSpec model = add_sub_model(max_batch);
  model.core_model_id = bench.model;
  const int listener = loopback_listener(port, 1024);

  std::vector<std::unique_ptr<HttpLane>> lanes;
  std::vector<std::unique_ptr<HttpIo>> ios;
  IoGroup group;
  for (uint32_t i = 0; i < loops; ++i) {
    lanes.push_back(std::make_unique<HttpLane>(core));
    lanes[i]->add_route("/v2/models/add_sub/infer", lanes[i]->codec().add_model(model));
    ios.push_back(std::make_unique<HttpIo>(*lanes[i], core, i == 0 ? listener : -1));
    group.add(*ios[i]);
  }

  // The stand-in worker: each batch answered with add_sub's block for its size.
  std::vector<std::string> blocks(max_batch + 1);
  for (uint32_t n = 1; n <= max_batch; ++n) blocks[n] = add_sub_result_block(n);
  WorkerEndpoint& worker = *bench.worker;
  std::thread standin([&] {
    for (;;) answer_add_sub_batch(worker, worker.next(), blocks);
  });
  clockid_t standin_clock;
  pthread_getcpuclockid(standin.native_handle(), &standin_clock);

  std::atomic<uint64_t> answered{0};
  std::vector<std::unique_ptr<IoThread>> threads;
  for (uint32_t i = 0; i < loops; ++i) {
    threads.push_back(std::make_unique<IoThread>(*ios[i], core, [&](uint32_t, HttpIo::Turn&& turn) {
      uint64_t n = 0;
      for (const auto& a : turn.answered) n += a.successes;
      answered.fetch_add(n, std::memory_order_relaxed);
    }));
  }
  std::printf("ready\n");
  std::fflush(stdout);
  std::string line;
  while (std::getline(std::cin, line)) {
    std::printf("{\"answered\": %llu, \"cpu_s\": %.6f, \"worker_cpu_s\": %.6f}\n",
                static_cast<unsigned long long>(answered.load()), process_cpu(),
                thread_cpu(standin_clock));
    std::fflush(stdout);
  }
  // The stand-in blocks in next() for good: leave without unwinding.
  std::_Exit(0);
}
