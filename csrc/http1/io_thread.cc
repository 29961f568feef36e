#include "http1/io_thread.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

namespace naiad {

namespace {

enum : uint64_t { kSockets = 1, kCompletions = 2, kStop = 3, kPause = 4 };

bool watch(int epoll_fd, int fd, uint32_t events, uint64_t key) {
  epoll_event event{};
  event.events = events;
  event.data.u64 = key;
  return epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &event) == 0;
}

}  // namespace

IoThread::IoThread(HttpIo& io, Core& core, Hand hand)
    : io_(io), core_(core), hand_(std::move(hand)) {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  stop_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  pause_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || stop_fd_ < 0 || pause_fd_ < 0 ||
      !watch(epoll_fd_, io_.epoll_fd(), EPOLLIN, kSockets) ||
      !watch(epoll_fd_, core_.notify_fd(), EPOLLIN | EPOLLEXCLUSIVE, kCompletions) ||
      !watch(epoll_fd_, stop_fd_, EPOLLIN, kStop) ||
      !watch(epoll_fd_, pause_fd_, EPOLLIN, kPause)) {
    const std::string why = std::strerror(errno);
    if (epoll_fd_ >= 0) ::close(epoll_fd_);
    if (stop_fd_ >= 0) ::close(stop_fd_);
    if (pause_fd_ >= 0) ::close(pause_fd_);
    throw std::runtime_error("I/O thread " + std::to_string(io_.loop_index()) + ": " + why);
  }
  thread_ = std::thread([this] { loop(); });
}

IoThread::~IoThread() {
  const uint64_t one = 1;
  (void)!::write(stop_fd_, &one, sizeof one);
  thread_.join();
  ::close(epoll_fd_);
  ::close(stop_fd_);
  ::close(pause_fd_);
}

void IoThread::pause() {
  std::unique_lock<std::mutex> lock(mutex_);
  pause_asked_ = true;
  const uint64_t one = 1;
  (void)!::write(pause_fd_, &one, sizeof one);
  changed_.wait(lock, [this] { return paused_; });
}

void IoThread::resume() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pause_asked_ = false;
  }
  changed_.notify_all();
}

void IoThread::hold_if_asked() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!pause_asked_) return;
  uint64_t count;
  (void)!::read(pause_fd_, &count, sizeof count);
  paused_ = true;
  changed_.notify_all();
  changed_.wait(lock, [this] { return !pause_asked_; });
  paused_ = false;
}

void IoThread::loop() {
  epoll_event events[4];
  for (;;) {
    const int ready = epoll_wait(epoll_fd_, events, 4, -1);
    if (ready < 0 && errno != EINTR) return;
    bool completions = false;
    for (int e = 0; e < ready; ++e) {
      if (events[e].data.u64 == kStop) return;
      if (events[e].data.u64 == kCompletions) completions = true;
    }
    hold_if_asked();
    HttpIo::Turn turn;
    io_.run(0, 0, &turn);
    if (completions) io_.poll(0, 0, &turn);
    if (hand_ && (!turn.events.empty() || !turn.completions.empty() || !turn.answered.empty())) {
      hand_(io_.loop_index(), std::move(turn));
    }
  }
}

}  // namespace naiad
