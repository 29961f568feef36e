// The shared-memory region registry: Triton's system and CUDA shared-memory extensions.
//
// A client registers a region by name: a system one is a POSIX shared-memory object
// (`key`, as shm_open names it) with an offset and a byte size; a CUDA one is a
// cudaIpcMemHandle_t (its 64 bytes), a device and a byte size. Requests then name the
// region and an offset and size inside it for each tensor that travels that way.
//
// What the registry guarantees:
//  - A system region is opened and mapped ONCE, at registration, after the checks:
//    the key names an existing object (no '/' after the leading one, not "." or ".."),
//    and offset + byte_size fits the object's real size (fstat). Its fd stays open so
//    that the workers can map the same object (`/proc/<pid>/fd/<fd>`) even after the
//    client unlinked it; both go at unregister.
//  - A region in use is never unmapped under a user: every user holds a reference
//    (acquire/release; a RegionPin in C++). Unregistering removes the name at once
//    (new requests find nothing) and releases the mapping and fd when the last
//    reference goes. So unregister never waits and never fails because of requests
//    in flight; they finish with the region they started with.
//  - Workers learn which regions are still alive from a table in the shared arena
//    (RegionTable): a region id stays in it while the region is registered or
//    referenced; a worker maps an id once and drops its mapping when the id leaves the
//    table (pysrc/naiad/worker/shm_outputs.py).
//
// Status codes and messages follow Triton 2.51 (checked by tests/test_shm_triton.py);
// where Triton's message names no numbers, Naiad appends them in parentheses.
//
// Threads: every method takes the registry's mutex; map() and acquire() may be called
// from any thread (the frontend's event loop in practice, several threads in tests).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "codec/infer_types.h"
#include "core/core.h"  // the helpers below: a Core and its assembler
#include "core/input_regions.h"
#include "ipc/arena.h"

namespace naiad {

// Region ids that are alive, for the workers: a slot holds an id or 0, and for a
// system region where a worker maps it: the frontend's fd of the object (opened as
// /proc/<frontend_pid>/fd/<fd>) and the registered range (object offset, byte size),
// written before the id (release order). `epoch` moves on after every change, so a
// worker compares one word per batch. A worker reading an input in place
// (InputSlot::region) finds its region here by id. One slot per region the server may
// hold (`naiad serve --shm-max-regions`): `slots` of them follow the header.
constexpr uint32_t kDefaultMaxRegions = 1024;
struct RegionTableSlot {
  std::atomic<uint64_t> id;
  int64_t fd;  // -1: no host mapping (CUDA)
  uint64_t object_offset;
  uint64_t byte_size;
};
struct RegionTable {
  std::atomic<uint64_t> epoch;
  uint64_t frontend_pid;
  uint64_t slots;
};
inline size_t region_table_bytes(uint64_t slots) {
  return sizeof(RegionTable) + slots * sizeof(RegionTableSlot);
}
inline RegionTableSlot* region_table_slot(RegionTable* table, uint64_t slot) {
  return reinterpret_cast<RegionTableSlot*>(table + 1) + slot;
}
inline const RegionTableSlot* region_table_slot(const RegionTable* table, uint64_t slot) {
  return reinterpret_cast<const RegionTableSlot*>(table + 1) + slot;
}

// A worker's reads of the table (the ids and epoch are atomics; _core.pyx calls these).
inline uint64_t region_table_epoch_of(const RegionTable* table) {
  return table->epoch.load(std::memory_order_acquire);
}
inline uint64_t region_table_id(const RegionTable* table, uint64_t slot) {
  return region_table_slot(table, slot)->id.load(std::memory_order_acquire);
}

constexpr size_t kCudaIpcHandleBytes = 64;  // sizeof(cudaIpcMemHandle_t)

struct RegionStatus {
  std::string name;
  InputKind kind = InputKind::kSystemShm;
  std::string key;  // system: the shm_open key
  uint64_t offset = 0;
  uint64_t byte_size = 0;
  int64_t device_id = 0;   // CUDA
  std::string raw_handle;  // CUDA: the cudaIpcMemHandle_t bytes
};

// Where a request's tensor is, once resolved: the region's id and, for system memory,
// the mapped bytes and what a worker needs to map the same object.
struct RegionRef {
  uint64_t id = 0;
  InputKind kind = InputKind::kSystemShm;
  uint8_t* data = nullptr;     // system: the tensor's first byte in the frontend's mapping
  int fd = -1;                 // system: the frontend's fd of the object
  uint64_t object_offset = 0;  // the tensor's offset in the object (region offset + offset)
  uint64_t size = 0;
  uint64_t region_offset = 0;  // the region's offset in the object, and its byte size
  uint64_t region_size = 0;
  int64_t device_id = 0;   // CUDA
  std::string raw_handle;  // CUDA
};

class ShmRegistry : public InputRegions {
 public:
  // `arena`: where the workers' RegionTable lives (null: no table, tests).
  // `max_regions`: regions held at once (registered or still referenced), for the whole
  // server, every client together.
  explicit ShmRegistry(Arena* arena = nullptr, uint32_t max_regions = kDefaultMaxRegions);
  ~ShmRegistry() override;  // unmaps and closes everything
  ShmRegistry(const ShmRegistry&) = delete;
  ShmRegistry& operator=(const ShmRegistry&) = delete;

