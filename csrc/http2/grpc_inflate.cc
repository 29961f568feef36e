#include "http2/grpc_inflate.h"

namespace naiad::grpc {

Inflation::Inflation(std::string compressed, std::string_view encoding, uint64_t max_message_size)
    : compressed_(std::move(compressed)),
      algorithm_(encoding == "gzip" ? "gzip" : "deflate"),
      max_(max_message_size) {
  InflateRules rules;
  rules.exact = true;
  rules.empty_is_empty = true;
  rules.measure_to = max_ * kMeasureFactor;
  inflater_ = std::make_unique<Inflater>(
      algorithm_ == "gzip" ? StreamFormat::kGzip : StreamFormat::kZlib, compressed_, max_, rules);
}

bool Inflation::step(size_t budget) {
  if (done_) return true;
  std::string zlib_error;
  const Inflated outcome = inflater_->step(budget, &inflated_, &zlib_error);
  if (outcome == Inflated::kMore) return false;
  done_ = true;
  if (outcome == Inflated::kTooLarge) {
    const uint64_t size = inflater_->total();
    status_ = kResourceExhausted;
    error_ = "Received message larger than max (" +
             (size > max_ * kMeasureFactor ? "more than " + std::to_string(max_ * kMeasureFactor)
                                           : std::to_string(size)) +
             " vs. " + std::to_string(max_) + ")";
  } else if (outcome == Inflated::kDamaged) {
    status_ = kInternal;
    error_ = "Unexpected error decompressing data for algorithm " + std::string(algorithm_);
  }
  if (status_ != kOk) inflated_.release();
  inflater_.reset();  // zlib's state (about 40 KiB) goes as soon as it is done
  compressed_.clear();
  compressed_.shrink_to_fit();
  return true;
}

}  // namespace naiad::grpc
