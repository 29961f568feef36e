// TLS on the I/O loop's connections (csrc/tls/tls_stream.h, HttpIo::set_tls) over real
// TCP connections on 127.0.0.1: an OpenSSL client in the test's thread (non-blocking,
// stepped between the loop's turns) against the loop of io_fixture.h. The certificates
// (a CA, the server's, a client's, and a client's from another CA) are made by
// tools/tls_certs.py into a temporary directory once per run.
#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>

#include "h2_client.h"
#include "http1/http_io.h"
#include "io_fixture.h"
#include "testing.h"
#include "tls/tls_stream.h"

using namespace naiad;

namespace {

// The certificates, made once: ca.pem signs server.pem (localhost, 127.0.0.1) and
// client.pem; other-ca.pem signs other-client.pem.
struct CertDir {
  CertDir() {
    char pattern[] = "/tmp/naiad-tls-test-XXXXXX";
    if (mkdtemp(pattern) == nullptr) throw std::runtime_error("mkdtemp failed");
    path = pattern;
    // One recipe for every TLS test (run from the repository root, as make test-core does).
    if (std::system(("python3 tools/tls_certs.py " + path + " >/dev/null 2>&1").c_str()) != 0) {
      throw std::runtime_error("tools/tls_certs.py could not make the test certificates in " +
                               path);
    }
  }
  ~CertDir() { std::system(("rm -rf " + path).c_str()); }
  std::string path;
};

const std::string& cert_dir() {
  static const CertDir dir;
  return dir.path;
}

std::string cert(const char* name) { return cert_dir() + "/" + name; }

std::shared_ptr<const TlsContext> server_context(bool mutual, const std::string& alpn) {
  return std::make_shared<TlsContext>(cert("server.pem"), cert("server-key.pem"),
                                      mutual ? cert("ca.pem") : "", mutual, alpn);
}

// A TLS client on a non-blocking socket, stepped by the test between the loop's turns.
struct TlsClient {
  TlsClient(Fixture& fixture, bool grpc, const char* client_cert = nullptr,
            const char* client_key = nullptr, const char* alpn = nullptr) {
    ctx = SSL_CTX_new(TLS_client_method());
    SSL_CTX_load_verify_locations(ctx, cert("ca.pem").c_str(), nullptr);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
    if (client_cert != nullptr) {
      SSL_CTX_use_certificate_file(ctx, cert(client_cert).c_str(), SSL_FILETYPE_PEM);
      SSL_CTX_use_PrivateKey_file(ctx, cert(client_key).c_str(), SSL_FILETYPE_PEM);
    }
    fd = fixture.connect_client(grpc);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    ssl = SSL_new(ctx);
    SSL_set_fd(ssl, fd);
    SSL_set1_host(ssl, "localhost");
    if (alpn != nullptr) {
      std::string wire(1, static_cast<char>(std::strlen(alpn)));
      wire += alpn;
      SSL_set_alpn_protos(ssl, reinterpret_cast<const unsigned char*>(wire.data()),
                          static_cast<unsigned>(wire.size()));
    }
    SSL_set_connect_state(ssl);
  }
  ~TlsClient() {
    SSL_free(ssl);
    SSL_CTX_free(ctx);
    if (fd >= 0) close(fd);
  }

  // One step: the handshake on, what is to send sent, what arrived read. False once the
  // connection failed or ended (`failed`, `ended`).
  bool step() {
    if (failed || ended) return false;
    ERR_clear_error();
    if (!connected) {
      const int result = SSL_do_handshake(ssl);
      if (result != 1) return keep(result);
      connected = true;
    }
    while (!to_send.empty()) {
      size_t sent = 0;
      const int result = SSL_write_ex(ssl, to_send.data(), to_send.size(), &sent);
      if (result != 1) return keep(result);
      to_send.erase(0, sent);
    }
    char buffer[16384];
    for (;;) {
      size_t got = 0;
      const int result = SSL_read_ex(ssl, buffer, sizeof buffer, &got);
      if (result != 1) return keep(result);
      received.append(buffer, got);
    }
  }
  bool keep(int result) {
    const int kind = SSL_get_error(ssl, result);
    if (kind == SSL_ERROR_WANT_READ || kind == SSL_ERROR_WANT_WRITE) return true;
    if (kind == SSL_ERROR_ZERO_RETURN) {
      ended = true;
    } else {
      failed = true;
    }
    return false;
  }
  std::string alpn() const {
    const unsigned char* name = nullptr;
    unsigned size = 0;
    SSL_get0_alpn_selected(ssl, &name, &size);
    return std::string(reinterpret_cast<const char*>(name), size);
  }

