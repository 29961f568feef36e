// Batch-major assembly: where a request's bytes go when it is submitted, and how a
// formed batch becomes one contiguous [N, ...] tensor per input (ipc_schema.h).
//
// Each batching model has an open staging slab: one arena block with a region for
// request blocks and one region per input, each sized for several batches' rows. A
// submit copies its inputs straight into the next rows of every input region (the
// one copy from the received bytes). The batcher then forms batches; when a batch's
// requests are a contiguous run of rows of one slab (first in, first out: the common
// case), that run IS the batch tensor and nothing moves. Otherwise the inputs are
// gathered into the batch descriptor's block at dispatch, a second copy. The cases
// that take two copies:
//   - the batch is not a run of consecutive submits: priority levels reordering the
//     queue, a queue timeout taking a request out of the middle, requests with other
//     shapes (another shape key) submitted in between;
//   - the batch crosses from one slab into the next (a slab holds kSlabBatches
//     batches' worth of rows, so under sustained load about one batch in that many);
//   - the request did not fit a slab (larger than the slab budget, or no arena room
//     for a new slab) and was laid out in a block of its own.
// One-request batches never gather (their slots are the tensors), and models that
// do not batch have no slab: each request is one block, inputs included.
//
// Inputs in a client's system shared-memory region (InputSource kSystemShm) are not
// copied at submit: place() keeps rows for them as for any input and notes the region
// in the slot (InputSlot::region). At dispatch, a batch of one request leaves them
// there and the worker reads them in place (no copy); a batch of several copies each
// one out of the region, once, into its rows (or straight into the gathered tensor).
// A model whose workers never take the batch whole (the Python backend: each request's
// arrays apart) reads them in place in any batch (Core::set_batch_tensors).
// The submitter keeps the region referenced until the request is answered
// (kserve_codec.h pins, Python's RegionRef), so the region outlives both reads.
//
// A slab is reference counted by the requests placed in it and freed when the last
// is released, the open one too: an idle model holds nothing in the arena. Slabs belong to the
// frontend; the only blocks a worker can leave behind are tagged with the batch id
// (descriptor and gathered tensors included), so Core::instance_down reclaims them.
//
// Threads: place() runs on the submitting thread without the core's lock; describe()
// and release() run under the core's lock (dispatch, poll, the timer thread). The
// assembler's own mutex guards the slab table; the lock order is core, then
// assembler. Bytes are copied outside the assembler's lock: rows reserved by place()
// are the caller's alone until the request is queued.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/dynamic_batcher.h"
#include "core/submit_request.h"
#include "ipc/arena.h"
#include "ipc/ipc_schema.h"

namespace naiad {

// Lays `request` out in a block of its own (RequestHeader, slots, metadata, then each
// input aligned), allocated with `tag`: requests without a slab, and the requests a
// worker submits (BLS). `trailer` bytes (a BLS call's string correlation id) are
// copied after the inputs, at the arena offset `*trailer_offset` gets. Returns the
// block offset, 0 when the arena has no room.
uint64_t place_standalone(Arena& arena, const SubmitRequest& request, const uint8_t* const* sources,
                          uint64_t tag, std::string_view trailer = {},
                          uint64_t* trailer_offset = nullptr);

class BatchAssembler {
 public:
  // Rows a slab holds, in batches of max_batch_size: larger slabs make a batch that
  // crosses into the next slab (and so gathers) rarer.
  static constexpr uint32_t kSlabBatches = 8;
  // Bytes a slab may take beyond one full batch: slabs of big inputs hold fewer rows.
  static constexpr uint64_t kSlabBudget = uint64_t{16} << 20;

  explicit BatchAssembler(Arena& arena) : arena_(arena) {}
  // Where slots with a region are read from at dispatch (Core::set_input_regions).
  void set_regions(InputRegions* regions) { regions_ = regions; }
  BatchAssembler(const BatchAssembler&) = delete;
  BatchAssembler& operator=(const BatchAssembler&) = delete;

  // `model_key` names the model for the assembler's life: the core passes its
  // ModelHandle value, which carries the slot's generation, so a model added in a
  // removed model's slot never sees that model's slabs.
  // `max_rows`: the most rows one batch of the model holds; 0 or 1 (no batching):
  // requests get a block of their own.
  void add_model(uint64_t model_key, uint32_t max_rows);
  // The model takes no more requests (Core::remove_model): its open slab closes,
  // freed once its last request is released; a later place() for the key lays the
  // request out in a block of its own.
  void close_model(uint64_t model_key);

