// The I/O loop's gRPC side (csrc/http2/grpc_io.cc) over real TCP connections on
// 127.0.0.1: HTTP/2 clients (h2_client.h) send ModelInfer calls that the loop answers
// in C++, and calls it hands to Python, which the test answers as Python would.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "grpc_request_support.h"
#include "h2_client.h"
#include "inflate_support.h"
#include "io_fixture.h"
#include "testing.h"

using namespace naiad;

namespace {

const char kModelInfer[] = "/inference.GRPCInferenceService/ModelInfer";
const char kServerLive[] = "/inference.GRPCInferenceService/ServerLive";

// One client connection to the loop's gRPC port: sends, and reads frames until a test
// of them holds (the loop turning meanwhile).
struct Client {
  explicit Client(Fixture& f) : fixture(f), fd(f.connect_client(true)) {
    send_all(fd, h2test::hello());
  }
  ~Client() {
    if (fd >= 0) close(fd);
  }
  void call(uint32_t stream, const char* path, const std::string& message) {
    send_all(fd, h2test::headers(stream, h2test::request_block(path)) +
                     h2test::data(stream, h2test::grpc_message(message)));
  }
  // A ModelInfer call with a grpc-timeout header of `timeout`.
  void call_within(uint32_t stream, const char* timeout, const std::string& message) {
    send_all(fd, h2test::headers(stream,
                                 h2test::request_block(kModelInfer, {{"grpc-timeout", timeout}})) +
                     h2test::data(stream, h2test::grpc_message(message)));
  }
  // A call whose message is `compressed` with grpc-encoding `encoding`.
  static std::string compressed_call_bytes(uint32_t stream, const std::string& compressed,
                                           const char* encoding) {
    return h2test::headers(stream,
                           h2test::request_block(kModelInfer, {{"grpc-encoding", encoding}})) +
           h2test::data_frames(stream, h2test::grpc_message(compressed, true), true);
  }
  void compressed_call(uint32_t stream, const std::string& compressed, const char* encoding) {
    send_all(fd, compressed_call_bytes(stream, compressed, encoding));
  }
  std::string status(uint32_t stream) const {
    return std::string(h2test::header_value(*trailers(stream), "grpc-status"));
  }
  template <typename Done>
  bool read_until(Done done) {
    return fixture.turn_until([&] {
      char buffer[65536];
      for (;;) {
        ssize_t got = recv(fd, buffer, sizeof buffer, MSG_DONTWAIT);
        if (got <= 0) break;
        for (h2test::Frame& frame : reader.read(std::string(buffer, static_cast<size_t>(got)))) {
          frames.push_back(std::move(frame));
        }
      }
      return done();
    });
  }
  // The trailers (HEADERS with END_STREAM) of `stream`, or null.
  const h2test::Frame* trailers(uint32_t stream) const {
    for (const h2test::Frame& f : frames) {
      if (f.type == 0x1 && f.stream == stream && (f.flags & 0x1)) return &f;
    }
    return nullptr;
  }
  // The gRPC message bytes of `stream` (its DATA frames' payload, prefix kept).
  std::string data_of(uint32_t stream) const {
    std::string out;
    for (const h2test::Frame& f : frames) {
      if (f.type == 0x0 && f.stream == stream) out += f.payload;
    }
    return out;
  }
  Fixture& fixture;
  int fd;
  h2test::Reader reader;
  std::vector<h2test::Frame> frames;
};

uint64_t grpc_connection(Fixture& fixture) {
  fixture.turn_until(
      [&] { return fixture.find_event(HttpIo::EventKind::kGrpcAccepted) != nullptr; });
  const HttpIo::Event* event = fixture.find_event(HttpIo::EventKind::kGrpcAccepted);
  return event == nullptr ? 0 : event->connection;
}

// The call events Python got, in order.
std::vector<const HttpIo::Event*> python_calls(const Fixture& fixture) {
  std::vector<const HttpIo::Event*> out;
  for (const HttpIo::Event& event : fixture.events) {
    if (event.kind == HttpIo::EventKind::kGrpcCall) out.push_back(&event);
  }
  return out;
}

uint32_t successes(const Fixture& fixture) {
  uint32_t n = 0;
  for (const auto& a : fixture.answered) n += a.successes;
  return n;
}

}  // namespace

