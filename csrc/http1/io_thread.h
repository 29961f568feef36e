// One I/O loop (HttpIo) on a thread of its own: the loop's owning thread when a group
// (io_group.h) runs several. It waits on the loop's epoll fd (sockets, mailbox), the
// core's notify eventfd (EPOLLEXCLUSIVE: one thread of the group wakes per completion
// signal; the one that polls routes each completion to its owners) and its own stop
// eventfd, and runs the loop's turns there.
//
// What a turn leaves for Python (events, completions the loops do not answer, the
// statistics of those they do) goes to `hand`, called on this thread with no lock held:
// the caller's sink must be safe to call from here. A loop that relays to another
// (HttpIo::relay_to) leaves nothing (its leftovers are posted to that loop): its
// `hand` may be empty.
//
// While the thread runs, no other thread calls the loop, with one exception: a thread
// holding it paused (Pause) is the loop's owner until it lets go, and may call any of
// its methods, and its lane's (settings, the sweep, answers Python makes). The thread
// stops between two turns; the mutex and condition variable order what either did
// before the other goes on. After a pause the thread runs a turn, so what the caller
// did (closes, answers, moves) goes out without waiting for the next socket event.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
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

  // Holds the thread between turns for as long as it lives: the holder owns the loop.
  // One holder at a time, never the loop's own thread.
  class Pause {
   public:
    explicit Pause(IoThread& thread) : thread_(thread) { thread_.pause(); }
    ~Pause() { thread_.resume(); }
    Pause(const Pause&) = delete;
    Pause& operator=(const Pause&) = delete;

   private:
    IoThread& thread_;
  };
  // Returns once the thread waits between turns; resume() lets it go on.
  void pause();
  void resume();

 private:
  void loop();
  // Waits while a pause is asked for (the thread's side of pause()).
  void hold_if_asked();

  HttpIo& io_;
  Core& core_;
  Hand hand_;
  int epoll_fd_ = -1;
  int stop_fd_ = -1;
  int pause_fd_ = -1;  // eventfd written by pause(): wakes the thread to stop
  std::mutex mutex_;
  std::condition_variable changed_;
  bool pause_asked_ = false;  // guarded by mutex_
  bool paused_ = false;       // guarded by mutex_
  std::thread thread_;
};

}  // namespace naiad
