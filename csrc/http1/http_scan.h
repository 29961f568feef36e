// Recognises a complete, plain HTTP/1.1 request at the start of a buffer, for the
// infer fast lane (http_framer.h): the front end hands received bytes to the lane
// first, and the lane takes the infer requests it finds there without a Python call
// per request. Whatever this scanner does not call plain goes to the front end's full
// HTTP parser (httptools), which also answers malformed input with the right error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace naiad {

// The longest request head (request line and headers) taken, by the lane and by the
// front end's parser alike (the general path reads it as _core.HTTP_MAX_HEAD): a
// longer one is refused with 431.
constexpr size_t kHttpMaxHead = 64 * 1024;
// The most requests one HTTP/1.1 connection has in flight (read, not yet answered):
// the lane takes no more (HttpLane::take_http) and the front end reads no further
// until answers make room (_core.HTTP_MAX_PIPELINE).
constexpr size_t kHttpMaxPipeline = 64;

enum class ResponseEncoding { kIdentity = 0, kGzip = 1, kDeflate = 2 };
// A request body's Content-Encoding (content_encoding()).
enum class ContentEncoding { kIdentity, kGzip, kDeflate, kUnsupported };

// How the connection goes on after a request: its HTTP version and Connection header,
// as Triton 2.51 (libevhtp) answers them (set_connection, http_framer.h).
enum class HttpConnection : uint8_t {
  kKeepAlive,    // HTTP/1.1, its default or Connection: keep-alive
  kClose,        // HTTP/1.1 with Connection: close: answered saying so, then closed
  kKeepAlive10,  // HTTP/1.0 with Connection: keep-alive: an HTTP/1.0 answer saying so
  kClose10,      // HTTP/1.0, its default: an HTTP/1.0 answer, then closed
};

inline bool closes(HttpConnection connection) {
  return connection == HttpConnection::kClose || connection == HttpConnection::kClose10;
}

struct ScannedRequest {
  std::string_view target;  // the request-target, as sent
  size_t body_offset = 0;   // from the start of the request
  size_t body_size = 0;
  bool has_header_length = false;
  size_t header_length = 0;  // Inference-Header-Content-Length
  size_t total = 0;          // bytes the request takes, head and body
  ResponseEncoding encoding = ResponseEncoding::kIdentity;  // what Accept-Encoding picked
  ContentEncoding content = ContentEncoding::kIdentity;     // how the body is sent
  HttpConnection connection = HttpConnection::kKeepAlive;
};

enum class ScanResult {
  kRequest,     // `out` describes a complete plain request
  kIncomplete,  // a plain request may follow but its bytes have not all arrived
  kOther,       // not for the lane: leave it to the full parser
};

// A plain request: `POST <target> HTTP/1.1` (or HTTP/1.0), well-formed header lines, a
// single Content-Length of at most `max_body` bytes, at most one Connection header,
// `keep-alive` or `close` (`connection` says which, with the version), and none of the
// headers that change how the connection is handled (Transfer-Encoding, Expect,
// Upgrade). `encoding` is what the (last) Accept-Encoding picks, `content` what the
// (last) Content-Encoding says, as the front end's parser reads them. kIncomplete with the head all
// there still fills `out` (its `total` says how many bytes the whole request takes).
ScanResult scan_request(const char* data, size_t size, size_t max_body, ScannedRequest* out);

// The last plain request head scan_request() recognised, kept so that the same head
// again (a client sending one kind of request: its headers and Content-Length repeat)
// is recognised by comparing its bytes rather than scanning them. The scan's result is
// a function of the head's bytes alone (it ends at the first CRLF CRLF, which the kept
// head ends with), so a byte-equal head gets the same answer. One thread at a time, as
// the HttpLane that holds it.
class ScanMemo {
 public:
  // scan_request(data, size, max_body, out), from the memo when `data` starts with the
  // head kept; a kRequest scanned afresh replaces it.
  ScanResult scan(const char* data, size_t size, size_t max_body, ScannedRequest* out);
  uint64_t hits() const { return hits_; }  // tests, benchmarks

 private:
  std::string head_;  // the head kept, CRLF CRLF included; empty: none
  // Its scan. `target` still views the bytes it was scanned in (gone since): only its
  // size is read, the target itself is at target_at_ of the head it is given.
  ScannedRequest scanned_;
  size_t target_at_ = 0;
  uint64_t hits_ = 0;
};

// The size of the plain request that starts `data` when its head has arrived and its
// body has not all arrived yet, else 0: a front end that knows it can collect the
// rest in one buffer of that size instead of joining pieces.
size_t incomplete_request_size(const char* data, size_t size, size_t max_body);

// The response encoding Triton picks for an Accept-Encoding value: the comma-separated
// entry with the highest `;q=` weight (1 without one; the first of equal weights) among
// "identity", "gzip" and "deflate", exactly spelled; others and malformed weights are
// skipped. The one rule for the scanner and the Python front end (through _core.pyx).
ResponseEncoding response_encoding(std::string_view accept_encoding);

// A Content-Encoding value, as the general path reads it: gzip, deflate, identity (or
// empty), exactly spelled; anything else is unsupported (Triton's 501).
ContentEncoding content_encoding(std::string_view value);

}  // namespace naiad