TEST(grpc_io_answers_a_lane_model_infer_call_in_cpp) {
  Fixture fixture;
  Client client(fixture);
  CHECK(grpc_connection(fixture) != 0);
  client.call(1, kModelInfer, grpctest::add_sub_request(1, "one"));
  client.call(3, kModelInfer, grpctest::add_sub_request(1, "two"));
  CHECK(client.read_until([&] { return client.trailers(1) && client.trailers(3); }));
  CHECK(h2test::header_value(*client.trailers(1), "grpc-status") == "0");
  CHECK(h2test::header_value(*client.trailers(3), "grpc-status") == "0");
  // A ModelInferResponse: model_name "add_sub" (field 1) after the 5-byte prefix, the id.
  const std::string answer = client.data_of(1);
  CHECK(answer.size() > 5 && answer[0] == 0);
  CHECK(answer.find("add_sub") != std::string::npos);
  CHECK(answer.find("one") != std::string::npos);
  CHECK(client.data_of(3).find("two") != std::string::npos);
  CHECK(python_calls(fixture).empty());  // no Python per call
  CHECK(fixture.python_completions.empty());
  CHECK(successes(fixture) == 2);
  CHECK(fixture.io->in_flight() == 0);
  CHECK(fixture.io->open_count() == 1);
  CHECK(fixture.io->waiting_count() == 0);
}

TEST(grpc_io_hands_other_calls_to_python_in_order_and_writes_its_answers) {
  Fixture fixture;
  Client client(fixture);
  uint64_t connection = grpc_connection(fixture);
  // ServerLive is Python's; so is a ModelInfer for a version served, but not by the lane.
  client.call(1, kServerLive, "");
  client.call(3, kModelInfer, grpctest::add_sub_request(1, "", false, "0"));
  CHECK(fixture.turn_until([&] { return python_calls(fixture).size() == 6; }));
  std::vector<const HttpIo::Event*> calls = python_calls(fixture);
  const h2::EventKind expected[] = {h2::EventKind::kCall,      h2::EventKind::kMessage,
                                    h2::EventKind::kHalfClose, h2::EventKind::kCall,
                                    h2::EventKind::kMessage,   h2::EventKind::kHalfClose};
  for (size_t i = 0; i < calls.size(); ++i) {
    CHECK(calls[i]->connection == connection);
    CHECK(calls[i]->grpc.kind == expected[i]);
    CHECK(calls[i]->grpc.stream_id == (i < 3 ? 1u : 3u));
  }
  CHECK(calls[3]->grpc.path == kModelInfer);
  CHECK(calls[4]->grpc.message == grpctest::add_sub_request(1, "", false, "0"));
  CHECK(fixture.io->in_flight() == 0);
  // Python answers through the loop.
  h2::GrpcConnection* conn = fixture.io->grpc(connection);
  CHECK(conn != nullptr);
  CHECK(conn->send_message(1, std::string("\x08\x01", 2)));
  CHECK(conn->finish(1, 0, ""));
  CHECK(conn->finish(3, 5, "the general path's answer"));
  fixture.io->grpc_wrote(connection);
  fixture.io->flush_writes();
  CHECK(client.read_until([&] { return client.trailers(1) && client.trailers(3); }));
  CHECK(client.data_of(1) == h2test::grpc_message(std::string("\x08\x01", 2)));
  CHECK(h2test::header_value(*client.trailers(3), "grpc-status") == "5");
}

TEST(grpc_io_a_reset_call_is_cancelled_in_the_core_and_never_answered) {
  Fixture fixture;
  fixture.holding = true;  // the batch runs and stays running: the test answers it
  Client client(fixture);
  grpc_connection(fixture);
  client.call(1, kModelInfer, grpctest::add_sub_request(1));
  CHECK(fixture.turn_until([&] { return fixture.io->in_flight() == 1; }));
  CHECK(fixture.io->waiting_count() == 1);
  send_all(client.fd, h2test::rst(1, h2::kCancel));
  CHECK(fixture.turn_until([&] { return fixture.io->waiting_count() == 0; }));
  // Running when it was reset: it ends, counted, and its answer goes nowhere.
  fixture.holding = false;
  CHECK(fixture.turn_until([&] { return fixture.io->in_flight() == 0; }));
  CHECK(successes(fixture) == 1);
  client.read_until([] { return false; });  // what the loop wrote meanwhile
  CHECK(client.trailers(1) == nullptr);
  CHECK(client.data_of(1).empty());
  CHECK(python_calls(fixture).empty());
}

TEST(grpc_io_serves_calls_with_a_deadline_in_cpp) {
  Fixture fixture;
  Client client(fixture);
  grpc_connection(fixture);
  client.call_within(1, "100S", grpctest::add_sub_request(1, "one"));
  client.call_within(3, "99999999H", grpctest::add_sub_request(1, "two"));  // no deadline
  CHECK(client.read_until([&] { return client.trailers(1) && client.trailers(3); }));
  CHECK(client.status(1) == "0");
  CHECK(client.status(3) == "0");
  CHECK(client.data_of(1).find("one") != std::string::npos);
  CHECK(python_calls(fixture).empty());
  CHECK(successes(fixture) == 2);
  CHECK(fixture.io->grpc_deadlines() == 0);  // answered: its deadline is gone
}

