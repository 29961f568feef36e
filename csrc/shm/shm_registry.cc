#include "shm/shm_registry.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "shm/shm_fault_guard.h"

namespace naiad {

namespace {

std::string quoted(std::string_view text) {
  std::string out = "'";
  out.append(text.data(), text.size());
  out += "'";
  return out;
}

const char* kind_word(InputKind kind) { return kind == InputKind::kCudaIpc ? "cuda" : "system"; }

const char* kind_title(InputKind kind) { return kind == InputKind::kCudaIpc ? "CUDA" : "system"; }

}  // namespace

std::string output_too_small_message(std::string_view output_name, uint64_t region_size,
                                     uint64_t needed) {
  return "shared memory size specified with the request for output '" + std::string(output_name) +
         "' (" + std::to_string(region_size) + " bytes) should be at least " +
         std::to_string(needed) + " bytes to hold the results";
}

std::string truncated_in_use_message(std::string_view region_name) {
  return "shared memory region " + quoted(region_name) +
         " was truncated while in use; unregister it and register it again";
}

bool valid_shm_key(std::string_view key) {
  if (!key.empty() && key.front() == '/') key.remove_prefix(1);
  if (key.empty() || key.size() > NAME_MAX) return false;
  if (key == "." || key == "..") return false;
  for (char c : key) {
    if (c == '/' || c == '\0') return false;
  }
  return true;
}

ShmRegistry::ShmRegistry(Arena* arena, uint32_t max_regions)
    : arena_(arena), max_regions_(max_regions) {
  if (arena_ != nullptr) {
    table_offset_ = arena_->alloc(region_table_bytes(max_regions_));
    if (table_offset_ != 0) {
      RegionTable* t = table();
      t->epoch.store(0, std::memory_order_relaxed);
      t->frontend_pid = static_cast<uint64_t>(::getpid());
      t->slots = max_regions_;
      for (uint32_t i = 0; i < max_regions_; ++i) {
        RegionTableSlot* slot = region_table_slot(t, i);
        new (&slot->id) std::atomic<uint64_t>(0);
        slot->fd = -1;
        slot->object_offset = 0;
        slot->byte_size = 0;
      }
    }
  }
}

ShmRegistry::~ShmRegistry() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [id, region] : regions_) {
    unmap(region);
    if (region.fd >= 0) ::close(region.fd);
  }
  regions_.clear();
  names_.clear();
  if (table_offset_ != 0) arena_->free(table_offset_);
}

RegionTable* ShmRegistry::table() const {
  return table_offset_ != 0 ? arena_->at<RegionTable>(table_offset_) : nullptr;
}

ErrorKind ShmRegistry::check_new_locked(std::string_view name, std::string* error) {
  if (names_.find(name) != names_.end()) {
    *error = "shared memory region " + quoted(name) + " already in manager";
    return ErrorKind::kAlreadyExists;
  }
  return ErrorKind::kNone;
}

void ShmRegistry::unmap(Region& region) {
  // Unwatched first: the guard must never repair an address range that is reused.
  shm_guard_unwatch(region.watch);
  shm_guard_unwatch(region.write_watch);
  region.watch = region.write_watch = -1;
  if (region.map_base != nullptr) ::munmap(region.map_base, region.map_length);
  if (region.write_base != nullptr) ::munmap(region.write_base, region.map_length);
  region.map_base = region.write_base = nullptr;
}

bool ShmRegistry::faulted(const Region& region) {
  return shm_guard_faults(region.watch) != 0 || shm_guard_faults(region.write_watch) != 0;
}

std::string ShmRegistry::truncated(const std::vector<uint64_t>& ids) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (uint64_t id : ids) {
    auto found = regions_.find(id);
    if (found != regions_.end() && faulted(found->second)) {
      return truncated_in_use_message(found->second.status.name);
    }
  }
  return {};
}

ErrorKind ShmRegistry::check_intact_locked(const Region& region, std::string* error) const {
  if (region.status.kind != InputKind::kSystemShm) return ErrorKind::kNone;
  const RegionStatus& s = region.status;
  if (faulted(region)) {
    // The guard replaced our mapping with zeros: its bytes are not the object's any more.
    *error = truncated_in_use_message(s.name);
    return ErrorKind::kInvalidArgument;
  }
  // Checked on every request: the client may shrink its object at any time, and
  // touching a page past the object's end raises SIGBUS.
  struct stat info;
  if (::fstat(region.fd, &info) != 0) {
    *error = "Invalid shared memory region: " + quoted(s.name) + " (fstat of " + quoted(s.key) +
             " failed: " + std::strerror(errno) + ")";
    return ErrorKind::kInternal;
  }
  const uint64_t object_size = static_cast<uint64_t>(info.st_size);
  if (s.offset > object_size || s.byte_size > object_size - s.offset) {
    *error = "shared memory region " + quoted(s.name) + " was truncated after registration (its " +
             "object " + quoted(s.key) + " has " + std::to_string(object_size) +
             " bytes, the region needs offset " + std::to_string(s.offset) + " + byte_size " +
             std::to_string(s.byte_size) + ")";
    return ErrorKind::kInvalidArgument;
  }
  return ErrorKind::kNone;
}

