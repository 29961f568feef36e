// Several I/O loops over one core (csrc/http1/io_group.h, io_thread.h): connections,
// HTTP/1.1 and gRPC, handed out by the loop holding the listener and then served wholly
// by their loop,
// completions polled by one loop reaching the loop that owns their requests (a batch
// whose requests two loops own answered by both, its block freed once), two loops
// on threads of their own serving many clients at once, and a relaying loop (as
// `naiad serve`'s loops 1..N-1) moving the connections that need Python to loop 0, its
// leftovers for Python posted there, and called by another thread while paused (run it
// under TSan: build/test_core_tsan).
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "grpc_request_support.h"
#include "h2_client.h"
#include "http1/io_group.h"
#include "http1/io_thread.h"
#include "io_fixture.h"
#include "testing.h"

using namespace naiad;

namespace {

size_t count_answers(const std::string& received) {
  size_t n = 0;
  for (size_t at = received.find("HTTP/1.1 200 OK"); at != std::string::npos;
       at = received.find("HTTP/1.1 200 OK", at + 1)) {
    ++n;
  }
  return n;
}

// The I/O fixture's core, lane and loop (loop 0, holding both listeners), and a second
// loop with a lane of its own and no listener: the group of the two.
struct Group : Fixture {
  explicit Group(uint64_t queue_delay_us = 0)
      : Fixture(queue_delay_us), lane1(core), grpc_lane1(lane1.codec()) {
    ModelSpec spec = add_sub_model(8);
    spec.core_model_id = lane.codec().model(0).core_model_id;  // the fixture's model
    const uint32_t lane_model = lane1.codec().add_model(spec);
    lane1.add_route("/v2/models/add_sub/infer", lane_model);
    grpc_lane1.set_model("add_sub", {{1, true, lane_model}});
    io1 = std::make_unique<HttpIo>(lane1, core, -1);
    io1->listen_grpc(-1, grpc_lane1, h2::Limits());
    group.add(*io);
    group.add(*io1);
  }
  ~Group() {
    threads.clear();  // stopped before the loops go
    io1.reset();
  }

  // Loop 1 hands Python nothing itself: it relays to loop 0, as `naiad serve`'s do.
  void relay() {
    io1->relay_to(io);
    io1_relays_ = true;
  }

  HttpIo& loop(uint32_t index) { return index == 0 ? *io : *io1; }

  // Two clients, the first served by loop 0 and the second by loop 1 (the single
  // thread turning both loops until loop 0 handed the second over).
  bool connect_pair(int* first, int* second) {
    *first = connect_client();
    *second = connect_client();
    return wait_until([&] {
      turn(0);
      turn(1);
      return io->connections_served() == 1 && io1->connections_served() == 1;
    });
  }

  // One turn of `index`'s loop (sockets, mailbox; with `completions`, the core's too),
  // its answered statistics kept by loop.
  void turn(uint32_t index, bool completions = false) {
    HttpIo::Turn turn;
    loop(index).run(0, 0, &turn);
    if (completions) loop(index).poll(0, 0, &turn);
    keep(index, std::move(turn));
  }
  void keep(uint32_t index, HttpIo::Turn&& turn) {
    std::lock_guard<std::mutex> lock(mutex);
    for (auto& a : turn.answered) by_loop[index].push_back(std::move(a));
    completions_from[index] += turn.completions.size();
    for (auto& c : turn.completions) python_completions.push_back(std::move(c));
    for (auto& e : turn.events) events_by_loop[index].push_back(std::move(e));
  }
  // Whether loop `index` handed over an event of `kind` (of `connection`, unless 0);
  // the first one copied to `out`.
  bool has_event(uint32_t index, HttpIo::EventKind kind, HttpIo::Event* out = nullptr,
                 uint64_t connection = 0) {
    std::lock_guard<std::mutex> lock(mutex);
    for (const auto& event : events_by_loop[index]) {
      if (event.kind != kind || (connection != 0 && event.connection != connection)) continue;
      if (out != nullptr) {
        out->connection = event.connection;
        out->data = event.data;
        out->grpc.kind = event.grpc.kind;
        out->grpc.stream_id = event.grpc.stream_id;
        out->grpc.path = event.grpc.path;
      }
      return true;
    }
    return false;
  }
  uint32_t successes(uint32_t index) {
    std::lock_guard<std::mutex> lock(mutex);
    uint32_t n = 0;
    for (const auto& a : by_loop[index]) n += a.successes;
    return n;
  }
  // A thread playing the workers (answer_batches) until stop_worker().
  void start_worker() {
    worker = std::thread([this] {
      while (!stop) {
        if (answer_batches() == 0) std::this_thread::yield();
      }
    });
  }
  // The worker and the loops' threads stopped.
  void stop_worker() {
    stop = true;
    worker.join();
    threads.clear();
  }
  // Both loops on threads of their own (a relaying loop 1's with no hand: it leaves
  // nothing).
  void start_threads() {
    for (uint32_t index = 0; index < 2; ++index) {
      IoThread::Hand hand;
      if (index == 0 || !io1_relays_) {
        hand = [this](uint32_t at, HttpIo::Turn&& turn) { keep(at, std::move(turn)); };
      }
      threads.push_back(std::make_unique<IoThread>(loop(index), core, std::move(hand)));
    }
  }

