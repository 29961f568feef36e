#include "core/batch_assembler.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "ipc/ipc_schema.h"
#include "util/scratch_array.h"

namespace naiad {

namespace {

uint64_t block_bytes_of(const SubmitRequest& request) {
  const uint32_t n = static_cast<uint32_t>(request.inputs.size());
  return align_tensor(request_metadata_offset(n) + request.metadata.size());
}

// Writes the request block at `block` (header, slots, metadata) and copies each input
// to its slot: the one copy of the inputs from the received bytes.
void write_request(uint8_t* base, uint64_t block, const SubmitRequest& request,
                   const uint8_t* const* sources, const uint64_t* input_offsets) {
  const uint32_t n = static_cast<uint32_t>(request.inputs.size());
  auto* header = reinterpret_cast<RequestHeader*>(base + block);
  *header = RequestHeader{kRequestMagic,
                          n,
                          static_cast<uint32_t>(request.metadata.size()),
                          request.options.batch_size,
                          request.options.input_order,
                          0,
                          0,
                          SpanContext{}};
  auto* slots = reinterpret_cast<InputSlot*>(base + block + sizeof(RequestHeader));
  if (!request.metadata.empty()) {
    std::memcpy(base + block + request_metadata_offset(n), request.metadata.data(),
                request.metadata.size());
  }
  for (uint32_t i = 0; i < n; ++i) {
    const InputSource& input = request.inputs[i];
    const uint64_t size = input.size;
    slots[i] = InputSlot{input_offsets[i], size, 0, 0};
    if (input.kind == InputKind::kSystemShm) {
      // Still in the client's region: copied at dispatch only if the batch needs it.
      slots[i].region = input.region;
      slots[i].region_offset = input.offset;
      continue;
    }
    // A null source is room only (a CUDA input the worker fills).
    if (size != 0 && sources[i] != nullptr) std::memcpy(base + input_offsets[i], sources[i], size);
  }
}

const RequestHeader& header_at(const Arena& arena, uint64_t block) {
  return *arena.at<RequestHeader>(block);
}

InputSlot* slots_at(const Arena& arena, uint64_t block) {
  return arena.at<InputSlot>(block + sizeof(RequestHeader));
}

}  // namespace

uint64_t place_standalone(Arena& arena, const SubmitRequest& request, const uint8_t* const* sources,
                          uint64_t tag, std::string_view trailer, uint64_t* trailer_offset) {
  ScratchArray<uint64_t> input_offsets(request.inputs.size());
  uint64_t size = block_bytes_of(request);
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    input_offsets[i] = size;
    size = align_tensor(size + request.inputs[i].size);
  }
  const uint64_t trailer_at = size;
  size += trailer.size();
  const uint64_t block = arena.alloc(size, tag);
  if (block == 0) return 0;
  for (size_t i = 0; i < request.inputs.size(); ++i) input_offsets[i] += block;
  write_request(arena.base(), block, request, sources, input_offsets.data());
  if (!trailer.empty())
    std::memcpy(arena.base() + block + trailer_at, trailer.data(), trailer.size());
  if (trailer_offset != nullptr) *trailer_offset = block + trailer_at;
  return block;
}

void BatchAssembler::add_model(uint64_t model_key, uint32_t max_rows) {
  std::lock_guard<std::mutex> lock(mutex_);
  models_[model_key] = Staging{max_rows, 0};
}

void BatchAssembler::close_model(uint64_t model_key) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = models_.find(model_key);
  if (found == models_.end()) return;
  if (found->second.open_slab != 0) close_slab_locked(found->second.open_slab);
  models_.erase(found);
}

bool BatchAssembler::fits(const Slab& slab, const SubmitRequest& request,
                          uint64_t block_bytes) const {
  if (slab.n_inputs != request.inputs.size() || slab.input_order != request.options.input_order) {
    return false;
  }
  if (slab.rows + request.options.batch_size > slab.row_capacity) return false;
  if (slab.blocks_used + block_bytes > slab.blocks_end - slab.blocks_begin) return false;
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    const Region& region = slab.regions[i];
    if (region.used + request.inputs[i].size > region.capacity) return false;
  }
  return true;
}