ShmRegistry::Region* ShmRegistry::add_locked(Region region, std::string* error) {
  RegionTable* t = table();
  if (regions_.size() >= max_regions_) {
    *error = "failed to register shared memory region " + quoted(region.status.name) + ": " +
             std::to_string(max_regions_) +
             " regions are in use, the most this server serves (--shm-max-regions)";
    return nullptr;
  }
  if (t != nullptr) {
    uint32_t slot = 0;
    while (slot < max_regions_ &&
           region_table_slot(t, slot)->id.load(std::memory_order_relaxed) != 0) {
      ++slot;
    }
    if (slot == max_regions_) {  // unreachable: one slot per region held
      *error = "failed to register shared memory region " + quoted(region.status.name) + ": " +
               std::to_string(max_regions_) +
               " regions are in use, the most this server serves (--shm-max-regions)";
      return nullptr;
    }
    region.slot = slot;
  }
  region.id = next_id_++;
  if (t != nullptr) {
    RegionTableSlot& entry = *region_table_slot(t, region.slot);
    entry.fd = region.fd;
    entry.object_offset = region.status.offset;
    entry.byte_size = region.status.byte_size;
    entry.id.store(region.id, std::memory_order_release);
    t->epoch.fetch_add(1, std::memory_order_release);
  }
  names_.emplace(region.status.name, region.id);
  uint64_t id = region.id;
  return &regions_.emplace(id, std::move(region)).first->second;
}

ErrorKind ShmRegistry::register_system(std::string_view name, std::string_view key, uint64_t offset,
                                       uint64_t byte_size, std::string* error) {
  std::lock_guard<std::mutex> lock(mutex_);
  ErrorKind kind = check_new_locked(name, error);
  if (kind != ErrorKind::kNone) return kind;
  const std::string open_error = "Unable to open shared memory region: " + quoted(key);
  if (!valid_shm_key(key)) {
    *error = open_error;
    return ErrorKind::kInternal;
  }
  std::string key_text(key);
  // Read-only: the frontend only reads inputs; workers open the object for writing.
  // O_NONBLOCK: a FIFO put where the object should be would block the open (and the
  // server's event loop) until someone writes to it; it is refused below instead.
  int fd = ::shm_open(key_text.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY, 0);
  if (fd < 0) {
    *error = open_error;
    return ErrorKind::kInternal;
  }
  struct stat info;
  if (::fstat(fd, &info) != 0) {
    ::close(fd);
    *error = open_error;
    return ErrorKind::kInternal;
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd);
    *error = open_error + " (not a shared memory object)";
    return ErrorKind::kInternal;
  }
  const uint64_t object_size = static_cast<uint64_t>(info.st_size);
  if (offset > object_size || byte_size > object_size - offset) {
    ::close(fd);
    *error = "failed to register shared memory region " + quoted(name) + ": invalid args (offset " +
             std::to_string(offset) + " + byte_size " + std::to_string(byte_size) + " > size " +
             std::to_string(object_size) + " of " + quoted(key) + ")";
    return ErrorKind::kInvalidArgument;
  }
  if (byte_size == 0) {  // an empty mapping: Triton 2.51's words (mmap's EINVAL)
    ::close(fd);
    *error = "failed to register shared memory region " + quoted(name) +
             ": unable to process address spaceInvalid argument";
    return ErrorKind::kInvalidArgument;
  }
  Region region;
  region.status.name = std::string(name);
  region.status.kind = InputKind::kSystemShm;
  region.status.key = key_text;
  region.status.offset = offset;
  region.status.byte_size = byte_size;
  region.fd = fd;
  {
    const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    const uint64_t start = offset - offset % page;
    region.map_length = offset + byte_size - start;
    void* base =
        ::mmap(nullptr, region.map_length, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(start));
    if (base == MAP_FAILED) {
      ::close(fd);
      *error = "Invalid shared memory region: " + quoted(key);
      return ErrorKind::kInternal;
    }
    region.map_base = static_cast<uint8_t*>(base);
    region.data = region.map_base + (offset - start);
    region.watch = shm_guard_watch(region.map_base, region.map_length, false);
  }
  if (add_locked(std::move(region), error) == nullptr) {
    unmap(region);
    ::close(fd);
    return ErrorKind::kInternal;
  }
  return ErrorKind::kNone;
}

