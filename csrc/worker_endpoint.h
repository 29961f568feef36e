// The worker side of an instance channel: wait for the next batch, allocate the
// result block in the arena, post the completion and wake the frontend.
#pragma once

#include <cstdint>
#include <vector>

#include "arena.h"
#include "channel.h"
#include "response_block.h"

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
  // Posts the batch's end: a response block already in the arena (0: none) and the
  // status; wakes the frontend unless a wake is already pending.
  void complete(uint64_t batch_id, uint64_t result_offset, uint64_t result_size, int32_t status);
  // Writes `responses` into a new response block (tagged with the batch, so a dead
  // worker's blocks are reclaimed) and posts it; `batch_done` also ends the batch.
  // False when the arena has no room (nothing was posted).
  bool respond(uint64_t batch_id, const std::vector<ResponseEntry>& responses,
               const uint64_t timings[4], bool batch_done);
  // Posts one message; waits while the ring is full (the frontend drains it).
  void post(const CompletionMessage& message);

  Arena& arena() { return arena_; }

 private:
  void wake_frontend();

  Arena arena_;
  Channel* channel_;
  int wake_fd_;
  int notify_fd_;
};

}  // namespace naiad
