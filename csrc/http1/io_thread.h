// One I/O loop (HttpIo) on a thread of its own: the loop's owning thread when a group
// (io_group.h) runs several. It waits on the loop's epoll fd (sockets, mailbox), the
// core's notify eventfd (EPOLLEXCLUSIVE: one thread of the group wakes per completion
// signal; the one that polls routes each completion to its owners) and its own stop
// eventfd, and runs the loop's turns there.
//
// What a turn leaves for Python (events, completions the loops do not answer, the
// statistics of those they do) goes to `hand`, called on this thread with no lock held:
// the caller's sink must be safe to call from here (the Python side takes the GIL).
// While the thread runs, no other thread calls the loop: Python's calls on a loop
// (write, close, answer...) reach it only once they go through its mailbox too.
#pragma once

#include <cstdint>
#include <functional>
#include <thread>

#include "core/core.h"
#include "http1/http_io.h"

namespace naiad {

class IoThread {
 public:
  using Hand = std::function<void(uint32_t loop, HttpIo::Turn&& turn)>;
  // Starts the thread; std::runtime_error when its fds cannot be made.
  IoThread(HttpIo& io, Core& core, Hand hand);
  // Stops the thread (after the turn it runs) and joins it.
  ~IoThread();
  IoThread(const IoThread&) = delete;
  IoThread& operator=(const IoThread&) = delete;

 private:
  void loop();

  HttpIo& io_;
  Core& core_;
  Hand hand_;
  int epoll_fd_ = -1;
  int stop_fd_ = -1;
  std::thread thread_;
};

}  // namespace naiad
