// The physical limit for large tensors in band (issue 40): a bare loopback echo server
// on one core, a client on another keeping N connections busy with one message each
// way. The server receives a whole message into the connection's one buffer and sends
// it back, as a server must before it can answer; nothing else happens. Round trips/s
// here are what no inference server on this host's loopback can beat, so the
// large-tensor scenarios report their rates as a share of it.
//
//   build/echo_limit [--bytes 602112] [--connections 4] [--seconds 5] [--warmup 1]
//                    [--server-cpu 0] [--client-cpu 1] [--whole 0]
//
// Prints one line of `key=value` pairs (perf/echo_limit.py reads it).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Options {
  size_t bytes = 602112;  // FP32 [1,3,224,224]
  int connections = 4;
  double seconds = 5.0;
  double warmup = 1.0;
  int server_cpu = 0;
  int client_cpu = 1;
  bool whole = false;  // --whole 1: echo whole messages only (see serve_step)
};

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "echo_limit: %s: %s\n", what, std::strerror(errno));
  std::exit(2);
}

void pin(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) die("sched_setaffinity");
}

void tune(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

// One connection. The server's side: `buffer` holds [sent, have) still to echo. The
// client's: `sent` and `have` count the bytes of the current message each way.
struct Conn {
  int fd = -1;
  std::vector<char> buffer;
  size_t have = 0;
  size_t sent = 0;
};

// True when the call would block. The server ends when its client goes (the run is
// over); for the client a reset is an error.
bool again(ssize_t n, const char* what, bool server) {
  if (n >= 0) return false;
  if (errno == EAGAIN) return true;
  if (server && (errno == ECONNRESET || errno == EPIPE)) _exit(0);
  die(what);
}

void watch(int epoll_fd, Conn& c, uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.ptr = &c;
  epoll_ctl(epoll_fd, EPOLL_CTL_MOD, c.fd, &ev);
}

// The server's side of a connection, as far as the socket allows. `whole`: echo only
// once a whole message is in (as an inference server answers), else echo what each
// recv brought (the "recv_into one buffer, send it back").
void serve_step(Conn& c, size_t bytes, bool whole, int epoll_fd) {
  for (;;) {
    const bool echoing = whole ? c.have == bytes : c.sent < c.have;
    if (echoing) {
      ssize_t n = send(c.fd, c.buffer.data() + c.sent, c.have - c.sent, MSG_NOSIGNAL);
      if (again(n, "send", true)) break;
      c.sent += static_cast<size_t>(n);
      if (c.sent == c.have) c.sent = c.have = 0;
    } else {
      ssize_t n = recv(c.fd, c.buffer.data() + c.have, bytes - c.have, 0);
      if (n == 0) _exit(0);
      if (again(n, "recv", true)) break;
      c.have += static_cast<size_t>(n);
    }
  }
  const bool echoing = whole ? c.have == bytes : c.sent < c.have;
  watch(epoll_fd, c, echoing ? EPOLLOUT : EPOLLIN);
}

// The client's side: sends its message while reading the echo; returns 1 when the
// whole echo is in (a round trip), then starts the next message.
int client_step(Conn& c, size_t bytes, int epoll_fd, std::vector<char>& sink) {
  int completed = 0;
  for (;;) {
    bool moved = false;
    if (c.sent < bytes) {
      ssize_t n = send(c.fd, c.buffer.data() + c.sent, bytes - c.sent, MSG_NOSIGNAL);
      if (!again(n, "send", false)) {
        c.sent += static_cast<size_t>(n);
        moved = true;
      }
    }
    ssize_t n = recv(c.fd, sink.data(), std::min(sink.size(), bytes - c.have), 0);
    if (n == 0) return -1;
    if (!again(n, "recv", false)) {
      // An echo that came back altered means the measurement is of something else.
      if (sink[0] != c.buffer[0] || sink[static_cast<size_t>(n) - 1] != c.buffer[0]) return -2;
      c.have += static_cast<size_t>(n);
      moved = true;
      if (c.have == bytes && c.sent == bytes) {
        ++completed;
        c.have = c.sent = 0;
      }
    }
    if (!moved) break;
  }
  watch(epoll_fd, c, c.sent < bytes ? EPOLLIN | EPOLLOUT : EPOLLIN);
  return completed;
}

void serve(int listener, const Options& o) {
  pin(o.server_cpu);
  int ep = epoll_create1(0);
  std::vector<Conn> conns(static_cast<size_t>(o.connections));
  for (Conn& c : conns) {
    c.fd = accept(listener, nullptr, nullptr);
    if (c.fd < 0) die("accept");
    tune(c.fd);
    c.buffer.resize(o.bytes);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = &c;
    epoll_ctl(ep, EPOLL_CTL_ADD, c.fd, &ev);
  }
  epoll_event events[64];
  for (;;) {
    int n = epoll_wait(ep, events, 64, -1);
    if (n < 0 && errno == EINTR) continue;
    for (int i = 0; i < n; ++i) {
      serve_step(*static_cast<Conn*>(events[i].data.ptr), o.bytes, o.whole, ep);
    }
  }
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string key = argv[i];
    const char* value = argv[i + 1];
    if (key == "--bytes") {
      o.bytes = std::stoul(value);
    } else if (key == "--connections") {
      o.connections = std::stoi(value);
    } else if (key == "--seconds") {
      o.seconds = std::stod(value);
    } else if (key == "--warmup") {
      o.warmup = std::stod(value);
    } else if (key == "--server-cpu") {
      o.server_cpu = std::stoi(value);
    } else if (key == "--client-cpu") {
      o.client_cpu = std::stoi(value);
    } else if (key == "--whole") {
      o.whole = std::stoi(value) != 0;
    } else {
      std::fprintf(stderr, "echo_limit: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) die("bind");
  socklen_t len = sizeof(addr);
  getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  if (listen(listener, o.connections) != 0) die("listen");
  const double forked = now_s();
  pid_t server = fork();
  if (server < 0) die("fork");
  if (server == 0) serve(listener, o);
  close(listener);

  pin(o.client_cpu);
  int ep = epoll_create1(0);
  std::vector<Conn> conns(static_cast<size_t>(o.connections));
  for (size_t k = 0; k < conns.size(); ++k) {
    Conn& c = conns[k];
    c.fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(c.fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) die("connect");
    tune(c.fd);
    c.buffer.assign(o.bytes, static_cast<char>('a' + k));
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLOUT;
    ev.data.ptr = &c;
    epoll_ctl(ep, EPOLL_CTL_ADD, c.fd, &ev);
  }
  std::vector<char> sink(o.bytes);
  epoll_event events[64];
  const double start = now_s();
  double measured_from = 0;
  long round_trips = 0;
  bool measuring = false;
  for (;;) {
    const double t = now_s();
    if (!measuring && t - start >= o.warmup) {
      measuring = true;
      measured_from = t;
      round_trips = 0;
    }
    if (measuring && t - measured_from >= o.seconds) break;
    int n = epoll_wait(ep, events, 64, 100);
    for (int i = 0; i < n; ++i) {
      Conn& c = *static_cast<Conn*>(events[i].data.ptr);
      int done = client_step(c, o.bytes, ep, sink);
      if (done < 0) {
        std::fprintf(stderr, "echo_limit: %s\n",
                     done == -1 ? "the server closed a connection" : "an echo came back altered");
        return 2;
      }
      round_trips += done;
    }
  }
  const double elapsed = now_s() - measured_from;
  for (Conn& c : conns) close(c.fd);
  int status = 0;
  rusage server_usage{};
  wait4(server, &status, 0, &server_usage);
  const double server_life = now_s() - forked;
  auto cpu = [](const rusage& u) {
    return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
  };
  std::printf(
      "bytes=%zu connections=%d seconds=%.3f round_trips=%ld round_trips_per_s=%.1f "
      "mb_per_s_each_way=%.1f server_cpu_share=%.2f whole=%d\n",
      o.bytes, o.connections, elapsed, round_trips, static_cast<double>(round_trips) / elapsed,
      static_cast<double>(round_trips) * static_cast<double>(o.bytes) / elapsed / 1e6,
      cpu(server_usage) / server_life, o.whole ? 1 : 0);
  return 0;
}
