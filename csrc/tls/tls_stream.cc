#include "tls/tls_stream.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <utility>

namespace naiad {

namespace {

// One TLS record's plaintext at most: SSL_read_ex returns no more at a time.
constexpr size_t kRecordPlain = 16 * 1024;

// The OpenSSL errors queued on this thread, as one line (and the queue emptied).
std::string openssl_errors() {
  std::string text;
  unsigned long code;
  while ((code = ERR_get_error()) != 0) {
    char line[256];
    ERR_error_string_n(code, line, sizeof line);
    if (!text.empty()) text += "; ";
    text += line;
  }
  return text.empty() ? "no OpenSSL error was queued" : text;
}

// A file the flags name that cannot even be opened gets the system's reason (OpenSSL's
// own is less clear: "system library").
void check_readable(const std::string& path, const char* what) {
  if (path.empty()) throw std::invalid_argument(std::string(what) + ": no file given");
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    throw std::invalid_argument(std::string(what) + " '" + path +
                                "' cannot be read: " + std::strerror(errno));
  }
  std::fclose(file);
}

[[noreturn]] void refuse(const std::string& path, const char* what, const char* problem) {
  throw std::invalid_argument(std::string(what) + " '" + path + "' " + problem + ": " +
                              openssl_errors());
}

int select_alpn(SSL*, const unsigned char** out, unsigned char* out_size, const unsigned char* in,
                unsigned int in_size, void* arg) {
  const std::string& ours = static_cast<const TlsContext*>(arg)->alpn_wire();
  unsigned char* selected = nullptr;
  if (SSL_select_next_proto(
          &selected, out_size, reinterpret_cast<const unsigned char*>(ours.data()),
          static_cast<unsigned int>(ours.size()), in, in_size) != OPENSSL_NPN_NEGOTIATED) {
    return SSL_TLSEXT_ERR_NOACK;  // none in common: go on without ALPN
  }
  *out = selected;
  return SSL_TLSEXT_ERR_OK;
}

// `cert` and `key` as the certificate `ctx` presents; `side` ("server", "client")
// names them in the errors.
void use_certificate(SSL_CTX* ctx, const std::string& cert, const std::string& key,
                     const std::string& side) {
  const std::string what_cert = "the " + side + " certificate";
  const std::string what_key = "the " + side + " key";
  check_readable(cert, what_cert.c_str());
  check_readable(key, what_key.c_str());
  ERR_clear_error();
  if (SSL_CTX_use_certificate_chain_file(ctx, cert.c_str()) != 1) {
    refuse(cert, what_cert.c_str(), "is not a PEM certificate");
  }
  // Read apart from its use: a key that is not one and a key of another certificate
  // are told apart.
  EVP_PKEY* pkey = nullptr;
  if (BIO* file = BIO_new_file(key.c_str(), "r")) {
    pkey = PEM_read_bio_PrivateKey(file, nullptr, nullptr, nullptr);
    BIO_free(file);
  }
  if (pkey == nullptr) refuse(key, what_key.c_str(), "is not a PEM private key");
  const int used = SSL_CTX_use_PrivateKey(ctx, pkey);
  EVP_PKEY_free(pkey);
  if (used != 1 || SSL_CTX_check_private_key(ctx) != 1) {
    refuse(key, what_key.c_str(), ("does not match the certificate '" + cert + "'").c_str());
  }
}

SSL_CTX* new_context(const SSL_METHOD* method) {
  ERR_clear_error();
  SSL_CTX* ctx = SSL_CTX_new(method);
  if (ctx == nullptr) throw std::runtime_error("SSL_CTX_new: " + openssl_errors());
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION);
  return ctx;
}

}  // namespace

TlsContext::TlsContext(const std::string& cert, const std::string& key, const std::string& root,
                       bool mutual, const std::string& alpn) {
  check_readable(cert, "the server certificate");
  check_readable(key, "the server key");
  if (mutual || !root.empty()) check_readable(root, "the root certificate");
  ctx_ = new_context(TLS_server_method());
  try {
    use_certificate(ctx_, cert, key, "server");
    if (!root.empty()) {
      if (SSL_CTX_load_verify_locations(ctx_, root.c_str(), nullptr) != 1) {
        refuse(root, "the root certificate", "holds no PEM certificate");
      }
    }
    if (mutual) {
      STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(root.c_str());
      if (names == nullptr) refuse(root, "the root certificate", "holds no PEM certificate");
      SSL_CTX_set_client_CA_list(ctx_, names);
      SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
    }
    // Resumed sessions must be told apart per context, or a resumption fails once client
    // certificates are verified.
    static const unsigned char kSessionContext[] = "naiad";
    SSL_CTX_set_session_id_context(ctx_, kSessionContext, sizeof kSessionContext - 1);
    if (!alpn.empty()) {
      if (alpn.size() > 255) throw std::invalid_argument("ALPN protocol name too long");
      alpn_wire_.push_back(static_cast<char>(alpn.size()));
      alpn_wire_ += alpn;
      SSL_CTX_set_alpn_select_cb(ctx_, select_alpn, this);
    }
  } catch (...) {
    SSL_CTX_free(ctx_);
    throw;
  }
}

std::shared_ptr<const TlsContext> TlsContext::client(const std::string& cert,
                                                     const std::string& key,
                                                     const std::string& ca_file,
                                                     const std::string& ca_dir) {
  std::shared_ptr<TlsContext> context(new TlsContext());
  if (!ca_file.empty()) check_readable(ca_file, "the CA certificate");
  context->ctx_ = new_context(TLS_client_method());
  SSL_CTX* ctx = context->ctx_;
  if (!cert.empty() || !key.empty()) use_certificate(ctx, cert, key, "client");
  if (!ca_file.empty() || !ca_dir.empty()) {
    if (SSL_CTX_load_verify_locations(ctx, ca_file.empty() ? nullptr : ca_file.c_str(),
                                      ca_dir.empty() ? nullptr : ca_dir.c_str()) != 1) {
      if (ca_file.empty()) refuse(ca_dir, "the CA certificate folder", "cannot be used");
      refuse(ca_file, "the CA certificate", "holds no PEM certificate");
    }
  } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
    throw std::invalid_argument("the system's CA certificates cannot be loaded: " +
                                openssl_errors());
  }
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  return context;
}

