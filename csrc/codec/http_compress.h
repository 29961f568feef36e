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
#include <cstdint>
#include <string>
#include <string_view>

#include "http1/http_scan.h"

struct z_stream_s;

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
  kMore,      // Inflater::step only: its budget is spent, the stream goes on
};

// How an Inflater reads a stream; the defaults are inflate_stream's (HTTP bodies).
struct InflateRules {
  // Bytes after the stream's end make it damaged, rather than being ignored.
  bool exact = false;
  // An empty input is an empty output, rather than a truncated stream.
  bool empty_is_empty = false;
  // Past the limit, inflate on to the stream's end without keeping the bytes (the
  // output is released), up to `measure_to` bytes in all: the whole size (total()), or
  // damage further on, is found. 0: give up at the limit.
  uint64_t measure_to = 0;
};

// One bounded inflation done in steps of a budget of output bytes, so that an event
// loop can inflate a large stream a piece per turn. It reads `data`, which must stay
// in place until it is done. Not movable: zlib's state points at it.
class Inflater {
 public:
  Inflater(StreamFormat format, std::string_view data, size_t limit, InflateRules rules = {});
  ~Inflater();
  Inflater(const Inflater&) = delete;
  Inflater& operator=(const Inflater&) = delete;

  // Inflates on into `out` (the same one each step; the first step empties it) until
  // `budget` more bytes came out: kMore. Otherwise as inflate_stream, with the rules.
  // Throws std::bad_alloc when zlib runs out of memory.
  Inflated step(size_t budget, InflatedBytes* out, std::string* error);
  // The bytes the stream inflated to so far, those past the limit included.
  uint64_t total() const { return total_; }

 private:
  z_stream_s* stream_;
  const char* next_;
  size_t left_;
  size_t limit_;
  size_t first_block_;  // the output's first size
  InflateRules rules_;
  uint64_t total_ = 0;
  bool started_ = false;
  bool past_limit_ = false;  // measuring: the output is no longer kept
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
