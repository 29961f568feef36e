// Receiving in place (csrc/http1/http_io.h): a request whose head and inference header
// have arrived but not all its binary tensors is placed in the arena, and the rest of
// its bytes are read from the socket straight into their places. Over real TCP
// connections on 127.0.0.1, with the I/O loop's fixture (io_fixture.h); damaged input
// too: a client that goes away mid-body, a body larger than the loop places, a request
// the validator refuses after its header, a request that times out mid-body.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "io_fixture.h"
#include "ipc/ipc_schema.h"
#include "testing.h"

using namespace naiad;

namespace {

// add_sub's request with its 128 tensor bytes numbered (byte i is i), split where its
// tensors begin: {head and inference header, tensors}.
std::pair<std::string, std::string> numbered_request(const std::string& datatype = "FP32") {
  std::string header =
      "{\"inputs\":[{\"name\":\"INPUT0\",\"datatype\":\"" + datatype +
      "\",\"shape\":[1,16],\"parameters\":{\"binary_data_size\":64}},{\"name\":\"INPUT1\","
      "\"datatype\":\"FP32\",\"shape\":[1,16],\"parameters\":{\"binary_data_size\":64}}],"
      "\"outputs\":[{\"name\":\"OUTPUT0\",\"parameters\":{\"binary_data\":true}}]}";
  std::string tensors;
  for (int i = 0; i < 128; ++i) tensors += static_cast<char>(i);
  std::string head =
      "POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\nInference-Header-Content-Length: " +
      std::to_string(header.size()) +
      "\r\nContent-Length: " + std::to_string(header.size() + tensors.size()) + "\r\n\r\n" + header;
  return {head, tensors};
}

// The tensor bytes of each request of the batches the (held) worker has: INPUT0 then
// INPUT1, per request.
std::vector<std::string> held_inputs(Fixture& fixture, std::vector<BatchMessage>* batches) {
  std::vector<std::string> inputs;
  BatchMessage message;
  WorkerEndpoint& worker = *fixture.workers[0];
  fixture.turn_until([&] {
    while (worker.try_next(&message)) {
      if (message.kind == MessageKind::kBatch) batches->push_back(message);
    }
    return !batches->empty();
  });
  const uint8_t* base = fixture.core.arena().base();
  for (const BatchMessage& batch : *batches) {
    const auto* header = reinterpret_cast<const BatchHeader*>(base + batch.desc_offset);
    const auto* records =
        reinterpret_cast<const BatchRequest*>(base + batch.desc_offset + batch_requests_offset());
    for (uint32_t r = 0; r < header->n_requests; ++r) {
      const auto* request = reinterpret_cast<const RequestHeader*>(base + records[r].block_offset);
      const auto* slots = reinterpret_cast<const InputSlot*>(base + records[r].block_offset +
                                                             sizeof(RequestHeader));
      std::string bytes;
      for (uint32_t i = 0; i < request->n_inputs; ++i) {
        bytes.append(reinterpret_cast<const char*>(base + slots[i].offset), slots[i].size);
      }
      inputs.push_back(bytes);
    }
  }
  return inputs;
}

// Turns until the loop has taken `n` tensor bytes of a request in progress (copied from
// what it read, or received in place).
bool took(Fixture& fixture, uint64_t n) {
  return fixture.turn_until(
      [&] { return fixture.tensor_bytes.in_copied + fixture.tensor_bytes.in_in_place >= n; });
}

// A client of `fixture` that sent `head` and the first 10 of its tensor bytes, which
// the loop has placed; its connection in `*connection`.
int client_mid_body(Fixture& fixture, const std::string& head, const std::string& tensors,
                    uint64_t* connection) {
  int client = fixture.connect_client();
  *connection = accepted_connection(fixture);
  send_all(client, head + tensors.substr(0, 10));
  CHECK(took(fixture, 10));
  CHECK(fixture.lane.codec().in_flight() == 1);
  return client;
}

}  // namespace

TEST(http_receive_tensors_after_the_header_land_in_place_and_a_pipelined_request_follows) {
  Fixture fixture;
  fixture.holding = true;
  int client = fixture.connect_client();
  accepted_connection(fixture);
  auto [head, tensors] = numbered_request();
  send_all(client, head + tensors.substr(0, 10));
  // Placed once its header is in: the 10 tensor bytes read with it are copied there.
  CHECK(took(fixture, 10));
  CHECK(fixture.io->in_flight() == 0);  // not queued before its bytes are all in
  CHECK(fixture.lane.codec().in_flight() == 1);
  const std::string second = http_add_sub_request('\x07');
  send_all(client, tensors.substr(10) + second);
  std::vector<BatchMessage> batches;
  std::vector<std::string> inputs = held_inputs(fixture, &batches);
  for (int i = 0; i < 3 && inputs.size() < 2; ++i) {
    std::vector<BatchMessage> more;
    for (const std::string& bytes : held_inputs(fixture, &more)) inputs.push_back(bytes);
    batches.insert(batches.end(), more.begin(), more.end());
  }
  CHECK(inputs.size() == 2);
  CHECK(inputs[0] == tensors);
  CHECK(inputs[1] == std::string(128, '\x07'));
  // The second request's bytes came with the first's end: read and copied as usual.
  CHECK(fixture.tensor_bytes.in_in_place >= 118);
  CHECK(fixture.tensor_bytes.in_in_place + fixture.tensor_bytes.in_copied == 256);
  for (const BatchMessage& batch : batches) fixture.answer(*fixture.workers[0], batch);
  fixture.holding = false;
  const std::string received = read_answers(fixture, client, 2);
  CHECK(received.find("HTTP/1.1 200 OK") == 0);
  CHECK(received.find("HTTP/1.1 200 OK", 1) != std::string::npos);
  CHECK(fixture.find_event(HttpIo::EventKind::kHandOver) == nullptr);
  CHECK(fixture.lane.codec().in_flight() == 0);
  close(client);
}

