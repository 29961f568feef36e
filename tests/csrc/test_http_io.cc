// The HTTP front end's C++ I/O loop (csrc/http1/http_io.h) over real TCP connections on
// 127.0.0.1: a core with add_sub and one instance, whose worker end the test plays
// (it answers each batch with add_sub's response block), and clients that send bytes
// and read answers. What Python would do with an event, the test does by hand.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/core.h"
#include "http1/http_framer.h"
#include "http1/http_io.h"
#include "io_fixture.h"
#include "ipc/ipc_schema.h"
#include "ipc/response_block.h"
#include "ipc/worker_endpoint.h"
#include "testing.h"

using namespace naiad;

namespace {

const char kGet[] = "GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n";

// A clock the test moves, for the core and the loop's spin. While `ticking`, every read
// moves it 1 ms on: a spin then ends after a set number of polls, however fast they are.
struct TestClock {
  std::atomic<uint64_t> now{1000000000};
  std::atomic<bool> ticking{false};
  Clock clock() {
    return [this] { return ticking ? now += 1000000 : now.load(); };
  }
};

}  // namespace

TEST(http_io_answers_pipelined_lane_requests_in_order_without_python) {
  Fixture fixture;
  int client = fixture.connect_client();
  uint64_t connection = accepted_connection(fixture);
  CHECK(connection != 0);
  CHECK(fixture.io->in_lane_mode(connection));
  send_all(client, http_add_sub_request() + http_add_sub_request() + http_add_sub_request());
  std::string received = read_answers(fixture, client, 3);
  size_t first = received.find("HTTP/1.1 200 OK");
  CHECK(first == 0);
  CHECK(received.find("HTTP/1.1 200 OK", first + 1) != std::string::npos);
  // No event for Python beyond the accept: the requests never left C++.
  CHECK(fixture.find_event(HttpIo::EventKind::kHandOver) == nullptr);
  CHECK(fixture.find_event(HttpIo::EventKind::kData) == nullptr);
  uint32_t successes = 0;
  for (const auto& a : fixture.answered) successes += a.successes;
  CHECK(successes == 3);
  CHECK(fixture.python_completions.empty());
  CHECK(fixture.io->in_flight() == 0);
  CHECK(fixture.io->open_count() == 1);
  CHECK(fixture.io->waiting_count() == 0);
  close(client);
}

TEST(http_io_answers_in_request_order_whichever_batch_completes_first) {
  // Two instances: the client's second request runs in a batch of its own while the
  // first's is still running, and finishes first.
  Fixture fixture(0, 2);
  fixture.holding = true;
  int client = fixture.connect_client();
  CHECK(accepted_connection(fixture) != 0);
  // Takes the next batch any worker was sent.
  auto next_batch = [&](WorkerEndpoint** taker, BatchMessage* message) {
    return fixture.turn_until([&] {
      for (WorkerEndpoint* worker : fixture.workers) {
        if (worker->try_next(message) && message->kind == MessageKind::kBatch) {
          *taker = worker;
          return true;
        }
      }
      return false;
    });
  };
  WorkerEndpoint *first_worker = nullptr, *second_worker = nullptr;
  BatchMessage first, second;
  send_all(client, http_add_sub_request('\x01', "r1"));
  CHECK(next_batch(&first_worker, &first));
  send_all(client, http_add_sub_request('\x02', "r2"));
  CHECK(next_batch(&second_worker, &second));
  CHECK(first_worker != second_worker);
  // The second answer waits for the first: nothing reaches the client yet.
  fixture.answer(*second_worker, second);
  fixture.turn_until([&] { return !fixture.answered.empty(); });
  char byte;
  CHECK(recv(client, &byte, 1, MSG_DONTWAIT) < 0);
  fixture.answer(*first_worker, first);
  std::string received = read_answers(fixture, client, 2);
  const size_t r1 = received.find("\"id\":\"r1\"");
  const size_t r2 = received.find("\"id\":\"r2\"");
  CHECK(r1 != std::string::npos && r2 != std::string::npos && r1 < r2);
  CHECK(received.find("HTTP/1.1 200 OK", received.find("HTTP/1.1 200 OK") + 1) < r2);
  CHECK(fixture.io->in_flight() == 0);
  close(client);
}