BatchAssembler::Slab* BatchAssembler::open_slab_locked(uint64_t model_key, Staging& staging,
                                                       const SubmitRequest& request,
                                                       uint64_t block_bytes) {
  // Sized from this request's rows: the slab holds kSlabBatches full batches of rows
  // like it, fewer when that is over the budget, never less than one full batch.
  const uint64_t rows_in = std::max<uint32_t>(request.options.batch_size, 1);
  uint64_t row_bytes = block_bytes;
  for (const InputSource& input : request.inputs) row_bytes += input.size / rows_in + 1;
  uint64_t rows = uint64_t{staging.max_rows} * kSlabBatches;
  if (rows * row_bytes > kSlabBudget) {
    rows = std::max<uint64_t>(staging.max_rows, kSlabBudget / row_bytes);
  }
  rows = std::max<uint64_t>(rows, rows_in);
  Slab slab;
  slab.regions.reserve(request.inputs.size());
  slab.model_key = model_key;
  slab.n_inputs = static_cast<uint32_t>(request.inputs.size());
  slab.input_order = request.options.input_order;
  slab.row_capacity = static_cast<uint32_t>(rows);
  // Request blocks: one per row at most, with room for longer metadata (ids vary).
  slab.blocks_end = align_tensor(rows * (2 * block_bytes + kTensorAlign));
  uint64_t cursor = slab.blocks_end;
  for (const InputSource& input : request.inputs) {
    const uint64_t capacity = align_tensor((input.size * rows + rows_in - 1) / rows_in);
    slab.regions.push_back(Region{cursor, capacity, 0});
    cursor += capacity;
  }
  slab.size = cursor;
  slab.offset = arena_.alloc(slab.size);
  if (slab.offset == 0) return nullptr;
  // Region offsets become absolute once the block is known.
  slab.blocks_begin = slab.offset;
  slab.blocks_end += slab.offset;
  for (Region& region : slab.regions) region.begin += slab.offset;
  auto placed = slabs_.emplace(slab.offset, std::move(slab));
  staging.open_slab = placed.first->first;
  return &placed.first->second;
}

void BatchAssembler::close_slab_locked(uint64_t offset) {
  auto found = slabs_.find(offset);
  if (found == slabs_.end()) return;
  found->second.open = false;
  if (found->second.refs == 0) {
    arena_.free(offset);
    slabs_.erase(found);
  }
}

uint64_t BatchAssembler::place(uint64_t model_key, const SubmitRequest& request,
                               const uint8_t* const* sources) {
  const uint64_t block_bytes = block_bytes_of(request);
  ScratchArray<uint64_t> input_offsets(request.inputs.size());
  uint64_t block = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto staging = models_.find(model_key);
    if (staging != models_.end() && staging->second.max_rows > 1) {
      Slab* slab = nullptr;
      if (staging->second.open_slab != 0) {
        slab = &slabs_.at(staging->second.open_slab);
        if (!fits(*slab, request, block_bytes)) {
          close_slab_locked(staging->second.open_slab);
          staging->second.open_slab = 0;
          slab = nullptr;
        }
      }
      if (slab == nullptr) {
        slab = open_slab_locked(model_key, staging->second, request, block_bytes);
      }
      if (slab != nullptr && fits(*slab, request, block_bytes)) {
        block = slab->blocks_begin + slab->blocks_used;
        slab->blocks_used += block_bytes;
        for (size_t i = 0; i < request.inputs.size(); ++i) {
          Region& region = slab->regions[i];
          input_offsets[i] = region.begin + region.used;
          region.used += request.inputs[i].size;
        }
        slab->rows += request.options.batch_size;
        slab->refs += 1;
      } else if (slab != nullptr) {
        // Cannot happen (a new slab is sized for its first request); stay correct.
        close_slab_locked(staging->second.open_slab);
        staging->second.open_slab = 0;
      }
    }
  }
  if (block == 0) {
    block = place_standalone(arena_, request, sources, 0);
    if (block == 0) return 0;
  } else {
    write_request(arena_.base(), block, request, sources, input_offsets.data());
  }
  uint64_t copied = 0;
  for (const InputSource& input : request.inputs) {
    if (input.kind != InputKind::kSystemShm) copied += input.size;
  }
  placed_bytes_.fetch_add(copied, std::memory_order_relaxed);
  return block;
}

