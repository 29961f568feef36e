// The HTTP/1.1 framer of the infer request path (framer.h): finds plain infer requests
// in received bytes (http_scan.h), routes them by URL to a codec model, reads their
// KServe REST bodies (kserve_json.h) and queues them through the KServe codec
// (kserve_codec.h); writes complete keep-alive HTTP responses (HttpResponseWriter).
// The common requests: what perf_analyzer and tritonclient send by default (binary
// inputs after a JSON header, binary outputs) and plain KServe v2 JSON (tensors as JSON
// `data` in and out, or any mix). One the validator refuses is answered at
// once with Triton's 400; everything else goes to the Python front end (httptools and
// the general path), which gives Triton's exact errors.
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

#include "framer.h"
#include "kserve_codec.h"

namespace naiad {

// KServe REST over HTTP/1.1: status line, Content-Length, Content-Type and, with binary
// outputs, Inference-Header-Content-Length (JSON outputs only: application/json);
// keep-alive (no Connection header).
//
// A response with JSON outputs has its body written once, by size(), and kept for the
// write() of the same response that follows (formatting numbers is what costs); the
// writer is used by one thread at a time, as the lane.
class HttpResponseWriter final : public ResponseWriter {
 public:
  size_t size(const InferResponse& response) const override;
  void write(const InferResponse& response, char* out) const override;
  std::string text(const InferResponse& response) const;  // tests and benchmarks

 private:
  // The body size() wrote for the response at `body_for_` (JSON outputs only).
  mutable const InferResponse* body_for_ = nullptr;
  mutable uint64_t body_request_ = 0;
  mutable std::string body_;
  mutable size_t body_json_size_ = 0;
};

class HttpLane {
 public:
  explicit HttpLane(Core& core) : codec_(core) {}

  KServeCodec& codec() { return codec_; }
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
    // 400 with the validator's message, as the general path would answer). So is a
    // response cache hit (kserve_codec.h kCached), with its batch size.
    std::string reply;
  };
  // Takes an infer body sent to URL `target` (as sent) if it is a route and the codec
  // queues it (it gets the next request id) or the validator refuses it (`reply`).
  // False: the general path's.
  bool submit_to(std::string_view target, const uint8_t* body, size_t body_size, size_t header_size,
                 uint64_t now_ns, Taken* taken);
  // Takes the complete plain infer requests at the start of received HTTP bytes
  // (http_scan.h), in order, up to the first it does not take. Returns how many bytes
  // they took; the rest is for the front end's full parser. At most `max_requests`
  // (the connection's room under kHttpMaxPipeline): the front end holds the rest
  // unread until answers make room.
  size_t take_http(const uint8_t* data, size_t size, size_t max_body, uint64_t now_ns,
                   std::vector<Taken>* taken, size_t max_requests = SIZE_MAX);

 private:
  KServeCodec codec_;
  HttpResponseWriter writer_;
  // The route keys point into these; a list, so removing one leaves the others put.
  std::list<std::string> targets_;
  std::unordered_map<std::string_view, uint32_t> routes_;
};

}  // namespace naiad
