// A shared-memory arena: one memfd mapped by the frontend and every worker, with a
// first-fit allocator whose state lives inside the mapping, so both sides allocate
// from it under one process-shared robust mutex. Offsets, never pointers, cross
// process boundaries because each process maps the arena at its own address.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace naiad {

constexpr uint64_t kArenaAlign = 64;

struct ArenaHeader {
  uint64_t magic;
  uint64_t size;        // bytes in the whole mapping
  uint64_t heap_begin;  // offset of the first block
  uint64_t free_head;   // offset of the first free block, 0 if none
  uint64_t bytes_in_use;
  uint64_t blocks_in_use;
  pthread_mutex_t mutex;
  // Set by a worker when it has written the frontend's eventfd and cleared by the
  // frontend after it drained the eventfd and before it reads the rings
  // (Core::poll): one wake-up per burst, not per batch.
  alignas(64) std::atomic<uint32_t> notify_pending;
};

struct ArenaStats {
  uint64_t bytes_in_use;
  uint64_t blocks_in_use;
  uint64_t largest_free;
};

class Arena {
 public:
  // Creates a new arena of `size` bytes in an anonymous memfd.
  static Arena create(uint64_t size);
  // Maps an arena created by another process from its inherited memfd.
  static Arena attach(int fd);

  Arena() = default;
  Arena(Arena&& other) noexcept;
  Arena& operator=(Arena&& other) noexcept;
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  ~Arena();

  // Returns the offset of a 64-byte aligned region of at least `size` bytes, or 0
  // when the arena has no room. `tag` marks the block's owner for free_tagged().
  uint64_t alloc(uint64_t size, uint64_t tag = 0);
  void free(uint64_t offset);
  // Gives an allocated block another owner tag (0: none) for free_tagged().
  void set_tag(uint64_t offset, uint64_t tag);
  // Frees every allocated block carrying `tag`: reclaims what a dead worker held.
  size_t free_tagged(uint64_t tag);

  ArenaStats stats();
  uint8_t* base() const { return base_; }
  uint64_t size() const { return size_; }
  int fd() const { return fd_; }
  ArenaHeader* header() const { return reinterpret_cast<ArenaHeader*>(base_); }
  template <typename T>
  T* at(uint64_t offset) const {
    return reinterpret_cast<T*>(base_ + offset);
  }

 private:
  void lock();
  void unlock();
  void unlink_free(uint64_t block);
  void push_free(uint64_t block);
  void free_locked(uint64_t block);

  uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  int fd_ = -1;
};

}  // namespace naiad
