#include "ipc/channel.h"

#include <errno.h>
#include <poll.h>
#include <unistd.h>

namespace naiad {

void signal_eventfd(int fd) {
  uint64_t one = 1;
  while (write(fd, &one, sizeof(one)) < 0 && errno == EINTR) {
  }
}

void wait_eventfd(int fd) {
  uint64_t value;
  for (;;) {
    ssize_t n = read(fd, &value, sizeof(value));
    if (n == sizeof(value)) return;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      // Non-blocking fd: wait for readability instead.
      pollfd p{fd, POLLIN, 0};
      while (poll(&p, 1, -1) < 0 && errno == EINTR) {
      }
      continue;
    }
    return;
  }
}

void drain_eventfd(int fd) {
  uint64_t value;
  while (read(fd, &value, sizeof(value)) < 0 && errno == EINTR) {
  }
}

}  // namespace naiad
