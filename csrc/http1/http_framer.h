// The HTTP/1.1 framer of the infer request path (framer.h): finds plain infer requests
// in received bytes (http_scan.h), routes them by URL to a codec model, reads their
// KServe REST bodies (kserve_json.h) and queues them through the KServe codec
// (kserve_codec.h); writes complete keep-alive HTTP responses (HttpResponseWriter).
// The common requests: what perf_analyzer and tritonclient send by default (binary
// inputs after a JSON header, binary outputs) and plain KServe v2 JSON (tensors as JSON
// `data` in and out, or any mix), sent as they are or compressed (Content-Encoding gzip
// or deflate, inflated here). One the validator refuses is answered at once with
// Triton's 400, JSON data Triton refuses with Triton's status and message (the
// reader's Refusal), a header that is no JSON with Triton's 500 (json_syntax.h), an
// infer URL whose model or version Triton does not serve with its 404/503 (the codec's
// model table), a body that cannot be inflated with the general path's answer;
// everything else goes to the Python front end (httptools and the general path), which
// gives Triton's exact errors.
//
// Threads and locks: as KServeCodec, one thread at a time — the front end's event loop,
// through _core.pyx, with the GIL released inside take_http() and submit_to() (and the
// codec's complete()). `targets_` and `routes_` change only between requests (after
// loading); no member needs a lock. HttpResponseWriter is stateless.
#pragma once

#include <cstdint>
#include <list>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "codec/framer.h"
#include "codec/http_compress.h"
#include "codec/kserve_codec.h"
#include "http1/header_memo.h"
#include "http1/http_scan.h"

namespace naiad {

// KServe REST over HTTP/1.1: status line, Content-Length, Content-Type and, with binary
// outputs, Inference-Header-Content-Length (JSON outputs only: application/json);
// keep-alive (no Connection header).
//
// A successful answer to a request that asked for gzip or deflate (response_encoding)
// has its body compressed (http_compress.h) and says so in Content-Encoding, exactly as
// the general path; errors are not compressed.
//
// A response with JSON outputs or a compressed body has its body written once, by
// size(), and kept for the write() of the same response that follows (formatting
// numbers and compressing are what cost); the writer is used by one thread at a time,
// as the lane.
class HttpResponseWriter final : public ResponseWriter {
 public:
  size_t size(const InferResponse& response) const override {
    return size(response, ResponseEncoding::kIdentity);
  }
  void write(const InferResponse& response, char* out) const override {
    write(response, ResponseEncoding::kIdentity, out);
  }
  // The answer to a request whose Accept-Encoding picked `encoding`.
  size_t size(const InferResponse& response, ResponseEncoding encoding) const;
  void write(const InferResponse& response, ResponseEncoding encoding, char* out) const;
  // The answer as a head (status line, headers, JSON) followed by its binary outputs'
  // bytes as they are in the block, in order, for the caller to send from there: the
  // head's size; 0 when it is not of that form (an error, JSON outputs, a compressed
  // body: write() it whole). write_head() writes that head.
  size_t head_size(const InferResponse& response, ResponseEncoding encoding) const;
  void write_head(const InferResponse& response, char* out) const;
  // tests and benchmarks
  std::string text(const InferResponse& response,
                   ResponseEncoding encoding = ResponseEncoding::kIdentity) const;

 private:
  void keep_body(const InferResponse& response, ResponseEncoding asked) const;