namespace {

// A connection the lane handed to Python (a GET), answered by Python's protocol
// through write(): it stays in Python mode.
uint64_t python_mode_connection(Fixture& fixture, int client) {
  uint64_t connection = accepted_connection(fixture);
  send_all(client, kGet);
  CHECK(fixture.turn_until(
      [&] { return fixture.find_event(HttpIo::EventKind::kHandOver, connection) != nullptr; }));
  CHECK(fixture.find_event(HttpIo::EventKind::kHandOver, connection)->data == kGet);
  CHECK(!fixture.io->in_lane_mode(connection));
  const std::string reply = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
  fixture.io->write(connection, reply.data(), reply.size());
  CHECK(read_answers(fixture, client, 1) == reply);
  return connection;
}

}  // namespace

TEST(http_io_hands_what_the_lane_does_not_take_to_python_and_takes_the_connection_back) {
  Fixture fixture;
  int client = fixture.connect_client();
  uint64_t connection = python_mode_connection(fixture, client);
  // Python mode: the next bytes come as kData; the idle protocol gives them back.
  const std::string request = http_add_sub_request();
  send_all(client, request);
  CHECK(fixture.turn_until(
      [&] { return fixture.find_event(HttpIo::EventKind::kData, connection) != nullptr; }));
  HttpIo::Turn turn;
  fixture.io->take_back(connection, request.data(), request.size(), &turn);
  CHECK(turn.queued == 1);
  CHECK(fixture.io->in_lane_mode(connection));
  fixture.core.flush(false);
  CHECK(read_answers(fixture, client, 1).find("HTTP/1.1 200 OK") == 0);
  close(client);
}

TEST(http_io_a_request_whose_head_and_body_python_received_apart_is_taken_back_whole) {
  // Python mode, and the client's head and body arrive in two reads of one turn: two
  // data events, each given back by the idle protocol. The first takes the connection
  // back; the second's bytes must join them (they were once dropped, and the request
  // was never answered).
  Fixture fixture;
  int client = fixture.connect_client();
  uint64_t connection = python_mode_connection(fixture, client);
  const std::string request = http_add_sub_request();
  const size_t head = request.find("\r\n\r\n") + 4;
  HttpIo::Turn first;
  fixture.io->take_back(connection, request.data(), head, &first);
  CHECK(first.queued == 0 && fixture.io->in_lane_mode(connection));
  HttpIo::Turn second;
  fixture.io->take_back(connection, request.data() + head, request.size() - head, &second);
  CHECK(second.queued == 1);
  CHECK(second.events.empty());  // nothing went back to Python
  fixture.core.flush(false);
  CHECK(read_answers(fixture, client, 1).find("HTTP/1.1 200 OK") == 0);
  close(client);
}

TEST(http_io_bytes_after_owed_answers_wait_for_them_before_python_gets_them) {
  Fixture fixture;
  int client = fixture.connect_client();
  uint64_t connection = accepted_connection(fixture);
  // An infer request, then a GET in the same write: the GET's answer must follow.
  send_all(client, http_add_sub_request() + kGet);
  CHECK(fixture.turn_until([&] { return fixture.io->in_flight() == 1; }));
  CHECK(fixture.find_event(HttpIo::EventKind::kHandOver, connection) == nullptr);
  std::string received = read_answers(fixture, client, 1);
  CHECK(received.find("HTTP/1.1 200 OK") == 0);
  CHECK(fixture.turn_until(
      [&] { return fixture.find_event(HttpIo::EventKind::kHandOver, connection) != nullptr; }));
  CHECK(fixture.find_event(HttpIo::EventKind::kHandOver, connection)->data == kGet);
  close(client);
}

