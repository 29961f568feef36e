// The core under N submitting threads (issue 40): what several I/O threads would do to
// one Core. Each thread plays an I/O thread and one worker, as core_bench does for one:
// it submits a batch's worth of add_sub requests, flushes, takes and completes the
// batches that landed on its own instance (try_next: a worker that always keeps up),
// and polls, freeing the result blocks of whatever completed. All threads submit to
// the same model (one queue, one dynamic batcher), which has one instance per thread;
// with `own`, each thread submits to a model of its own (its queue, its slab, its
// instance) and shares only the core's lock and the arena with the others. Each round
// is a loop turn (Core::Turn: its submits queued under the flush's one acquisition of
// the core's lock), or with `each` no turn: every submit takes the lock, as the core
// did before turns (the same binary's before and after).
//
//   build/core_threads_bench THREADS [BATCH=32] [ROUNDS=20000] [shared|own] [turn|each]
//
// Prints infer/s over the wall time, and per thread its CPU per request, its voluntary
// context switches (a thread that blocks on a taken lock sleeps) and where its wall
// time went per call (submit, flush, worker, poll): with one thread that is the work,
// with more the growth is waiting. Run: make bench-core-threads.
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench_support.h"

using namespace naiad;

namespace {

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

uint64_t now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

struct ThreadResult {
  uint64_t submitted = 0;
  uint64_t submit_ns = 0, flush_ns = 0, worker_ns = 0, poll_ns = 0;
  uint64_t batches_run = 0;
  double cpu_s = 0;
  long voluntary_switches = 0;
  long involuntary_switches = 0;
};

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::stoi(argv[1]) : 1;
  const uint32_t batch = argc > 2 ? static_cast<uint32_t>(std::stoul(argv[2])) : 32;
  const int rounds = argc > 3 ? std::stoi(argv[3]) : 20000;
  const bool own = argc > 4 && std::string(argv[4]) == "own";
  const bool turns = !(argc > 5 && std::string(argv[5]) == "each");

  Core core(1 << 28, nullptr, false);
  BatcherConfig config;
  config.dynamic_batching = true;
  config.max_batch_size = batch;
  std::vector<ModelHandle> models;
  std::vector<WorkerEndpoint*> workers;
  for (int t = 0; t < threads; ++t) {
    if (own || models.empty()) models.push_back(core.add_model(config));
    uint32_t instance = core.add_instance(models.back());
    InstanceEndpoint ep = core.endpoint(instance);
    workers.push_back(new WorkerEndpoint(dup(core.arena().fd()), ep.channel_offset, dup(ep.wake_fd),
                                         dup(core.notify_fd())));
    core.instance_up(instance);
  }

  const uint64_t total = static_cast<uint64_t>(threads) * static_cast<uint64_t>(rounds) * batch;
  const int warmup = rounds / 10 + 1;
  const uint64_t warmup_total =
      static_cast<uint64_t>(threads) * static_cast<uint64_t>(warmup) * batch;
  std::atomic<uint64_t> completed{0};
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::atomic<bool> failed{false};
  std::vector<ThreadResult> results(static_cast<size_t>(threads));

