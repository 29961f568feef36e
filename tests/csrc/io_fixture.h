// The I/O loop's C++ tests (csrc/http1/http_io.h) over real TCP connections on
// 127.0.0.1: a core with add_sub and its instances, whose worker end the test plays
// (it answers each batch with add_sub's response block), the loop listening for HTTP/1.1
// and gRPC, and what a client needs to send.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "add_sub_model.h"
#include "core/core.h"
#include "http1/http_io.h"
#include "http2/grpc_lane.h"
#include "ipc/ipc_schema.h"
#include "ipc/response_block.h"
#include "ipc/worker_endpoint.h"
#include "testing.h"

namespace naiad {

// A core with add_sub (one instance, or `instances`; batches up to 8), its lane, and
// the loop on a listening socket of its own. With a queue delay, the core has its timer
// thread. `clock`: the core's (the loop's spin runs on it too), monotonic_ns by default.
struct Fixture {
  explicit Fixture(uint64_t queue_delay_us = 0, int instances = 1, Clock clock = nullptr)
      : core(1 << 24, std::move(clock), queue_delay_us != 0), lane(core), grpc_lane(lane.codec()) {
    BatcherConfig config;
    config.dynamic_batching = true;
    config.max_batch_size = 8;
    config.max_queue_delay_us = queue_delay_us;
    ModelHandle model = core.add_model(config);
    for (int i = 0; i < instances; ++i) {
      uint32_t instance = core.add_instance(model);
      InstanceEndpoint ep = core.endpoint(instance);
      workers.push_back(new WorkerEndpoint(dup(core.arena().fd()), ep.channel_offset,
                                           dup(ep.wake_fd), dup(core.notify_fd())));
      core.instance_up(instance);
    }
    ModelSpec spec = add_sub_model(8);
    spec.core_model_id = model;
    const uint32_t lane_model = lane.codec().add_model(spec);
    lane.add_route("/v2/models/add_sub/infer", lane_model);
    // Version 0 is served, but not by the lane: its calls go to Python.
    grpc_lane.set_model("add_sub", {{0, true, kNoLaneModel}, {1, true, lane_model}});
    listener = listening(&port);
    grpc_listener = listening(&grpc_port);
    io = new HttpIo(lane, core, listener);
    io->listen_grpc(grpc_listener, grpc_lane, h2::Limits());
  }

  // A listening socket on 127.0.0.1 (non-blocking) and its port.
  static int listening(uint16_t* port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
    listen(fd, 16);
    socklen_t length = sizeof address;
    getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
    *port = ntohs(address.sin_port);
    return fd;
  }
  ~Fixture() {
    delete io;
    for (WorkerEndpoint* worker : workers) delete worker;
    close(listener);
    close(grpc_listener);
  }

  // A client of the HTTP port (of the gRPC port with `grpc`).
  int connect_client(bool grpc = false) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(grpc ? grpc_port : port);
    connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
    return fd;
  }

  // Plays the workers: every batch dispatched gets add_sub's answer (answer()). Returns
  // the batches answered. Not while `holding`: the test takes and answers them.
  int answer_batches() {
    if (holding) return 0;
    int answered = 0;
    BatchMessage message;
    for (WorkerEndpoint* worker : workers) {
      while (worker->try_next(&message)) {
        if (message.kind != MessageKind::kBatch) continue;
        answer(*worker, message);
        ++answered;
      }
    }
    return answered;
  }

  // add_sub's answer to a batch `worker` took: OUTPUT0 filled with the batch's size, one
  // response per request.
  void answer(WorkerEndpoint& worker, const BatchMessage& message) {
    const auto* header =
        reinterpret_cast<const BatchHeader*>(worker.arena().base() + message.desc_offset);
    std::string output(64, static_cast<char>('0' + header->n_requests));
    std::vector<ResponseEntry> entries(header->n_requests);
    for (uint32_t i = 0; i < header->n_requests; ++i) {
      entries[i].request_index = i;
      entries[i].json = "{\"outputs\":[[\"OUTPUT0\",\"FP32\",[1,16]]]}";
      entries[i].outputs = {{output.data(), 64}};
    }
    const uint64_t timings[4] = {1, 2, 3, 4};
    std::vector<uint8_t> block(response_block_size(entries));
    write_response_block(block.data(), entries, timings);
    uint64_t offset = worker.arena().alloc(block.size(), message.batch_id);
    std::memcpy(worker.arena().base() + offset, block.data(), block.size());
    worker.complete(message.batch_id, offset, block.size(), kCompletionOk);
  }

