// Inflates what the server compressed, for the tests that check its gzip and deflate
// answers (HTTP bodies, gRPC messages).
#pragma once

#include <zlib.h>

#include <string>

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

}  // namespace naiad
