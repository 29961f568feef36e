// The worker side of an instance channel: wait for the next batch, allocate the
// result block in the arena, post the completion and wake the frontend.
#pragma once

#include <cstdint>

#include "arena.h"
#include "channel.h"

namespace naiad {

class WorkerEndpoint {
 public:
  // Takes ownership of the inherited descriptors.
  WorkerEndpoint(int arena_fd, uint64_t channel_offset, int wake_fd, int notify_fd);
  ~WorkerEndpoint();
  WorkerEndpoint(const WorkerEndpoint&) = delete;
  WorkerEndpoint& operator=(const WorkerEndpoint&) = delete;

  // Blocks (without spinning) until the frontend posts a message.
  BatchMessage next();
  // Posts a completion; wakes the frontend unless a wake is already pending.
  void complete(uint64_t batch_id, uint64_t result_offset, uint64_t result_size, int32_t status);

  Arena& arena() { return arena_; }

 private:
  Arena arena_;
  Channel* channel_;
  int wake_fd_;
  int notify_fd_;
};

}  // namespace naiad