  SSL_CTX* ctx = nullptr;
  SSL* ssl = nullptr;
  int fd = -1;
  bool connected = false, failed = false, ended = false;
  std::string to_send, received;
};

const std::string kReady = "GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n";

size_t count_of(HttpIo::EventKind kind, const Fixture& fixture) {
  size_t n = 0;
  for (const auto& event : fixture.events) n += event.kind == kind;
  return n;
}

// Reads the plaintext client `fd` until the server closes it (or ~2 s of turns).
bool closed_by_server(Fixture& fixture, int fd) {
  return fixture.turn_until([&] {
    char buffer[4096];
    const ssize_t got = recv(fd, buffer, sizeof buffer, MSG_DONTWAIT);
    return got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
  });
}

}  // namespace

TEST(tls_io_answers_a_lane_request_over_https_with_http11_alpn) {
  Fixture fixture;
  fixture.io->set_tls(false, server_context(false, "http/1.1"));
  TlsClient client(fixture, false, nullptr, nullptr, "http/1.1");
  client.to_send = http_add_sub_request() + http_add_sub_request();
  CHECK(fixture.turn_until([&] {
    client.step();
    return client.received.find("HTTP/1.1 200", client.received.find("HTTP/1.1 200") + 1) !=
           std::string::npos;
  }));
  CHECK(client.alpn() == "http/1.1");
  CHECK(fixture.answered.size() >= 1);
  CHECK(count_of(HttpIo::EventKind::kTlsFailed, fixture) == 0);
}

TEST(tls_io_grpc_selects_h2_and_sends_its_settings_once_the_handshake_is_done) {
  Fixture fixture;
  fixture.io->set_tls(true, server_context(false, "h2"));
  TlsClient client(fixture, true, nullptr, nullptr, "h2");
  client.to_send = h2test::hello();
  CHECK(fixture.turn_until([&] {
    client.step();
    return client.received.size() >= 9;
  }));
  CHECK(client.alpn() == "h2");
  CHECK(client.received[3] == 0x4);  // the first frame: the server's SETTINGS
  CHECK(fixture.find_event(HttpIo::EventKind::kGrpcAccepted) != nullptr);
}

TEST(tls_io_large_answers_pause_python_writes_and_arrive_whole) {
  Fixture fixture;
  fixture.io->set_tls(false, server_context(false, "http/1.1"));
  TlsClient client(fixture, false);
  client.to_send = kReady;  // not the lane's: handed to Python
  CHECK(fixture.turn_until([&] {
    client.step();
    return fixture.find_event(HttpIo::EventKind::kHandOver) != nullptr;
  }));
  const uint64_t id = fixture.find_event(HttpIo::EventKind::kHandOver)->connection;
  std::string big(16 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
  fixture.io->write(id, big.data(), big.size());
  // The client has not read: what the socket did not take waits, and Python is paused.
  CHECK(fixture.io->unsent(id) > 64 * 1024);
  CHECK(fixture.turn_until(
      [&] { return fixture.find_event(HttpIo::EventKind::kPauseWriting) != nullptr; }));
  CHECK(fixture.turn_until([&] {
    client.step();
    return client.received.size() == big.size();
  }));
  CHECK(client.received == big);
  CHECK(fixture.find_event(HttpIo::EventKind::kResumeWriting) != nullptr);
  CHECK(fixture.io->unsent(id) == 0);
}

TEST(tls_io_plaintext_before_the_handshake_is_closed_with_a_reason_and_serving_goes_on) {
  Fixture fixture;
  fixture.io->set_tls(false, server_context(false, "http/1.1"));
  const int plain = fixture.connect_client(false);
  send_all(plain, kReady);
  CHECK(closed_by_server(fixture, plain));
  close(plain);
  const HttpIo::Event* failed = fixture.find_event(HttpIo::EventKind::kTlsFailed);
  CHECK(failed != nullptr);
  CHECK(failed->data.find("handshake failed") != std::string::npos);
  CHECK(failed->data.find("127.0.0.1:") == 0);
  CHECK(fixture.find_event(HttpIo::EventKind::kClosed, failed->connection) != nullptr);
  TlsClient client(fixture, false);
  client.to_send = http_add_sub_request();
  CHECK(fixture.turn_until([&] {
    client.step();
    return client.received.find("HTTP/1.1 200") != std::string::npos;
  }));
}

TEST(tls_io_a_client_that_closes_mid_handshake_frees_its_session) {
  Fixture fixture;
  fixture.io->set_tls(true, server_context(false, "h2"));
  {
    TlsClient client(fixture, true);
    client.step();  // the ClientHello goes out; the client leaves before the answer
    CHECK(fixture.turn_until([&] { return fixture.io->grpc(1) != nullptr; }));
  }
  // A ClientHello cut short, then gone.
  const int cut = fixture.connect_client(true);
  send_all(cut, std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11));
  close(cut);
  CHECK(fixture.turn_until([&] { return count_of(HttpIo::EventKind::kClosed, fixture) == 2; }));
  CHECK(fixture.io->grpc(1) == nullptr);
  CHECK(fixture.io->grpc(2) == nullptr);
}