  // Arena offset of the RegionTable, 0 when none.
  uint64_t table_offset() const { return table_offset_; }

  // kNone on success; else the error kind and Triton's message.
  ErrorKind register_system(std::string_view name, std::string_view key, uint64_t offset,
                            uint64_t byte_size, std::string* error);
  ErrorKind register_cuda(std::string_view name, std::string_view raw_handle, int64_t device_id,
                          uint64_t byte_size, std::string* error);
  // Unregisters `name` (empty: every region of `kind`). Unknown names are not an error.
  ErrorKind unregister(InputKind kind, std::string_view name, std::string* error);
  // The regions of `kind` (all, or the one named); unknown name: kNotFound.
  ErrorKind status(InputKind kind, std::string_view name, std::vector<RegionStatus>* out,
                   std::string* error);

  // Resolves [offset, offset + size) of the region named `name` for a request's
  // tensor and takes a reference on it (release(ref.id) when the request is done).
  // Errors: unknown region (kNotFound), range outside the region, or a system region
  // whose object the client shrank (fstat now, or a fault absorbed by the guard,
  // shm_fault_guard.h) (kInvalidArgument).
  ErrorKind resolve(std::string_view name, uint64_t offset, uint64_t size, RegionRef* ref,
                    std::string* error);
  // References on a region by id; acquire() fails (false) for an id already released.
  bool acquire(uint64_t id);
  void release(uint64_t id);

  // InputRegions: the mapped bytes of a live system region by id, bounds checked.
  const uint8_t* map(InputKind kind, uint64_t region, uint64_t offset, uint64_t size) override;
  bool device_range(uint64_t region, uint64_t offset, uint64_t size) override;
  bool host_range(uint64_t region, uint64_t offset, uint64_t size) override;

  // Writes `size` bytes at `offset` of live system region `region`, bounds checked, for
  // an answer the frontend writes itself (an ensemble's: no worker holds its outputs).
  // The frontend maps regions read-only for inputs; the first write maps the region
  // writable too, kept until the region is freed. False: unknown, CUDA, out of bounds.
  bool write(uint64_t region, uint64_t offset, const uint8_t* data, uint64_t size);
  // An output's bytes into the place a request gave it (`place_size` bytes at `offset` of
  // `region`): the one fit check and write of the frontend's paths, the lanes and the
  // general path. Empty on success, else the error the answer carries (HTTP 500, gRPC
  // INTERNAL): Triton's output-too-small message, or that the region cannot be written.
  std::string write_output(uint64_t region, uint64_t offset, uint64_t place_size,
                           std::string_view output_name, const uint8_t* data, uint64_t size);

