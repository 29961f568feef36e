#include "codec/http_compress.h"

#include <zlib.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <memory>
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

namespace {

int window_bits(StreamFormat format) {
  switch (format) {
    case StreamFormat::kGzip:
      return kGzipWindowBits;
    case StreamFormat::kZlib:
      return kDeflateWindowBits;
    default:
      return -kDeflateWindowBits;
  }
}

// The output buffer starts at four times the input, between these sizes, and doubles
// (never past the limit): a small message does not map a megabyte.
constexpr size_t kFirstBlockMin = size_t(16) << 10;
constexpr size_t kFirstBlockMax = size_t(1) << 20;

size_t first_block(size_t input) {
  return input >= kFirstBlockMax / 4 ? kFirstBlockMax : std::max(4 * input, kFirstBlockMin);
}

// zlib's complaint in the words of Python's zlib module (what the general path said).
std::string inflate_error(int status, const z_stream& stream) {
  const char* what = stream.msg;
  if (what == nullptr) {
    if (status == Z_STREAM_ERROR) what = "inconsistent stream state";
    if (status == Z_DATA_ERROR) what = "invalid input data";
  }
  char text[256];
  if (what == nullptr) {
    std::snprintf(text, sizeof(text), "Error %d while decompressing data", status);
  } else {
    std::snprintf(text, sizeof(text), "Error %d while decompressing data: %.200s", status, what);
  }
  return text;
}

// A stream whose input ended before its end.
constexpr std::string_view kTruncated = "incomplete or truncated stream";

}  // namespace

void InflatedBytes::release() {
  std::free(data_);
  data_ = nullptr;
  size_ = capacity_ = 0;
}

void InflatedBytes::grow_to(size_t capacity) {
  if (capacity <= capacity_) return;
  void* grown = std::realloc(data_, capacity);
  if (grown == nullptr) throw std::bad_alloc();
  data_ = static_cast<char*>(grown);
  capacity_ = capacity;
}

Inflater::Inflater(StreamFormat format, std::string_view data, size_t limit, InflateRules rules)
    : stream_(new z_stream{}),
      next_(data.data()),
      left_(data.size()),
      limit_(limit),
      first_block_(first_block(data.size())),
      rules_(rules) {
  if (inflateInit2(stream_, window_bits(format)) != Z_OK) {
    delete stream_;
    throw std::bad_alloc();
  }
}

Inflater::~Inflater() {
  inflateEnd(stream_);
  delete stream_;
}

Inflated Inflater::step(size_t budget, InflatedBytes* out, std::string* error) {
  if (!started_) {
    started_ = true;
    out->clear();
    if (left_ == 0 && rules_.empty_is_empty) return Inflated::kDone;
  }
  // One byte past the limit tells it is exceeded.
  const size_t most = limit_ == SIZE_MAX ? limit_ : limit_ + 1;
  // Where bytes past the limit go while the rest of the stream is measured.
  thread_local char discard[64 << 10];
  size_t spent = 0;
  for (;;) {
    if (!past_limit_ && out->size() == out->capacity()) {
      size_t grow = out->size() < first_block_ ? first_block_ : out->size();
      if (grow > most - out->size()) grow = most - out->size();
      out->grow_to(out->size() + grow);
    }
    char* dest = past_limit_ ? discard : out->end();
    size_t room = past_limit_ ? sizeof discard : out->capacity() - out->size();
    if (room > budget - spent) room = budget - spent;
    if (room == 0) return Inflated::kMore;
    const size_t in_piece = left_ < UINT_MAX ? left_ : UINT_MAX;
    stream_->next_in = reinterpret_cast<Bytef*>(const_cast<char*>(next_));
    stream_->avail_in = static_cast<uInt>(in_piece);
    stream_->next_out = reinterpret_cast<Bytef*>(dest);
    stream_->avail_out = static_cast<uInt>(room < UINT_MAX ? room : UINT_MAX);
    const uInt in_before = stream_->avail_in;
    const uInt out_before = stream_->avail_out;
    const int status = ::inflate(stream_, Z_NO_FLUSH);
    next_ += in_before - stream_->avail_in;
    left_ -= in_before - stream_->avail_in;
    const size_t produced = out_before - stream_->avail_out;
    spent += produced;
    total_ += produced;
    if (!past_limit_) out->wrote(produced);
    if (status == Z_MEM_ERROR) throw std::bad_alloc();
    if (status == Z_STREAM_END && rules_.exact && left_ != 0) {
      *error = "bytes after the end of the stream";
      out->clear();
      return Inflated::kDamaged;
    }
    if (total_ > limit_) {
      if (rules_.measure_to == 0 || total_ > rules_.measure_to) return Inflated::kTooLarge;
      if (status == Z_STREAM_END) return Inflated::kTooLarge;  // measured whole
      if (!past_limit_) {
        past_limit_ = true;
        out->release();  // nothing past the limit is answered: a bomb's worth is not held
      }
    }
    if (status == Z_STREAM_END) return Inflated::kDone;
    if (status != Z_OK && status != Z_BUF_ERROR) {
      *error = inflate_error(status, *stream_);
      out->clear();
      return Inflated::kDamaged;
    }
    if (left_ == 0 && stream_->avail_out != 0) {  // all read, and the stream goes on
      *error = kTruncated;
      out->clear();
      return Inflated::kDamaged;
    }
  }
}

Inflated inflate_stream(StreamFormat format, std::string_view data, size_t limit,
                        InflatedBytes* out, std::string* error) {
  return Inflater(format, data, limit).step(SIZE_MAX, out, error);
}

Inflated inflate_body(ContentEncoding encoding, std::string_view body, size_t limit,
                      InflatedBytes* out, std::string* error) {
  if (encoding == ContentEncoding::kGzip) {
    return inflate_stream(StreamFormat::kGzip, body, limit, out, error);
  }
  const Inflated zlib_format = inflate_stream(StreamFormat::kZlib, body, limit, out, error);
  if (zlib_format != Inflated::kDamaged) return zlib_format;
  return inflate_stream(StreamFormat::kRawDeflate, body, limit, out, error);
}

}  // namespace naiad