bool BatchAssembler::release_locked(uint64_t block_offset) {
  auto after = slabs_.upper_bound(block_offset);
  if (after == slabs_.begin()) return false;
  auto found = std::prev(after);
  Slab& slab = found->second;
  if (block_offset >= slab.offset + slab.size) return false;
  if (--slab.refs == 0) {
    // Every row is done. Even the open slab goes (the next submit opens another):
    // an idle model holds nothing in the arena.
    if (slab.open) {
      auto staging = models_.find(slab.model_key);
      if (staging != models_.end() && staging->second.open_slab == slab.offset) {
        staging->second.open_slab = 0;
      }
    }
    arena_.free(slab.offset);
    slabs_.erase(found);
  }
  return true;
}

void BatchAssembler::release(uint64_t block_offset) {
  if (block_offset == 0) return;
  bool in_slab;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    in_slab = release_locked(block_offset);
  }
  if (!in_slab) arena_.free(block_offset);
}

void BatchAssembler::release(const std::vector<QueuedRequest>& requests) {
  ScratchArray<uint64_t, 64> standalone(requests.size());
  size_t n_standalone = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const QueuedRequest& r : requests) {
      if (r.offset != 0 && !release_locked(r.offset)) standalone[n_standalone++] = r.offset;
    }
  }
  for (size_t i = 0; i < n_standalone; ++i) arena_.free(standalone[i]);
}

size_t BatchAssembler::slabs() {
  std::lock_guard<std::mutex> lock(mutex_);
  return slabs_.size();
}

bool BatchAssembler::copy_from_region(InputSlot& slot, uint8_t* target) {
  const uint8_t* source = regions_ == nullptr ? nullptr
                                              : regions_->map(InputKind::kSystemShm, slot.region,
                                                              slot.region_offset, slot.size);
  if (source == nullptr && slot.size != 0) return false;
  if (slot.size != 0) std::memcpy(target, source, slot.size);
  slot.region = 0;
  slot.region_offset = 0;
  return true;
}

bool BatchAssembler::fill_from_regions(uint64_t block_offset) {
  const RequestHeader& header = header_at(arena_, block_offset);
  InputSlot* slots = slots_at(arena_, block_offset);
  for (uint32_t i = 0; i < header.n_inputs; ++i) {
    if (slots[i].region != 0 && !copy_from_region(slots[i], arena_.base() + slots[i].offset)) {
      return false;
    }
  }
  return true;
}