TEST(grpc_io_a_running_call_past_its_deadline_is_answered_and_cancelled_in_the_core) {
  Fixture fixture;
  fixture.holding = true;  // the batch runs and stays running: the test answers it
  Client client(fixture);
  grpc_connection(fixture);
  client.call_within(1, "100S", grpctest::add_sub_request(1));
  CHECK(fixture.turn_until([&] { return fixture.io->in_flight() == 1; }));
  CHECK(fixture.io->grpc_deadlines() == 1);
  fixture.io->grpc_expire(monotonic_ns() + 99000000000ull);  // not yet
  CHECK(fixture.io->grpc_deadlines() == 1);
  fixture.io->grpc_expire(monotonic_ns() + 101000000000ull);
  CHECK(client.read_until([&] { return client.trailers(1) != nullptr; }));
  CHECK(client.status(1) == "4");  // DEADLINE_EXCEEDED, grpc++'s words
  CHECK(h2test::header_value(*client.trailers(1), "grpc-message") == "Deadline Exceeded");
  CHECK(client.data_of(1).empty());
  CHECK(fixture.io->grpc_deadlines() == 0);
  CHECK(fixture.io->waiting_count() == 0);
  // Running when it expired: it ends, counted, and its answer goes nowhere.
  fixture.holding = false;
  CHECK(fixture.turn_until([&] { return fixture.io->in_flight() == 0; }));
  CHECK(successes(fixture) == 1);
  CHECK(python_calls(fixture).empty());
}

TEST(grpc_io_the_loop_timer_answers_a_passed_deadline) {
  Fixture fixture;
  fixture.holding = true;
  Client client(fixture);
  grpc_connection(fixture);
  // 1 ms: the loop's timerfd wakes it (turn_until waits on the loop's epoll fd).
  client.call_within(1, "1m", grpctest::add_sub_request(1));
  CHECK(client.read_until([&] { return client.trailers(1) != nullptr; }));
  CHECK(client.status(1) == "4");
  fixture.holding = false;
  CHECK(fixture.turn_until([&] { return fixture.io->in_flight() == 0; }));
  CHECK(python_calls(fixture).empty());
}

TEST(grpc_io_a_call_due_before_it_is_queued_is_not_run) {
  Fixture fixture;
  Client client(fixture);
  grpc_connection(fixture);
  client.call_within(1, "0n", grpctest::add_sub_request(1));
  CHECK(client.read_until([&] { return client.trailers(1) != nullptr; }));
  CHECK(client.status(1) == "4");
  CHECK(h2test::header_value(*client.trailers(1), "grpc-message") == "Deadline Exceeded");
  CHECK(successes(fixture) == 0);
  CHECK(fixture.io->in_flight() == 0);
  CHECK(fixture.io->grpc_deadlines() == 0);
  CHECK(python_calls(fixture).empty());
}

TEST(grpc_io_a_call_handed_to_python_takes_its_grpc_timeout_along) {
  Fixture fixture;
  Client client(fixture);
  grpc_connection(fixture);
  // Version 0 is served, but not by the lane: Python's, with its timeout for its timer.
  client.call_within(1, "5S", grpctest::add_sub_request(1, "", false, "0"));
  CHECK(fixture.turn_until([&] { return python_calls(fixture).size() == 3; }));
  CHECK(python_calls(fixture)[0]->grpc.timeout_us == 5000000);
  CHECK(fixture.io->grpc_deadlines() == 0);
}

TEST(grpc_io_a_restricted_inference_protocol_is_checked_by_the_lane) {
  Fixture fixture;
  fixture.io->set_grpc_inference_rule("triton-grpc-protocol-key", "secret", "denied: key");
  Client client(fixture);
  grpc_connection(fixture);
  auto call_with = [&](uint32_t stream, const char* name, const char* value) {
    send_all(client.fd,
             h2test::headers(stream, h2test::request_block(kModelInfer, {{name, value}})) +
                 h2test::data(stream, h2test::grpc_message(grpctest::add_sub_request(1))));
  };
  call_with(1, "triton-grpc-protocol-key", "secret");
  call_with(3, "triton-grpc-protocol-key", "wrong");
  call_with(5, "key", "secret");
  CHECK(client.read_until(
      [&] { return client.trailers(1) && client.trailers(3) && client.trailers(5); }));
  CHECK(client.status(1) == "0");
  CHECK(client.status(3) == "14");  // UNAVAILABLE, with the words it was given
  CHECK(h2test::header_value(*client.trailers(3), "grpc-message") == "denied: key");
  CHECK(client.status(5) == "14");
  CHECK(successes(fixture) == 1);
  // Python hears of no call but what follows a refused call's opening (its message).
  for (const HttpIo::Event* event : python_calls(fixture)) {
    CHECK(event->grpc.kind != h2::EventKind::kCall);
  }
}

