#include "ipc/arena.h"

#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace naiad {
namespace {

constexpr uint64_t kMagic = 0x4e41494144415231ULL;  // "NAIADAR1"
constexpr uint64_t kAllocatedBit = 1;

// Every block starts with this header and ends with a copy of its size (the footer),
// so that free() can find and merge the block before it in O(1).
struct BlockHeader {
  uint64_t size_and_flag;  // block bytes (multiple of 64) | kAllocatedBit
  uint64_t tag;
  uint64_t prev_free;  // free-list links, meaningful only while free
  uint64_t next_free;
  uint64_t magic;
  uint64_t pad[3];
};
static_assert(sizeof(BlockHeader) == kArenaAlign, "block header keeps data 64-byte aligned");

constexpr uint64_t kBlockMagic = 0x424c4f434b424c4bULL;
constexpr uint64_t kFooter = sizeof(uint64_t);
constexpr uint64_t kMinBlock = 2 * kArenaAlign;

uint64_t round_up(uint64_t value, uint64_t align) { return (value + align - 1) / align * align; }

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error(what + ": " + std::strerror(errno));
}

}  // namespace

Arena Arena::create(uint64_t size) {
  size = round_up(size, 4096);
  if (size < 65536) size = 65536;
  int fd = memfd_create("naiad-arena", MFD_CLOEXEC);
  if (fd < 0) fail("memfd_create");
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    ::close(fd);
    fail("ftruncate arena");
  }
  void* mem = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (mem == MAP_FAILED) {
    ::close(fd);
    fail("mmap arena");
  }
  Arena arena;
  arena.base_ = static_cast<uint8_t*>(mem);
  arena.size_ = size;
  arena.fd_ = fd;

  ArenaHeader* h = arena.header();
  std::memset(static_cast<void*>(h), 0, sizeof(ArenaHeader));
  h->size = size;
  h->heap_begin = round_up(sizeof(ArenaHeader), kArenaAlign);
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  // Robust: a worker killed while holding the lock must not wedge the server.
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(&h->mutex, &attr);
  pthread_mutexattr_destroy(&attr);

  uint64_t heap_bytes = (size - h->heap_begin) / kArenaAlign * kArenaAlign;
  uint64_t block = h->heap_begin;
  auto* b = arena.at<BlockHeader>(block);
  b->size_and_flag = heap_bytes;
  b->magic = kBlockMagic;
  *arena.at<uint64_t>(block + heap_bytes - kFooter) = heap_bytes;
  h->free_head = 0;
  arena.push_free(block);
  h->magic = kMagic;
  return arena;
}