  HttpLane lane1;
  GrpcLane grpc_lane1;
  bool io1_relays_ = false;
  std::unique_ptr<HttpIo> io1;
  IoGroup group;
  std::mutex mutex;
  std::vector<HttpIo::Answered> by_loop[2];
  std::vector<HttpIo::Event> events_by_loop[2];
  size_t completions_from[2] = {0, 0};
  std::vector<std::unique_ptr<IoThread>> threads;
  std::atomic<bool> stop{false};
  std::thread worker;
};

// What has arrived on `fd` so far, appended to `received`.
void receive(int fd, std::string* received) {
  char buffer[65536];
  for (;;) {
    ssize_t got = recv(fd, buffer, sizeof buffer, MSG_DONTWAIT);
    if (got <= 0) return;
    received->append(buffer, static_cast<size_t>(got));
  }
}

// A gRPC client's connection: the frames received so far, and its calls' statuses.
struct GrpcCalls {
  int fd = -1;
  h2test::Reader reader;
  std::vector<h2test::Frame> frames;
  void receive() {
    char buffer[65536];
    for (;;) {
      ssize_t got = recv(fd, buffer, sizeof buffer, MSG_DONTWAIT);
      if (got <= 0) return;
      for (auto& frame : reader.read(std::string(buffer, static_cast<size_t>(got)))) {
        frames.push_back(std::move(frame));
      }
    }
  }
  // The call's grpc-status, empty until its trailers came.
  std::string status(uint32_t stream) const {
    for (const h2test::Frame& f : frames) {
      if (f.type == 0x1 && f.stream == stream && (f.flags & 0x1)) {
        return h2test::header_value(f, "grpc-status");
      }
    }
    return "";
  }
};

}  // namespace

TEST(io_group_hands_connections_out_round_robin_and_each_is_served_by_its_loop) {
  Group g;
  std::vector<int> clients;
  for (int i = 0; i < 4; ++i) clients.push_back(g.connect_client());
  // Loop 0 holds the listener: it keeps every other connection and posts the rest.
  CHECK(wait_until([&] {
    g.turn(0);
    g.turn(1);
    return g.io->connections_served() + g.io1->connections_served() == 4;
  }));
  CHECK(g.io->connections_served() == 2);
  CHECK(g.io1->connections_served() == 2);
  for (int client : clients) send_all(client, http_add_sub_request());
  std::vector<std::string> received(clients.size());
  CHECK(wait_until([&] {
    g.turn(0, true);
    g.turn(1, true);
    g.answer_batches();
    size_t answered = 0;
    for (size_t i = 0; i < clients.size(); ++i) {
      receive(clients[i], &received[i]);
      answered += count_answers(received[i]);
    }
    return answered == clients.size();
  }));
  // Each loop answered its own two clients' requests, whichever loop polled the core.
  CHECK(g.successes(0) == 2);
  CHECK(g.successes(1) == 2);
  CHECK(g.python_completions.empty());
  // Connection ids are unique in the group: loop 0's odd, loop 1's even.
  CHECK(g.io->is_open(1) && g.io->is_open(3) && !g.io->is_open(2));
  CHECK(g.io1->is_open(2) && g.io1->is_open(4) && !g.io1->is_open(1));
  for (int client : clients) close(client);
}

