#include "core/redis_client.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <memory>

#include "core/core.h"

namespace naiad {

namespace {

// Waits for `events` on `fd` until `deadline_ns`; false on timeout or a poll error.
bool wait_for(int fd, short events, uint64_t deadline_ns) {
  for (;;) {
    const uint64_t now = monotonic_ns();
    if (now >= deadline_ns) return false;
    pollfd p{fd, events, 0};
    const int ms = static_cast<int>(std::max<uint64_t>((deadline_ns - now) / 1'000'000, 1));
    const int n = ::poll(&p, 1, ms);
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return false;
  }
}

}  // namespace

RedisClient::RedisClient(RedisOptions options) : options_(std::move(options)) {
  if (options_.tls) {
    tls_context_ = TlsContext::client(options_.tls_cert, options_.tls_key, options_.tls_cacert,
                                      options_.tls_cacert_dir);
  }
}

void RedisClient::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  tls_.reset();
  in_.clear();
}

bool RedisClient::fail(const std::string& why, std::string* error) {
  close();
  backoff_ns_ = backoff_ns_ == 0 ? kFirstBackoffNs : std::min(backoff_ns_ * 2, kMaxBackoffNs);
  retry_at_ns_ = monotonic_ns() + backoff_ns_;
  last_error_ = "Redis at " + options_.host + ":" + std::to_string(options_.port) + ": " + why;
  *error = last_error_;
  return false;
}

