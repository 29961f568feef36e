// TLS for the I/O loop's connections (http1/http_io.h), with OpenSSL 3 over memory BIOs:
// the loop reads and writes the socket as for plaintext, and a TlsStream turns the
// bytes it read into plaintext and the plaintext it sends into records. No call here
// touches a socket or blocks, so the handshake runs inside the epoll loop (a read that
// leaves it unfinished just waits for the next read).
//
// TlsContext is one listener's settings (its certificate and key, the root certificates
// that client certificates must chain to when they are required, the ALPN protocol it
// selects), or a client's (the Redis cache's connection: the roots the server's
// certificate must chain to, a client certificate); TlsStream is one connection's
// session, made from it.
#pragma once

#include <openssl/opensslv.h>
#if OPENSSL_VERSION_NUMBER < 0x30000000L
#error "Naiad's TLS needs OpenSSL 3 (Debian/Ubuntu: apt-get install libssl-dev)"
#endif

#include <cstddef>
#include <memory>
#include <string>

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;

namespace naiad {

class TlsContext {
 public:
  // `cert`: PEM certificate chain, `key`: its PEM private key; `root`: PEM root
  // certificates (may be empty unless `mutual`); `mutual`: clients must present a
  // certificate that chains to `root`, else the handshake fails. `alpn`: the protocol
  // selected when the client offers it ("h2", "http/1.1"). Throws std::invalid_argument
  // naming the file that cannot be used, and why.
  TlsContext(const std::string& cert, const std::string& key, const std::string& root, bool mutual,
             const std::string& alpn);
  // A client's: the server's certificate must chain to `ca_file` and/or the hashed
  // folder `ca_dir` (both empty: the system's roots); `cert` and `key` (both or
  // neither): the certificate presented when the server asks for one. Throws as above.
  static std::shared_ptr<const TlsContext> client(const std::string& cert, const std::string& key,
                                                  const std::string& ca_file,
                                                  const std::string& ca_dir);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  SSL_CTX* get() const { return ctx_; }
  const std::string& alpn_wire() const { return alpn_wire_; }

 private:
  TlsContext() = default;

  SSL_CTX* ctx_ = nullptr;
  std::string alpn_wire_;  // the ALPN protocol, length-prefixed as on the wire
};

class TlsStream {
 public:
  // A server-side session of `context` (kept alive with it: its ALPN callback reads it).
  explicit TlsStream(std::shared_ptr<const TlsContext> context);
  // A client-side session of a client context, naming `server_name` (SNI) when not
  // empty. receive(nullptr, 0, ...) starts its handshake: the ClientHello waits in
  // output().
  TlsStream(std::shared_ptr<const TlsContext> context, const std::string& server_name);
  ~TlsStream();
  TlsStream(const TlsStream&) = delete;
  TlsStream& operator=(const TlsStream&) = delete;

  enum class Status {
    kOk,      // go on (the handshake may still be unfinished: established() says)
    kClosed,  // the client sent close_notify: no more plaintext comes
    kFailed,  // the handshake or a record failed: error() says why; close the connection
  };
  // `size` bytes read from the socket: the plaintext they complete is appended to
  // `plain`; records to send (the handshake's answers, alerts) wait in output().
  Status receive(const char* data, size_t size, std::string* plain);
  bool established() const { return established_; }
  // Encrypts `size` bytes of plaintext (only once established()) into the output;
  // false (error() says why) when a record could not be made: close the connection.
  bool send(const char* data, size_t size);
  // Adds a close_notify alert to the output (once; after the handshake only).
  void close_notify();
  // Moves the records waiting to be sent to the end of `wire`.
  void take_output(std::string* wire);
  bool has_output() const;
  const std::string& error() const { return error_; }
  // The protocol ALPN selected ("" when the client offered none).
  std::string alpn() const;

 private:
  Status fail(int result, const char* what);
  void attach_bios();

  std::shared_ptr<const TlsContext> context_;
  SSL* ssl_ = nullptr;
  bool established_ = false;
  bool notified_ = false;
  std::string error_;
};

}  // namespace naiad