  // The body size() wrote for the response at `body_for_` (JSON outputs or compressed),
  // asked for with `body_asked_` and sent with `body_coding_`.
  mutable const InferResponse* body_for_ = nullptr;
  mutable uint64_t body_request_ = 0;
  mutable ResponseEncoding body_asked_ = ResponseEncoding::kIdentity;
  mutable ResponseEncoding body_coding_ = ResponseEncoding::kIdentity;
  mutable std::string body_;
  mutable std::string plain_;  // a compressed body before compression
  mutable size_t body_json_size_ = 0;
};

// A complete keep-alive HTTP/1.1 error answer: `status` with {"error": message} as
// JSON, as the general path writes its errors (http/routes.py error_reply).
std::string http_error_reply(int status, std::string_view message);

// Makes the complete keep-alive HTTP/1.1 answer that starts at `at` of `http` (this
// writer's, http_error_reply's) the answer to a request with `connection`, as Triton
// 2.51 answers it: an HTTP/1.0 status line for HTTP/1.0, and `Connection: close` (HTTP/1.1)
// or `Connection: keep-alive` (HTTP/1.0) last in the head.
void set_connection(std::string* http, size_t at, HttpConnection connection);

// What a 413 says: the body's size as text (or "more than N"), the limit
// (--http-max-input-size), and which body ("request body", "inflated request body").
// The one wording, for the general path too (_core.body_too_large_message).
std::string body_too_large_message(std::string_view size, size_t limit,
                                   std::string_view body = "request body");

class HttpLane {
 public:
  explicit HttpLane(Core& core) : codec_(core) {}

  KServeCodec& codec() { return codec_; }
  // Requests whose header was read from the memo (tests, benchmarks).
  uint64_t header_memo_hits() const { return header_memo_.hits(); }
  // Requests whose HTTP head was recognised from the memo (tests, benchmarks).
  uint64_t scan_memo_hits() const { return scan_memo_.hits(); }
  const HttpResponseWriter& writer() const { return writer_; }

  // Requests for `target` (an infer URL as sent) go to codec model `model`.
  void add_route(const std::string& target, uint32_t model);
  // The model is gone: its routes are dropped and it takes nothing more. Its codec
  // entry stays, since requests in flight still need it to build their responses.
  void remove_model(uint32_t model);

  struct Taken {
    uint32_t model = 0;
    uint64_t request_id = 0;  // 0 when answered at once (`reply`)
    uint32_t batch_size = 0;  // 0 for a refused request
    // An invalid request is answered at once: its complete HTTP response (Triton's
    // 400 with the validator's message, or Triton's answer to JSON data it refuses).
    // So is a response cache hit (kserve_codec.h kCached), with its batch size.
    // Either way still a keep-alive HTTP/1.1 answer: the caller set_connection()s it.
    std::string reply;
    HttpConnection connection = HttpConnection::kKeepAlive;  // the request's (http_scan.h)
    // Binary tensor bytes of a queued request (its body past the inference header),
    // copied from the received bytes into the arena.
    uint64_t tensor_bytes = 0;
  };
  // Takes an infer body sent to URL `target` (as sent) if it is a route and the codec
  // queues it (it gets the next request id) or refuses it (`reply`). False: the general
  // path's. `encoding`: what the request's Accept-Encoding picked (response_encoding);
  // a cache hit's `reply` is compressed with it, a queued request's answer too
  // (take_encoding), a refusal never. `content`: the body's Content-Encoding; a
  // compressed body is inflated here, to at most `max_body` bytes (the general path's
  // 413 past it, its 400 for damaged data, its 501 for an encoding it does not know),
  // and `header_size` (Inference-Header-Content-Length) counts the inflated bytes;
  // SIZE_MAX: there was none, the whole body is JSON.
  bool submit_to(std::string_view target, const uint8_t* body, size_t body_size, size_t header_size,
                 uint64_t now_ns, Taken* taken,
                 ResponseEncoding encoding = ResponseEncoding::kIdentity,
                 ContentEncoding content = ContentEncoding::kIdentity, size_t max_body = SIZE_MAX);
  // Takes the complete plain infer requests at the start of received HTTP bytes
  // (http_scan.h), in order, up to the first it does not take. Returns how many bytes
  // they took; the rest is for the front end's full parser. At most `max_requests`
  // (the connection's room under kHttpMaxPipeline): the front end holds the rest
  // unread until answers make room. With `closes` (a front end that answers with the
  // request's HttpConnection and closes after a closing one), HTTP/1.0 and
  // `Connection: close` requests are taken too, none after one that closes.
  size_t take_http(const uint8_t* data, size_t size, size_t max_body, uint64_t now_ns,
                   std::vector<Taken>* taken, size_t max_requests = SIZE_MAX, bool closes = false);