TEST(http_io_a_request_split_by_the_stream_stays_in_lane_mode) {
  Fixture fixture;
  int client = fixture.connect_client();
  uint64_t connection = accepted_connection(fixture);
  const std::string request = http_add_sub_request();
  send_all(client, request.substr(0, 100));
  fixture.turn_until([&] { return false; });  // a few turns: nothing to take yet
  CHECK(fixture.io->in_lane_mode(connection));
  CHECK(fixture.io->in_flight() == 0);
  send_all(client, request.substr(100));
  CHECK(read_answers(fixture, client, 1).find("HTTP/1.1 200 OK") == 0);
  CHECK(fixture.find_event(HttpIo::EventKind::kHandOver) == nullptr);
  close(client);
}

TEST(http_io_a_client_that_goes_away_has_its_requests_cancelled_and_counts_released) {
  Fixture fixture;
  int client = fixture.connect_client();
  uint64_t connection = accepted_connection(fixture);
  // No worker answers: the requests stay in flight until the client closes.
  send_all(client, http_add_sub_request() + http_add_sub_request());
  for (int i = 0; i < 200 && fixture.io->in_flight() < 2; ++i) {
    HttpIo::Turn turn;
    fixture.io->run(0, 0, &turn);
    usleep(1000);
  }
  CHECK(fixture.io->in_flight() == 2);
  CHECK(fixture.io->waiting_count() == 1);
  close(client);
  CHECK(fixture.turn_until(
      [&] { return fixture.find_event(HttpIo::EventKind::kClosed, connection) != nullptr; }));
  CHECK(fixture.io->open_count() == 0);
  CHECK(fixture.io->waiting_count() == 0);
  CHECK(!fixture.io->is_open(connection));
  // The batch was running: it ends, and its requests are counted though no one waits.
  CHECK(fixture.turn_until([&] { return fixture.io->in_flight() == 0; }));
  uint32_t successes = 0;
  for (const auto& a : fixture.answered) successes += a.successes;
  CHECK(successes == 2);
  CHECK(fixture.lane.codec().in_flight() == 0);
}