Arena Arena::attach(int fd) {
  off_t end = lseek(fd, 0, SEEK_END);
  if (end <= 0) fail("size of arena fd");
  void* mem = mmap(nullptr, static_cast<size_t>(end), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (mem == MAP_FAILED) fail("mmap arena");
  Arena arena;
  arena.base_ = static_cast<uint8_t*>(mem);
  arena.size_ = static_cast<uint64_t>(end);
  arena.fd_ = fd;
  if (arena.header()->magic != kMagic) throw std::runtime_error("not a naiad arena");
  return arena;
}

Arena::Arena(Arena&& other) noexcept { *this = std::move(other); }

Arena& Arena::operator=(Arena&& other) noexcept {
  if (this != &other) {
    this->~Arena();
    base_ = other.base_;
    size_ = other.size_;
    fd_ = other.fd_;
    other.base_ = nullptr;
    other.size_ = 0;
    other.fd_ = -1;
  }
  return *this;
}

Arena::~Arena() {
  if (base_ != nullptr) munmap(base_, size_);
  if (fd_ >= 0) ::close(fd_);
  base_ = nullptr;
  fd_ = -1;
}

void Arena::lock() {
  int rc = pthread_mutex_lock(&header()->mutex);
  if (rc == EOWNERDEAD) {
    // The owner died mid-operation. The allocator's steps are short and ordered so
    // the lists stay walkable; accept the state and carry on.
    pthread_mutex_consistent(&header()->mutex);
  } else if (rc != 0) {
    errno = rc;
    fail("arena lock");
  }
}

void Arena::unlock() { pthread_mutex_unlock(&header()->mutex); }

void Arena::unlink_free(uint64_t block) {
  auto* b = at<BlockHeader>(block);
  if (b->prev_free != 0) {
    at<BlockHeader>(b->prev_free)->next_free = b->next_free;
  } else {
    header()->free_head = b->next_free;
  }
  if (b->next_free != 0) at<BlockHeader>(b->next_free)->prev_free = b->prev_free;
  b->prev_free = b->next_free = 0;
}

void Arena::push_free(uint64_t block) {
  auto* b = at<BlockHeader>(block);
  b->prev_free = 0;
  b->next_free = header()->free_head;
  if (b->next_free != 0) at<BlockHeader>(b->next_free)->prev_free = block;
  header()->free_head = block;
}

uint64_t Arena::alloc(uint64_t size, uint64_t tag) {
  uint64_t need = round_up(size + sizeof(BlockHeader) + kFooter, kArenaAlign);
  if (need < kMinBlock) need = kMinBlock;
  lock();
  uint64_t block = header()->free_head;
  while (block != 0 && at<BlockHeader>(block)->size_and_flag < need) {
    block = at<BlockHeader>(block)->next_free;
  }
  if (block == 0) {
    unlock();
    return 0;
  }
  auto* b = at<BlockHeader>(block);
  unlink_free(block);
  uint64_t have = b->size_and_flag;
  if (have - need >= kMinBlock) {
    uint64_t rest = block + need;
    auto* r = at<BlockHeader>(rest);
    r->size_and_flag = have - need;
    r->tag = 0;
    r->magic = kBlockMagic;
    *at<uint64_t>(rest + have - need - kFooter) = have - need;
    push_free(rest);
    have = need;
  }
  b->size_and_flag = have | kAllocatedBit;
  b->tag = tag;
  b->magic = kBlockMagic;
  *at<uint64_t>(block + have - kFooter) = have;
  header()->bytes_in_use += have;
  header()->blocks_in_use += 1;
  unlock();
  return block + sizeof(BlockHeader);
}

void Arena::free_locked(uint64_t block) {
  ArenaHeader* h = header();
  auto* b = at<BlockHeader>(block);
  uint64_t size = b->size_and_flag & ~kAllocatedBit;
  h->bytes_in_use -= size;
  h->blocks_in_use -= 1;
  uint64_t heap_end = h->heap_begin + (h->size - h->heap_begin) / kArenaAlign * kArenaAlign;

  uint64_t next = block + size;
  if (next < heap_end && (at<BlockHeader>(next)->size_and_flag & kAllocatedBit) == 0) {
    size += at<BlockHeader>(next)->size_and_flag;
    unlink_free(next);
    at<BlockHeader>(next)->magic = 0;
  }
  if (block > h->heap_begin) {
    uint64_t prev_size = *at<uint64_t>(block - kFooter);
    uint64_t prev = block - prev_size;
    if ((at<BlockHeader>(prev)->size_and_flag & kAllocatedBit) == 0) {
      unlink_free(prev);
      b->magic = 0;
      block = prev;
      size += prev_size;
      b = at<BlockHeader>(block);
    }
  }
  b->size_and_flag = size;
  b->tag = 0;
  *at<uint64_t>(block + size - kFooter) = size;
  push_free(block);
}

void Arena::free(uint64_t offset) {
  if (offset == 0) return;
  uint64_t block = offset - sizeof(BlockHeader);
  auto* b = at<BlockHeader>(block);
  if (b->magic != kBlockMagic || (b->size_and_flag & kAllocatedBit) == 0) {
    throw std::logic_error("arena free of an offset that is not an allocated block");
  }
  lock();
  free_locked(block);
  unlock();
}

void Arena::set_tag(uint64_t offset, uint64_t tag) {
  auto* b = at<BlockHeader>(offset - sizeof(BlockHeader));
  if (b->magic != kBlockMagic || (b->size_and_flag & kAllocatedBit) == 0) {
    throw std::logic_error("arena set_tag of an offset that is not an allocated block");
  }
  lock();
  b->tag = tag;
  unlock();
}

size_t Arena::free_tagged(uint64_t tag) {
  lock();
  ArenaHeader* h = header();
  uint64_t heap_end = h->heap_begin + (h->size - h->heap_begin) / kArenaAlign * kArenaAlign;
  std::vector<uint64_t> owned;
  for (uint64_t block = h->heap_begin; block < heap_end;) {
    auto* b = at<BlockHeader>(block);
    if ((b->size_and_flag & kAllocatedBit) != 0 && b->tag == tag) owned.push_back(block);
    block += b->size_and_flag & ~kAllocatedBit;
  }
  // Freeing merges neighbours, but only free neighbours, so the collected
  // allocated blocks stay valid while we go.
  for (uint64_t block : owned) free_locked(block);
  unlock();
  return owned.size();
}

ArenaStats Arena::stats() {
  lock();
  ArenaStats s{header()->bytes_in_use, header()->blocks_in_use, 0};
  for (uint64_t block = header()->free_head; block != 0;
       block = at<BlockHeader>(block)->next_free) {
    uint64_t size = at<BlockHeader>(block)->size_and_flag;
    if (size > s.largest_free) s.largest_free = size;
  }
  unlock();
  return s;
}

}  // namespace naiad