  // Turns of the loop (the worker answering in between) until `done` or ~2 s; every
  // turn's events and answered completions are kept.
  template <typename Done>
  bool turn_until(Done done) {
    for (int i = 0; i < 2000; ++i) {
      HttpIo::Turn turn;
      io->run(0, 0, &turn);
      io->poll(0, 0, &turn);  // the core's notify eventfd is the event loop's reader
      for (auto& event : turn.events) events.push_back(std::move(event));
      for (auto& a : turn.answered) answered.push_back(std::move(a));
      for (auto& c : turn.completions) python_completions.push_back(std::move(c));
      tensor_bytes += turn.tensor_bytes;
      answer_batches();
      if (done()) return true;
      pollfd wait{io->epoll_fd(), POLLIN, 0};
      ::poll(&wait, 1, 1);
    }
    return false;
  }

  const HttpIo::Event* find_event(HttpIo::EventKind kind, uint64_t connection = 0) const {
    for (const auto& event : events) {
      if (event.kind == kind && (connection == 0 || event.connection == connection)) return &event;
    }
    return nullptr;
  }

  Core core;
  HttpLane lane;
  GrpcLane grpc_lane;
  std::vector<WorkerEndpoint*> workers;
  bool holding = false;
  int listener = -1;
  uint16_t port = 0;
  int grpc_listener = -1;
  uint16_t grpc_port = 0;
  HttpIo* io = nullptr;
  std::vector<HttpIo::Event> events;
  std::vector<HttpIo::Answered> answered;
  std::vector<Completion> python_completions;
  HttpIo::TensorBytes tensor_bytes;  // the turns' counts, added up
};

// An HTTP/1.1 add_sub request (binary inputs filled with `fill`, binary output); with
// `id`, the client's id (its answer carries it).
inline std::string http_add_sub_request(char fill = '\x01', const std::string& id = "") {
  std::string header =
      std::string(id.empty() ? "{" : "{\"id\":\"" + id + "\",") +
      "\"inputs\":[{\"name\":\"INPUT0\",\"datatype\":\"FP32\",\"shape\":[1,16],"
      "\"parameters\":{\"binary_data_size\":64}},{\"name\":\"INPUT1\",\"datatype\":\"FP32\","
      "\"shape\":[1,16],\"parameters\":{\"binary_data_size\":64}}],\"outputs\":[{\"name\":"
      "\"OUTPUT0\",\"parameters\":{\"binary_data\":true}}]}";
  std::string body = header + std::string(128, fill);
  return "POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\nInference-Header-Content-Length: " +
         std::to_string(header.size()) + "\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n\r\n" + body;
}

inline void send_all(int fd, const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    ssize_t n = send(fd, bytes.data() + sent, bytes.size() - sent, 0);
    if (n <= 0) return;
    sent += static_cast<size_t>(n);
  }
}

// Reads from `fd` until `count` HTTP answers have arrived (or ~2 s with `fixture`
// turning the loop meanwhile).
inline std::string read_answers(Fixture& fixture, int fd, size_t count) {
  std::string received;
  auto answers = [&] {
    size_t n = 0;
    for (size_t at = received.find("HTTP/1.1 "); at != std::string::npos;
         at = received.find("HTTP/1.1 ", at + 1)) {
      ++n;
    }
    return n;
  };
  fixture.turn_until([&] {
    char buffer[65536];
    for (;;) {
      ssize_t got = recv(fd, buffer, sizeof buffer, MSG_DONTWAIT);
      if (got <= 0) break;
      received.append(buffer, static_cast<size_t>(got));
    }
    return answers() >= count;
  });
  return received;
}

inline uint64_t accepted_connection(Fixture& fixture) {
  fixture.turn_until([&] { return fixture.find_event(HttpIo::EventKind::kAccepted) != nullptr; });
  const HttpIo::Event* event = fixture.find_event(HttpIo::EventKind::kAccepted);
  return event == nullptr ? 0 : event->connection;
}

// Polls `done` (any thread's state) until it holds or ~5 s pass: a guard against a hang,
// never a measure of time.
template <typename Done>
bool wait_until(Done done) {
  for (int i = 0; i < 5000; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return done();
}

}  // namespace naiad