ErrorKind ShmRegistry::register_cuda(std::string_view name, std::string_view raw_handle,
                                     int64_t device_id, uint64_t byte_size, std::string* error) {
  std::lock_guard<std::mutex> lock(mutex_);
  ErrorKind kind = check_new_locked(name, error);
  if (kind != ErrorKind::kNone) return kind;
  if (raw_handle.size() != kCudaIpcHandleBytes) {
    *error = "failed to register CUDA shared memory region " + quoted(name) + ": raw_handle has " +
             std::to_string(raw_handle.size()) + " bytes, a cudaIpcMemHandle_t has " +
             std::to_string(kCudaIpcHandleBytes);
    return ErrorKind::kInvalidArgument;
  }
  Region region;
  region.status.name = std::string(name);
  region.status.kind = InputKind::kCudaIpc;
  region.status.byte_size = byte_size;
  region.status.device_id = device_id;
  region.status.raw_handle = std::string(raw_handle);
  if (add_locked(std::move(region), error) == nullptr) return ErrorKind::kInternal;
  return ErrorKind::kNone;
}

void ShmRegistry::drop_name_locked(Region& region) {
  region.registered = false;
  names_.erase(region.status.name);
  if (region.refs == 0) free_locked(region.id);
}

void ShmRegistry::free_locked(uint64_t id) {
  auto found = regions_.find(id);
  if (found == regions_.end()) return;
  Region& region = found->second;
  unmap(region);
  if (region.fd >= 0) ::close(region.fd);
  RegionTable* t = table();
  if (t != nullptr && region.slot < max_regions_) {
    region_table_slot(t, region.slot)->id.store(0, std::memory_order_release);
    t->epoch.fetch_add(1, std::memory_order_release);
  }
  regions_.erase(found);
}

ErrorKind ShmRegistry::unregister(InputKind kind, std::string_view name, std::string* error) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!name.empty()) {
    auto found = names_.find(name);
    if (found == names_.end()) return ErrorKind::kNone;  // Triton: nothing to do, success
    Region& region = regions_.at(found->second);
    if (region.status.kind != kind) {
      *error = "shared memory region " + quoted(name) + " is registered as " +
               kind_title(region.status.kind) + " shared memory, not " + kind_title(kind) +
               " shared memory";
      return ErrorKind::kInvalidArgument;
    }
    drop_name_locked(region);
    return ErrorKind::kNone;
  }
  std::vector<uint64_t> ids;
  for (const auto& [region_name, id] : names_) {
    if (regions_.at(id).status.kind == kind) ids.push_back(id);
  }
  for (uint64_t id : ids) drop_name_locked(regions_.at(id));
  return ErrorKind::kNone;
}

ErrorKind ShmRegistry::status(InputKind kind, std::string_view name, std::vector<RegionStatus>* out,
                              std::string* error) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!name.empty()) {
    auto found = names_.find(name);
    if (found == names_.end() || regions_.at(found->second).status.kind != kind) {
      *error = std::string("Unable to find ") + kind_word(kind) +
               " shared memory region: " + quoted(name);
      return ErrorKind::kNotFound;
    }
    out->push_back(regions_.at(found->second).status);
    return ErrorKind::kNone;
  }
  for (const auto& [region_name, id] : names_) {
    const Region& region = regions_.at(id);
    if (region.status.kind == kind) out->push_back(region.status);
  }
  return ErrorKind::kNone;
}

