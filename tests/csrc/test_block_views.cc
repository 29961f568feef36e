// Answers sent from their response block (csrc/ipc/block_views.h): the spliced output
// is the string's bytes with the views' in place, whatever the socket takes per call;
// the block stays allocated until its last view is sent or dropped.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <random>
#include <string>

#include "ipc/arena.h"
#include "ipc/block_views.h"
#include "testing.h"

using namespace naiad;

namespace {

// A block of `size` bytes in `arena`, filled with a pattern that starts at `seed`.
uint64_t filled_block(Arena& arena, size_t size, uint8_t seed) {
  const uint64_t offset = arena.alloc(size);
  for (size_t i = 0; i < size; ++i) arena.base()[offset + i] = static_cast<uint8_t>(seed + i * 7);
  return offset;
}

std::string bytes_of(const Arena& arena, uint64_t offset, size_t size) {
  return std::string(reinterpret_cast<const char*>(arena.base() + offset), size);
}

// Two answers: head, a view, head, two views of another block, a tail in `out`; and
// what the socket must receive.
struct Spliced {
  std::string out;
  OutViews views;
  std::string expected;
};

Spliced make_spliced(Arena& arena, uint64_t* held, size_t tensor) {
  Spliced s;
  const uint64_t a = filled_block(arena, tensor, 1);
  const uint64_t b = filled_block(arena, 2 * tensor, 50);
  auto hold_a = std::make_shared<HeldBlock>(arena, a, tensor, held);
  auto hold_b = std::make_shared<HeldBlock>(arena, b, 2 * tensor, held);
  s.out = "HEAD-ONE{json}";
  s.views.add(s.out.size(), arena.base() + a, tensor, hold_a);
  s.expected = s.out + bytes_of(arena, a, tensor);
  s.out += "HEAD-TWO{json}";
  s.expected += "HEAD-TWO{json}";
  s.views.add(s.out.size(), arena.base() + b, tensor, hold_b);
  s.views.add(s.out.size(), arena.base() + b + tensor, tensor, hold_b);
  s.expected += bytes_of(arena, b, 2 * tensor);
  s.out += "tail written later";
  s.expected += "tail written later";
  return s;
}

}  // namespace

TEST(block_views_consume_any_split_of_the_spliced_output_leaves_the_rest_in_order) {
  Arena arena = Arena::create(1 << 20);
  uint64_t held = 0;
  std::mt19937 random(7);
  for (int round = 0; round < 200; ++round) {
    Spliced s = make_spliced(arena, &held, 1 + random() % 300);
    std::string got;
    while (!s.out.empty() || !s.views.empty()) {
      iovec iov[3];  // few, so that gather() stops short too
      const int n = s.views.gather(s.out, iov, 3);
      CHECK(n > 0);
      size_t total = 0;
      for (int i = 0; i < n; ++i) total += iov[i].iov_len;
      const size_t sent = 1 + random() % total;  // the socket takes part of it
      size_t left = sent;
      for (int i = 0; i < n && left != 0; ++i) {
        const size_t part = std::min(left, iov[i].iov_len);
        got.append(static_cast<const char*>(iov[i].iov_base), part);
        left -= part;
      }
      s.views.consume(&s.out, sent);
    }
    CHECK(got == s.expected);
    CHECK(s.views.bytes() == 0);
  }
  CHECK(held == 0);
  CHECK(arena.stats().blocks_in_use == 0);
}

TEST(block_views_send_spliced_through_a_small_socket_buffer_frees_the_block_when_sent) {
  Arena arena = Arena::create(8 << 20);
  uint64_t held = 0;
  int pair[2];
  CHECK(::socketpair(AF_UNIX, SOCK_STREAM, 0, pair) == 0);
  const int small = 4096;
  ::setsockopt(pair[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
  ::fcntl(pair[0], F_SETFL, ::fcntl(pair[0], F_GETFL) | O_NONBLOCK);
  Spliced s = make_spliced(arena, &held, 600 * 1024);
  CHECK(held == 3 * 600 * 1024);
  std::string got;
  char buffer[65536];
  int calls = 0;
  while (!s.out.empty() || !s.views.empty()) {
    CHECK(send_spliced(pair[0], &s.out, &s.views) == 0);  // EAGAIN is no failure
    ++calls;
    const ssize_t n = ::read(pair[1], buffer, sizeof buffer);  // a slow reader
    if (n > 0) got.append(buffer, static_cast<size_t>(n));
  }
  for (;;) {
    ::fcntl(pair[1], F_SETFL, ::fcntl(pair[1], F_GETFL) | O_NONBLOCK);
    const ssize_t n = ::read(pair[1], buffer, sizeof buffer);
    if (n <= 0) break;
    got.append(buffer, static_cast<size_t>(n));
  }
  CHECK(calls > 1);  // the socket took it in several parts
  CHECK(got == s.expected);
  CHECK(held == 0);
  CHECK(arena.stats().blocks_in_use == 0);
  ::close(pair[0]);
  ::close(pair[1]);
}

TEST(block_views_dropped_unsent_release_their_blocks_and_a_closed_peer_is_an_error) {
  Arena arena = Arena::create(1 << 20);
  uint64_t held = 0;
  int pair[2];
  CHECK(::socketpair(AF_UNIX, SOCK_STREAM, 0, pair) == 0);
  {
    Spliced s = make_spliced(arena, &held, 1000);
    CHECK(arena.stats().blocks_in_use == 2);
    ::close(pair[1]);  // the client is gone
    CHECK(send_spliced(pair[0], &s.out, &s.views) == EPIPE);
    CHECK(held != 0);  // still held: the connection drops them
  }
  CHECK(held == 0);
  CHECK(arena.stats().blocks_in_use == 0);
  ::close(pair[0]);
}

TEST(block_views_append_moves_a_pipelined_answers_views_behind_the_output) {
  Arena arena = Arena::create(1 << 20);
  uint64_t held = 0;
  Spliced first = make_spliced(arena, &held, 100);
  Spliced second = make_spliced(arena, &held, 200);
  first.views.append(std::move(second.views), first.out.size());
  first.out += second.out;
  CHECK(second.views.empty());
  CHECK(first.views.bytes() == 3 * 100 + 3 * 200);
  std::string got;
  iovec iov[16];
  const int n = first.views.gather(first.out, iov, 16);
  for (int i = 0; i < n; ++i) got.append(static_cast<const char*>(iov[i].iov_base), iov[i].iov_len);
  CHECK(got == first.expected + second.expected);
}
