#include "codec/http_compress.h"

#include <zlib.h>

#include <climits>
#include <new>

namespace naiad {

namespace {

// Triton's settings (its data_compressor.h): window 15 bits, +16 for the gzip wrapper.
constexpr int kGzipWindowBits = 15 + 16;
constexpr int kDeflateWindowBits = 15;
constexpr int kMemLevel = 8;

// One deflate stream per encoding and thread, reset between bodies: a fresh one
// allocates and clears about 256 KiB each time. A reset stream compresses exactly as a
// new one.
class Deflaters {
 public:
  ~Deflaters() {
    for (Slot& slot : slots_) {
      if (slot.ready) deflateEnd(&slot.stream);
    }
  }

  z_stream* get(ResponseEncoding encoding) {
    Slot& slot = slots_[encoding == ResponseEncoding::kGzip ? 0 : 1];
    if (!slot.ready) {
      slot.stream = z_stream{};
      int bits = encoding == ResponseEncoding::kGzip ? kGzipWindowBits : kDeflateWindowBits;
      if (deflateInit2(&slot.stream, Z_DEFAULT_COMPRESSION, Z_DEFLATED, bits, kMemLevel,
                       Z_DEFAULT_STRATEGY) != Z_OK) {
        throw std::bad_alloc();
      }
      slot.ready = true;
    } else if (deflateReset(&slot.stream) != Z_OK) {
      throw std::bad_alloc();
    }
    return &slot.stream;
  }

 private:
  struct Slot {
    z_stream stream;
    bool ready = false;
  };
  Slot slots_[2];
};

}  // namespace

std::string_view content_encoding_line(ResponseEncoding encoding) {
  switch (encoding) {
    case ResponseEncoding::kGzip:
      return "Content-Encoding: gzip\r\n";
    case ResponseEncoding::kDeflate:
      return "Content-Encoding: deflate\r\n";
    default:
      return {};
  }
}

bool compress_body(ResponseEncoding encoding, const std::string_view* parts, size_t count,
                   std::string* out) {
  if (encoding != ResponseEncoding::kGzip && encoding != ResponseEncoding::kDeflate) return false;
  size_t total = 0;
  for (size_t i = 0; i < count; ++i) total += parts[i].size();
  if (total == 0) return false;
  thread_local Deflaters deflaters;
  z_stream* stream = deflaters.get(encoding);
  const size_t start = out->size();
  // deflateBound is enough for one deflate() call to finish; the loop only grows the
  // output for bodies past what uLong describes.
  size_t room = total <= ULONG_MAX / 2 ? deflateBound(stream, static_cast<uLong>(total)) : total;
  out->resize(start + room);
  size_t written = 0;
  for (size_t i = 0; i < count; ++i) {
    const bool last = i + 1 == count;
    std::string_view part = parts[i];
    // zlib counts in uInt: a part past 4 GiB is fed in pieces.
    do {
      const size_t piece = part.size() < UINT_MAX ? part.size() : UINT_MAX;
      stream->next_in = reinterpret_cast<Bytef*>(const_cast<char*>(part.data()));
      stream->avail_in = static_cast<uInt>(piece);
      part.remove_prefix(piece);
      const int flush = last && part.empty() ? Z_FINISH : Z_NO_FLUSH;
      int status;
      do {
        if (written == out->size() - start) out->resize(out->size() + (room / 2) + 64);
        const size_t space = out->size() - start - written;
        stream->next_out = reinterpret_cast<Bytef*>(&(*out)[start + written]);
        stream->avail_out = static_cast<uInt>(space < UINT_MAX ? space : UINT_MAX);
        const uInt before = stream->avail_out;
        status = deflate(stream, flush);
        written += before - stream->avail_out;
        if (status == Z_STREAM_ERROR) throw std::bad_alloc();
      } while (flush == Z_FINISH ? status != Z_STREAM_END
                                 : stream->avail_in != 0 || stream->avail_out == 0);
    } while (!part.empty());
  }
  out->resize(start + written);
  return true;
}

}  // namespace naiad