  // A plain infer request received in two steps, its tensors straight into the arena
  // (http_io.h): begin_http() takes the request at the start of `data` once its head
  // and inference header are there (`size` bytes of the request, fewer than it takes)
  // and the rest of its body is its binary tensors, validates it and places it
  // (KServeCodec::place), and says where each of its bytes from `tensors_at` on goes
  // (`pieces`). False: not for this (not such a request, refused, compressed, not
  // placed...): the caller collects it whole for take_http(), which answers it. The
  // caller fills the pieces, then finish_http() queues it (true, `taken` filled), or,
  // when the core refuses it, gives it up and returns its bytes whole in `whole`
  // (false): taken again as a request received whole, the general path answers it as
  // it answered before. Or abandon_http() gives it up.
  struct Receiving {
    struct Piece {
      size_t at;  // from the start of the request
      uint64_t size;
      uint8_t* to;  // in the arena
    };
    Taken taken;  // its model, request id, batch size, connection (its tensor bytes the caller's to
                  // count)
    size_t total = 0;           // bytes the request takes, head and body
    size_t tensors_at = 0;      // where its binary tensors begin
    std::vector<Piece> pieces;  // in request order, from tensors_at to total
    std::string head;           // its bytes before tensors_at (a timed-out request's)
    std::string target;         // its request-target
    ResponseEncoding encoding = ResponseEncoding::kIdentity;
    KServeCodec::Placed placed;
    uint64_t placed_bytes = 0;  // the caller's measure of the arena room it holds
  };
  bool begin_http(const uint8_t* data, size_t size, size_t max_body, uint64_t now_ns, bool closes,
                  Receiving* out);
  bool finish_http(Receiving& receiving, Taken* taken, std::string* whole);
  void abandon_http(Receiving& receiving);

  // The encoding the answer of queued request `request_id` is written with (writer()),
  // asked once, when its answer is: the lane keeps it no longer.
  ResponseEncoding take_encoding(uint64_t request_id) {
    if (encodings_.empty()) return ResponseEncoding::kIdentity;
    auto found = encodings_.find(request_id);
    if (found == encodings_.end()) return ResponseEncoding::kIdentity;
    ResponseEncoding encoding = found->second;
    encodings_.erase(found);
    return encoding;
  }
  // The request was answered another way (failed batch, shutdown): the codec and the
  // lane forget it.
  void forget(uint64_t request_id) {
    encodings_.erase(request_id);
    codec_.forget(request_id);
  }

 private:
  // A compressed body inflated into `inflated_`; false with the complete refusal.
  bool inflate_request(ContentEncoding content, const uint8_t* body, size_t body_size,
                       size_t max_body, std::string* refusal);
  // An infer target with no route of its own (an unknown model or version, a version
  // spelled otherwise, "01" for "1"), looked up in the codec's model table as Triton
  // looks it up: kLane with `*model` the lane model that serves it; kRefused with
  // Triton's answer (unknown, not ready) in `taken`; kNotLane when no lane serves it.
  enum class Lookup : uint8_t { kLane, kRefused, kNotLane };
  Lookup route_by_lookup(std::string_view target, uint32_t* model, Taken* taken);
  // submit_to() for a body as the codec reads it (not compressed).
  bool submit_body(uint32_t model, const uint8_t* body, size_t body_size, size_t header_size,
                   uint64_t now_ns, Taken* taken, ResponseEncoding encoding);
  // The inflated buffer's capacity kept between compressed requests.
  static constexpr size_t kKeptInflated = size_t(16) << 20;

  KServeCodec codec_;
  HttpResponseWriter writer_;
  // The route keys point into these; a list, so removing one leaves the others put.
  std::list<std::string> targets_;
  std::unordered_map<std::string_view, uint32_t> routes_;
  // The queued requests whose answers are to be compressed (identity ones are not kept).
  std::unordered_map<uint64_t, ResponseEncoding> encodings_;
  // The request being taken (submit_to): one object, whose vectors keep their capacity
  // from request to request; and the last inference header read, which the next
  // request's often repeats.
  ParsedRequest request_;
  InflatedBytes inflated_;  // the body of the request being taken, inflated
  HeaderMemo header_memo_;
  ScanMemo scan_memo_;  // and the last HTTP head, which it often repeats too
};

}  // namespace naiad
