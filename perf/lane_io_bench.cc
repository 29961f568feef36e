// What a C++ I/O loop for lane connections would cost the frontend per request: a
// prototype, not the server. One thread: epoll over real TCP connections on 127.0.0.1,
// the received bytes go to HttpLane::take_http, the core batches them, an in-thread
// stand-in for the worker answers each batch with add_sub's result block (no model,
// no second process), KServeCodec::complete builds the answers, and each connection's
// answers of one wake-up go out in one write. No Python, no uvloop. Drive it with wrk
// (perf/wrk_load.py's binary body) and compare its CPU per request with perf/cost.py's
// frontend figures. Run: make build/lane_io_bench; build/lane_io_bench PORT SECONDS.
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

#include "add_sub_model.h"
#include "bench_support.h"
#include "http1/http_framer.h"
#include "http1/http_scan.h"
#include "ipc/ipc_schema.h"
#include "ipc/response_block.h"

using namespace naiad;

namespace {

struct Connection {
  int fd = -1;
  std::string in;
  std::deque<uint64_t> owed;                       // request ids, in request order
  std::unordered_map<uint64_t, std::string> done;  // answers not yet at the front
  std::string out;
  bool touched = false;
};

double cpu_seconds(const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; }

}  // namespace

int main(int argc, char** argv) {
  const int port = argc > 1 ? std::stoi(argv[1]) : 0;
  const double seconds = argc > 2 ? std::stod(argv[2]) : 10.0;
  const uint32_t max_batch = 64;
  OneInstanceCore bench(max_batch);
  Core& core = bench.core;
  WorkerEndpoint& worker = *bench.worker;
  ModelSpec model = add_sub_model(max_batch);
  model.core_model_id = bench.model;
  HttpLane lane(core);
  lane.add_route("/v2/models/add_sub/infer", lane.codec().add_model(model));
  std::vector<std::string> blocks(max_batch + 1);
  for (uint32_t n = 1; n <= max_batch; ++n) blocks[n] = add_sub_result_block(n);

  int listener = loopback_listener(port, 512);
  const int one = 1;
  sockaddr_in address{};
  socklen_t length = sizeof address;
  getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length);
  std::printf("listening on 127.0.0.1:%d\n", ntohs(address.sin_port));
  std::fflush(stdout);

  int poller = epoll_create1(0);
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.ptr = nullptr;  // the listener
  epoll_ctl(poller, EPOLL_CTL_ADD, listener, &event);

  std::unordered_map<uint64_t, Connection*> by_request;
  std::vector<Connection*> touched;
  std::vector<HttpLane::Taken> taken;
  std::vector<KServeCodec::Answer> answers;
  uint64_t timings[4];
  uint64_t answered = 0, first_answered = 0, wakeups = 0, writes = 0;
  char buffer[1 << 16];
  epoll_event events[256];
  bool counting = false;
  rusage usage_start{};
  auto started = std::chrono::steady_clock::now();
  auto counted_from = started;
  for (;;) {
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    if (!counting && answered > 0) {  // count from the first answer (wrk is running)
      counting = true;
      counted_from = std::chrono::steady_clock::now();
      first_answered = answered;
      getrusage(RUSAGE_SELF, &usage_start);
    }
    if (counting &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - counted_from).count() >
            seconds)
      break;
    if (!counting && elapsed > 120) return 3;
    int ready = epoll_wait(poller, events, 256, 100);
    ++wakeups;
    for (int e = 0; e < ready; ++e) {
      auto* connection = static_cast<Connection*>(events[e].data.ptr);
      if (connection == nullptr) {
        for (;;) {
          int fd = accept4(listener, nullptr, nullptr, SOCK_NONBLOCK);
          if (fd < 0) break;
          setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          auto* fresh = new Connection;
          fresh->fd = fd;
          epoll_event added{};
          added.events = EPOLLIN;
          added.data.ptr = fresh;
          epoll_ctl(poller, EPOLL_CTL_ADD, fd, &added);
        }
        continue;
      }
      ssize_t got = read(connection->fd, buffer, sizeof buffer);
      if (got <= 0) {
        epoll_ctl(poller, EPOLL_CTL_DEL, connection->fd, nullptr);
        close(connection->fd);
        for (uint64_t id : connection->owed) {
          by_request.erase(id);
          core.cancel(id);
        }
        delete connection;  // no answer names it now; `touched` holds only earlier events
        continue;
      }
      connection->in.append(buffer, static_cast<size_t>(got));
      taken.clear();
      size_t consumed =
          lane.take_http(reinterpret_cast<const uint8_t*>(connection->in.data()),
                         connection->in.size(), 1 << 20, monotonic_ns(), &taken, kHttpMaxPipeline);
      connection->in.erase(0, consumed);
      for (HttpLane::Taken& t : taken) {
        if (t.request_id == 0) {  // answered at once: not in this benchmark's traffic
          connection->out += t.reply;
          connection->touched = true;
          continue;
        }
        connection->owed.push_back(t.request_id);
        by_request[t.request_id] = connection;
      }
      if (connection->touched) touched.push_back(connection);
    }
    core.flush(false);
    // The worker, in this thread: every batch dispatched gets its result block.
    BatchMessage message;
    while (worker.try_next(&message)) answer_add_sub_batch(worker, message, blocks);
    for (Completion& done : core.poll(false)) {
      answers.clear();
      lane.codec().complete(core.arena().base() + done.result_offset, done.result_size,
                            done.request_ids, done.dispatch_ns, monotonic_ns(), &answers, timings);
      for (const KServeCodec::Answer& answer : answers) {
        auto found = by_request.find(answer.response.request_id);
        if (found == by_request.end()) continue;  // its client went away
        Connection* connection = found->second;
        by_request.erase(found);
        std::string& http = connection->done[answer.response.request_id];
        http.resize(lane.writer().size(answer.response));
        lane.writer().write(answer.response, http.data());
        if (!connection->touched) {
          connection->touched = true;
          touched.push_back(connection);
        }
      }
      answered += answers.size();
      core.arena().free(done.result_offset);
    }
    // One write per connection per wake-up: its answers that are due, in request order.
    for (Connection* connection : touched) {
      connection->touched = false;
      while (!connection->owed.empty()) {
        auto it = connection->done.find(connection->owed.front());
        if (it == connection->done.end()) break;
        connection->out += it->second;
        connection->done.erase(it);
        connection->owed.pop_front();
      }
      if (connection->out.empty()) continue;
      ssize_t sent = write(connection->fd, connection->out.data(), connection->out.size());
      ++writes;
      if (sent > 0) connection->out.erase(0, static_cast<size_t>(sent));
    }
    touched.clear();
  }
  rusage usage_end{};
  getrusage(RUSAGE_SELF, &usage_end);
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - counted_from).count();
  const double requests = static_cast<double>(answered - first_answered);
  const double user = cpu_seconds(usage_end.ru_utime) - cpu_seconds(usage_start.ru_utime);
  const double kernel = cpu_seconds(usage_end.ru_stime) - cpu_seconds(usage_start.ru_stime);
  std::printf(
      "C++ I/O loop prototype: %.0f requests in %.1f s (%.0f/s), CPU per request: user %.2f us, "
      "kernel %.2f us, total %.2f us; %.2f requests per wake-up, %.2f per write\n",
      requests, wall, requests / wall, user / requests * 1e6, kernel / requests * 1e6,
      (user + kernel) / requests * 1e6, static_cast<double>(answered) / wakeups,
      static_cast<double>(answered) / (writes ? writes : 1));
  return 0;
}