TEST(http_receive_a_client_gone_mid_body_gives_its_place_back) {
  for (bool reset : {false, true}) {
    Fixture fixture;
    const uint64_t blocks = fixture.core.arena().stats().blocks_in_use;
    auto [head, tensors] = numbered_request();
    uint64_t connection = 0;
    int client = client_mid_body(fixture, head, tensors, &connection);
    if (reset) {
      linger abort{1, 0};  // close() sends a reset
      setsockopt(client, SOL_SOCKET, SO_LINGER, &abort, sizeof abort);
      close(client);
    } else {
      shutdown(client, SHUT_WR);  // a body shorter than declared
    }
    CHECK(fixture.turn_until(
        [&] { return fixture.find_event(HttpIo::EventKind::kClosed, connection) != nullptr; }));
    CHECK(fixture.lane.codec().in_flight() == 0);
    CHECK(fixture.io->in_flight() == 0);
    CHECK(fixture.core.arena().stats().blocks_in_use == blocks);
    if (!reset) close(client);
  }
}

TEST(http_receive_a_huge_declared_body_is_not_placed_before_it_arrives) {
  Fixture fixture;  // a 16 MiB arena
  int client = fixture.connect_client();
  uint64_t connection = accepted_connection(fixture);
  // 8 MiB of tensors declared (within the body limit), 64 KiB of them sent.
  const std::string header =
      "{\"inputs\":[{\"name\":\"INPUT0\",\"datatype\":\"FP32\",\"shape\":[1,2097152],"
      "\"parameters\":{\"binary_data_size\":8388608}}]}";
  send_all(
      client,
      "POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\nInference-Header-Content-Length: " +
          std::to_string(header.size()) +
          "\r\nContent-Length: " + std::to_string(header.size() + (8u << 20)) + "\r\n\r\n" +
          header + std::string(64 << 10, '\x01'));
  fixture.turn_until([&] { return false; });  // a few turns
  CHECK(fixture.lane.codec().in_flight() == 0);
  CHECK(fixture.tensor_bytes.in_in_place == 0 && fixture.tensor_bytes.in_copied == 0);
  CHECK(fixture.io->in_lane_mode(connection));
  close(client);
}

TEST(http_receive_a_request_refused_after_its_header_is_answered_once_its_body_is_in) {
  Fixture fixture;
  int client = fixture.connect_client();
  uint64_t connection = accepted_connection(fixture);
  auto [head, tensors] = numbered_request("INT32");  // add_sub takes FP32
  send_all(client, head + tensors.substr(0, 10));
  fixture.turn_until([&] { return false; });
  CHECK(fixture.lane.codec().in_flight() == 0);  // not placed
  send_all(client, tensors.substr(10) + http_add_sub_request());
  const std::string received = read_answers(fixture, client, 2);
  CHECK(received.find("HTTP/1.1 400 Bad Request") == 0);
  CHECK(received.find("data-type is 'INT32'") != std::string::npos);
  CHECK(received.find("HTTP/1.1 200 OK") != std::string::npos);
  CHECK(fixture.tensor_bytes.in_in_place == 0);
  CHECK(fixture.tensor_bytes.in_copied == 128);  // the second request's
  CHECK(fixture.io->in_lane_mode(connection));
  close(client);
}

TEST(http_receive_a_request_timed_out_mid_body_goes_to_python_with_its_head) {
  Fixture fixture;
  const uint64_t blocks = fixture.core.arena().stats().blocks_in_use;
  auto [head, tensors] = numbered_request();
  uint64_t connection = 0;
  int client = client_mid_body(fixture, head, tensors, &connection);
  std::vector<uint64_t> timed_out, idle;
  fixture.io->sweep(monotonic_ns() + 1, 0, &timed_out, &idle);
  CHECK(timed_out.size() == 1 && timed_out[0] == connection);
  fixture.io->hand_over(connection);
  CHECK(fixture.turn_until(
      [&] { return fixture.find_event(HttpIo::EventKind::kHandOver, connection) != nullptr; }));
  CHECK(fixture.find_event(HttpIo::EventKind::kHandOver, connection)->data == head);
  CHECK(fixture.lane.codec().in_flight() == 0);
  CHECK(fixture.core.arena().stats().blocks_in_use == blocks);
  close(client);
}

TEST(http_receive_a_closing_request_received_in_place_is_answered_then_closed) {
  Fixture fixture;
  int client = fixture.connect_client();
  accepted_connection(fixture);
  auto [head, tensors] = numbered_request();
  head.replace(head.find("Host: x\r\n"), 9, "Host: x\r\nConnection: close\r\n");
  send_all(client, head + tensors.substr(0, 10));
  CHECK(took(fixture, 10));
  // What follows a closing request is never read.
  send_all(client, tensors.substr(10) + http_add_sub_request());
  const std::string received = read_answers(fixture, client, 1);
  CHECK(received.find("HTTP/1.1 200 OK") == 0);
  CHECK(received.find("Connection: close\r\n") != std::string::npos);
  CHECK(received.find("HTTP/1.1", 1) == std::string::npos);
  CHECK(fixture.tensor_bytes.in_in_place >= 118);
  CHECK(fixture.tensor_bytes.in_in_place + fixture.tensor_bytes.in_copied == 128);
  CHECK(fixture.turn_until([&] {
    char byte;
    return recv(client, &byte, 1, MSG_DONTWAIT) == 0;  // closed by the server
  }));
  close(client);
}