TEST(grpc_io_a_lost_connection_cancels_its_calls_in_the_core) {
  Fixture fixture;
  fixture.holding = true;  // the batch runs and stays running: the test answers it
  Client client(fixture);
  uint64_t connection = grpc_connection(fixture);
  client.call(1, kModelInfer, grpctest::add_sub_request(1));
  client.call(3, kModelInfer, grpctest::add_sub_request(1));
  CHECK(fixture.turn_until([&] { return fixture.io->in_flight() == 2; }));
  close(client.fd);
  client.fd = -1;
  CHECK(fixture.turn_until(
      [&] { return fixture.find_event(HttpIo::EventKind::kClosed, connection) != nullptr; }));
  CHECK(fixture.io->grpc(connection) == nullptr);
  CHECK(fixture.io->open_count() == 0);
  CHECK(fixture.io->waiting_count() == 0);
  // Each request was running (it ends, counted, and answers no one) or queued behind
  // the running batch (dropped: its cancelled completion goes to Python, which
  // releases it, as the manager does).
  fixture.holding = false;
  uint32_t cancelled = 0;
  size_t seen = 0;
  CHECK(fixture.turn_until([&] {
    for (; seen < fixture.python_completions.size(); ++seen) {
      const Completion& done = fixture.python_completions[seen];
      CHECK(done.status == kCompletionCancelled);
      for (uint64_t id : done.request_ids) {
        HttpIo::Owned owned;
        CHECK(fixture.io->owned(id, &owned) && owned.connection == 0);
        cancelled += fixture.io->release_grpc(id) ? 1 : 0;
      }
    }
    return fixture.io->in_flight() == 0;
  }));
  CHECK(successes(fixture) + cancelled == 2);
}

TEST(grpc_io_refuses_an_invalid_lane_call_with_invalid_argument) {
  Fixture fixture;
  Client client(fixture);
  grpc_connection(fixture);
  // add_sub takes [N,16]: a shape of [1,15] with 60 bytes is the validator's to refuse.
  std::string m;
  grpctest::bytes(&m, 1, "add_sub");
  grpctest::bytes(&m, 5, grpctest::tensor("INPUT0", "FP32", {1, 15}));
  grpctest::bytes(&m, 5, grpctest::tensor("INPUT1", "FP32", {1, 15}));
  grpctest::bytes(&m, 7, std::string(60, '\1'));
  grpctest::bytes(&m, 7, std::string(60, '\2'));
  client.call(1, kModelInfer, m);
  CHECK(client.read_until([&] { return client.trailers(1) != nullptr; }));
  CHECK(h2test::header_value(*client.trailers(1), "grpc-status") == "3");
  CHECK(!h2test::header_value(*client.trailers(1), "grpc-message").empty());
  CHECK(python_calls(fixture).empty());
  CHECK(fixture.io->in_flight() == 0);
}

TEST(grpc_io_refuses_an_unknown_model_or_version_with_its_status) {
  Fixture fixture;
  Client client(fixture);
  grpc_connection(fixture);
  std::string nope = grpctest::add_sub_request(1);
  nope[2] = 'x';  // "xdd_sub"
  client.call(1, kModelInfer, nope);
  client.call(3, kModelInfer, grpctest::add_sub_request(1, "", false, "7"));
  client.call(5, kModelInfer, grpctest::add_sub_request(1, "", false, "-1"));
  CHECK(client.read_until(
      [&] { return client.trailers(1) && client.trailers(3) && client.trailers(5); }));
  CHECK(h2test::header_value(*client.trailers(1), "grpc-status") == "5");  // NOT_FOUND
  CHECK(h2test::header_value(*client.trailers(3), "grpc-status") == "5");
  CHECK(h2test::header_value(*client.trailers(5), "grpc-status") == "3");  // INVALID_ARGUMENT
  CHECK(h2test::header_value(*client.trailers(3), "grpc-message") ==
        "Request for unknown model: 'add_sub' version 7 is not found");
  CHECK(python_calls(fixture).empty());
  CHECK(fixture.io->in_flight() == 0);
}

