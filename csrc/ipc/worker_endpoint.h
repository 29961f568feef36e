// The worker side of an instance channel: wait for the next batch, allocate the
// result block in the arena, post the completion and wake the frontend.
#pragma once

#include <cstdint>
#include <mutex>
#include <string_view>
#include <vector>

#include "core/submit_request.h"
#include "ipc/arena.h"
#include "ipc/channel.h"
#include "ipc/response_block.h"

namespace naiad {

class WorkerEndpoint {
 public:
  // Takes ownership of the inherited descriptors.
  WorkerEndpoint(int arena_fd, uint64_t channel_offset, int wake_fd, int notify_fd);
  ~WorkerEndpoint();
  WorkerEndpoint(const WorkerEndpoint&) = delete;
  WorkerEndpoint& operator=(const WorkerEndpoint&) = delete;

  // Blocks (without spinning) until the frontend posts a message: a batch, a stop,
  // or a response to a request this worker submitted (channel.h MessageKind).
  BatchMessage next();
  // The next message if one is there, without blocking.
  bool try_next(BatchMessage* message);
  // Posts the batch's end: a response block already in the arena (0: none) and the
  // status; wakes the frontend unless a wake is already pending.
  void complete(uint64_t batch_id, uint64_t result_offset, uint64_t result_size, int32_t status);
  // Writes `responses` into a new response block (tagged with the batch, so a dead
  // worker's blocks are reclaimed) and posts it; `batch_done` also ends the batch,
  // `keep_open` (with it) keeps its requests without a final response open for
  // responses posted later (decoupled models, channel.h kPostKeepOpen).
  // False when the arena has no room (nothing was posted).
  bool respond(uint64_t batch_id, const std::vector<ResponseEntry>& responses,
               const uint64_t timings[4], bool batch_done, bool keep_open = false);
  // An output-major response block (response_block.h) laid out in a new block of the
  // arena, tagged with the batch, for the model to write its outputs into: its offset
  // (0 when the arena has no room) and size; `runs` gets each output's run, as arena
  // offsets. post_block() posts it once written (timings filled in then), or the caller
  // frees it (arena().free).
  uint64_t reserve_output_major(uint64_t batch_id, const std::vector<ResponseEntry>& responses,
                                uint64_t* runs, uint64_t* size);
  // Posts a response block written in place (reserve_output_major) as respond() posts
  // its own.
  void post_block(uint64_t batch_id, uint64_t offset, uint64_t size, const uint64_t timings[4],
                  bool batch_done);
  // Ends the batch without responses: the instance is free, its requests without a
  // final response stay open (keep_open) or fail.
  void end_batch(uint64_t batch_id, bool keep_open);
  // Posts one message; waits while the ring is full (the frontend drains it). Any
  // thread: posts are serialized (the ring has one producer), so a decoupled model
  // may answer from threads of its own.
  void post(const CompletionMessage& message);

  // Submits a request to the core for the model whose ModelHandle value is `model`
  // (BLS), named `tag`: its inline
  // inputs are copied into a block of the arena, which the core takes over. Its
  // responses come back from next() as kResponse messages carrying `tag` (kRefused
  // if it cannot be served). kArenaFull or kUnsupportedInput: nothing was sent.
  // `wake` false leaves waking the frontend to a later wake() (several submits, one
  // wake-up: the core then takes them in one poll and may batch them together).
  // The request's correlation id and START/END flags (request.options.sequence_*)
  // travel with it to the target's sequence batcher. `trace_batch`, `trace_index`:
  // SubmitMessage's (a call made with trace=).
  SubmitResult submit(uint64_t model, uint64_t tag, const SubmitRequest& request, bool wake = true,
                      uint64_t trace_batch = 0, uint32_t trace_index = 0);
  // Cancels the request submitted as `tag` (channel.h SubmitKind::kCancel); a tag
  // already answered is ignored by the core.
  void cancel(uint64_t tag);
  // Sends a model-control request (channel.h SubmitKind::kControl) named `tag`: a
  // control block (ipc_schema.h ControlHeader) of `json` and the `files`' bytes,
  // tagged with the running batch until the core takes it. Its answer comes back from
  // next() as a kControlReply message with `tag`. False when the arena has no room
  // (nothing was sent).
  bool control(uint64_t tag, std::string_view json, const std::vector<std::string_view>& files);
  // Wakes the frontend for what this worker left on its rings (unless a wake is
  // already pending).
  void wake() { wake_frontend(); }
  // Called after a streamed response is posted. A wake-up the frontend has not taken
  // yet means it is runnable but not running, as when it shares this CPU (a server
  // pinned to one core): this thread then gives up the CPU. Without that, a model
  // sending in a loop keeps the CPU for its whole time slice, the frontend forwards
  // the responses in a few large bursts and the client idles between them; yielding
  // interleaves the two, so the client reads while the model sends (one stream of
  // 100 responses per request: 20-25 % more responses/s, perf/decoupled_stream.py).
  // True when it yielded.
  bool yield_to_frontend();

  Arena& arena() { return arena_; }

 private:
  BatchMessage pop_next();
  void wake_frontend();
  void push_to_core(const SubmitMessage& message);  // waits while to_core is full

  Arena arena_;
  Channel* channel_;
  uint64_t current_batch_ = 0;  // the batch running: tags what it allocates
  std::mutex post_mutex_;       // one producer at a time on to_frontend
  std::mutex submit_mutex_;     // and on to_core
  int wake_fd_;
  int notify_fd_;
};

}  // namespace naiad