TEST(http_io_a_client_that_half_closes_then_resets_is_closed_not_polled_forever) {
  Fixture fixture;
  int client = fixture.connect_client();
  uint64_t connection = accepted_connection(fixture);
  // No worker answers here: the request stays owed while the client goes away.
  send_all(client, http_add_sub_request());
  shutdown(client, SHUT_WR);
  for (int i = 0; i < 200 && fixture.io->in_flight() < 1; ++i) {
    HttpIo::Turn turn;
    fixture.io->run(0, 0, &turn);
    usleep(1000);
  }
  CHECK(fixture.io->in_flight() == 1);
  for (int i = 0; i < 20; ++i) {  // the half-close read: the connection waits to answer
    HttpIo::Turn turn;
    fixture.io->run(0, 0, &turn);
  }
  CHECK(fixture.io->is_open(connection));
  linger reset{1, 0};  // close with RST
  setsockopt(client, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
  close(client);
  bool closed = false;
  for (int i = 0; i < 200 && !closed; ++i) {
    HttpIo::Turn turn;
    fixture.io->run(0, 0, &turn);
    for (const auto& event : turn.events) {
      closed |= event.kind == HttpIo::EventKind::kClosed && event.connection == connection;
    }
    usleep(1000);
  }
  CHECK(closed);
  CHECK(!fixture.io->is_open(connection));
}

TEST(http_io_a_completion_with_requests_not_its_own_goes_to_python_and_answer_reaches_client) {
  Fixture fixture;
  int client = fixture.connect_client();
  accepted_connection(fixture);
  send_all(client, http_add_sub_request());
  CHECK(fixture.turn_until([&] { return fixture.io->in_flight() == 1; }));
  uint64_t id = 0;
  for (uint64_t candidate = 1; candidate < 100 && id == 0; ++candidate) {
    HttpIo::Owned owned;
    if (fixture.io->owned(candidate, &owned)) {
      id = candidate;
      CHECK(owned.batch_size == 1);
    }
  }
  CHECK(id != 0);
  // Python answers it (as for a failed batch): the bytes reach the client as given.
  const std::string error = "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 2\r\n\r\n{}";
  CHECK(fixture.io->answer(id, error.data(), error.size()));
  CHECK(!fixture.io->answer(id, error.data(), error.size()));  // once
  fixture.io->flush_writes();
  CHECK(read_answers(fixture, client, 1) == error);
  close(client);
}

TEST(http_io_damaged_input_goes_to_python_whole_and_never_reaches_the_core) {
  const std::vector<std::string> inputs = {
      std::string("\x00\x01\x02garbage\r\n\r\n", 14),
      "POST /v2/models/add_sub/infer HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
      "POST /v2/models/add_sub/infer HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
      "POST /v2/models/add_sub/infer HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
      http_add_sub_request().substr(0, 60) + "\r\n\r\n",
  };
  for (const std::string& input : inputs) {
    Fixture fixture;
    int client = fixture.connect_client();
    uint64_t connection = accepted_connection(fixture);
    send_all(client, input);
    std::string handed;
    fixture.turn_until([&] {
      handed.clear();
      for (const auto& event : fixture.events) {
        if (event.kind == HttpIo::EventKind::kHandOver && event.connection == connection) {
          handed += event.data;
        }
      }
      return handed.size() == input.size();
    });
    CHECK(handed == input);
    CHECK(fixture.io->in_flight() == 0);
    close(client);
  }
}

namespace {

// Two clients on the loop that have each had an answer: both count for the batcher's
// arrivals hint (a connection that never sent a request does not). Their fds.
std::pair<int, int> two_clients(Fixture& fixture) {
  int a = fixture.connect_client();
  int b = fixture.connect_client();
  send_all(a, http_add_sub_request());
  send_all(b, http_add_sub_request());
  read_answers(fixture, a, 1);
  read_answers(fixture, b, 1);
  return {a, b};
}

}  // namespace

// One client's request is held (the other could still send, and the queue delay is
// long): the turn polls for the other's instead of ending, takes it as it comes, and
// the batch of both leaves with no timer ever set.
TEST(http_io_a_held_batch_that_arrivals_release_during_the_turn_sets_no_timer) {
  // The clock stands still: only the arrival can end the spin, however late it comes.
  TestClock clock;
  Fixture fixture(2000000, 1, clock.clock());  // 2 s
  fixture.io->set_spin(0);
  auto [a, b] = two_clients(fixture);
  fixture.io->set_spin(500000000);  // up to 0.5 s
  const uint64_t settings = fixture.core.timer_settings();
  send_all(a, http_add_sub_request());
  Core& core = fixture.core;
  std::thread late([&core, &clock, b = b] {
    // Once a's request is held, the turn took it and spins: b's comes during the spin.
    if (wait_until([&core] { return core.held_for_idle() != 0; })) {
      send_all(b, http_add_sub_request());
      if (wait_until([&core] { return core.in_flight() != 0; })) return;
    }
    clock.now += 1000000000;  // a hang guard: the clock ends a spin the arrival did not
  });
  HttpIo::Turn turn;
  fixture.io->run(0, 0, &turn);
  late.join();
  CHECK(fixture.core.in_flight() == 1);  // one batch left in that turn
  CHECK(fixture.core.timer_settings() == settings);
  CHECK(fixture.answer_batches() == 1);
  const std::string of_two(64, '2');  // the played worker fills outputs with the batch size
  CHECK(read_answers(fixture, a, 1).find(of_two) != std::string::npos);
  CHECK(read_answers(fixture, b, 1).find(of_two) != std::string::npos);
  close(a);
  close(b);
}

// When the arrivals do not come, the turn ends after its spin: the timer is set and the
// batch leaves at its deadline; the next chance to spin is left out.
TEST(http_io_a_spin_the_arrivals_do_not_end_leaves_the_batch_to_the_timer) {
  // The loop's reads move the clock: the spin ends on it, and whether the deadline has
  // passed by then depends on this clock alone.
  TestClock clock;
  Fixture fixture(80000, 1, clock.clock());  // 80 ms
  fixture.io->set_spin(0);
  auto [a, b] = two_clients(fixture);
  fixture.io->set_spin(40000000);  // 40 ms
  const uint64_t settings = fixture.core.timer_settings();
  send_all(a, http_add_sub_request());
  HttpIo::Turn turn;
  uint64_t before = clock.now;
  clock.ticking = true;
  fixture.io->run(0, 0, &turn);
  clock.ticking = false;
  CHECK(clock.now - before >= 40000000);  // it spun its 40 ms
  CHECK(fixture.core.in_flight() == 0);   // still held
  CHECK(fixture.core.timer_settings() == settings + 1);
  const uint64_t deadline = fixture.core.held_for_idle();
  CHECK(deadline > clock.now);
  // At its deadline only the timer thread can send it: nothing here calls the core.
  clock.now = deadline;
  CHECK(wait_until([&fixture] { return fixture.core.in_flight() == 1; }));
  CHECK(fixture.core.timer_wakeups() >= 1);
  CHECK(fixture.answer_batches() == 1);
  CHECK(read_answers(fixture, a, 1).find(std::string(64, '1')) != std::string::npos);
  // Held again: this turn does not spin (one chance left out after a miss); it sets
  // the timer as it ends.
  send_all(a, http_add_sub_request());
  const uint64_t settings_before = fixture.core.timer_settings();
  before = clock.now;
  clock.ticking = true;
  fixture.io->run(0, 0, &turn);
  clock.ticking = false;
  // A spin would have moved the clock its 40 ms; the turn's own reads move it far less.
  CHECK(clock.now - before < 40000000);
  CHECK(fixture.core.in_flight() == 0);
  CHECK(fixture.core.timer_settings() == settings_before + 1);
  clock.now = fixture.core.held_for_idle();  // due: the next turn or the timer sends it
  CHECK(read_answers(fixture, a, 1).find(std::string(64, '1')) != std::string::npos);
  close(a);
  close(b);
}

// The limits' sweep: a lane-mode connection that never sent a byte and was accepted
// before `before_ns` is to be closed (it would hold a slot for good); one idle after a
// request is not while `idle_before_ns` is 0; nor is one accepted after `before_ns`. The
// times are the test's, on either side of the accepts, so none depends on elapsed time.
TEST(http_io_sweep_reports_silent_connections_accepted_before_the_cut) {
  Fixture fixture;
  auto accept_next = [&fixture] {
    size_t seen = 0;
    for (const auto& event : fixture.events) seen += event.kind == HttpIo::EventKind::kAccepted;
    uint64_t id = 0;
    fixture.turn_until([&] {
      size_t count = 0;
      for (const auto& event : fixture.events) {
        if (event.kind != HttpIo::EventKind::kAccepted) continue;
        if (++count > seen) id = event.connection;
      }
      return id != 0;
    });
    return id;
  };
  int silent_client = fixture.connect_client();
  const uint64_t silent = accept_next();
  int served_client = fixture.connect_client();
  const uint64_t served = accept_next();
  send_all(served_client, http_add_sub_request());
  CHECK(read_answers(fixture, served_client, 1).find("HTTP/1.1 200 OK") == 0);
  const uint64_t cut = monotonic_ns();
  int late_client = fixture.connect_client();
  const uint64_t late = accept_next();
  CHECK(silent != 0 && served != 0 && late != 0);
  CHECK(fixture.io->in_lane_mode(silent) && fixture.io->in_lane_mode(served) &&
        fixture.io->in_lane_mode(late));

  std::vector<uint64_t> timed_out, idle;
  fixture.io->sweep(cut, 0, &timed_out, &idle);
  CHECK(timed_out.empty());
  CHECK(idle == std::vector<uint64_t>{silent});
  idle.clear();
  fixture.io->sweep(0, 0, &timed_out, &idle);  // 0: no silent connection is reported
  CHECK(timed_out.empty() && idle.empty());
  // Accepted before a later cut, the late one is reported too: it was left out above
  // for when it came, not for being the newest.
  const uint64_t later = monotonic_ns();
  fixture.io->sweep(later, 0, &timed_out, &idle);
  std::sort(idle.begin(), idle.end());
  CHECK(timed_out.empty());
  CHECK((idle == std::vector<uint64_t>{silent, late}));
  // The idle rule still reports the served one once `idle_before_ns` is past its read.
  idle.clear();
  fixture.io->sweep(0, later, &timed_out, &idle);
  CHECK(std::find(idle.begin(), idle.end(), served) != idle.end());
  close(silent_client);
  close(served_client);
  close(late_client);
}