TEST(io_group_a_completion_polled_by_another_loop_is_answered_by_the_owning_loop) {
  Group g;
  int first = -1, second = -1;
  CHECK(g.connect_pair(&first, &second));
  send_all(second, http_add_sub_request());
  CHECK(wait_until([&] {
    g.turn(1);
    return g.io1->in_flight() == 1;
  }));
  CHECK(wait_until([&] { return g.answer_batches() == 1; }));
  // Loop 0 polls the core: the completion is loop 1's, posted to its mailbox.
  CHECK(wait_until([&] {
    g.turn(0, true);
    return g.io1->in_flight() == 1 && g.successes(0) == 0 && g.io->in_flight() == 0;
  }));
  std::string received;
  CHECK(wait_until([&] {
    g.turn(1);  // its sockets and mailbox only: it never polls the core here
    receive(second, &received);
    return count_answers(received) == 1;
  }));
  CHECK(g.successes(1) == 1);
  CHECK(g.successes(0) == 0);
  CHECK(g.io1->in_flight() == 0);
  CHECK(g.python_completions.empty());
  close(first);
  close(second);
}

TEST(io_group_a_batch_of_two_loops_requests_is_answered_by_both_and_counted_once) {
  Group g;
  int first = -1, second = -1;
  CHECK(g.connect_pair(&first, &second));
  // The one instance runs a request of loop 0's while one of each loop queues: they
  // leave together, as one batch.
  g.holding = true;
  send_all(first, http_add_sub_request());
  CHECK(wait_until([&] {
    g.turn(0);
    return g.io->in_flight() == 1;
  }));
  BatchMessage running;
  CHECK(wait_until([&] { return g.workers[0]->try_next(&running); }));
  send_all(first, http_add_sub_request());
  send_all(second, http_add_sub_request());
  CHECK(wait_until([&] {
    g.turn(0);
    g.turn(1);
    return g.io->in_flight() == 2 && g.io1->in_flight() == 1;
  }));
  g.answer(*g.workers[0], running);
  BatchMessage both;
  CHECK(wait_until([&] {
    g.turn(0, true);  // the first completion, and the next batch dispatched
    return g.workers[0]->try_next(&both);
  }));
  const auto* header =
      reinterpret_cast<const BatchHeader*>(g.core.arena().base() + both.desc_offset);
  CHECK(header->n_requests == 2);
  g.answer(*g.workers[0], both);
  std::string got_first, got_second;
  CHECK(wait_until([&] {
    g.turn(1, true);  // loop 1 polls it: answers its request, posts loop 0 its share
    g.turn(0);
    receive(first, &got_first);
    receive(second, &got_second);
    return count_answers(got_first) == 2 && count_answers(got_second) == 1;
  }));
  CHECK(g.successes(0) == 2);
  CHECK(g.successes(1) == 1);
  int executions = 0;
  for (uint32_t index = 0; index < 2; ++index) {
    for (const auto& a : g.by_loop[index]) executions += a.execution ? 1 : 0;
  }
  CHECK(executions == 2);  // the first batch and the shared one, each once
  // The shared block was freed by the last loop done with it.
  CHECK(g.core.arena().free_tagged(both.batch_id) == 0);
  CHECK(g.python_completions.empty());
  close(first);
  close(second);
}