TEST(grpc_io_graceful_shutdown_answers_open_calls_then_closes) {
  Fixture fixture;
  fixture.holding = true;
  Client client(fixture);
  uint64_t connection = grpc_connection(fixture);
  client.call(1, kModelInfer, grpctest::add_sub_request(1));
  CHECK(fixture.turn_until([&] { return fixture.io->in_flight() == 1; }));
  fixture.io->grpc(connection)->shutdown();
  fixture.io->grpc_wrote(connection);
  fixture.holding = false;
  CHECK(client.read_until(
      [&] { return fixture.find_event(HttpIo::EventKind::kClosed, connection) != nullptr; }));
  bool goaway = false;
  for (const h2test::Frame& f : client.frames) goaway = goaway || f.type == 0x7;
  CHECK(goaway);
  CHECK(client.trailers(1) != nullptr);
  CHECK(h2test::header_value(*client.trailers(1), "grpc-status") == "0");
}

TEST(grpc_io_inflates_compressed_calls_and_answers_them_in_cpp) {
  Fixture fixture;
  Client client(fixture);
  grpc_connection(fixture);
  client.compressed_call(1, deflated(StreamFormat::kGzip, grpctest::add_sub_request(1, "gz")),
                         "gzip");
  client.compressed_call(3, deflated(StreamFormat::kZlib, grpctest::add_sub_request(2, "zl")),
                         "deflate");
  // Damaged: refused here with Triton's status and message.
  client.compressed_call(5, "not gzip", "gzip");
  CHECK(client.read_until(
      [&] { return client.trailers(1) && client.trailers(3) && client.trailers(5); }));
  CHECK(client.status(1) == "0");
  CHECK(client.status(3) == "0");
  CHECK(client.data_of(1).find("gz") != std::string::npos);
  CHECK(client.data_of(3).find("zl") != std::string::npos);
  CHECK(client.status(5) == "13");
  CHECK(h2test::header_value(*client.trailers(5), "grpc-message") ==
        "Unexpected error decompressing data for algorithm gzip");
  CHECK(python_calls(fixture).empty());
  CHECK(successes(fixture) == 2);
  CHECK(fixture.io->in_flight() == 0);
}

TEST(grpc_io_inflates_a_large_message_a_step_per_turn_and_serves_the_others_between) {
  Fixture fixture;
  Client client(fixture);
  grpc_connection(fixture);
  // 16 MiB of zeros with a damaged CRC: inflated to the end, a step per turn, then refused.
  std::string bomb = deflated(StreamFormat::kGzip, std::string(16 << 20, '\0'));
  bomb[bomb.size() - 8] ^= 1;
  client.compressed_call(1, bomb, "gzip");
  client.call(3, kServerLive, "");
  client.compressed_call(5, deflated(StreamFormat::kGzip, grpctest::add_sub_request(1, "small")),
                         "gzip");
  // The small call is answered and ServerLive is Python's while the bomb still inflates.
  CHECK(client.read_until([&] { return client.trailers(5) && python_calls(fixture).size() == 3; }));
  CHECK(client.trailers(1) == nullptr);
  CHECK(client.status(5) == "0");
  // The loop's epoll fd stays readable while it inflates: the event loop comes back.
  pollfd ready{fixture.io->epoll_fd(), POLLIN, 0};
  CHECK(::poll(&ready, 1, 0) == 1);
  CHECK(client.read_until([&] { return client.trailers(1) != nullptr; }));
  CHECK(client.status(1) == "13");
  CHECK(python_calls(fixture).size() == 3);  // ServerLive's call, message and half-close
  CHECK(::poll(&ready, 1, 0) == 0);          // nothing left to inflate
}

TEST(grpc_io_a_call_reset_while_it_inflates_is_dropped_and_the_next_inflates) {
  Fixture fixture;
  Client client(fixture);
  grpc_connection(fixture);
  const std::string zeros(8 << 20, '\0');
  std::string damaged = deflated(StreamFormat::kGzip, zeros);
  damaged[damaged.size() - 8] ^= 1;
  // One send, so one read: the reset comes while the first message is a step in.
  send_all(client.fd,
           Client::compressed_call_bytes(1, deflated(StreamFormat::kGzip, zeros), "gzip") +
               Client::compressed_call_bytes(3, damaged, "gzip") + h2test::rst(1, h2::kCancel));
  CHECK(client.read_until([&] { return client.trailers(3) != nullptr; }));
  CHECK(client.status(3) == "13");
  CHECK(client.trailers(1) == nullptr);
  CHECK(python_calls(fixture).empty());
}
