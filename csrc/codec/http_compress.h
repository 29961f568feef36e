// Compression of HTTP infer answers as Accept-Encoding asks (http_scan.h
// response_encoding picks the encoding): the one compressor of the fast lane's answers
// (HttpResponseWriter) and of the general path's (pysrc/naiad/http/codec.py, through
// _core.pyx), so both give the same bytes. As Triton 2.51: zlib at its default level,
// the gzip wrapper for gzip and the zlib format for deflate, memLevel 8, the default
// strategy; an empty body is sent as it is, without Content-Encoding.
//
// And the one inflater of compressed requests, for every protocol (HTTP bodies with
// Content-Encoding, gRPC messages with grpc-encoding): bounded, since a few megabytes
// of gzip can inflate to gigabytes.
//
// Threads: any thread may call these; each thread keeps its own deflate streams.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "http1/http_scan.h"

namespace naiad {

// The Content-Encoding header line (with its CRLF) of an answer compressed with
// `encoding`; empty for identity.
std::string_view content_encoding_line(ResponseEncoding encoding);

// Appends `parts` (the body, in order) compressed with `encoding` to `out`. False, with
// `out` unchanged, when nothing is compressed: identity, or an empty body. Throws
// std::bad_alloc when zlib runs out of memory.
bool compress_body(ResponseEncoding encoding, const std::string_view* parts, size_t count,
                   std::string* out);

inline bool compress_body(ResponseEncoding encoding, std::string_view body, std::string* out) {
  return compress_body(encoding, &body, 1, out);
}

// The stream formats zlib reads (its window bits say which).
enum class StreamFormat { kGzip, kZlib, kRawDeflate };

// Bytes an inflater wrote: one malloc'd block grown with realloc, which grows a large
// block in place by remapping it (no copy, no second block), so that inflating never
// holds or touches much more than what was written.
class InflatedBytes {
 public:
  InflatedBytes() = default;
  ~InflatedBytes() { release(); }
  InflatedBytes(const InflatedBytes&) = delete;
  InflatedBytes& operator=(const InflatedBytes&) = delete;

  const char* data() const { return data_; }
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }
  std::string_view view() const { return {data_, size_}; }
  void clear() { size_ = 0; }
  void release();  // gives the block back
  // Room for `capacity` bytes, those written kept. Throws std::bad_alloc.
  void grow_to(size_t capacity);
  char* end() { return data_ + size_; }
  void wrote(size_t count) { size_ += count; }

 private:
  char* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

enum class Inflated {
  kDone,      // `out` holds the inflated bytes
  kTooLarge,  // they pass `limit`: given up there
  kDamaged,   // not a whole stream of the format: `error` says what zlib found
};

// Inflates the one stream `data` holds (bytes after its end are ignored) into `out`
// (replaced), holding at most `limit` bytes of output and one more, never more: the
// output grows as it comes. `error`, for kDamaged: zlib's complaint, as Python's
// zlib words it ("Error -3 while decompressing data: incorrect header check",
// "incomplete or truncated stream"). Throws std::bad_alloc when zlib runs out of memory.
Inflated inflate_stream(StreamFormat format, std::string_view data, size_t limit,
                        InflatedBytes* out, std::string* error);

// Inflates an HTTP request body sent with `encoding` (kGzip or kDeflate): deflate is
// the zlib format, but some clients send it raw, which is read when the zlib format is
// not. Otherwise as inflate_stream.
Inflated inflate_body(ContentEncoding encoding, std::string_view body, size_t limit,
                      InflatedBytes* out, std::string* error);

}  // namespace naiad
