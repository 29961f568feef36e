// A minimal HTTP/2 client side for the C++ tests of GrpcConnection: builds client
// frames and splits the server's output into frames, decoding header blocks with its
// own HPACK decoder (as a peer would).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "http2/grpc_connection.h"
#include "http2/hpack.h"

namespace h2test {

inline const std::string kPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

inline void put32(std::string* out, uint32_t v) {
  out->push_back(static_cast<char>(v >> 24));
  out->push_back(static_cast<char>(v >> 16));
  out->push_back(static_cast<char>(v >> 8));
  out->push_back(static_cast<char>(v));
}

inline std::string frame(uint8_t type, uint8_t flags, uint32_t stream, std::string_view payload) {
  std::string f;
  size_t n = payload.size();
  f.push_back(static_cast<char>(n >> 16));
  f.push_back(static_cast<char>(n >> 8));
  f.push_back(static_cast<char>(n));
  f.push_back(static_cast<char>(type));
  f.push_back(static_cast<char>(flags));
  put32(&f, stream);
  f.append(payload.data(), payload.size());
  return f;
}

inline std::string settings(std::vector<std::pair<uint16_t, uint32_t>> values = {}) {
  std::string p;
  for (auto [id, v] : values) {
    p.push_back(static_cast<char>(id >> 8));
    p.push_back(static_cast<char>(id));
    put32(&p, v);
  }
  return frame(0x4, 0, 0, p);
}

inline std::string window_update(uint32_t stream, uint32_t increment) {
  std::string p;
  put32(&p, increment);
  return frame(0x8, 0, stream, p);
}

inline std::string rst(uint32_t stream, uint32_t code) {
  std::string p;
  put32(&p, code);
  return frame(0x3, 0, stream, p);
}

inline std::string request_block(std::string_view path,
                                 std::vector<std::pair<std::string, std::string>> extra = {}) {
  std::string b;
  naiad::hpack::encode_header(":method", "POST", &b);
  naiad::hpack::encode_header(":scheme", "http", &b);
  naiad::hpack::encode_header(":path", path, &b);
  naiad::hpack::encode_header(":authority", "localhost", &b);
  naiad::hpack::encode_header("content-type", "application/grpc", &b);
  naiad::hpack::encode_header("te", "trailers", &b);
  for (auto& [n, v] : extra) naiad::hpack::encode_header(n, v, &b);
  return b;
}

inline std::string headers(uint32_t stream, std::string_view block, bool end_stream = false) {
  return frame(0x1, 0x4 | (end_stream ? 0x1 : 0), stream, block);
}

inline std::string grpc_message(std::string_view payload, bool compressed = false) {
  std::string m;
  m.push_back(compressed ? 1 : 0);
  put32(&m, static_cast<uint32_t>(payload.size()));
  m.append(payload.data(), payload.size());
  return m;
}

inline std::string data(uint32_t stream, std::string_view payload, bool end_stream = true) {
  return frame(0x0, end_stream ? 0x1 : 0, stream, payload);
}

// `payload` as DATA frames of at most 16 KiB (the default SETTINGS_MAX_FRAME_SIZE).
inline std::string data_frames(uint32_t stream, std::string_view payload, bool end_stream) {
  std::string out;
  for (size_t pos = 0; pos < payload.size(); pos += 16384) {
    size_t n = std::min<size_t>(16384, payload.size() - pos);
    out += data(stream, payload.substr(pos, n), end_stream && pos + n == payload.size());
  }
  return out;
}

// The start every client sends: preface, then SETTINGS.
inline std::string hello(std::vector<std::pair<uint16_t, uint32_t>> values = {}) {
  return kPreface + settings(values);
}

struct Frame {
  uint8_t type;
  uint8_t flags;
  uint32_t stream;
  std::string payload;
  std::vector<naiad::hpack::Header> headers;  // HEADERS (+ CONTINUATION), decoded
};

// Splits server output into frames; header blocks are joined and decoded.
struct Reader {
  naiad::hpack::Decoder decoder{4096};
  std::string pending;
  std::string block;

  std::vector<Frame> read(const std::string& bytes) {
    pending += bytes;
    std::vector<Frame> frames;
    size_t pos = 0;
    while (pending.size() - pos >= 9) {
      const uint8_t* h = reinterpret_cast<const uint8_t*>(pending.data() + pos);
      size_t n = (size_t(h[0]) << 16) | (size_t(h[1]) << 8) | h[2];
      if (pending.size() - pos < 9 + n) break;
      Frame f;
      f.type = h[3];
      f.flags = h[4];
      f.stream = ((uint32_t(h[5]) << 24) | (uint32_t(h[6]) << 16) | (uint32_t(h[7]) << 8) | h[8]) &
                 0x7fffffff;
      f.payload = pending.substr(pos + 9, n);
      pos += 9 + n;
      if (f.type == 0x1 || f.type == 0x9) {
        block += f.payload;
        if (f.flags & 0x4) {
          decoder.decode(block, 1 << 20, &f.headers);
          block.clear();
        }
      }
      frames.push_back(std::move(f));
    }
    pending.erase(0, pos);
    return frames;
  }
};

inline std::string header_value(const Frame& f, std::string_view name) {
  for (auto& h : f.headers) {
    if (h.name == name) return h.value;
  }
  return "";
}

inline uint32_t u32(std::string_view p, size_t at = 0) {
  const uint8_t* b = reinterpret_cast<const uint8_t*>(p.data() + at);
  return (uint32_t(b[0]) << 24) | (uint32_t(b[1]) << 16) | (uint32_t(b[2]) << 8) | b[3];
}

}  // namespace h2test
