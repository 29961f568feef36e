// Two sinks for writers that size a message before they write it: ByteCounter adds
// up the bytes a writer would put, ByteWriter puts them at a pointer. Writing a
// response twice through the same template, once per sink, lets the caller allocate
// the destination (e.g. the Python bytes object that goes to the socket) at its exact
// size and write the tensor bytes into it once.
#pragma once

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace naiad {

class ByteCounter {
 public:
  void put(std::string_view text) { size_ += text.size(); }
  void put(char) { ++size_; }
  void put(const uint8_t*, size_t size) { size_ += size; }
  void number(uint64_t value) {
    char buffer[24];
    size_ +=
        static_cast<size_t>(std::to_chars(buffer, buffer + sizeof(buffer), value).ptr - buffer);
  }
  size_t size() const { return size_; }

 private:
  size_t size_ = 0;
};

class ByteWriter {
 public:
  explicit ByteWriter(char* out) : start_(out), p_(out) {}
  void put(std::string_view text) {
    // An empty view may have no data (a response without an error message).
    if (!text.empty()) std::memcpy(p_, text.data(), text.size());
    p_ += text.size();
  }
  void put(char c) { *p_++ = c; }
  void put(const uint8_t* data, size_t size) {
    if (size != 0) std::memcpy(p_, data, size);
    p_ += size;
  }
  void number(uint64_t value) { p_ = std::to_chars(p_, p_ + 24, value).ptr; }
  size_t size() const { return static_cast<size_t>(p_ - start_); }

 private:
  char* start_;
  char* p_;
};

// Appends to a string: for a message whose text is costly to produce twice (JSON
// numbers), written once and then sized and copied.
class StringSink {
 public:
  explicit StringSink(std::string* out) : out_(out), start_(out->size()) {}
  void put(std::string_view text) { out_->append(text.data(), text.size()); }
  void put(char c) { out_->push_back(c); }
  void put(const uint8_t* data, size_t size) {
    if (size != 0) out_->append(reinterpret_cast<const char*>(data), size);
  }
  void number(uint64_t value) {
    char buffer[24];
    out_->append(buffer, std::to_chars(buffer, buffer + sizeof(buffer), value).ptr);
  }
  size_t size() const { return out_->size() - start_; }

 private:
  std::string* out_;
  size_t start_;
};

}  // namespace naiad