uint64_t BatchAssembler::describe(uint64_t batch_id, const std::vector<QueuedRequest>& requests,
                                  bool batch_tensors) {
  const uint32_t n_requests = static_cast<uint32_t>(requests.size());
  uint8_t* base = arena_.base();
  // Batch tensors exist when every request has the same inputs in the same order.
  const RequestHeader& first = header_at(arena_, requests.front().offset);
  uint32_t n_tensors = first.n_inputs;
  bool in_regions = false;  // an input still in a client region
  for (const QueuedRequest& r : requests) {
    const RequestHeader& header = header_at(arena_, r.offset);
    if (header.n_inputs != first.n_inputs || header.input_order != first.input_order) {
      n_tensors = 0;
    }
    const InputSlot* slots = slots_at(arena_, r.offset);
    for (uint32_t i = 0; i < header.n_inputs && !in_regions; ++i) in_regions = slots[i].region != 0;
  }
  // Read apart, in place: no batch tensor to build for such a model.
  const bool in_place = n_requests == 1 || (!batch_tensors && in_regions);
  if (in_place && n_requests > 1) n_tensors = 0;
  // Contiguous: each input's rows follow one another in batch order (place() kept
  // rows for inputs still in client regions too, so they count as any other).
  ScratchArray<BatchTensor> tensors(n_tensors);
  bool contiguous = true;
  for (uint32_t i = 0; i < n_tensors; ++i) {
    const InputSlot& head = slots_at(arena_, requests.front().offset)[i];
    tensors[i] = BatchTensor{head.offset, head.size, 0, 0};
    for (uint32_t k = 1; k < n_requests; ++k) {
      const InputSlot& slot = slots_at(arena_, requests[k].offset)[i];
      if (slot.offset != tensors[i].offset + tensors[i].size) contiguous = false;
      tensors[i].size += slot.size;
    }
  }
  const bool gather = n_tensors != 0 && !contiguous;
  uint64_t size = batch_tensors_offset(n_requests) + uint64_t{n_tensors} * sizeof(BatchTensor);
  ScratchArray<uint64_t> gathered_at(n_tensors);
  if (gather) {
    for (uint32_t i = 0; i < n_tensors; ++i) {
      size = align_tensor(size);
      gathered_at[i] = size;
      size += tensors[i].size;
    }
  }
  const uint64_t desc = arena_.alloc(size, batch_id);
  if (desc == 0) return 0;
  if (in_place) {
    // Alone, or read apart: inputs in client regions stay there; the worker reads them
    // in place. (n_tensors is 0 unless the request is alone.)
    for (const QueuedRequest& r : requests) {
      const uint32_t n_inputs = header_at(arena_, r.offset).n_inputs;
      const InputSlot* slots = slots_at(arena_, r.offset);
      for (uint32_t i = 0; i < n_inputs; ++i) {
        if (slots[i].region == 0) continue;
        in_place_inputs_.fetch_add(1, std::memory_order_relaxed);
        if (i < n_tensors) {
          tensors[i].region = slots[i].region;
          tensors[i].region_offset = slots[i].region_offset;
        }
      }
    }
  } else if (!gather) {
    // Several requests: each input still in a client region is copied into its rows.
    for (const QueuedRequest& r : requests) {
      const uint32_t n_inputs = header_at(arena_, r.offset).n_inputs;
      InputSlot* slots = slots_at(arena_, r.offset);
      for (uint32_t i = 0; i < n_inputs; ++i) {
        if (slots[i].region != 0 && !copy_from_region(slots[i], base + slots[i].offset)) {
          arena_.free(desc);
          return 0;
        }
      }
    }
  }
  if (gather) {
    // The second copy: each request's rows into the batch tensors, and its slots
    // moved there so per-request views and the batch view share the bytes. An input
    // still in a client region is copied from there, its only copy.
    for (uint32_t i = 0; i < n_tensors; ++i) {
      uint64_t cursor = desc + gathered_at[i];
      tensors[i].offset = cursor;
      for (const QueuedRequest& r : requests) {
        InputSlot& slot = slots_at(arena_, r.offset)[i];
        if (slot.region != 0) {
          if (!copy_from_region(slot, base + cursor)) {
            arena_.free(desc);
            return 0;
          }
        } else {
          if (slot.size != 0) std::memcpy(base + cursor, base + slot.offset, slot.size);
          gathered_bytes_ += slot.size;
        }
        slot.offset = cursor;
        cursor += slot.size;
      }
    }
    ++gathered_;
  } else if (n_tensors != 0) {
    ++contiguous_;
  }
  uint32_t rows = 0;
  auto* records = arena_.at<BatchRequest>(desc + batch_requests_offset());
  for (uint32_t k = 0; k < n_requests; ++k) {
    records[k] = BatchRequest{requests[k].id, requests[k].offset, requests[k].batch_size, rows};
    arena_.at<RequestHeader>(requests[k].offset)->sequence = requests[k].sequence;
    rows += requests[k].batch_size;
  }
  auto* out = arena_.at<BatchTensor>(desc + batch_tensors_offset(n_requests));
  for (uint32_t i = 0; i < n_tensors; ++i) out[i] = tensors[i];
  *arena_.at<BatchHeader>(desc) = BatchHeader{n_requests, n_tensors, rows, gather ? 1u : 0u};
  return desc;
}

}  // namespace naiad