TEST(io_group_two_loops_on_threads_serve_many_clients_and_a_stalled_one_delays_none) {
  Group g;
  g.start_threads();
  g.start_worker();
  // A client that sends half a request and stops: its loop holds the bytes and goes on.
  int stalled = g.connect_client();
  const std::string request = http_add_sub_request();
  send_all(stalled, request.substr(0, request.size() / 2));
  constexpr int kClients = 8, kRequests = 50;
  std::atomic<int> answered{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&] {
      int fd = g.connect_client();
      for (int r = 0; r < kRequests; ++r) {
        send_all(fd, request);
        std::string received;
        if (!wait_until([&] {
              receive(fd, &received);
              return count_answers(received) == 1;
            })) {
          break;
        }
        ++answered;
      }
      close(fd);
    });
  }
  for (auto& client : clients) client.join();
  CHECK(answered == kClients * kRequests);
  g.stop_worker();
  CHECK(g.successes(0) + g.successes(1) == uint32_t(kClients * kRequests));
  CHECK(g.successes(0) > 0 && g.successes(1) > 0);
  CHECK(g.io->connections_served() + g.io1->connections_served() == kClients + 1);
  CHECK(g.python_completions.empty());
  close(stalled);
}

TEST(io_group_grpc_connections_are_handed_out_and_their_calls_answered_on_their_loops) {
  Group g;
  g.start_threads();
  g.start_worker();
  GrpcCalls clients[2];
  for (GrpcCalls& client : clients) {
    client.fd = g.connect_client(true);
    send_all(client.fd, h2test::hello());
    for (uint32_t stream : {1u, 3u}) {
      send_all(client.fd,
               h2test::headers(
                   stream, h2test::request_block("/inference.GRPCInferenceService/ModelInfer")) +
                   h2test::data(stream, h2test::grpc_message(grpctest::add_sub_request(1, "x"))));
    }
  }
  CHECK(wait_until([&] {
    bool all = true;
    for (GrpcCalls& client : clients) {
      client.receive();
      all = all && !client.status(1).empty() && !client.status(3).empty();
    }
    return all;
  }));
  for (GrpcCalls& client : clients) {
    CHECK(client.status(1) == "0");
    CHECK(client.status(3) == "0");
  }
  g.stop_worker();
  // One connection on each loop, its calls answered there in C++.
  CHECK(g.io->connections_served() == 1 && g.io1->connections_served() == 1);
  CHECK(g.successes(0) == 2 && g.successes(1) == 2);
  CHECK(g.python_completions.empty());
  for (GrpcCalls& client : clients) close(client.fd);
}

TEST(io_group_a_loop_whose_clients_all_wait_holds_a_batch_while_another_loops_could_send) {
  // A queue delay far longer than the test: a batch held for it stays queued.
  Group g(10 * 1000 * 1000);
  const ModelHandle model = g.lane.codec().model(0).core_model_id;
  int first = -1, second = -1;
  CHECK(g.connect_pair(&first, &second));
  // Loop 1's client sends once and is answered: it stays open, and could send again.
  send_all(second, http_add_sub_request());
  std::string received;
  CHECK(wait_until([&] {
    g.turn(1, true);
    g.answer_batches();
    receive(second, &received);
    return count_answers(received) == 1;
  }));
  // Loop 0's one client waits for its answer, but loop 1's could still send: the batch
  // is held for the queue delay, not sent at once.
  send_all(first, http_add_sub_request());
  CHECK(wait_until([&] {
    g.turn(0);
    return g.io->in_flight() == 1;
  }));
  CHECK(g.core.pending_requests(model) == 1);
  BatchMessage message;
  CHECK(!g.workers[0]->try_next(&message));
  // Loop 1's client goes away: no one else could send, and the next turn lets it go.
  close(second);
  CHECK(wait_until([&] {
    g.turn(1);
    g.turn(0, true);
    return g.core.pending_requests(model) == 0;
  }));
  close(first);
}

