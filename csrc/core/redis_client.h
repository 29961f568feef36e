// One connection to a Redis server for the Redis response cache: connect (TLS, AUTH,
// SELECT),
// one command at a time, every step bounded by a short timeout so that a Redis that is
// gone or stalled costs a request at most one timeout, never a hang. After a failure the
// connection is closed and the next attempt waits a backoff (doubling up to a cap) during
// which calls fail at once; the first call after it reconnects. Not thread-safe: the
// cache that owns it serialises the calls.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>

#include "core/resp.h"
#include "tls/tls_stream.h"

namespace naiad {

struct RedisOptions {
  std::string host;
  int port = 6379;
  std::string user;      // empty: AUTH with the password alone (Redis's "default" user)
  std::string password;  // empty: no AUTH
  int db = 0;
  uint32_t connect_timeout_ms = 100;
  uint32_t socket_timeout_ms = 100;  // one command's round trip
  // TLS, with the settings of Triton's redis cache: the server's certificate must chain
  // to `tls_cacert` / `tls_cacert_dir` (neither: the system's roots); `tls_cert` and
  // `tls_key`: a client certificate; `tls_sni`: the server name sent.
  bool tls = false;
  std::string tls_cert, tls_key, tls_cacert, tls_cacert_dir, tls_sni;
};

class RedisClient {
 public:
  // The backoff after a failure: from the first value, doubled per failure, up to the cap.
  static constexpr uint64_t kFirstBackoffNs = 50'000'000;
  static constexpr uint64_t kMaxBackoffNs = 2'000'000'000;

  // std::invalid_argument naming a TLS file that cannot be used.
  explicit RedisClient(RedisOptions options);
  ~RedisClient() { close(); }
  RedisClient(const RedisClient&) = delete;
  RedisClient& operator=(const RedisClient&) = delete;

  // Sends `args` and reads the reply (a Redis error reply is a reply, not a failure).
  // False, with `*error` naming the server and why, when Redis cannot be reached or
  // does not answer in time, or while the backoff after such a failure lasts.
  bool call(std::initializer_list<std::string_view> args, RespReply* reply, std::string* error);

  bool connected() const { return fd_ >= 0; }
  const RedisOptions& options() const { return options_; }

 private:
  bool connect(uint64_t now_ns, std::string* error);
  bool handshake(uint64_t deadline_ns, std::string* error);
  // Sends `bytes` whole (TLS: as records) by `deadline_ns`.
  bool send_all(const std::string& bytes, uint64_t deadline_ns, std::string* error);
  // Reads what comes into in_ (TLS: its plaintext); false on a failure or at
  // `deadline_ns`.
  bool receive_some(uint64_t deadline_ns, const std::string& timed_out, std::string* error);
  bool exchange(const std::string& request, RespReply* reply, std::string* error);
  bool fail(const std::string& why, std::string* error);
  void close();

  const RedisOptions options_;
  std::shared_ptr<const TlsContext> tls_context_;  // options_.tls: made once
  std::unique_ptr<TlsStream> tls_;                 // the connection's session
  int fd_ = -1;
  std::string in_;  // bytes read past the last reply
  uint64_t retry_at_ns_ = 0;
  uint64_t backoff_ns_ = 0;
  std::string last_error_;
};

}  // namespace naiad
