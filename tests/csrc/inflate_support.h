// Inflates what the server compressed, for the tests that check its gzip and deflate
// answers (HTTP bodies, gRPC messages), and compresses what the tests send it.
#pragma once

#include <zlib.h>

#include <string>

#include "codec/http_compress.h"
#include "testing.h"

namespace naiad {

// Inflates a gzip (window_bits 31) or zlib-format (15) stream; "" on any error.
inline std::string inflated(const std::string& data, int window_bits) {
  z_stream stream{};
  if (inflateInit2(&stream, window_bits) != Z_OK) return "";
  std::string out(1 << 20, '\0');
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  stream.avail_in = static_cast<uInt>(data.size());
  stream.next_out = reinterpret_cast<Bytef*>(&out[0]);
  stream.avail_out = static_cast<uInt>(out.size());
  int status = inflate(&stream, Z_FINISH);
  out.resize(stream.total_out);
  bool whole = status == Z_STREAM_END && stream.avail_in == 0;
  inflateEnd(&stream);
  return whole ? out : "";
}

// `data` as a stream of `format` (zlib's default level).
inline std::string deflated(StreamFormat format, const std::string& data, int level = 6) {
  int bits = format == StreamFormat::kGzip ? 31 : format == StreamFormat::kZlib ? 15 : -15;
  z_stream stream{};
  CHECK(deflateInit2(&stream, level, Z_DEFLATED, bits, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string out(deflateBound(&stream, static_cast<uLong>(data.size())) + 64, '\0');
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  stream.avail_in = static_cast<uInt>(data.size());
  stream.next_out = reinterpret_cast<Bytef*>(&out[0]);
  stream.avail_out = static_cast<uInt>(out.size());
  CHECK(deflate(&stream, Z_FINISH) == Z_STREAM_END);
  out.resize(stream.total_out);
  deflateEnd(&stream);
  return out;
}

// `size` bytes that compress well, with stretches that do not.
inline std::string patterned(size_t size) {
  std::string data(size, '\0');
  uint32_t x = 7;
  for (size_t i = 0; i < size; ++i) {
    data[i] = static_cast<char>(i % 251 < 200 ? i % 13 : (x = x * 1103515245 + 12345) >> 24);
  }
  return data;
}

}  // namespace naiad