TEST(tls_io_a_tls_client_on_a_plaintext_port_is_closed_with_a_reason) {
  Fixture fixture;  // no TLS
  TlsClient client(fixture, false);
  CHECK(fixture.turn_until([&] { return !client.step(); }));
  CHECK(client.failed);
  const HttpIo::Event* failed = fixture.find_event(HttpIo::EventKind::kTlsFailed);
  CHECK(failed != nullptr);
  CHECK(failed->data.find("serves without TLS") != std::string::npos);
}

TEST(tls_io_mutual_tls_takes_a_client_certificate_of_the_root_and_no_other) {
  Fixture fixture;
  fixture.io->set_tls(false, server_context(true, "http/1.1"));
  TlsClient good(fixture, false, "client.pem", "client-key.pem");
  good.to_send = http_add_sub_request();
  CHECK(fixture.turn_until([&] {
    good.step();
    return good.received.find("HTTP/1.1 200") != std::string::npos;
  }));
  CHECK(count_of(HttpIo::EventKind::kTlsFailed, fixture) == 0);

  TlsClient other(fixture, false, "other-client.pem", "other-client-key.pem");
  other.to_send = http_add_sub_request();
  CHECK(fixture.turn_until([&] {
    other.step();
    return count_of(HttpIo::EventKind::kTlsFailed, fixture) == 1 && (other.failed || other.ended);
  }));
  CHECK(other.received.empty());
  CHECK(fixture.find_event(HttpIo::EventKind::kTlsFailed)->data.find("certificate") !=
        std::string::npos);

  TlsClient none(fixture, false);
  none.to_send = http_add_sub_request();
  CHECK(fixture.turn_until([&] {
    none.step();
    return count_of(HttpIo::EventKind::kTlsFailed, fixture) == 2 && (none.failed || none.ended);
  }));
  CHECK(none.received.empty());
}

TEST(tls_context_names_the_file_it_cannot_use) {
  auto refused = [](const std::string& certificate, const std::string& key, const std::string& root,
                    bool mutual) -> std::string {
    try {
      TlsContext context(certificate, key, root, mutual, "h2");
    } catch (const std::invalid_argument& error) {
      return error.what();
    }
    return "";
  };
  const std::string missing = cert_dir() + "/missing.pem";
  std::string why = refused(missing, cert("server-key.pem"), "", false);
  CHECK(why.find("server certificate '" + missing + "' cannot be read") != std::string::npos);
  why = refused(cert("server-key.pem"), cert("server-key.pem"), "", false);
  CHECK(why.find("server certificate '" + cert("server-key.pem") + "'") != std::string::npos);
  why = refused(cert("server.pem"), cert("client-key.pem"), "", false);
  CHECK(why.find("server key '" + cert("client-key.pem") + "' does not match") !=
        std::string::npos);
  why = refused(cert("server.pem"), cert("server-key.pem"), cert("server-key.pem"), true);
  CHECK(why.find("root certificate '" + cert("server-key.pem") + "'") != std::string::npos);
  why = refused(cert("server.pem"), cert("server-key.pem"), "", true);
  CHECK(why.find("root certificate: no file given") != std::string::npos);
  CHECK(refused(cert("server.pem"), cert("server-key.pem"), cert("ca.pem"), true).empty());
}