TEST(io_group_a_relaying_loop_moves_a_connection_python_must_serve_to_loop_0) {
  Group g;
  g.relay();
  int first = -1, second = -1;
  CHECK(g.connect_pair(&first, &second));
  // Loop 1 serves its client's lane request itself; its statistics reach Python
  // through loop 0, and Python never hears of the connection from loop 1.
  send_all(second, http_add_sub_request());
  std::string received;
  CHECK(wait_until([&] {
    g.turn(1, true);
    g.answer_batches();
    g.turn(0);
    receive(second, &received);
    return count_answers(received) == 1 && g.successes(0) == 1;
  }));
  CHECK(g.successes(1) == 0);
  CHECK(g.io1->connections_moved() == 0);
  // A request the lane does not take: the connection moves whole to loop 0, which
  // announces it to Python with the bytes Python has to read.
  const std::string health = "GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n";
  send_all(second, health);
  HttpIo::Event handed(HttpIo::EventKind::kData, 0);
  CHECK(wait_until([&] {
    g.turn(1);
    g.turn(0);
    return g.has_event(0, HttpIo::EventKind::kHandOver, &handed);
  }));
  CHECK(g.io1->connections_moved() == 1);
  CHECK(handed.data == health);
  CHECK(g.has_event(0, HttpIo::EventKind::kAccepted, nullptr, handed.connection));
  CHECK(g.events_by_loop[1].empty());
  CHECK(g.io->is_open(handed.connection) && !g.io1->is_open(handed.connection));
  CHECK(!g.io->in_lane_mode(handed.connection));
  // Python answers on loop 0, and reads what the client sends next there.
  const std::string ok = "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
  g.io->write(handed.connection, ok.data(), ok.size());
  received.clear();
  CHECK(wait_until([&] {
    receive(second, &received);
    return received == ok;
  }));
  send_all(second, "x");
  CHECK(wait_until([&] {
    g.turn(0);
    std::lock_guard<std::mutex> lock(g.mutex);
    for (const auto& event : g.events_by_loop[0]) {
      if (event.kind == HttpIo::EventKind::kData && event.data == "x") return true;
    }
    return false;
  }));
  CHECK(g.events_by_loop[1].empty());
  close(first);
  close(second);
}

TEST(io_group_a_relaying_loop_moves_a_grpc_connection_once_its_lane_calls_are_answered) {
  Group g;
  g.relay();
  int first = g.connect_client(true);
  int second = g.connect_client(true);
  CHECK(wait_until([&] {
    g.turn(0);
    g.turn(1);
    return g.io->connections_served() == 1 && g.io1->connections_served() == 1;
  }));
  send_all(second, h2test::hello());
  // A lane call, in flight on loop 1; then a call the lane does not take.
  send_all(second,
           h2test::headers(1, h2test::request_block("/inference.GRPCInferenceService/ModelInfer")) +
               h2test::data(1, h2test::grpc_message(grpctest::add_sub_request(1, "x"))));
  CHECK(wait_until([&] {
    g.turn(1);
    return g.io1->in_flight() == 1;
  }));
  send_all(second,
           h2test::headers(3, h2test::request_block("/inference.GRPCInferenceService/ServerLive")) +
               h2test::data(3, h2test::grpc_message("")));
  for (int i = 0; i < 20; ++i) g.turn(1);
  // It waits for its lane call: nothing moved, nothing for Python yet.
  CHECK(g.io1->connections_moved() == 0);
  CHECK(!g.has_event(0, HttpIo::EventKind::kGrpcCall));
  CHECK(wait_until([&] { return g.answer_batches() == 1; }));
  GrpcCalls calls;
  calls.fd = second;
  auto status_of = [&](uint32_t stream) {
    calls.receive();
    return calls.status(stream);
  };
  HttpIo::Event call(HttpIo::EventKind::kData, 0);
  CHECK(wait_until([&] {
    g.turn(1, true);  // answers the lane call, then the connection moves
    g.turn(0);
    return status_of(1) == "0" && g.has_event(0, HttpIo::EventKind::kGrpcCall, &call);
  }));
  CHECK(g.successes(0) == 1);  // loop 1's statistics, through loop 0
  CHECK(g.io1->connections_moved() == 1);
  CHECK(g.has_event(0, HttpIo::EventKind::kGrpcAccepted, nullptr, call.connection));
  CHECK(call.grpc.stream_id == 3);
  CHECK(call.grpc.path == "/inference.GRPCInferenceService/ServerLive");
  CHECK(g.io->grpc(call.connection) != nullptr && g.io1->grpc(call.connection) == nullptr);
  CHECK(g.events_by_loop[1].empty());
  // Python answers on loop 0.
  g.io->grpc(call.connection)->finish(3, 0, "");
  g.io->grpc_wrote(call.connection);
  g.io->flush_writes();
  CHECK(wait_until([&] { return status_of(3) == "0"; }));
  close(first);
  close(second);
}

