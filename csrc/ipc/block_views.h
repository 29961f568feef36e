// Answers whose tensor bytes go to the socket from the response block they are in,
// not copied into the connection's output first: the bytes before them (HTTP head and
// JSON) stay in the connection's `out` string and each tensor is a view into the
// block, spliced in after a given number of `out`'s bytes. The block is held (not
// freed) until the last view of it is sent or dropped with its connection.
//
// Threads: one connection's loop thread alone uses its views; a block's hold is
// released on that thread too (Arena::free takes the arena's own lock).
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>

#include "ipc/arena.h"

namespace naiad {

// Tensors smaller than this are copied rather than viewed: one more iovec and a held
// block cost more than copying a page.
constexpr size_t kMinBlockView = 4096;

// A response block kept allocated while views of it wait to be sent; freed by the
// last holder. `held` (the loop's count of bytes held this way, which bounds how much
// of the arena slow readers can keep) goes down by the block's size then.
class HeldBlock {
 public:
  HeldBlock(Arena& arena, uint64_t offset, uint64_t size, uint64_t* held)
      : arena_(arena), offset_(offset), size_(size), held_(held) {
    *held_ += size_;
  }
  ~HeldBlock() {
    *held_ -= size_;
    arena_.free(offset_);
  }
  HeldBlock(const HeldBlock&) = delete;
  HeldBlock& operator=(const HeldBlock&) = delete;
  // Whether [data, data + size) lies in the block.
  bool holds(const void* data, size_t size) const {
    const uint8_t* begin = arena_.base() + offset_;
    const uint8_t* p = static_cast<const uint8_t*>(data);
    return p >= begin && p <= begin + size_ && size <= static_cast<size_t>(begin + size_ - p);
  }

 private:
  Arena& arena_;
  uint64_t offset_;
  uint64_t size_;
  uint64_t* held_;
};

// The views spliced into one output string, in order of position.
class OutViews {
 public:
  bool empty() const { return views_.empty(); }
  // View bytes not yet sent.
  size_t bytes() const { return bytes_; }
  // `size` bytes at `data` (in `block`) go out after the first `at` bytes of the
  // output; `at` is at least every earlier view's.
  void add(size_t at, const uint8_t* data, size_t size, std::shared_ptr<HeldBlock> block);
  // Moves `other`'s views (of an output that is appended to this one's, which was
  // `base` bytes long then) behind these.
  void append(OutViews&& other, size_t base);
  // Drops every view (their blocks are released by their last holder).
  void clear();

  // Up to `max` iovecs of the output `out` with the views spliced in, in order; the
  // count.
  int gather(const std::string& out, iovec* iov, int max) const;
  // The first `sent` bytes of the spliced output went out: they leave `out` and the
  // views.
  void consume(std::string* out, size_t sent);

 private:
  struct View {
    size_t at;  // bytes of the output before it
    const uint8_t* data;
    size_t size;
    std::shared_ptr<HeldBlock> block;
  };
  std::deque<View> views_;
  size_t bytes_ = 0;
};

// Sends what the socket `fd` takes now of `out` with `views` spliced in (sendmsg over
// the string and the views, no copy). 0: all was sent or the socket took all it could
// (EAGAIN); else the errno of the failure.
int send_spliced(int fd, std::string* out, OutViews* views);

}  // namespace naiad