bool RedisClient::connect(uint64_t now_ns, std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(options_.port);
  const int rc = ::getaddrinfo(options_.host.c_str(), port.c_str(), &hints, &found);
  if (rc != 0) return fail(std::string("cannot resolve the host: ") + gai_strerror(rc), error);
  const uint64_t deadline = now_ns + uint64_t{options_.connect_timeout_ms} * 1'000'000;
  std::string why = "no address";
  for (addrinfo* at = found; at != nullptr && fd_ < 0; at = at->ai_next) {
    int fd = ::socket(at->ai_family, at->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    if (::connect(fd, at->ai_addr, at->ai_addrlen) != 0) {
      int err = errno;
      if (err == EINPROGRESS) {
        socklen_t len = sizeof err;
        err = wait_for(fd, POLLOUT, deadline) ? 0 : ETIMEDOUT;
        if (err == 0 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      }
      if (err != 0) {
        why = err == ETIMEDOUT
                  ? "connect timed out after " + std::to_string(options_.connect_timeout_ms) + " ms"
                  : std::string(std::strerror(err));
        ::close(fd);
        continue;
      }
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fd_ = fd;
  }
  ::freeaddrinfo(found);
  if (fd_ < 0) return fail("cannot connect: " + why, error);
  if (tls_context_ != nullptr && !handshake(deadline, error)) return false;
  // The session's settings, before any cache command.
  RespReply reply;
  std::string request;
  if (!options_.password.empty()) {
    if (options_.user.empty()) {
      resp_command({"AUTH", options_.password}, &request);
    } else {
      resp_command({"AUTH", options_.user, options_.password}, &request);
    }
    if (!exchange(request, &reply, error)) return false;
    if (reply.type == RespReply::Type::kError) return fail("AUTH refused: " + reply.text, error);
  }
  if (options_.db != 0) {
    request.clear();
    resp_command({"SELECT", std::to_string(options_.db)}, &request);
    if (!exchange(request, &reply, error)) return false;
    if (reply.type == RespReply::Type::kError) {
      return fail("SELECT " + std::to_string(options_.db) + " refused: " + reply.text, error);
    }
  }
  return true;
}

bool RedisClient::handshake(uint64_t deadline_ns, std::string* error) {
  const std::string timed_out =
      "TLS handshake not done within " + std::to_string(options_.connect_timeout_ms) + " ms";
  std::string plain;
  try {
    tls_ = std::make_unique<TlsStream>(tls_context_, options_.tls_sni);
  } catch (const std::exception& e) {
    return fail(std::string("TLS: ") + e.what(), error);
  }
  if (tls_->receive(nullptr, 0, &plain) == TlsStream::Status::kFailed) {  // the ClientHello
    return fail("TLS " + tls_->error(), error);
  }
  for (;;) {
    if (tls_->has_output() && !send_all(std::string(), deadline_ns, error)) return false;
    if (tls_->established()) return true;
    if (!receive_some(deadline_ns, timed_out, error)) return false;
  }
}

bool RedisClient::send_all(const std::string& bytes, uint64_t deadline_ns, std::string* error) {
  const std::string* wire = &bytes;
  std::string records;
  if (tls_ != nullptr) {
    if (!bytes.empty() && !tls_->send(bytes.data(), bytes.size())) {
      return fail("TLS " + tls_->error(), error);
    }
    tls_->take_output(&records);
    wire = &records;
  }
  size_t sent = 0;
  while (sent < wire->size()) {
    const ssize_t n = ::send(fd_, wire->data() + sent, wire->size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
      return fail(std::string("send: ") + std::strerror(errno), error);
    } else if (!wait_for(fd_, POLLOUT, deadline_ns)) {
      return fail("could not send within " + std::to_string(options_.socket_timeout_ms) + " ms",
                  error);
    }
  }
  return true;
}

bool RedisClient::receive_some(uint64_t deadline_ns, const std::string& timed_out,
                               std::string* error) {
  char buffer[65536];
  for (;;) {
    const ssize_t n = ::recv(fd_, buffer, sizeof buffer, 0);
    if (n > 0) {
      if (tls_ == nullptr) {
        in_.append(buffer, static_cast<size_t>(n));
        return true;
      }
      const TlsStream::Status status = tls_->receive(buffer, static_cast<size_t>(n), &in_);
      if (status == TlsStream::Status::kFailed) return fail("TLS " + tls_->error(), error);
      // Records the session answers with (the handshake's, alerts) go out now.
      if (tls_->has_output() && !send_all(std::string(), deadline_ns, error)) return false;
      if (status == TlsStream::Status::kClosed) return fail("connection closed", error);
      return true;
    }
    if (n == 0) return fail("connection closed", error);
    if (errno != EAGAIN && errno != EINTR) {
      return fail(std::string("recv: ") + std::strerror(errno), error);
    }
    if (!wait_for(fd_, POLLIN, deadline_ns)) return fail(timed_out, error);
  }
}

bool RedisClient::exchange(const std::string& request, RespReply* reply, std::string* error) {
  const uint64_t deadline = monotonic_ns() + uint64_t{options_.socket_timeout_ms} * 1'000'000;
  const std::string timed_out =
      "no answer within " + std::to_string(options_.socket_timeout_ms) + " ms";
  if (!send_all(request, deadline, error)) return false;
  for (;;) {
    size_t used = 0;
    std::string why;
    const RespRead got = resp_read(in_, &used, reply, &why);
    if (got == RespRead::kDone) {
      in_.erase(0, used);
      return true;
    }
    if (got == RespRead::kBad) return fail(why, error);
    if (!receive_some(deadline, timed_out, error)) return false;
  }
}

bool RedisClient::call(std::initializer_list<std::string_view> args, RespReply* reply,
                       std::string* error) {
  if (fd_ < 0) {
    const uint64_t now = monotonic_ns();
    if (now < retry_at_ns_) {
      *error = last_error_ + " (next attempt in " +
               std::to_string((retry_at_ns_ - now) / 1'000'000) + " ms)";
      return false;
    }
    if (!connect(now, error)) return false;
  }
  std::string request;
  resp_command(args, &request);
  if (!exchange(request, reply, error)) return false;
  backoff_ns_ = 0;  // Redis answered: the next failure starts the backoff afresh
  return true;
}

}  // namespace naiad