TlsContext::~TlsContext() { SSL_CTX_free(ctx_); }

TlsStream::TlsStream(std::shared_ptr<const TlsContext> context) : context_(std::move(context)) {
  attach_bios();
  SSL_set_accept_state(ssl_);
}

TlsStream::TlsStream(std::shared_ptr<const TlsContext> context, const std::string& server_name)
    : context_(std::move(context)) {
  attach_bios();
  if (!server_name.empty() && SSL_set_tlsext_host_name(ssl_, server_name.c_str()) != 1) {
    SSL_free(ssl_);
    throw std::invalid_argument("the server name '" + server_name +
                                "' cannot be sent (SNI): " + openssl_errors());
  }
  SSL_set_connect_state(ssl_);
}

void TlsStream::attach_bios() {
  ssl_ = SSL_new(context_->get());
  if (ssl_ == nullptr) throw std::runtime_error("SSL_new: " + openssl_errors());
  BIO* in = BIO_new(BIO_s_mem());
  BIO* out = BIO_new(BIO_s_mem());
  if (in == nullptr || out == nullptr) {
    BIO_free(in);
    BIO_free(out);
    SSL_free(ssl_);
    throw std::runtime_error("BIO_new: " + openssl_errors());
  }
  // An empty input BIO means "more bytes to come" (WANT_READ), not end of stream.
  BIO_set_mem_eof_return(in, -1);
  SSL_set_bio(ssl_, in, out);  // the session owns both
}

TlsStream::~TlsStream() { SSL_free(ssl_); }

TlsStream::Status TlsStream::fail(int result, const char* what) {
  const int kind = SSL_get_error(ssl_, result);
  error_ = what;
  error_ += ": ";
  if (kind == SSL_ERROR_SSL) {
    error_ += openssl_errors();
    const long verify = SSL_get_verify_result(ssl_);
    if (verify != X509_V_OK) {
      error_ += SSL_is_server(ssl_) ? " (client certificate: " : " (server certificate: ";
      error_ += X509_verify_cert_error_string(verify);
      error_ += ")";
    }
  } else {
    error_ += "SSL error " + std::to_string(kind);
    ERR_clear_error();
  }
  return Status::kFailed;
}

TlsStream::Status TlsStream::receive(const char* data, size_t size, std::string* plain) {
  ERR_clear_error();
  while (size != 0) {
    size_t written = 0;
    if (BIO_write_ex(SSL_get_rbio(ssl_), data, size, &written) != 1) {
      error_ = "buffering received bytes: " + openssl_errors();
      return Status::kFailed;
    }
    data += written;
    size -= written;
  }
  if (!established_) {
    const int result = SSL_do_handshake(ssl_);
    if (result != 1) {
      const int kind = SSL_get_error(ssl_, result);
      if (kind == SSL_ERROR_WANT_READ || kind == SSL_ERROR_WANT_WRITE) return Status::kOk;
      return fail(result, "handshake failed");
    }
    established_ = true;
  }
  // Records are opened into a scratch buffer and what they hold appended: growing
  // `plain` by a record's room first would zero-fill 16 KB for every small request.
  thread_local char record[kRecordPlain];
  for (;;) {
    size_t got = 0;
    const int result = SSL_read_ex(ssl_, record, kRecordPlain, &got);
    if (result == 1) {
      plain->append(record, got);
      continue;
    }
    const int kind = SSL_get_error(ssl_, result);
    if (kind == SSL_ERROR_WANT_READ || kind == SSL_ERROR_WANT_WRITE) return Status::kOk;
    if (kind == SSL_ERROR_ZERO_RETURN) return Status::kClosed;
    return fail(result, "reading a record failed");
  }
}

bool TlsStream::send(const char* data, size_t size) {
  // Into a memory BIO a write never blocks: it takes every byte or fails outright.
  ERR_clear_error();
  while (size != 0) {
    size_t written = 0;
    const size_t chunk = std::min<size_t>(size, size_t(1) << 30);
    const int result = SSL_write_ex(ssl_, data, chunk, &written);
    if (result != 1) {
      fail(result, "writing a record failed");
      return false;
    }
    data += written;
    size -= written;
  }
  return true;
}

void TlsStream::close_notify() {
  if (!established_ || notified_) return;
  notified_ = true;
  ERR_clear_error();
  SSL_shutdown(ssl_);  // queues the alert; the client's answer is not waited for
  ERR_clear_error();
}

bool TlsStream::has_output() const { return BIO_ctrl_pending(SSL_get_wbio(ssl_)) != 0; }

void TlsStream::take_output(std::string* wire) {
  BIO* out = SSL_get_wbio(ssl_);
  const size_t pending = BIO_ctrl_pending(out);
  if (pending == 0) return;
  const size_t at = wire->size();
  wire->resize(at + pending);
  size_t got = 0;
  BIO_read_ex(out, &(*wire)[at], pending, &got);
  wire->resize(at + got);
}

std::string TlsStream::alpn() const {
  const unsigned char* name = nullptr;
  unsigned int size = 0;
  SSL_get0_alpn_selected(ssl_, &name, &size);
  return std::string(reinterpret_cast<const char*>(name), size);
}

}  // namespace naiad