  // Lays `request` out in the arena: its block (RequestHeader, slots, metadata) and
  // its inputs, copied from `sources`. Returns the block offset, 0 when the arena has
  // no room. The request holds its rows until release().
  uint64_t place(uint64_t model_key, const SubmitRequest& request, const uint8_t* const* sources);
  // The request is done (ran, rejected, or never queued).
  void release(uint64_t block_offset);
  // The same for each request, under one lock.
  void release(const std::vector<QueuedRequest>& requests);

  // Writes the batch descriptor of `requests` (ipc_schema.h) into a block tagged
  // `batch_id`, joining their inputs into batch tensors, and returns its offset;
  // 0 when the arena has no room. Free it with arena.free() when the batch is done.
  // `batch_tensors` false (a model whose workers read each request apart): inputs in
  // client regions stay there whatever the batch's size, and such a batch of several
  // requests has no batch tensors (n_tensors 0).
  uint64_t describe(uint64_t batch_id, const std::vector<QueuedRequest>& requests,
                    bool batch_tensors = true);

  // Copies the inputs of the request block at `block_offset` still in client regions
  // into the rows place() kept for them, for a consumer that reads the block itself
  // rather than through a batch descriptor (an ensemble, ensemble_scheduler.h); false
  // when a region cannot be read. The block is its request's alone: no lock is taken.
  bool fill_from_regions(uint64_t block_offset);

  // Slabs allocated: each holds requests not yet released.
  size_t slabs();
  // How many batches found their tensors contiguous / had to gather (tests, stats).
  uint64_t contiguous_batches() const { return contiguous_; }
  uint64_t gathered_batches() const { return gathered_; }
  // Input bytes copied by place() (the first copy) and by describe() (the second).
  uint64_t placed_bytes() const { return placed_bytes_.load(std::memory_order_relaxed); }
  uint64_t gathered_bytes() const { return gathered_bytes_; }
  // Inputs left in client regions for the worker to read in place (one-request batches).
  uint64_t in_place_inputs() const { return in_place_inputs_.load(std::memory_order_relaxed); }

 private:
  struct Region {  // one input's rows in a slab
    uint64_t begin = 0;
    uint64_t capacity = 0;
    uint64_t used = 0;
  };
  struct Slab {
    uint64_t offset = 0;  // the arena block
    uint64_t size = 0;
    uint64_t model_key = 0;
    uint32_t n_inputs = 0;
    uint64_t input_order = 0;
    uint32_t row_capacity = 0;
    uint32_t rows = 0;
    uint64_t blocks_begin = 0, blocks_end = 0, blocks_used = 0;  // request block region
    std::vector<Region> regions;                                 // one per input
    uint32_t refs = 0;                                           // requests placed and not released
    bool open = true;                                            // still taking requests
  };
  struct Staging {
    uint32_t max_rows = 0;
    uint64_t open_slab = 0;  // offset of the open slab, 0 when none
  };

  bool fits(const Slab& slab, const SubmitRequest& request, uint64_t block_bytes) const;
  Slab* open_slab_locked(uint64_t model_key, Staging& staging, const SubmitRequest& request,
                         uint64_t block_bytes);
  void close_slab_locked(uint64_t offset);
  // Drops the request's hold on its slab; false: the block is not in a slab.
  bool release_locked(uint64_t block_offset);

  // Copies the slot's bytes out of its client region to `target`; false when the
  // region cannot be read (cannot happen while the submitter holds its reference).
  bool copy_from_region(InputSlot& slot, uint8_t* target);

  Arena& arena_;
  InputRegions* regions_ = nullptr;
  std::atomic<uint64_t> in_place_inputs_{0};
  std::mutex mutex_;
  std::unordered_map<uint64_t, Staging> models_;  // by model key
  std::map<uint64_t, Slab> slabs_;                // by arena offset: release() finds a block's slab
  uint64_t contiguous_ = 0;                       // under the core's lock (describe)
  uint64_t gathered_ = 0;
  uint64_t gathered_bytes_ = 0;
  std::atomic<uint64_t> placed_bytes_{0};
};

}  // namespace naiad
