#include "http1/http_framer.h"

#include <algorithm>

#include "codec/http_compress.h"
#include "codec/json_syntax.h"
#include "codec/kserve_json.h"
#include "http1/http_scan.h"
#include "util/byte_sink.h"

namespace naiad {

namespace {

std::string_view status_line(int status) {
  switch (status) {
    case 200:
      return "HTTP/1.1 200 OK\r\n";
    case 400:
      return "HTTP/1.1 400 Bad Request\r\n";
    case 404:
      return "HTTP/1.1 404 Not Found\r\n";
    case 413:
      return "HTTP/1.1 413 Request Entity Too Large\r\n";
    case 501:
      return "HTTP/1.1 501 Not Implemented\r\n";
    case 503:
      return "HTTP/1.1 503 Service Unavailable\r\n";
    default:
      return "HTTP/1.1 500 Internal Server Error\r\n";
  }
}

// The head, in the general path's order: Content-Length (of the body as sent),
// Content-Type, Inference-Header-Content-Length (of the JSON before compression, as
// Triton says it), Content-Encoding.
template <typename Sink>
void write_http(const InferResponse& response, size_t json_size, size_t body_size,
                ResponseEncoding coding, Sink& out) {
  out.put(status_line(http_status_of(response.error)));
  out.put("Content-Length: ");
  out.number(body_size);
  bool binary = false;
  for (const ResponseOutput& output : response.outputs) binary |= !output.json && !output.in_shm;
  if (response.error != ErrorKind::kNone && response.error_in_writing) {
    out.put("\r\nContent-Type: text/plain\r\n");
  } else if (response.error != ErrorKind::kNone || !binary) {
    out.put("\r\nContent-Type: application/json\r\n");
  } else {
    out.put("\r\nContent-Type: application/octet-stream\r\nInference-Header-Content-Length: ");
    out.number(json_size);
    out.put("\r\n");
  }
  out.put(content_encoding_line(coding));
  out.put("\r\n");
}

struct BodySize {
  size_t json = 0;
  size_t total = 0;
};

BodySize body_size(const InferResponse& response) {
  ByteCounter counter;
  BodySize size;
  size.json = write_response_body(response, counter);
  size.total = counter.size();
  return size;
}

// The model name and version string of an infer URL, `/v2/models/<name>/infer` or
// `/v2/models/<name>/versions/<digits>/infer` (Triton's routes; the name as sent, not
// decoded, as Triton). False for anything else (a query, other paths): the full parser's.
bool infer_target(std::string_view target, std::string_view* name, std::string_view* version) {
  static constexpr std::string_view kModels = "/v2/models/";
  static constexpr std::string_view kInfer = "/infer";
  static constexpr std::string_view kVersions = "/versions/";
  if (target.size() <= kModels.size() + kInfer.size() ||
      target.substr(0, kModels.size()) != kModels ||
      target.substr(target.size() - kInfer.size()) != kInfer ||
      target.find('?') != std::string_view::npos) {
    return false;
  }
  std::string_view middle =
      target.substr(kModels.size(), target.size() - kModels.size() - kInfer.size());
  const size_t slash = middle.find('/');
  *name = middle.substr(0, slash);
  *version = {};
  if (slash != std::string_view::npos) {
    if (middle.substr(slash, kVersions.size()) != kVersions) return false;
    *version = middle.substr(slash + kVersions.size());
    if (version->empty()) return false;
    for (char c : *version) {
      if (c < '0' || c > '9') return false;
    }
  }
  return !name->empty();
}

bool has_json_outputs(const InferResponse& response) {
  if (response.error != ErrorKind::kNone) return false;
  for (const ResponseOutput& output : response.outputs) {
    if (output.json) return true;
  }
  return false;
}

// Only successful answers are compressed (Triton's too): errors go as they are.
bool compresses(const InferResponse& response, ResponseEncoding encoding) {
  return encoding != ResponseEncoding::kIdentity && response.error == ErrorKind::kNone;
}

}  // namespace

size_t HttpResponseWriter::size(const InferResponse& response, ResponseEncoding encoding) const {
  if (compresses(response, encoding)) {
    plain_.clear();
    StringSink sink(&plain_);
    body_json_size_ = write_response_body(response, sink);
    body_.clear();
    body_coding_ = encoding;
    if (!compress_body(encoding, plain_, &body_)) {
      body_.swap(plain_);  // empty: sent as it is
      body_coding_ = ResponseEncoding::kIdentity;
    }
    keep_body(response, encoding);
    ByteCounter head;
    write_http(response, body_json_size_, body_.size(), body_coding_, head);
    return head.size() + body_.size();
  }
  if (has_json_outputs(response)) {
    body_.clear();
    StringSink sink(&body_);
    body_json_size_ = write_response_body(response, sink);
    body_coding_ = ResponseEncoding::kIdentity;
    keep_body(response, encoding);
    ByteCounter head;
    write_http(response, body_json_size_, body_.size(), body_coding_, head);
    return head.size() + body_.size();
  }
  BodySize body = body_size(response);
  ByteCounter head;
  write_http(response, body.json, body.total, ResponseEncoding::kIdentity, head);
  return head.size() + body.total;
}

void HttpResponseWriter::write(const InferResponse& response, ResponseEncoding encoding,
                               char* out) const {
  ByteWriter writer(out);
  if (body_for_ == &response && body_request_ == response.request_id && body_asked_ == encoding &&
      (compresses(response, encoding) || has_json_outputs(response))) {
    body_for_ = nullptr;
    write_http(response, body_json_size_, body_.size(), body_coding_, writer);
    writer.put(body_);
    return;
  }
  if (compresses(response, encoding)) {
    // write() without its size(): the compressed body is made first.
    size(response, encoding);
    write(response, encoding, out);
    return;
  }
  BodySize body = body_size(response);
  write_http(response, body.json, body.total, ResponseEncoding::kIdentity, writer);
  write_response_body(response, writer);
}

size_t HttpResponseWriter::head_size(const InferResponse& response,
                                     ResponseEncoding encoding) const {
  if (response.error != ErrorKind::kNone || compresses(response, encoding) ||
      has_json_outputs(response)) {
    return 0;
  }
  const BodySize body = body_size(response);
  ByteCounter head;
  write_http(response, body.json, body.total, ResponseEncoding::kIdentity, head);
  return head.size() + body.json;
}

void HttpResponseWriter::write_head(const InferResponse& response, char* out) const {
  const BodySize body = body_size(response);
  ByteWriter writer(out);
  write_http(response, body.json, body.total, ResponseEncoding::kIdentity, writer);
  write_response_json(response, writer);
}

void HttpResponseWriter::keep_body(const InferResponse& response, ResponseEncoding asked) const {
  body_for_ = &response;
  body_request_ = response.request_id;
  body_asked_ = asked;
}

std::string HttpResponseWriter::text(const InferResponse& response,
                                     ResponseEncoding encoding) const {
  std::string out(size(response, encoding), '\0');
  write(response, encoding, out.data());
  return out;
}

void set_connection(std::string* http, size_t at, HttpConnection connection) {
  if (connection == HttpConnection::kKeepAlive) return;
  static constexpr std::string_view kVersion10 = "HTTP/1.0";
  if (connection == HttpConnection::kKeepAlive10 || connection == HttpConnection::kClose10) {
    http->replace(at, kVersion10.size(), kVersion10);
  }
  std::string_view line;
  if (connection == HttpConnection::kClose) line = "Connection: close\r\n";
  if (connection == HttpConnection::kKeepAlive10) line = "Connection: keep-alive\r\n";
  if (line.empty()) return;
  const size_t blank = http->find("\r\n\r\n", at);
  if (blank != std::string::npos) http->insert(blank + 2, line);
}

std::string body_too_large_message(std::string_view size, size_t limit, std::string_view body) {
  std::string message(body);
  message += " of ";
  message += size;
  message += " bytes exceeds the maximum allowed input size of ";
  message += std::to_string(limit);
  message += " bytes; use --http-max-input-size to increase the limit";
  return message;
}

std::string http_error_reply(int status, std::string_view message) {
  InferResponse response;
  response.error = ErrorKind::kInvalidArgument;
  std::string escaped = json_string_text(message);
  response.error_message = escaped;
  const BodySize body = body_size(response);
  std::string out;
  StringSink sink(&out);
  sink.put(status_line(status));
  sink.put("Content-Length: ");
  sink.number(body.total);
  sink.put("\r\nContent-Type: application/json\r\n\r\n");
  write_response_body(response, sink);
  return out;
}

bool HttpLane::inflate_request(ContentEncoding content, const uint8_t* body, size_t body_size,
                               size_t max_body, std::string* refusal) {
  if (content == ContentEncoding::kUnsupported) {
    *refusal = http_error_reply(501, "Unsupported compression type");
    return false;
  }
  std::string error;
  switch (inflate_body(content, std::string_view(reinterpret_cast<const char*>(body), body_size),
                       max_body, &inflated_, &error)) {
    case Inflated::kDone:
      return true;
    case Inflated::kTooLarge:
      inflated_.release();  // a bomb's worth is not kept for the next request
      *refusal =
          http_error_reply(413, body_too_large_message("more than " + std::to_string(max_body),
                                                       max_body, "inflated request body"));
      return false;
    default:
      *refusal = http_error_reply(400, "failed to decompress the request body: " + error);
      return false;
  }
}

void HttpLane::add_route(const std::string& target, uint32_t model) {
  if (model >= codec_.model_count()) return;
  auto found = routes_.find(target);
  if (found != routes_.end()) {
    found->second = model;
    return;
  }
  targets_.push_back(target);
  routes_.emplace(targets_.back(), model);
}

void HttpLane::remove_model(uint32_t model) {
  codec_.set_accepting(model, false);
  codec_.models().remove_lane_model(model);
  for (auto route = routes_.begin(); route != routes_.end();) {
    if (route->second != model) {
      ++route;
      continue;
    }
    const char* key = route->first.data();
    route = routes_.erase(route);
    targets_.remove_if([key](const std::string& target) { return target.data() == key; });
  }
}

size_t HttpLane::take_http(const uint8_t* data, size_t size, size_t max_body, uint64_t now_ns,
                           std::vector<Taken>* taken, size_t max_requests, bool closes) {
  size_t consumed = 0;
  const size_t limit = taken->size() + max_requests;
  while (consumed < size && taken->size() < limit) {
    const char* start = reinterpret_cast<const char*>(data + consumed);
    ScannedRequest request;
    if (scan_memo_.scan(start, size - consumed, max_body, &request) != ScanResult::kRequest) break;
    if (request.connection != HttpConnection::kKeepAlive && !closes) break;
    // Without Inference-Header-Content-Length the whole body is JSON.
    const size_t header_length = request.has_header_length ? request.header_length : SIZE_MAX;
    Taken& one = taken->emplace_back();
    if (!submit_to(request.target, data + consumed + request.body_offset, request.body_size,
                   header_length, now_ns, &one, request.encoding, request.content, max_body)) {
      taken->pop_back();
      break;
    }
    one.connection = request.connection;
    if (one.request_id != 0 && request.has_header_length &&
        request.content == ContentEncoding::kIdentity) {
      one.tensor_bytes = request.body_size - request.header_length;
    }
    consumed += request.total;
    if (naiad::closes(request.connection)) break;  // what follows is never read
  }
  return consumed;
}

bool HttpLane::begin_http(const uint8_t* data, size_t size, size_t max_body, uint64_t now_ns,
                          bool closes, Receiving* out) {
  ScannedRequest scanned;
  const char* start = reinterpret_cast<const char*>(data);
  if (scan_memo_.scan(start, size, max_body, &scanned) != ScanResult::kIncomplete ||
      scanned.total == 0 || scanned.total <= size) {
    return false;
  }
  if (scanned.connection != HttpConnection::kKeepAlive && !closes) return false;
  if (scanned.content != ContentEncoding::kIdentity || !scanned.has_header_length ||
      scanned.header_length == 0 || scanned.header_length > scanned.body_size ||
      scanned.body_offset + scanned.header_length > size) {
    return false;
  }
  uint32_t model = 0;
  auto route = routes_.find(scanned.target);
  if (route != routes_.end()) {
    model = route->second;
  } else {
    Taken refused;  // refused or not the lane's: answered once its body is in, as before
    if (route_by_lookup(scanned.target, &model, &refused) != Lookup::kLane) return false;
  }
  // The body's binary bytes are not all here: the reader views them (by where they
  // will be) without reading them.
  const uint8_t* body = data + scanned.body_offset;
  const uint8_t* tensors = body + scanned.header_length;
  const uint64_t binary = scanned.body_size - scanned.header_length;
  ParsedRequest& request = request_;
  Refusal refusal;
  if (!header_memo_.read(body, scanned.body_size, scanned.header_length, &request, &refusal)) {
    return false;
  }
  // Every input binary (a BYTES tensor's elements are read by the validator), together
  // all of the bytes after the header.
  uint64_t sum = 0;
  for (const RequestInput& input : request.inputs) {
    if (input.size == 0) continue;
    if (input.in_shm || input.datatype == "BYTES" || input.data < tensors || input.size > binary ||
        static_cast<uint64_t>(input.data - tensors) > binary - input.size) {
      return false;
    }
    sum += input.size;
  }
  if (sum != binary) return false;
  std::string error;
  const uint64_t request_id = codec_.new_request_id();
  if (codec_.place(model, request, request_id, now_ns, &error, &out->placed) !=
      SubmitOutcome::kPlaced) {
    return false;
  }
  out->taken = Taken();
  out->taken.model = model;
  out->taken.request_id = request_id;
  out->taken.batch_size = request.batch_size;
  out->taken.connection = scanned.connection;
  out->total = scanned.total;
  out->tensors_at = scanned.body_offset + scanned.header_length;
  out->pieces.clear();
  uint8_t* arena = codec_.core().arena().base();
  for (const KServeCodec::Placed::Input& input : out->placed.inputs) {
    if (input.size == 0) continue;
    out->pieces.push_back({out->tensors_at + static_cast<size_t>(input.source - tensors),
                           input.size, arena + input.offset});
  }
  std::sort(out->pieces.begin(), out->pieces.end(),
            [](const Receiving::Piece& a, const Receiving::Piece& b) { return a.at < b.at; });
  // One after the other, as the socket gives them (the reader's offsets are so).
  size_t at = out->tensors_at;
  for (const Receiving::Piece& piece : out->pieces) {
    if (piece.at != at) {
      codec_.abandon_placed(request_id, out->placed);
      return false;
    }
    at += piece.size;
  }
  out->head.assign(start, out->tensors_at);
  out->target.assign(scanned.target.data(), scanned.target.size());
  out->encoding = scanned.encoding;
  return true;
}

bool HttpLane::finish_http(Receiving& receiving, Taken* taken, std::string* whole) {
  const uint64_t request_id = receiving.taken.request_id;
  if (codec_.queue_placed(request_id, receiving.placed) == SubmitOutcome::kQueued) {
    *taken = std::move(receiving.taken);
    if (receiving.encoding != ResponseEncoding::kIdentity) {
      encodings_[request_id] = receiving.encoding;
    }
    return true;
  }
  // Refused by the core (its model removed meanwhile, its queue full): the request as
  // it came, for the path that answers such a request.
  *whole = receiving.head;
  for (const Receiving::Piece& piece : receiving.pieces) {
    whole->append(reinterpret_cast<const char*>(piece.to), piece.size);
  }
  abandon_http(receiving);
  return false;
}

void HttpLane::abandon_http(Receiving& receiving) {
  codec_.abandon_placed(receiving.taken.request_id, receiving.placed);
}

bool HttpLane::submit_to(std::string_view target, const uint8_t* body, size_t body_size,
                         size_t header_size, uint64_t now_ns, Taken* taken,
                         ResponseEncoding encoding, ContentEncoding content, size_t max_body) {
  uint32_t model = 0;
  auto route = routes_.find(target);
  if (route != routes_.end()) {
    model = route->second;
  } else {
    switch (route_by_lookup(target, &model, taken)) {
      case Lookup::kRefused:
        return true;
      case Lookup::kNotLane:
        return false;
      default:
        break;
    }
  }
  if (content != ContentEncoding::kIdentity) {
    std::string refusal;
    if (!inflate_request(content, body, body_size, max_body, &refusal)) {
      taken->model = model;
      taken->request_id = 0;
      taken->batch_size = 0;
      taken->reply = std::move(refusal);
      return true;
    }
    const bool took = submit_body(model, reinterpret_cast<const uint8_t*>(inflated_.data()),
                                  inflated_.size(), header_size, now_ns, taken, encoding);
    // The core copied the tensors: a large body's buffer is not kept for the next one.
    if (inflated_.capacity() > kKeptInflated) inflated_.release();
    return took;
  }
  return submit_body(model, body, body_size, header_size, now_ns, taken, encoding);
}

HttpLane::Lookup HttpLane::route_by_lookup(std::string_view target, uint32_t* model, Taken* taken) {
  std::string_view name, version;
  if (!infer_target(target, &name, &version)) return Lookup::kNotLane;
  ErrorKind kind = ErrorKind::kNone;
  std::string message;
  switch (codec_.models().find(name, version, model, &kind, &message)) {
    case ModelLookup::Found::kLane:
      return Lookup::kLane;
    case ModelLookup::Found::kRefused:
      taken->model = 0;
      taken->request_id = 0;
      taken->batch_size = 0;
      taken->reply = http_error_reply(http_status_of(kind), message);
      return Lookup::kRefused;
    default:
      return Lookup::kNotLane;  // served, not by a lane
  }
}

bool HttpLane::submit_body(uint32_t model, const uint8_t* body, size_t body_size,
                           size_t header_size, uint64_t now_ns, Taken* taken,
                           ResponseEncoding encoding) {
  if (header_size == SIZE_MAX) header_size = body_size;
  // No JSON header: Triton's raw binary request, the general path's.
  if (header_size == 0) return false;
  ParsedRequest& request = request_;
  Refusal refusal;
  if (header_size > body_size) {
    refusal.kind = ErrorKind::kInvalidArgument;
    refusal.message = "inference header size should be in range (0, " + std::to_string(body_size) +
                      "), got: " + std::to_string(header_size);
  } else if (!header_memo_.read(body, body_size, header_size, &request, &refusal) &&
             refusal.kind == ErrorKind::kNone) {
    // Not read: Triton's answer when its JSON parser refuses the header, else the
    // general path's.
    JsonSyntaxError syntax;
    if (json_syntax_ok(reinterpret_cast<const char*>(body), header_size, &syntax)) return false;
    refusal.kind = ErrorKind::kInternal;
    refusal.message = json_syntax_message(syntax);
  }
  if (refusal.kind != ErrorKind::kNone) {
    // Triton refuses it while reading it (a header size past the body, a header that is
    // no JSON, JSON data it does not take): its answer.
    taken->model = model;
    taken->request_id = 0;
    taken->batch_size = 0;
    taken->reply = http_error_reply(http_status_of(refusal.kind), refusal.message);
    return true;
  }
  std::string error;
  uint64_t request_id = codec_.new_request_id();
  CachedAnswer cached;
  ErrorKind shm_refusal = ErrorKind::kNone;
  switch (codec_.submit(model, request, request_id, now_ns, &error, &cached, &shm_refusal)) {
    case SubmitOutcome::kCached:
      // A response cache hit: answered now, from the entry, as complete() would.
      taken->model = model;
      taken->request_id = 0;
      taken->batch_size = cached.batch_size;
      taken->reply = writer_.text(cached.response, encoding);
      return true;
    case SubmitOutcome::kQueued:
      taken->model = model;
      taken->request_id = request_id;
      taken->batch_size = request.batch_size;
      taken->reply.clear();
      if (encoding != ResponseEncoding::kIdentity) encodings_[request_id] = encoding;
      return true;
    case SubmitOutcome::kInvalid: {
      // The general path would parse the same request and get the same message from
      // the same validator: answer it here (uncompressed, as every error).
      taken->model = model;
      taken->request_id = 0;
      taken->batch_size = 0;
      taken->reply = http_error_reply(http_status_of(ErrorKind::kInvalidArgument), error);
      return true;
    }
    case SubmitOutcome::kRefused:
      // A shm region the registry refuses (unknown, out of bounds): Triton's answer,
      // from the registry the general path asks too.
      taken->model = model;
      taken->request_id = 0;
      taken->batch_size = 0;
      taken->reply = http_error_reply(http_status_of(shm_refusal), error);
      return true;
    default:
      return false;
  }
}

}  // namespace naiad