TEST(io_group_a_relaying_loops_tls_failure_is_reported_by_loop_0) {
  Group g;
  g.relay();
  int first = -1, second = -1;
  CHECK(g.connect_pair(&first, &second));
  send_all(second, std::string("\x16\x03\x01", 3));
  HttpIo::Event failed(HttpIo::EventKind::kData, 0);
  CHECK(wait_until([&] {
    g.turn(1);
    g.turn(0);
    return g.has_event(0, HttpIo::EventKind::kTlsFailed, &failed);
  }));
  CHECK(failed.data.find("a TLS handshake on a port that serves without TLS") != std::string::npos);
  CHECK(!g.has_event(0, HttpIo::EventKind::kClosed));  // Python never knew it
  CHECK(g.events_by_loop[1].empty());
  close(first);
  close(second);
}

TEST(io_group_a_paused_loops_thread_lets_another_thread_sweep_and_hand_over) {
  Group g;
  g.relay();
  g.start_threads();
  int first = g.connect_client();
  int second = g.connect_client();
  // Half a request on each: loop 1's is swept as a stalled client's, from this thread
  // holding loop 1's thread paused.
  const std::string request = http_add_sub_request();
  send_all(first, request.substr(0, 10));
  send_all(second, request.substr(0, 10));
  std::vector<uint64_t> timed_out, idle;
  CHECK(wait_until([&] {
    IoThread::Pause paused(*g.threads[1]);
    timed_out.clear();
    g.io1->sweep(monotonic_ns() + 1, 0, &timed_out, &idle);
    return timed_out.size() == 1;
  }));
  {
    IoThread::Pause paused(*g.threads[1]);
    g.io1->hand_over(timed_out[0]);
  }
  // It moves to loop 0, whose thread hands Python the partial request.
  HttpIo::Event handed(HttpIo::EventKind::kData, 0);
  CHECK(wait_until([&] { return g.has_event(0, HttpIo::EventKind::kHandOver, &handed); }));
  CHECK(handed.data == request.substr(0, 10));
  {
    IoThread::Pause paused(*g.threads[1]);
    CHECK(g.io1->connections_moved() == 1);
  }
  g.threads.clear();
  CHECK(g.events_by_loop[1].empty());
  close(first);
  close(second);
}

TEST(io_group_a_relaying_loops_failed_batch_reaches_python_on_loop_0_which_answers_it_paused) {
  Group g;
  g.relay();
  g.start_threads();
  int first = g.connect_client();
  int second = g.connect_client();  // loop 1's
  send_all(second, http_add_sub_request());
  BatchMessage message;
  CHECK(wait_until([&] { return g.workers[0]->try_next(&message); }));
  g.workers[0]->complete(message.batch_id, 0, 0, kCompletionWorkerFailed);
  // Whichever thread polled it, the failed batch is handed to Python by loop 0.
  uint64_t request_id = 0;
  CHECK(wait_until([&] {
    std::lock_guard<std::mutex> lock(g.mutex);
    if (g.python_completions.empty()) return false;
    request_id = g.python_completions[0].request_ids[0];
    return true;
  }));
  CHECK(g.completions_from[1] == 0);
  CHECK(g.group.owner_of(request_id) == 1);
  // Python answers loop 1's request as its owner while it holds loop 1's thread paused.
  const std::string failed = "HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\n\r\n";
  {
    IoThread::Pause paused(*g.threads[1]);
    HttpIo::Owned owned;
    CHECK(g.io1->owned(request_id, &owned));
    CHECK(owned.stream == 0);
    CHECK(g.io1->answer(request_id, failed.data(), failed.size()));
    g.io1->flush_writes();
  }
  std::string received;
  CHECK(wait_until([&] {
    receive(second, &received);
    return received == failed;
  }));
  {
    IoThread::Pause paused(*g.threads[1]);
    CHECK(g.io1->in_flight() == 0);
  }
  g.threads.clear();
  CHECK(g.events_by_loop[1].empty());
  close(first);
  close(second);
}

