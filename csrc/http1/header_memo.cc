#include "http1/header_memo.h"

#include <cstring>
#include <utility>

#include "codec/kserve_json.h"

namespace naiad {

bool HeaderMemo::read(const uint8_t* body, size_t body_size, size_t header_size, ParsedRequest* out,
                      Refusal* refusal) {
  *refusal = Refusal();
  if (header_size == 0 || header_size > body_size) return false;
  const uint8_t* binary = body + header_size;
  const size_t binary_size = body_size - header_size;
  if (kept_ && header_size == header_.size() && binary_size == binary_size_ &&
      std::memcmp(body, header_.data(), header_size) == 0) {
    *out = parsed_;
    for (size_t i = 0; i < offsets_.size(); ++i) out->inputs[i].data = binary + offsets_[i];
    ++hits_;
    return true;
  }
  kept_ = false;
  if (binary_size == 0) {
    // A JSON body (the header is all of it): its inputs are JSON `data` or in shm,
    // never kept, and copying it could cost more than reading it.
    *out = ParsedRequest();
    return read_infer_header(body, header_size, binary, 0, out, refusal);
  }
  header_.assign(reinterpret_cast<const char*>(body), header_size);
  parsed_ = ParsedRequest();
  if (!read_infer_header(reinterpret_cast<const uint8_t*>(header_.data()), header_size, binary,
                         binary_size, &parsed_, refusal)) {
    return false;
  }
  if (keep(binary, binary_size)) {
    kept_ = true;
    binary_size_ = binary_size;
    *out = parsed_;
  } else {
    *out = std::move(parsed_);  // inputs may point into its `converted`: moved, not copied
  }
  return true;
}

bool HeaderMemo::keep(const uint8_t* binary, size_t binary_size) {
  // Views into its own storage (converted data, unescaped text) would not follow a copy.
  if (!parsed_.converted.empty() || !parsed_.output_shm.empty() || !parsed_.unescaped.empty()) {
    return false;
  }
  offsets_.clear();
  const uintptr_t start = reinterpret_cast<uintptr_t>(binary);
  for (const RequestInput& input : parsed_.inputs) {
    if (input.in_shm || input.on_device) return false;
    const uintptr_t at = reinterpret_cast<uintptr_t>(input.data);
    // Outside the binary part: an input of empty JSON `data` (its view is the header).
    if (at < start || at - start > binary_size || input.size > binary_size - (at - start)) {
      return false;
    }
    offsets_.push_back(at - start);
  }
  return true;
}

}  // namespace naiad
