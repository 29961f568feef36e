// A compressed gRPC message (the prefix's flag set, grpc-encoding gzip or deflate)
// inflated by the one inflater (codec/http_compress.h) as Triton 2.51's gRPC core takes
// it: one whole stream (gzip, or deflate in the zlib format) with nothing after its end,
// an empty message staying empty. A damaged stream is INTERNAL "Unexpected error
// decompressing data for algorithm gzip"; one that inflates past the maximum message
// size is RESOURCE_EXHAUSTED naming its whole inflated size, so it is inflated to its
// end (checked to the end as gRPC core does), without keeping what passes the maximum.
// Past kMeasureFactor times the maximum it is given up and the message says "more than".
//
// It is done in steps of at most a budget of bytes: the I/O loop (grpc_io.cc) inflates a
// small message at once and a large one (a bomb: a few megabytes inflating to
// gigabytes) a step per loop turn, serving its other connections in between.
//
// Python's general path inflates the messages the loop does not hold (ModelStreamInfer's,
// other calls') with it too, whole, on its inflating thread (naiad/inflate.py).
//
// Threads: one at a time (the loop thread that owns the call).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "codec/http_compress.h"
#include "http2/grpc_wire.h"

namespace naiad::grpc {

class Inflation {
 public:
  // Bytes a step inflates at most (about a millisecond of zlib).
  static constexpr size_t kStep = size_t(1) << 20;
  // How far past the maximum a message is inflated to measure it.
  static constexpr uint64_t kMeasureFactor = 2;

  // `encoding`: the call's grpc-encoding, "gzip" or "deflate" (the connection refuses
  // any other); `max_message_size`: the limit on the inflated message.
  Inflation(std::string compressed, std::string_view encoding, uint64_t max_message_size);
  Inflation(const Inflation&) = delete;  // the inflater reads `compressed_` in place
  Inflation& operator=(const Inflation&) = delete;

  // Inflates on by at most `budget` bytes; true once it is done.
  bool step(size_t budget = kStep);
  bool done() const { return done_; }
  // Once done: kOk and message(), or Triton's status and error().
  int status() const { return status_; }
  const std::string& error() const { return error_; }
  std::string_view message() const { return inflated_.view(); }
  // The message as received, for a call handed on before it is done.
  std::string take_compressed() { return std::move(compressed_); }

 private:
  std::string compressed_;
  std::string_view algorithm_;  // "gzip" or "deflate"
  uint64_t max_;
  InflatedBytes inflated_;
  std::unique_ptr<Inflater> inflater_;
  bool done_ = false;
  int status_ = 0;
  std::string error_;
};

}  // namespace naiad::grpc