TEST(io_group_pythons_completions_polled_by_a_relaying_loop_reach_python_in_order) {
  // Python's requests (owner 0: the general path, a decoupled stream's) are answered
  // by Python in the order the core finished them. Loop 1 polls the core while Python,
  // on loop 0, polls it too: the second completion is done and polled by loop 0 in
  // the window between loop 1's poll and what loop 1 does with the first.
  Group g;
  g.relay();
  const ModelHandle model = g.lane.codec().model(0).core_model_id;
  auto python_request_done = [&](uint64_t id) {
    SubmitRequest request;
    request.request_id = id;
    request.metadata = "{}";
    CHECK(g.core.submit(model, request) == SubmitResult::kOk);
    g.core.flush();
    BatchMessage message;
    CHECK(g.workers[0]->try_next(&message));
    g.answer(*g.workers[0], message);
  };
  const uint64_t first = g.lane.codec().new_request_id();
  const uint64_t second = g.lane.codec().new_request_id();
  CHECK(g.group.owner_of(first) == -1);
  python_request_done(first);
  bool hooked = false;
  g.io1->set_after_core_poll([&] {
    if (hooked) return;
    hooked = true;
    python_request_done(second);
    g.turn(0, true);
  });
  HttpIo::Turn relaying;
  g.io1->poll(0, 0, &relaying);
  CHECK(hooked);
  CHECK(relaying.completions.empty());  // a relaying loop hands Python nothing itself
  g.turn(0, true);                      // its mailbox, and the core
  std::vector<uint64_t> order;
  for (const Completion& done : g.python_completions) {
    order.push_back(done.request_ids[0]);
    g.core.arena().free(done.result_offset);
  }
  CHECK(order == (std::vector<uint64_t>{first, second}));
  CHECK(g.completions_from[1] == 0);
}

TEST(io_group_ids_minted_outside_a_loops_takes_are_no_loops_even_on_loop_0s_shared_lane) {
  // `naiad serve`'s Python submits through loop 0's lane between its turns: those
  // requests are Python's, so a batch mixing them with another loop's goes to Python.
  Group g;
  CHECK(g.group.owner_of(g.lane.codec().new_request_id()) == -1);
  int first = 0, second = 0;
  CHECK(g.connect_pair(&first, &second));
  send_all(first, http_add_sub_request());
  CHECK(wait_until([&] {
    g.turn(0);
    return g.io->in_flight() == 1;
  }));
  CHECK(g.group.owner_of(g.io->owned_ids()[0]) == 0);
  CHECK(g.group.owner_of(g.lane.codec().new_request_id()) == -1);
  close(first);
  close(second);
}

TEST(io_group_a_loop_keeping_grpc_hands_out_http_connections_only) {
  Group g;
  g.io->set_keep_grpc(true);
  std::vector<int> clients;
  for (int i = 0; i < 2; ++i) clients.push_back(g.connect_client(true));
  for (int i = 0; i < 2; ++i) clients.push_back(g.connect_client());
  CHECK(wait_until([&] {
    g.turn(0);
    g.turn(1);
    return g.io->connections_served() + g.io1->connections_served() == 4;
  }));
  // Both gRPC connections stay on loop 0; the HTTP ones go round robin.
  CHECK(g.io->connections_served() == 3 && g.io1->connections_served() == 1);
  for (int fd : clients) close(fd);
}

TEST(io_group_a_relaying_loops_close_all_closes_its_connections_and_reports_none) {
  Group g;
  g.relay();
  int first = 0, second = 0;
  CHECK(g.connect_pair(&first, &second));
  g.io1->close_all();
  CHECK(!g.io1->is_open(2));
  char byte;
  CHECK(recv(second, &byte, 1, 0) == 0);  // the client sees the close
  g.turn(0);
  g.turn(1);
  CHECK(g.events_by_loop[1].empty());
  CHECK(g.io->is_open(1));  // loop 0's stays
  close(first);
  close(second);
}
