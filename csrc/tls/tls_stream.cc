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

}  // namespace

TlsContext::TlsContext(const std::string& cert, const std::string& key, const std::string& root,
                       bool mutual, const std::string& alpn) {
  check_readable(cert, "the server certificate");
  check_readable(key, "the server key");
  if (mutual || !root.empty()) check_readable(root, "the root certificate");
  ERR_clear_error();
  ctx_ = SSL_CTX_new(TLS_server_method());
  if (ctx_ == nullptr) throw std::runtime_error("SSL_CTX_new: " + openssl_errors());
  try {
    SSL_CTX_set_min_proto_version(ctx_, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx_, SSL_OP_NO_RENEGOTIATION);
    if (SSL_CTX_use_certificate_chain_file(ctx_, cert.c_str()) != 1) {
      refuse(cert, "the server certificate", "is not a PEM certificate");
    }
    // Read apart from its use: a key that is not one and a key of another certificate
    // are told apart.
    EVP_PKEY* pkey = nullptr;
    if (BIO* file = BIO_new_file(key.c_str(), "r")) {
      pkey = PEM_read_bio_PrivateKey(file, nullptr, nullptr, nullptr);
      BIO_free(file);
    }
    if (pkey == nullptr) refuse(key, "the server key", "is not a PEM private key");
    const int used = SSL_CTX_use_PrivateKey(ctx_, pkey);
    EVP_PKEY_free(pkey);
    if (used != 1 || SSL_CTX_check_private_key(ctx_) != 1) {
      refuse(key, "the server key", ("does not match the certificate '" + cert + "'").c_str());
    }
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

TlsContext::~TlsContext() { SSL_CTX_free(ctx_); }

TlsStream::TlsStream(std::shared_ptr<const TlsContext> context) : context_(std::move(context)) {
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
  SSL_set_accept_state(ssl_);
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
      error_ += " (client certificate: ";
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