ErrorKind ShmRegistry::resolve(std::string_view name, uint64_t offset, uint64_t size,
                               RegionRef* ref, std::string* error) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = names_.find(name);
  if (found == names_.end()) {
    *error = "Unable to find shared memory region: " + quoted(name);
    return ErrorKind::kNotFound;
  }
  Region& region = regions_.at(found->second);
  const uint64_t region_size = region.status.byte_size;
  // Triton's shm manager: the offset within the region, then the end (a negative
  // number from a gRPC int64_param arrives as its 64-bit pattern: past both).
  if (offset >= region_size) {
    *error = "Invalid offset for shared memory region: " + quoted(name);
    return ErrorKind::kInvalidArgument;
  }
  if (size > region_size - offset) {
    *error = "Invalid offset + byte size for shared memory region: " + quoted(name);
    return ErrorKind::kInvalidArgument;
  }
  ErrorKind intact = check_intact_locked(region, error);
  if (intact != ErrorKind::kNone) return intact;
  ++region.refs;
  ref->id = region.id;
  ref->kind = region.status.kind;
  ref->size = size;
  ref->data = region.data != nullptr ? region.data + offset : nullptr;
  ref->fd = region.fd;
  ref->region_offset = region.status.offset;
  ref->region_size = region_size;
  ref->object_offset = region.status.offset + offset;
  ref->device_id = region.status.device_id;
  ref->raw_handle = region.status.raw_handle;
  if (ref->kind == InputKind::kCudaIpc) ref->object_offset = offset;
  return ErrorKind::kNone;
}

bool ShmRegistry::acquire(uint64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = regions_.find(id);
  if (found == regions_.end()) return false;
  ++found->second.refs;
  return true;
}

void ShmRegistry::release(uint64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = regions_.find(id);
  if (found == regions_.end() || found->second.refs == 0) return;
  if (--found->second.refs == 0 && !found->second.registered) free_locked(id);
}

const uint8_t* ShmRegistry::map(InputKind kind, uint64_t region_id, uint64_t offset,
                                uint64_t size) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = regions_.find(region_id);
  if (found == regions_.end()) return nullptr;
  const Region& region = found->second;
  if (kind != InputKind::kSystemShm || region.status.kind != InputKind::kSystemShm) return nullptr;
  const uint64_t region_size = region.status.byte_size;
  if (offset > region_size || size > region_size - offset) return nullptr;
  if (region.data == nullptr) return nullptr;
  copies_.fetch_add(1, std::memory_order_relaxed);  // the caller copies these bytes once
  copied_bytes_.fetch_add(size, std::memory_order_relaxed);
  return region.data + offset;
}

bool ShmRegistry::write(uint64_t region_id, uint64_t offset, const uint8_t* data, uint64_t size) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = regions_.find(region_id);
  if (found == regions_.end()) return false;
  Region& region = found->second;
  if (region.status.kind != InputKind::kSystemShm || region.map_base == nullptr) return false;
  const uint64_t region_size = region.status.byte_size;
  if (offset > region_size || size > region_size - offset) return false;
  if (size == 0) return true;
  if (region.write_base == nullptr) {
    // The fd was opened read-only; its /proc path opens the same object for writing.
    const std::string path = "/proc/self/fd/" + std::to_string(region.fd);
    const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) return false;
    const uint64_t start =
        region.status.offset - static_cast<uint64_t>(region.data - region.map_base);
    void* base = ::mmap(nullptr, region.map_length, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                        static_cast<off_t>(start));
    ::close(fd);
    if (base == MAP_FAILED) return false;
    region.write_base = static_cast<uint8_t*>(base);
    region.write_watch = shm_guard_watch(region.write_base, region.map_length, true);
  }
  // A truncation racing this copy costs the write (the guard's zero pages take it), not
  // the process; once a mapping took zero pages, the object is no longer behind it.
  if (faulted(region)) return false;
  std::memcpy(region.write_base + (region.data - region.map_base) + offset, data, size);
  return shm_guard_faults(region.write_watch) == 0;
}

std::string ShmRegistry::write_output(uint64_t region, uint64_t offset, uint64_t place_size,
                                      std::string_view output_name, const uint8_t* data,
                                      uint64_t size) {
  if (size > place_size) return output_too_small_message(output_name, place_size, size);
  if (!write(region, offset, data, size)) {
    std::string truncated_error = truncated({region});
    if (!truncated_error.empty()) return truncated_error;
    return "failed to write output '" + std::string(output_name) +
           "' into its shared memory region";
  }
  return {};
}

bool ShmRegistry::host_range(uint64_t region_id, uint64_t offset, uint64_t size) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = regions_.find(region_id);
  if (found == regions_.end() || found->second.status.kind != InputKind::kSystemShm) return false;
  const uint64_t region_size = found->second.status.byte_size;
  return found->second.data != nullptr && offset <= region_size && size <= region_size - offset;
}

bool ShmRegistry::device_range(uint64_t region_id, uint64_t offset, uint64_t size) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = regions_.find(region_id);
  if (found == regions_.end() || found->second.status.kind != InputKind::kCudaIpc) return false;
  const uint64_t region_size = found->second.status.byte_size;
  return offset <= region_size && size <= region_size - offset;
}

size_t ShmRegistry::mapped() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return regions_.size();
}

}  // namespace naiad
