// libFuzzer target: received HTTP/1.1 bytes through the infer fast lane (http_scan,
// http_framer, kserve_json, the validator and the codec, BYTES length prefixes), as the
// front end hands them over. Seeds: tests/fuzz/corpus/http (tools/capture_traffic.py).
// The contract: the lane takes whole requests from the start, back to back, and
// nothing after the first it leaves (the front end's parser gets the rest untouched);
// each taken request is queued or answered at once with a well-formed 400 carrying
// Triton's {"error"} body (500 where Triton answers JSON tensor data it cannot read with
// INTERNAL, or a header that is no JSON; for a compressed body it cannot inflate, 413
// or 501; for an infer URL with no route, 404 or 503 as the codec's model table says); a
// queued request's answer is a well-formed HTTP response, compressed or not as its
// Accept-Encoding asked.
#include <cstdint>
#include <vector>

#include "fuzz_support.h"
#include "http1/http_scan.h"

using namespace naiad;
using naiad::fuzz::check_http_response;
using naiad::fuzz::kMaxBody;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Lanes lanes;
  std::vector<HttpLane::Taken> taken;
  const size_t consumed = lanes.fixture.lane.take_http(data, size, kMaxBody, 1, &taken);
  FUZZ_CHECK(consumed <= size);
  size_t pos = 0;
  std::vector<uint64_t> ids;
  std::vector<uint32_t> models;
  for (const HttpLane::Taken& t : taken) {
    ScannedRequest request;
    const char* at = reinterpret_cast<const char*>(data) + pos;
    FUZZ_CHECK(scan_request(at, size - pos, kMaxBody, &request) == ScanResult::kRequest);
    pos += request.total;
    if (t.request_id == 0) {
      const int status = check_http_response(t.reply);
      const bool routed = request.target == "/v2/models/add_sub/infer" ||
                          request.target == "/v2/models/add_sub/versions/1/infer" ||
                          request.target == "/v2/models/identity_bytes/infer";
      FUZZ_CHECK((routed && (status == 400 || status == 500)) ||
                 (routed && request.content != ContentEncoding::kIdentity &&
                  (status == 413 || status == 501)) ||
                 (!routed && (status == 404 || status == 503)));
    } else {
      FUZZ_CHECK(t.reply.empty() && lanes.codec().owns(t.request_id));
      FUZZ_CHECK(t.batch_size <= 8);  // the model's max_batch_size
      ids.push_back(t.request_id);
      models.push_back(t.model);
    }
  }
  FUZZ_CHECK(pos == consumed);

  // What is left: the scanner's view of it is self-consistent. (An
  // Inference-Header-Content-Length past the body is the reader's to refuse, not the
  // scanner's.)
  const char* rest = reinterpret_cast<const char*>(data) + consumed;
  ScannedRequest request;
  ScanResult result = scan_request(rest, size - consumed, kMaxBody, &request);
  if (result == ScanResult::kRequest) {
    FUZZ_CHECK(request.total <= size - consumed && request.body_size <= kMaxBody);
    FUZZ_CHECK(request.body_offset + request.body_size == request.total);
  }
  size_t incomplete = incomplete_request_size(rest, size - consumed, kMaxBody);
  FUZZ_CHECK(incomplete == 0 || incomplete > size - consumed);

  // The queued requests answered, as a worker would: each a complete response, compressed
  // when its Accept-Encoding asked (the encoding the lane kept, asked once).
  std::string block;
  for (const KServeCodec::Answer& answer : lanes.answer(ids, models, &block)) {
    const ResponseEncoding coding = lanes.fixture.lane.take_encoding(answer.response.request_id);
    FUZZ_CHECK(lanes.fixture.lane.take_encoding(answer.response.request_id) ==
               ResponseEncoding::kIdentity);
    std::string text = lanes.fixture.lane.writer().text(answer.response, coding);
    FUZZ_CHECK(text.size() == lanes.fixture.lane.writer().size(answer.response, coding));
    check_http_response(text);
  }
  FUZZ_CHECK(lanes.codec().in_flight() == 0);

  // The rest as a request still arriving: placed to be received in place (http_io.h)
  // only with its inference header there, its pieces covering the rest of the request
  // one after the other, inside the arena; given up, the codec keeps nothing.
  HttpLane::Receiving receiving;
  if (lanes.fixture.lane.begin_http(reinterpret_cast<const uint8_t*>(rest), size - consumed,
                                    kMaxBody, 1, true, &receiving)) {
    FUZZ_CHECK(receiving.total > size - consumed && receiving.tensors_at <= size - consumed);
    const uint8_t* base = lanes.fixture.core.arena().base();
    const uint8_t* end = base + lanes.fixture.core.arena().size();
    size_t at = receiving.tensors_at;
    for (const HttpLane::Receiving::Piece& piece : receiving.pieces) {
      FUZZ_CHECK(piece.at == at && piece.to >= base && piece.size <= uint64_t(end - piece.to));
      at += piece.size;
    }
    FUZZ_CHECK(at == receiving.total);
    lanes.fixture.lane.abandon_http(receiving);
  }
  FUZZ_CHECK(lanes.codec().in_flight() == 0);
  return 0;
}
