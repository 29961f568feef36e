// The frontend's wake-up (issue 13): a worker's post writes the notify eventfd only
// when ArenaHeader::notify_pending was 0, and Core::poll() re-arms the flag, drains the
// eventfd and reads the rings. A post that lands while poll() is at it must leave the
// eventfd readable for the posts after it. Re-arming before draining did not: the
// drain ate that post's signal, the flag stayed 1 with the eventfd empty, no post ever
// signalled again, and every later completion of every model sat in the rings
// unannounced (the server hung).
//
// The race is made certain here: the core's notify fd is replaced by the read end of
// a blocking pipe and the worker writes to its write end, so poll()'s drain blocks
// until the worker's post signals, exactly inside the window.
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "core/core.h"
#include "ipc/worker_endpoint.h"
#include "testing.h"

using namespace naiad;

namespace {

// Whether thread `tid` of this process is asleep (blocked in a system call).
bool asleep(pid_t tid) {
  const std::string path = "/proc/self/task/" + std::to_string(tid) + "/stat";
  FILE* file = std::fopen(path.c_str(), "r");
  if (file == nullptr) return false;
  char line[512] = {};
  const bool read = std::fgets(line, sizeof(line), file) != nullptr;
  std::fclose(file);
  const char* state = read ? std::strrchr(line, ')') : nullptr;
  return state != nullptr && state[1] == ' ' && state[2] == 'S';
}

bool readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, 0) > 0;
}

}  // namespace

TEST(a_post_while_poll_drains_leaves_the_next_post_a_wakeup) {
  Core core(1 << 20, nullptr, false);
  BatcherConfig config;
  const ModelHandle model = core.add_model(config);
  const uint32_t instance = core.add_instance(model);
  core.instance_up(instance);  // poll() reads the rings of running instances only
  const InstanceEndpoint ep = core.endpoint(instance);
  int pipe_fds[2];
  CHECK(pipe(pipe_fds) == 0);
  CHECK(dup2(pipe_fds[0], core.notify_fd()) == core.notify_fd());  // blocking reads
  ::close(pipe_fds[0]);
  WorkerEndpoint worker(dup(core.arena().fd()), ep.channel_offset, dup(ep.wake_fd), pipe_fds[1]);
  const Channel* channel = core.arena().at<Channel>(ep.channel_offset);
  auto ring_empty = [channel] {
    return channel->to_frontend.head.load() == channel->to_frontend.tail.load();
  };

  // The frontend polls; with nothing signalled its drain blocks. The worker's first
  // post (a batch-done message of a batch the core does not know: read and dropped)
  // signals and so lets it go on.
  std::atomic<pid_t> tid{0};
  std::thread frontend([&] {
    tid.store(static_cast<pid_t>(gettid()));
    core.poll();
  });
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while ((tid.load() == 0 || !asleep(tid.load())) && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  worker.end_batch(1000001, false);
  frontend.join();
  CHECK(ring_empty());  // poll() read it

  // The next post must wake the frontend again.
  worker.end_batch(1000002, false);
  CHECK(readable(core.notify_fd()));
  core.poll();
  CHECK(ring_empty());
}
