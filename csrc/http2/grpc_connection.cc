#include "http2/grpc_connection.h"

#include <algorithm>
#include <cstring>

#include "codec/http_compress.h"
#include "http2/grpc_wire.h"

namespace naiad::h2 {

namespace {

constexpr char kPreface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
constexpr size_t kPrefaceSize = 24;
constexpr size_t kFrameHeaderSize = 9;
// The opaque data of our keepalive PINGs: an ACK carrying it answers one of them.
constexpr char kKeepalivePing[8] = {'n', 'a', 'i', 'a', 'd', 'k', 'a', 0};
// We never raise SETTINGS_MAX_FRAME_SIZE: every frame we accept fits in 16 KiB + 9.
constexpr uint32_t kOurMaxFrameSize = 16384;
constexpr int64_t kMaxWindow = 0x7fffffff;

enum FrameType : uint8_t {
  kData = 0x0,
  kHeaders = 0x1,
  kPriority = 0x2,
  kRstStream = 0x3,
  kSettings = 0x4,
  kPushPromise = 0x5,
  kPing = 0x6,
  kGoaway = 0x7,
  kWindowUpdate = 0x8,
  kContinuation = 0x9,
};

enum Flags : uint8_t {
  kEndStream = 0x1,
  kAck = 0x1,
  kEndHeaders = 0x4,
  kPadded = 0x8,
  kPriorityFlag = 0x20,
};

enum SettingId : uint16_t {
  kHeaderTableSize = 0x1,
  kEnablePush = 0x2,
  kMaxConcurrentStreams = 0x3,
  kInitialWindowSize = 0x4,
  kMaxFrameSize = 0x5,
  kMaxHeaderListSize = 0x6,
};

uint32_t read32(const char* p) {
  const uint8_t* b = reinterpret_cast<const uint8_t*>(p);
  return (uint32_t(b[0]) << 24) | (uint32_t(b[1]) << 16) | (uint32_t(b[2]) << 8) | b[3];
}

void put32(std::string* out, uint32_t v) {
  out->push_back(static_cast<char>(v >> 24));
  out->push_back(static_cast<char>(v >> 16));
  out->push_back(static_cast<char>(v >> 8));
  out->push_back(static_cast<char>(v));
}

// Strips the padding of a PADDED frame (§6.1, §6.2). False: padding beyond the payload.
bool unpad(uint8_t flags, std::string_view* payload) {
  if (!(flags & kPadded)) return true;
  if (payload->empty()) return false;
  size_t pad = static_cast<uint8_t>((*payload)[0]);
  if (pad + 1 > payload->size()) return false;
  *payload = payload->substr(1, payload->size() - 1 - pad);
  return true;
}

bool is_connection_specific(const std::string& name) {
  return name == "connection" || name == "keep-alive" || name == "proxy-connection" ||
         name == "transfer-encoding" || name == "upgrade";
}

}  // namespace

GrpcConnection::GrpcConnection(const Limits& limits)
    : limits_(limits), decoder_(limits.header_table_size) {
  write_settings();
  // The connection window starts at 65535 (§6.9.2); SETTINGS cannot raise it.
  if (limits_.connection_window > 65535) {
    write_window_update(0, limits_.connection_window - 65535);
    conn_recv_available_ = limits_.connection_window;
  }
}

// ---------------------------------------------------------------------------- output

void GrpcConnection::write_frame_header(uint8_t type, uint8_t flags, uint32_t stream_id,
                                        size_t length) {
  output_.push_back(static_cast<char>(length >> 16));
  output_.push_back(static_cast<char>(length >> 8));
  output_.push_back(static_cast<char>(length));
  output_.push_back(static_cast<char>(type));
  output_.push_back(static_cast<char>(flags));
  put32(&output_, stream_id & 0x7fffffff);
}

void GrpcConnection::write_frame(uint8_t type, uint8_t flags, uint32_t stream_id,
                                 std::string_view payload) {
  write_frame_header(type, flags, stream_id, payload.size());
  output_.append(payload.data(), payload.size());
}

void GrpcConnection::write_header_block(uint32_t stream_id, bool end_stream,
                                        const std::string& block) {
  // A block larger than the peer's frame size continues in CONTINUATION frames.
  size_t max = peer_max_frame_size_;
  size_t first = std::min(block.size(), max);
  uint8_t flags = (end_stream ? kEndStream : 0) | (first == block.size() ? kEndHeaders : 0);
  write_frame(kHeaders, flags, stream_id, std::string_view(block).substr(0, first));
  for (size_t pos = first; pos < block.size();) {
    size_t n = std::min(block.size() - pos, max);
    pos += n;
    write_frame(kContinuation, pos == block.size() ? kEndHeaders : 0, stream_id,
                std::string_view(block).substr(pos - n, n));
  }
}

void GrpcConnection::write_settings() {
  std::string p;
  auto setting = [&p](uint16_t id, uint32_t value) {
    p.push_back(static_cast<char>(id >> 8));
    p.push_back(static_cast<char>(id));
    put32(&p, value);
  };
  setting(kMaxConcurrentStreams, limits_.max_concurrent_streams);
  setting(kInitialWindowSize, limits_.stream_window);
  setting(kMaxHeaderListSize, limits_.max_header_list_size);
  setting(kEnablePush, 0);
  if (limits_.header_table_size != 4096) setting(kHeaderTableSize, limits_.header_table_size);
  write_frame(kSettings, 0, 0, p);
}

void GrpcConnection::write_window_update(uint32_t stream_id, uint32_t increment) {
  std::string p;
  put32(&p, increment);
  write_frame(kWindowUpdate, 0, stream_id, p);
}

void GrpcConnection::write_rst(uint32_t stream_id, uint32_t code) {
  std::string p;
  put32(&p, code);
  write_frame(kRstStream, 0, stream_id, p);
}

void GrpcConnection::connection_error(uint32_t code, std::string message) {
  if (closed_) return;
  std::string p;
  put32(&p, last_client_stream_);
  put32(&p, code);
  p += message;
  write_frame(kGoaway, 0, 0, p);
  closed_ = true;
  error_ = std::move(message);
  streams_.clear();
  queued_bytes_ = 0;
}

std::string GrpcConnection::take_output() {
  std::string out;
  out.swap(output_);
  return out;
}

bool GrpcConnection::send_message(uint32_t stream_id, std::string_view payload) {
  return send_message(stream_id, &payload, 1);
}

namespace {

// Appends bytes [from, to) of the concatenation of `parts` to `out`.
void append_range(const std::string_view* parts, size_t n_parts, size_t from, size_t to,
                  std::string* out) {
  size_t start = 0;
  for (size_t i = 0; i < n_parts && from < to; ++i) {
    size_t end = start + parts[i].size();
    if (from < end) {
      size_t n = std::min(end, to) - from;
      out->append(parts[i].data() + (from - start), n);
      from += n;
    }
    start = end;
  }
}

// append_range(), with the pieces of a page or more that lie in `block` added to `views`
// (at their place in `out`) rather than copied; the bytes viewed.
size_t append_range_viewing(const std::string_view* parts, size_t n_parts, size_t from, size_t to,
                            const std::shared_ptr<HeldBlock>& block, std::string* out,
                            OutViews* views) {
  size_t viewed = 0;
  size_t start = 0;
  for (size_t i = 0; i < n_parts && from < to; ++i) {
    size_t end = start + parts[i].size();
    if (from < end) {
      size_t n = std::min(end, to) - from;
      const char* data = parts[i].data() + (from - start);
      if (parts[i].size() >= kMinBlockView && block->holds(parts[i].data(), parts[i].size())) {
        views->add(out->size(), reinterpret_cast<const uint8_t*>(data), n, block);
        viewed += n;
      } else {
        out->append(data, n);
      }
      from += n;
    }
    start = end;
  }
  return viewed;
}

}  // namespace

void GrpcConnection::encode_response_encoding(const Stream& s, std::string* block) {
  if (s.response_encoding == ResponseEncoding::kIdentity) return;
  hpack::encode_header("grpc-encoding",
                       s.response_encoding == ResponseEncoding::kGzip ? "gzip" : "deflate", block);
}

ResponseEncoding response_encoding_for(int level, std::string_view accept) {
  if (level <= 0) return ResponseEncoding::kIdentity;
  bool gzip = false;
  bool deflate = false;
  while (!accept.empty()) {
    size_t comma = accept.find(',');
    std::string_view name = accept.substr(0, comma);
    accept = comma == std::string_view::npos ? std::string_view() : accept.substr(comma + 1);
    while (!name.empty() && (name.front() == ' ' || name.front() == '\t')) name.remove_prefix(1);
    while (!name.empty() && (name.back() == ' ' || name.back() == '\t')) name.remove_suffix(1);
    gzip = gzip || name == "gzip";
    deflate = deflate || name == "deflate";
  }
  ResponseEncoding ranked[2];
  size_t n = 0;
  if (gzip) ranked[n++] = ResponseEncoding::kGzip;
  if (deflate) ranked[n++] = ResponseEncoding::kDeflate;
  if (n == 0) return ResponseEncoding::kIdentity;
  if (level == 1) return ranked[0];
  if (level == 2) return ranked[n / 2];
  return ranked[n - 1];
}

bool GrpcConnection::send_message(uint32_t stream_id, const std::string_view* parts, size_t n_parts,
                                  const std::shared_ptr<HeldBlock>& block) {
  auto it = streams_.find(stream_id);
  if (closed_ || it == streams_.end() || it->second.finishing || it->second.discard) return false;
  Stream& s = it->second;
  // With a compression level, the message goes out compressed (one more copy): the
  // compressed bytes stand for the parts, and the prefix's flag says so.
  std::string compressed;
  std::string_view packed;
  char flag = 0;
  if (s.response_encoding != ResponseEncoding::kIdentity &&
      compress_body(s.response_encoding, parts, n_parts, &compressed)) {
    packed = compressed;
    parts = &packed;
    n_parts = 1;
    flag = 1;
  }
  const bool viewing = block && flag == 0;
  if (s.outbound_pos == s.outbound.size()) {
    s.outbound.clear();
    s.outbound_pos = 0;
  }
  size_t size = 0;
  for (size_t i = 0; i < n_parts; ++i) size += parts[i].size();
  // The 5-byte prefix is one more piece in front.
  char prefix[5] = {flag, static_cast<char>(size >> 24), static_cast<char>(size >> 16),
                    static_cast<char>(size >> 8), static_cast<char>(size)};
  std::vector<std::string_view> all;
  all.reserve(n_parts + 1);
  all.emplace_back(prefix, 5);
  for (size_t i = 0; i < n_parts; ++i) all.push_back(parts[i]);
  size_t total = 5 + size;
  if (!s.outbound.empty()) {  // behind earlier messages: queue it
    s.outbound.reserve(s.outbound.size() + total);
    append_range(all.data(), all.size(), 0, total, &s.outbound);
    queued_bytes_ += total;
    copied_out_ += total;
    pump_stream(stream_id, s);
    return true;
  }
  if (!s.headers_sent) {
    std::string block;
    hpack::encode_header(":status", "200", &block);
    hpack::encode_header("content-type", "application/grpc", &block);
    encode_response_encoding(s, &block);
    write_header_block(stream_id, false, block);
    s.headers_sent = true;
  }
  // What the windows allow goes straight from the caller's bytes into the output (one
  // copy, not two); only the rest waits in the stream's queue.
  int64_t window = std::min(conn_send_window_, s.send_window);
  size_t now = window > 0 ? std::min<size_t>(total, static_cast<size_t>(window)) : 0;
  size_t viewed = 0;
  if (!viewing) output_.reserve(output_.size() + now + 9 * (now / peer_max_frame_size_ + 1));
  for (size_t pos = 0; pos < now;) {
    size_t n = std::min<size_t>(now - pos, peer_max_frame_size_);
    write_frame_header(kData, 0, stream_id, n);
    if (viewing) {
      viewed += append_range_viewing(all.data(), all.size(), pos, pos + n, block, &output_,
                                     &output_views_);
    } else {
      append_range(all.data(), all.size(), pos, pos + n, &output_);
    }
    pos += n;
  }
  conn_send_window_ -= static_cast<int64_t>(now);
  s.send_window -= static_cast<int64_t>(now);
  if (now < total) {
    append_range(all.data(), all.size(), now, total, &s.outbound);
    queued_bytes_ += total - now;
  }
  copied_out_ += total - viewed;
  viewed_out_ += viewed;
  return true;
}

bool GrpcConnection::finish(uint32_t stream_id, int status, std::string_view message) {
  auto it = streams_.find(stream_id);
  if (closed_ || it == streams_.end() || it->second.finishing || it->second.discard) return false;
  Stream& s = it->second;
  s.finishing = true;
  s.status = status;
  s.status_message.assign(message.data(), message.size());
  if (resets_net_ > 0) --resets_net_;
  if (pump_stream(stream_id, s)) streams_.erase(it);
  return true;
}

void GrpcConnection::reset(uint32_t stream_id, uint32_t code) {
  auto it = streams_.find(stream_id);
  if (closed_ || it == streams_.end()) return;
  queued_bytes_ -= it->second.outbound.size() - it->second.outbound_pos;
  write_rst(stream_id, code);
  streams_.erase(it);
}

void GrpcConnection::ping() {
  if (closed_) return;
  write_frame(kPing, 0, 0, std::string_view(kKeepalivePing, 8));
  ++pings_unacked_;
}

void GrpcConnection::shutdown() {
  if (closed_ || going_away_) return;
  going_away_ = true;
  goaway_last_stream_ = last_client_stream_;
  std::string p;
  put32(&p, last_client_stream_);
  put32(&p, kNoError);
  write_frame(kGoaway, 0, 0, p);
}

bool GrpcConnection::pump_stream(uint32_t stream_id, Stream& s) {
  if (!s.headers_sent) {
    std::string block;
    hpack::encode_header(":status", "200", &block);
    hpack::encode_header("content-type", "application/grpc", &block);
    if (s.finishing && s.outbound.size() == s.outbound_pos) {
      // Trailers-only response: one HEADERS frame with the status.
      hpack::encode_header("grpc-status", std::to_string(s.status), &block);
      if (!s.status_message.empty()) {
        hpack::encode_header("grpc-message", grpc::percent_encode(s.status_message), &block);
      }
      write_header_block(stream_id, true, block);
      if (!s.remote_closed) write_rst(stream_id, kNoError);  // §8.1: stop sending to us
      return true;
    }
    encode_response_encoding(s, &block);
    write_header_block(stream_id, false, block);
    s.headers_sent = true;
  }
  while (s.outbound_pos < s.outbound.size()) {
    int64_t window = std::min(conn_send_window_, s.send_window);
    if (window <= 0) return false;  // waits for WINDOW_UPDATE
    size_t n = std::min<size_t>(
        {s.outbound.size() - s.outbound_pos, static_cast<size_t>(window), peer_max_frame_size_});
    write_frame(kData, 0, stream_id, std::string_view(s.outbound).substr(s.outbound_pos, n));
    copied_out_ += n;
    s.outbound_pos += n;
    conn_send_window_ -= n;
    s.send_window -= n;
    queued_bytes_ -= n;
  }
  s.outbound.clear();
  s.outbound_pos = 0;
  reopen_window(stream_id, s);
  if (!s.finishing) return false;
  std::string block;
  hpack::encode_header("grpc-status", std::to_string(s.status), &block);
  if (!s.status_message.empty()) {
    hpack::encode_header("grpc-message", grpc::percent_encode(s.status_message), &block);
  }
  write_header_block(stream_id, true, block);
  if (!s.remote_closed) write_rst(stream_id, kNoError);
  return true;
}

void GrpcConnection::pump() {
  for (auto it = streams_.begin(); it != streams_.end() && conn_send_window_ > 0;) {
    Stream& s = it->second;
    bool pending = s.outbound_pos < s.outbound.size() || s.finishing;
    if (pending && pump_stream(it->first, s)) {
      it = streams_.erase(it);
    } else {
      ++it;
    }
  }
}

void GrpcConnection::answer_http(uint32_t stream_id, int http_status) {
  std::string block;
  hpack::encode_header(":status", std::to_string(http_status), &block);
  write_header_block(stream_id, true, block);
}

void GrpcConnection::answer_early(uint32_t stream_id, Stream& s, int status,
                                  std::string_view message, std::vector<Event>* events) {
  if (s.announced && !s.discard) {
    Event e;  // the caller drops its side of the call: we answered it
    e.kind = EventKind::kCancel;
    e.stream_id = stream_id;
    e.error_code = kNoError;
    events->push_back(std::move(e));
  }
  // Answers a call the caller never saw (or sees no more), then keeps the stream only
  // to count what the client still sends on it.
  queued_bytes_ -= s.outbound.size() - s.outbound_pos;
  s.outbound.clear();
  s.outbound_pos = 0;
  s.finishing = true;
  s.status = status;
  s.status_message.assign(message.data(), message.size());
  s.inbound.clear();
  std::string block;
  if (!s.headers_sent) {
    hpack::encode_header(":status", "200", &block);
    hpack::encode_header("content-type", "application/grpc", &block);
  }
  hpack::encode_header("grpc-status", std::to_string(status), &block);
  hpack::encode_header("grpc-message", grpc::percent_encode(message), &block);
  write_header_block(stream_id, true, block);
  if (!s.remote_closed) write_rst(stream_id, kNoError);
  s.discard = true;
}

void GrpcConnection::close_stream(uint32_t stream_id, std::vector<Event>* events, uint32_t code) {
  auto it = streams_.find(stream_id);
  if (it == streams_.end()) return;
  if (it->second.announced && !it->second.discard) {
    Event e;
    e.kind = EventKind::kCancel;
    e.stream_id = stream_id;
    e.error_code = code;
    events->push_back(std::move(e));
  }
  queued_bytes_ -= it->second.outbound.size() - it->second.outbound_pos;
  streams_.erase(it);
}

// ----------------------------------------------------------------------------- input

void GrpcConnection::receive(const char* data, size_t size, std::vector<Event>* events) {
  std::string_view in(data, size);
  if (closed_) return;
  if (!preface_done_) {
    // Compare as bytes arrive: a wrong byte fails at once, not after 24 bytes.
    size_t have = input_.size();
    size_t n = std::min(kPrefaceSize - have, in.size());
    if (n > 0 && std::memcmp(in.data(), kPreface + have, n) != 0) {
      connection_error(kProtocolError, "invalid connection preface");
      return;
    }
    input_.append(in.data(), n);
    in.remove_prefix(n);
    if (input_.size() < kPrefaceSize) return;
    input_.clear();
    preface_done_ = true;
  }
  // Frames straight from `in` when nothing is carried over; otherwise complete the
  // carried frame first.
  if (!input_.empty()) {
    size_t need = kFrameHeaderSize;
    if (input_.size() >= kFrameHeaderSize) {
      const uint8_t* h = reinterpret_cast<const uint8_t*>(input_.data());
      need += (size_t(h[0]) << 16) | (size_t(h[1]) << 8) | h[2];
    } else {
      size_t n = std::min(kFrameHeaderSize - input_.size(), in.size());
      input_.append(in.data(), n);
      in.remove_prefix(n);
      if (input_.size() < kFrameHeaderSize) return;
      const uint8_t* h = reinterpret_cast<const uint8_t*>(input_.data());
      need += (size_t(h[0]) << 16) | (size_t(h[1]) << 8) | h[2];
      if (need - kFrameHeaderSize > kOurMaxFrameSize) {
        connection_error(kFrameSizeError, "frame larger than SETTINGS_MAX_FRAME_SIZE");
        return;
      }
    }
    size_t n = std::min(need - input_.size(), in.size());
    input_.append(in.data(), n);
    copied_in_ += n;
    in.remove_prefix(n);
    if (input_.size() < need) return;
    std::string frame;
    frame.swap(input_);
    const uint8_t* h = reinterpret_cast<const uint8_t*>(frame.data());
    on_frame(h[3], h[4], read32(frame.data() + 5) & 0x7fffffff,
             std::string_view(frame).substr(kFrameHeaderSize), events);
  }
  while (!closed_ && in.size() >= kFrameHeaderSize) {
    const uint8_t* h = reinterpret_cast<const uint8_t*>(in.data());
    size_t length = (size_t(h[0]) << 16) | (size_t(h[1]) << 8) | h[2];
    if (length > kOurMaxFrameSize) {
      connection_error(kFrameSizeError, "frame larger than SETTINGS_MAX_FRAME_SIZE");
      return;
    }
    if (in.size() < kFrameHeaderSize + length) break;
    on_frame(h[3], h[4], read32(in.data() + 5) & 0x7fffffff, in.substr(kFrameHeaderSize, length),
             events);
    in.remove_prefix(kFrameHeaderSize + length);
  }
  if (!closed_ && !in.empty()) {
    if (in.size() >= kFrameHeaderSize) {
      const uint8_t* h = reinterpret_cast<const uint8_t*>(in.data());
      size_t length = (size_t(h[0]) << 16) | (size_t(h[1]) << 8) | h[2];
      if (length > kOurMaxFrameSize) {
        connection_error(kFrameSizeError, "frame larger than SETTINGS_MAX_FRAME_SIZE");
        return;
      }
    }
    input_.assign(in.data(), in.size());
    copied_in_ += in.size();
  }
}

void GrpcConnection::on_frame(uint8_t type, uint8_t flags, uint32_t stream_id,
                              std::string_view payload, std::vector<Event>* events) {
  if (closed_) return;
  if (!settings_seen_) {
    // §3.4: the client preface ends with a SETTINGS frame.
    if (type != kSettings || (flags & kAck)) {
      connection_error(kProtocolError, "first frame is not SETTINGS");
      return;
    }
    settings_seen_ = true;
  }
  if (block_stream_ != 0 && type != kContinuation) {
    connection_error(kProtocolError, "frame inside a header block");  // §6.10
    return;
  }
  switch (type) {
    case kData:
      on_data(flags, stream_id, payload, events);
      return;
    case kHeaders:
      on_headers(flags, stream_id, payload, events);
      return;
    case kPriority:
      if (stream_id == 0) return connection_error(kProtocolError, "PRIORITY on stream 0");
      if (payload.size() != 5) {
        close_stream(stream_id, events, kFrameSizeError);
        write_rst(stream_id, kFrameSizeError);
      }
      return;
    case kRstStream:
      on_rst_stream(stream_id, payload, events);
      return;
    case kSettings:
      if (stream_id != 0) return connection_error(kProtocolError, "SETTINGS on a stream");
      if (flags & kAck) {
        if (!payload.empty()) connection_error(kFrameSizeError, "SETTINGS ACK with a payload");
        return;
      }
      on_settings(flags, payload);
      return;
    case kPushPromise:
      return connection_error(kProtocolError, "PUSH_PROMISE from a client");
    case kPing:
      if (stream_id != 0) return connection_error(kProtocolError, "PING on a stream");
      if (payload.size() != 8) return connection_error(kFrameSizeError, "PING not 8 bytes");
      if (!(flags & kAck)) {
        write_frame(kPing, kAck, 0, payload);
        ++pings_received_;
      } else if (pings_unacked_ > 0 && payload == std::string_view(kKeepalivePing, 8)) {
        --pings_unacked_;
      }
      return;
    case kGoaway:
      if (stream_id != 0) return connection_error(kProtocolError, "GOAWAY on a stream");
      if (payload.size() < 8) return connection_error(kFrameSizeError, "GOAWAY too short");
      // The client leaves: answer what is open, accept nothing new.
      going_away_ = true;
      goaway_last_stream_ = last_client_stream_;
      return;
    case kWindowUpdate:
      on_window_update(stream_id, payload);
      return;
    case kContinuation: {
      if (block_stream_ == 0 || stream_id != block_stream_) {
        return connection_error(kProtocolError, "CONTINUATION without HEADERS before it");
      }
      if (++block_frames_ > limits_.max_continuation_frames) {
        return connection_error(kEnhanceYourCalm, "too many CONTINUATION frames");
      }
      if (block_.size() + payload.size() > limits_.max_header_block_bytes) {
        return connection_error(kEnhanceYourCalm, "header block too large");
      }
      block_.append(payload.data(), payload.size());
      if (flags & kEndHeaders) on_header_block(events);
      return;
    }
    default:
      return;  // §4.1: unknown frame types are ignored
  }
}

void GrpcConnection::replenish(uint32_t stream_id, Stream* stream, size_t bytes) {
  // Window updates once half a window is used, not per frame: fewer frames, same flow.
  conn_recv_unacked_ += bytes;
  if (conn_recv_unacked_ >= limits_.connection_window / 2) {
    write_window_update(0, static_cast<uint32_t>(conn_recv_unacked_));
    conn_recv_available_ += conn_recv_unacked_;
    conn_recv_unacked_ = 0;
  }
  if (stream == nullptr || stream->remote_closed) return;
  stream->recv_unacked += bytes;
  reopen_window(stream_id, *stream);
}

void GrpcConnection::reopen_window(uint32_t stream_id, Stream& s) {
  // Withheld while the stream's answers back up: the client then cannot send more.
  if (s.remote_closed || s.recv_unacked < limits_.stream_window / 2) return;
  if (s.outbound.size() - s.outbound_pos > limits_.max_stream_backlog) return;
  write_window_update(stream_id, s.recv_unacked);
  s.recv_unacked = 0;
}

void GrpcConnection::on_data(uint8_t flags, uint32_t stream_id, std::string_view payload,
                             std::vector<Event>* events) {
  if (stream_id == 0) return connection_error(kProtocolError, "DATA on stream 0");
  // §6.9: the whole frame, padding included, counts against the windows.
  size_t flow = payload.size();
  if (static_cast<int64_t>(flow) > conn_recv_available_) {
    return connection_error(kFlowControlError, "DATA beyond the connection window");
  }
  conn_recv_available_ -= flow;
  if (!unpad(flags, &payload)) return connection_error(kProtocolError, "padding beyond DATA");
  auto it = streams_.find(stream_id);
  if (it == streams_.end()) {
    if (stream_id > last_client_stream_) {
      return connection_error(kProtocolError, "DATA on an idle stream");
    }
    replenish(0, nullptr, flow);  // a stream we closed or reset: count it, drop it
    return;
  }
  Stream& s = it->second;
  if (s.remote_closed) {
    replenish(0, nullptr, flow);
    close_stream(stream_id, events, kStreamClosed);
    write_rst(stream_id, kStreamClosed);
    return;
  }
  int64_t stream_window_used = s.recv_unacked + flow;
  if (stream_window_used > static_cast<int64_t>(limits_.stream_window)) {
    replenish(0, nullptr, flow);
    close_stream(stream_id, events, kFlowControlError);
    write_rst(stream_id, kFlowControlError);
    return;
  }
  if (flags & kEndStream) s.remote_closed = true;
  replenish(stream_id, &s, flow);
  if (s.discard) {
    if (s.remote_closed) streams_.erase(it);
    return;
  }
  s.inbound.append(payload.data(), payload.size());
  copied_in_ += payload.size();
  take_messages(stream_id, s, events);
}

void GrpcConnection::take_messages(uint32_t stream_id, Stream& s, std::vector<Event>* events) {
  size_t pos = 0;
  while (s.inbound.size() - pos >= 5) {
    uint8_t flag = static_cast<uint8_t>(s.inbound[pos]);
    uint64_t length = read32(s.inbound.data() + pos + 1);
    if (flag > 1) {
      answer_early(stream_id, s, grpc::kInternal,
                   "invalid gRPC message flag " + std::to_string(flag), events);
      break;
    }
    if (length > limits_.max_message_size) {
      answer_early(stream_id, s, grpc::kResourceExhausted,
                   "Received message larger than max (" + std::to_string(length) + " vs. " +
                       std::to_string(limits_.max_message_size) + ")",
                   events);
      break;
    }
    if (flag == 1 && s.encoding.empty()) {
      answer_early(stream_id, s, grpc::kInternal,
                   "compressed message without grpc-encoding on the call", events);
      break;
    }
    if (s.inbound.size() - pos - 5 < length) {
      // A large message arrives in many frames: grow the buffer once, not by doubling.
      if (pos == 0) s.inbound.reserve(5 + length);
      break;
    }
    Event e;
    e.kind = EventKind::kMessage;
    e.stream_id = stream_id;
    e.compressed = flag == 1;
    if (pos == 0 && s.inbound.size() == 5 + length) {
      s.inbound.erase(0, 5);
      e.message.swap(s.inbound);  // the common case: one message, no copy
      pos = 0;
    } else {
      e.message.assign(s.inbound, pos + 5, length);
      copied_in_ += length;
      pos += 5 + length;
    }
    events->push_back(std::move(e));
  }
  if (s.discard) {
    if (s.remote_closed) streams_.erase(stream_id);
    return;
  }
  if (pos > 0) s.inbound.erase(0, pos);
  if (s.remote_closed) {
    if (!s.inbound.empty()) {
      answer_early(stream_id, s, grpc::kInternal,
                   "incomplete gRPC message at the end of the stream: " +
                       std::to_string(s.inbound.size()) + " bytes left",
                   events);
      streams_.erase(stream_id);
      return;
    }
    Event e;
    e.kind = EventKind::kHalfClose;
    e.stream_id = stream_id;
    events->push_back(std::move(e));
  }
}

void GrpcConnection::on_headers(uint8_t flags, uint32_t stream_id, std::string_view payload,
                                std::vector<Event>* events) {
  if (stream_id == 0) return connection_error(kProtocolError, "HEADERS on stream 0");
  if (!unpad(flags, &payload)) return connection_error(kProtocolError, "padding beyond HEADERS");
  if (flags & kPriorityFlag) {
    if (payload.size() < 5) return connection_error(kFrameSizeError, "HEADERS priority cut");
    if ((read32(payload.data()) & 0x7fffffff) == stream_id) {
      return connection_error(kProtocolError, "stream depends on itself");
    }
    payload.remove_prefix(5);
  }
  if (payload.size() > limits_.max_header_block_bytes) {
    return connection_error(kEnhanceYourCalm, "header block too large");
  }
  block_.assign(payload.data(), payload.size());
  block_stream_ = stream_id;
  block_end_stream_ = (flags & kEndStream) != 0;
  block_frames_ = 0;
  (void)events;
  if (flags & kEndHeaders) on_header_block(events);
}

void GrpcConnection::on_header_block(std::vector<Event>* events) {
  uint32_t stream_id = block_stream_;
  bool end_stream = block_end_stream_;
  block_stream_ = 0;
  std::vector<hpack::Header> headers;
  // Every block is decoded, even one we then ignore, to keep HPACK's table in step.
  hpack::Decoder::Result result = decoder_.decode(block_, limits_.max_header_list_size, &headers);
  block_.clear();
  if (result == hpack::Decoder::Result::kError) {
    return connection_error(kCompressionError, "HPACK: " + decoder_.error());
  }
  auto it = streams_.find(stream_id);
  if (it != streams_.end()) {
    // Trailers from the client: they must end the stream (§8.1).
    Stream& s = it->second;
    if (!end_stream || s.remote_closed) {
      close_stream(stream_id, events, kProtocolError);
      write_rst(stream_id, kProtocolError);
      return;
    }
    s.remote_closed = true;
    if (s.discard) {
      streams_.erase(it);
      return;
    }
    take_messages(stream_id, s, events);
    return;
  }
  if ((stream_id & 1) == 0) return connection_error(kProtocolError, "even stream id from client");
  if (stream_id <= last_client_stream_) {
    return;  // a stream we already closed or reset: its late trailers are dropped
  }
  last_client_stream_ = stream_id;
  if (going_away_ && stream_id > goaway_last_stream_) return;  // §6.8: after GOAWAY
  if (streams_.size() >= limits_.max_concurrent_streams) {
    write_rst(stream_id, kRefusedStream);  // §5.1.2
    return;
  }
  if (result == hpack::Decoder::Result::kTooLarge) {
    answer_http(stream_id, 431);  // §10.5.1
    if (!end_stream) write_rst(stream_id, kNoError);
    return;
  }
  open_call(stream_id, end_stream, headers, events);
}

void GrpcConnection::open_call(uint32_t stream_id, bool end_stream,
                               std::vector<hpack::Header>& headers, std::vector<Event>* events) {
  Event call;
  call.kind = EventKind::kCall;
  call.stream_id = stream_id;
  std::string method, scheme, content_type, timeout;
  ResponseEncoding response_encoding = ResponseEncoding::kIdentity;
  bool regular_seen = false;
  bool malformed = false;
  for (hpack::Header& h : headers) {
    for (char c : h.name) {
      if (c >= 'A' && c <= 'Z') malformed = true;  // §8.2: names are lowercase
    }
    if (!h.name.empty() && h.name[0] == ':') {
      if (regular_seen) malformed = true;  // §8.3: pseudo-headers first
      if (h.name == ":method") {
        method = h.value;
      } else if (h.name == ":path") {
        call.path = h.value;
      } else if (h.name == ":scheme") {
        scheme = h.value;
      } else if (h.name != ":authority") {
        malformed = true;
      }
      continue;
    }
    regular_seen = true;
    if (is_connection_specific(h.name) || (h.name == "te" && h.value != "trailers")) {
      malformed = true;
    } else if (h.name == "content-type") {
      content_type = h.value;
    } else if (h.name == "grpc-timeout") {
      timeout = h.value;
    } else if (h.name == "grpc-encoding") {
      call.encoding = h.value == "identity" ? "" : h.value;
    } else if (h.name == "grpc-accept-encoding") {
      response_encoding = response_encoding_for(limits_.response_compression, h.value);
    }
    call.metadata.push_back(std::move(h));
  }
  if (malformed || method.empty() || call.path.empty() || scheme.empty()) {
    write_rst(stream_id, kProtocolError);  // §8.1.1: malformed request
    return;
  }
  if (method != "POST") {
    answer_http(stream_id, 405);
    if (!end_stream) write_rst(stream_id, kNoError);
    return;
  }
  if (content_type.rfind("application/grpc", 0) != 0) {
    answer_http(stream_id, 415);
    if (!end_stream) write_rst(stream_id, kNoError);
    return;
  }
  Stream& s = streams_[stream_id];
  s.send_window = peer_initial_window_;
  s.encoding = call.encoding;
  s.response_encoding = response_encoding;
  s.remote_closed = end_stream;
  if (!timeout.empty() && !grpc::parse_timeout(timeout, &call.timeout_us)) {
    answer_early(stream_id, s, grpc::kInternal, "malformed grpc-timeout: " + timeout, events);
    if (s.remote_closed) streams_.erase(stream_id);
    return;
  }
  if (!s.encoding.empty() && s.encoding != "gzip" && s.encoding != "deflate") {
    answer_early(stream_id, s, grpc::kUnimplemented,
                 "Compression algorithm '" + s.encoding + "' is not supported", events);
    if (s.remote_closed) streams_.erase(stream_id);
    return;
  }
  s.announced = true;
  events->push_back(std::move(call));
  if (end_stream) {
    Event e;
    e.kind = EventKind::kHalfClose;
    e.stream_id = stream_id;
    events->push_back(std::move(e));
  }
}

void GrpcConnection::on_settings(uint8_t flags, std::string_view payload) {
  (void)flags;
  if (payload.size() % 6 != 0) return connection_error(kFrameSizeError, "SETTINGS size");
  for (size_t pos = 0; pos < payload.size(); pos += 6) {
    const uint8_t* p = reinterpret_cast<const uint8_t*>(payload.data() + pos);
    uint16_t id = static_cast<uint16_t>((p[0] << 8) | p[1]);
    uint32_t value = read32(payload.data() + pos + 2);
    switch (id) {
      case kEnablePush:
        if (value > 1) return connection_error(kProtocolError, "ENABLE_PUSH not 0 or 1");
        break;
      case kInitialWindowSize: {
        if (value > kMaxWindow) {
          return connection_error(kFlowControlError, "INITIAL_WINDOW_SIZE above 2^31-1");
        }
        // §6.9.2: the change applies to every open stream's window.
        int64_t delta = static_cast<int64_t>(value) - peer_initial_window_;
        peer_initial_window_ = value;
        for (auto& [id_, s] : streams_) {
          s.send_window += delta;
          if (s.send_window > kMaxWindow) {
            return connection_error(kFlowControlError, "stream window above 2^31-1");
          }
        }
        break;
      }
      case kMaxFrameSize:
        if (value < 16384 || value > 16777215) {
          return connection_error(kProtocolError, "MAX_FRAME_SIZE out of range");
        }
        peer_max_frame_size_ = value;
        break;
      default:
        break;  // HEADER_TABLE_SIZE: our encoder never indexes; others are advisory
    }
  }
  write_frame(kSettings, kAck, 0, {});
  pump();
}

void GrpcConnection::on_window_update(uint32_t stream_id, std::string_view payload) {
  if (payload.size() != 4) return connection_error(kFrameSizeError, "WINDOW_UPDATE size");
  uint32_t increment = read32(payload.data()) & 0x7fffffff;
  if (stream_id == 0) {
    if (increment == 0) return connection_error(kProtocolError, "WINDOW_UPDATE of 0");
    conn_send_window_ += increment;
    if (conn_send_window_ > kMaxWindow) {
      return connection_error(kFlowControlError, "connection window above 2^31-1");
    }
    pump();
    return;
  }
  auto it = streams_.find(stream_id);
  if (it == streams_.end()) {
    if (stream_id > last_client_stream_) {
      connection_error(kProtocolError, "WINDOW_UPDATE on an idle stream");
    }
    return;
  }
  Stream& s = it->second;
  if (increment == 0) {
    reset(stream_id, kProtocolError);
    return;
  }
  s.send_window += increment;
  if (s.send_window > kMaxWindow) {
    reset(stream_id, kFlowControlError);
    return;
  }
  if (pump_stream(stream_id, s)) streams_.erase(it);
}

void GrpcConnection::on_rst_stream(uint32_t stream_id, std::string_view payload,
                                   std::vector<Event>* events) {
  if (stream_id == 0) return connection_error(kProtocolError, "RST_STREAM on stream 0");
  if (payload.size() != 4) return connection_error(kFrameSizeError, "RST_STREAM size");
  if (stream_id > last_client_stream_) {
    return connection_error(kProtocolError, "RST_STREAM on an idle stream");
  }
  auto it = streams_.find(stream_id);
  if (it == streams_.end()) return;
  if (it->second.announced && !it->second.finishing) {
    // Rapid reset (CVE-2023-44487): calls the client opens and cancels before any
    // answer cost us work each; more than the limit, net of answered calls, is abuse.
    if (++resets_net_ > static_cast<int64_t>(limits_.max_client_resets)) {
      close_stream(stream_id, events, read32(payload.data()));
      return connection_error(kEnhanceYourCalm, "too many streams reset by the client");
    }
  }
  close_stream(stream_id, events, read32(payload.data()));
}

}  // namespace naiad::h2