  // Checked when a request that pinned regions `ids` is answered: the message naming
  // the first of them whose frontend mapping absorbed a fault (shm_fault_guard.h), else
  // empty. resolve() pins a region only while none was absorbed, so one seen here came
  // while the request held it: bytes the frontend copied for it (the validator, a
  // batch's copy at dispatch, an ensemble's inputs) or wrote for it may be the guard's
  // zeros. The request fails (HTTP 400, gRPC INVALID_ARGUMENT) instead of answering them.
  std::string truncated(const std::vector<uint64_t>& ids) const;

  // For tests and /proc checks: regions whose mapping is still held (registered or
  // referenced), and mappings released so far.
  size_t mapped() const;
  // Copies the core made out of client regions (map() calls: inputs of requests that
  // shared a batch) and their bytes. Inputs read in place: BatchAssembler::in_place_inputs.
  uint64_t copies() const { return copies_.load(std::memory_order_relaxed); }
  uint64_t copied_bytes() const { return copied_bytes_.load(std::memory_order_relaxed); }

 private:
  struct Region {
    uint64_t id = 0;
    RegionStatus status;
    bool registered = true;  // false once unregistered: gone when refs reach 0
    uint64_t refs = 0;
    int fd = -1;
    uint8_t* map_base = nullptr;    // page-aligned mmap start
    uint8_t* write_base = nullptr;  // the same range mapped writable, on first write()
    uint64_t map_length = 0;
    uint8_t* data = nullptr;  // the region's first byte (map_base + page remainder)
    uint32_t slot = UINT32_MAX;
    int watch = -1;  // shm_fault_guard.h handles of map_base and write_base
    int write_watch = -1;
  };

  ErrorKind check_new_locked(std::string_view name, std::string* error);
  Region* add_locked(Region region, std::string* error);
  void drop_name_locked(Region& region);
  void free_locked(uint64_t id);  // unmaps, closes and forgets (refs == 0, unregistered)
  // True once the guard absorbed a fault in either frontend mapping of `region`.
  static bool faulted(const Region& region);
  // kNone while a system region's object still holds all of it; else Triton's kind.
  ErrorKind check_intact_locked(const Region& region, std::string* error) const;
  static void unmap(Region& region);
  RegionTable* table() const;

  Arena* arena_;
  uint32_t max_regions_;
  uint64_t table_offset_ = 0;
  std::atomic<uint64_t> copies_{0};
  std::atomic<uint64_t> copied_bytes_{0};
  mutable std::mutex mutex_;
  // --- guarded by mutex_ ---
  uint64_t next_id_ = 1;
  std::unordered_map<uint64_t, Region> regions_;        // by id: registered or still referenced
  std::map<std::string, uint64_t, std::less<>> names_;  // registered names, sorted
};

// Checks a shm_open key as Naiad accepts it: one leading '/' (optional, as shm_open),
// then a non-empty name without '/', not "." or "..", no NUL, at most NAME_MAX bytes.
bool valid_shm_key(std::string_view key);

// Triton's message (HTTP 500, gRPC INTERNAL) when an output of `needed` bytes does not
// fit the `region_size` bytes its request gave it: the lanes' (KServeCodec) and, through
// _core, the workers' and the general path's (naiad/memory/shm.py).
std::string output_too_small_message(std::string_view output_name, uint64_t region_size,
                                     uint64_t needed);

// The error of a request that used region `region_name` while it was truncated, or
// later, once a mapping of it took a fault (the guard absorbed it in the frontend's or
// a worker's mapping; the mapping holds zeros since): HTTP 400, gRPC INVALID_ARGUMENT.
// One text for the frontend and, through _core, the workers (worker/shm_outputs.py).
std::string truncated_in_use_message(std::string_view region_name);

// The core reads kSystemShm inputs through `registry` (which must outlive it).
inline void attach_registry(Core& core, ShmRegistry* registry) { core.set_input_regions(registry); }
// Bytes the core's assembler gathered into batch tensors (a second copy), for the
// copy counters of /v2/naiad/shm.
inline uint64_t gathered_bytes(Core& core) { return core.assembler().gathered_bytes(); }
// Inputs in client regions the workers read in place (requests that ran alone).
inline uint64_t in_place_inputs(Core& core) { return core.assembler().in_place_inputs(); }

}  // namespace naiad
