// Per-input scratch on the submit and dispatch paths: a few values on the stack, more
// on the heap, so the common request (a handful of inputs) allocates nothing.
#pragma once

#include <cstddef>
#include <vector>

namespace naiad {

template <typename T, size_t N = 16>
class ScratchArray {
 public:
  explicit ScratchArray(size_t n) : heap_(n > N ? n : 0), data_(n > N ? heap_.data() : inline_) {
    for (size_t i = 0; i < n && i < N; ++i) inline_[i] = T();
  }
  ScratchArray(const ScratchArray&) = delete;
  ScratchArray& operator=(const ScratchArray&) = delete;
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T* data() { return data_; }

 private:
  T inline_[N];
  std::vector<T> heap_;
  T* data_;
};

}  // namespace naiad
