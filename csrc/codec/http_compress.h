// Compression of HTTP infer answers as Accept-Encoding asks (http_scan.h
// response_encoding picks the encoding): the one compressor of the fast lane's answers
// (HttpResponseWriter) and of the general path's (pysrc/naiad/http/codec.py, through
// _core.pyx), so both give the same bytes. As Triton 2.51: zlib at its default level,
// the gzip wrapper for gzip and the zlib format for deflate, memLevel 8, the default
// strategy; an empty body is sent as it is, without Content-Encoding.
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

}  // namespace naiad
