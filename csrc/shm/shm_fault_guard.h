// Survives a client shrinking its shared-memory object under our mapping of it.
//
// A system shm region is a mapping of an object the client owns: once it ftruncates the
// object, touching a page past the new end raises SIGBUS, which kills the process (the
// frontend: every model goes down). Every access to a client's bytes may fault, and not
// all of them are copies we could wrap (the validator reads BYTES elements, a model reads
// an input in place, a worker writes an output), on any thread, with the GIL released.
//
// So mappings of client objects are watched: a SIGBUS at an address inside a watched
// mapping replaces the whole mapping with private zero pages (mmap MAP_FIXED, same
// protection) and counts a fault, and the faulting access resumes on zeros. Whoever uses
// the mapping asks faults() afterwards and refuses the region from then on
// (ShmRegistry::resolve; the worker's shm_outputs.py). A SIGBUS anywhere else goes to
// the handler that was installed before ours (or the default action: the process dies
// as it would have).
//
// The handler only reads the watch table (atomics) and makes raw syscalls, so it is
// async-signal-safe; watch/unwatch are lock-free and may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>

namespace naiad {

// Watch slots in a process: a frontend watches at most two mappings per region (read,
// and write on the first output it writes), a worker one; --shm-max-regions is at most
// 65536.
constexpr size_t kShmGuardSlots = 1 << 17;

// Installs the SIGBUS handler once per process (watch() calls it).
void shm_guard_install();
// Watches the mapping [base, base + length) (`base` page-aligned, as mmap returned it).
// A handle >= 0, or -1 when every slot is taken (the mapping is then unguarded).
int shm_guard_watch(void* base, size_t length, bool writable);
// Stops watching (before the munmap). A handle of -1 is ignored.
void shm_guard_unwatch(int handle);
// Faults absorbed in the watched mapping so far (0 for -1).
uint64_t shm_guard_faults(int handle);

}  // namespace naiad