  auto run = [&](int t) {
    SubmitRequest request = add_sub_request();
    WorkerEndpoint& worker = *workers[static_cast<size_t>(t)];
    const ModelHandle model = models[own ? static_cast<size_t>(t) : 0];
    ThreadResult& r = results[static_cast<size_t>(t)];
    auto serve = [&] {
      uint64_t t0 = now_ns();
      BatchMessage message;
      while (worker.try_next(&message)) {
        uint64_t result = worker.arena().alloc(message.n_requests * 128, message.batch_id);
        worker.complete(message.batch_id, result, message.n_requests * 128, kCompletionOk);
        ++r.batches_run;
      }
      uint64_t t1 = now_ns();
      uint64_t done = 0;
      for (Completion& c : core.poll()) {
        if (c.status != kCompletionOk) failed = true;
        done += c.request_ids.size();
        core.arena().free(c.result_offset);
      }
      completed.fetch_add(done, std::memory_order_relaxed);
      r.worker_ns += t1 - t0;
      r.poll_ns += now_ns() - t1;
    };
    auto submit_rounds = [&](int n, uint64_t until) {
      for (int round = 0; round < n; ++round) {
        uint64_t t0 = now_ns();
        std::optional<Core::Turn> turn;
        if (turns) turn.emplace(core);
        for (uint32_t i = 0; i < batch; ++i) {
          request.request_id = core.new_request_id();
          if (core.submit(model, request) != SubmitResult::kOk) failed = true;
        }
        uint64_t t1 = now_ns();
        core.flush();
        turn.reset();
        r.submit_ns += t1 - t0;
        r.flush_ns += now_ns() - t1;
        serve();
      }
      // What is still queued or on this thread's instance is served until every
      // thread's requests completed: the other threads' batches may be on this instance.
      while (completed.load(std::memory_order_relaxed) < until && !failed) serve();
    };
    // A warm-up first: the arena's pages are touched (faulted in) here, not measured.
    submit_rounds(warmup, warmup_total);
    r = ThreadResult{};
    ready.fetch_add(1);
    while (!go.load()) {
    }
    const double cpu0 = thread_cpu_s();
    rusage u0{};
    getrusage(RUSAGE_THREAD, &u0);
    submit_rounds(rounds, warmup_total + total);
    r.submitted = static_cast<uint64_t>(rounds) * batch;
    r.cpu_s = thread_cpu_s() - cpu0;
    rusage u1{};
    getrusage(RUSAGE_THREAD, &u1);
    r.voluntary_switches = u1.ru_nvcsw - u0.ru_nvcsw;
    r.involuntary_switches = u1.ru_nivcsw - u0.ru_nivcsw;
  };

  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(run, t);
  while (ready.load() < threads) {
  }
  const uint64_t contiguous0 = core.assembler().contiguous_batches();
  const uint64_t gathered0 = core.assembler().gathered_batches();
  const uint64_t gathered_bytes0 = core.assembler().gathered_bytes();
  const auto start = std::chrono::steady_clock::now();
  go = true;
  for (std::thread& th : pool) th.join();
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (failed || completed.load() != warmup_total + total) {
    std::fprintf(stderr, "core_threads_bench: %llu of %llu requests completed ok\n",
                 static_cast<unsigned long long>(completed.load()),
                 static_cast<unsigned long long>(warmup_total + total));
    return 1;
  }
  std::printf("threads %d batch %u, %s, %s: %.0f infer/s (%llu requests in %.3f s)\n", threads,
              batch, own ? "a model each" : "one model",
              turns ? "submits queued per turn" : "a lock per submit",
              static_cast<double>(total) / wall, static_cast<unsigned long long>(total), wall);
  for (int t = 0; t < threads; ++t) {
    const ThreadResult& r = results[static_cast<size_t>(t)];
    const double n = static_cast<double>(r.submitted);
    std::printf(
        "  thread %d: cpu %.1f ns/request, %ld voluntary + %ld involuntary switches, "
        "%llu batches run; wall us/request: submit %.3f flush %.3f worker %.3f poll %.3f\n",
        t, r.cpu_s * 1e9 / n, r.voluntary_switches, r.involuntary_switches,
        static_cast<unsigned long long>(r.batches_run), static_cast<double>(r.submit_ns) / 1e3 / n,
        static_cast<double>(r.flush_ns) / 1e3 / n, static_cast<double>(r.worker_ns) / 1e3 / n,
        static_cast<double>(r.poll_ns) / 1e3 / n);
  }
  std::printf("  batches: %llu contiguous, %llu gathered (%llu bytes copied again)\n",
              static_cast<unsigned long long>(core.assembler().contiguous_batches() - contiguous0),
              static_cast<unsigned long long>(core.assembler().gathered_batches() - gathered0),
              static_cast<unsigned long long>(core.assembler().gathered_bytes() - gathered_bytes0));
  for (WorkerEndpoint* w : workers) delete w;
  return 0;
}
