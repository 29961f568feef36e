#include "ipc/block_views.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

namespace naiad {

void OutViews::add(size_t at, const uint8_t* data, size_t size, std::shared_ptr<HeldBlock> block) {
  if (size == 0) return;  // a view of nothing would stop consume() at its position
  views_.push_back(View{at, data, size, std::move(block)});
  bytes_ += size;
}

void OutViews::append(OutViews&& other, size_t base) {
  for (View& view : other.views_) {
    view.at += base;
    views_.push_back(std::move(view));
  }
  bytes_ += other.bytes_;
  other.clear();
}

void OutViews::clear() {
  views_.clear();
  bytes_ = 0;
}

int OutViews::gather(const std::string& out, iovec* iov, int max) const {
  int n = 0;
  size_t pos = 0;
  for (const View& view : views_) {
    if (view.at > pos) {
      if (n == max) return n;
      iov[n++] = iovec{const_cast<char*>(out.data() + pos), view.at - pos};
      pos = view.at;
    }
    if (n == max) return n;
    iov[n++] = iovec{const_cast<uint8_t*>(view.data), view.size};
  }
  if (out.size() > pos && n < max) {
    iov[n++] = iovec{const_cast<char*>(out.data() + pos), out.size() - pos};
  }
  return n;
}

void OutViews::consume(std::string* out, size_t sent) {
  size_t pos = 0;  // bytes of `out` sent
  while (sent != 0) {
    const size_t next = views_.empty() ? out->size() : views_.front().at;
    const size_t plain = std::min(sent, next - pos);
    pos += plain;
    sent -= plain;
    if (sent == 0 || views_.empty()) break;
    View& view = views_.front();
    const size_t taken = std::min(sent, view.size);
    view.data += taken;
    view.size -= taken;
    bytes_ -= taken;
    sent -= taken;
    if (view.size == 0) views_.pop_front();  // its block is released with its last view
  }
  out->erase(0, pos);
  for (View& view : views_) view.at -= pos;
}

int send_spliced(int fd, std::string* out, OutViews* views) {
  constexpr int kMaxIov = 256;
  iovec iov[kMaxIov];
  for (;;) {
    const int n = views->gather(*out, iov, kMaxIov);
    if (n == 0) return 0;
    msghdr message{};
    message.msg_iov = iov;
    message.msg_iovlen = static_cast<size_t>(n);
    const ssize_t sent = ::sendmsg(fd, &message, MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
      return errno;
    }
    views->consume(out, static_cast<size_t>(sent));
  }
}

}  // namespace naiad
