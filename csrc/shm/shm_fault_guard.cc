#include "shm/shm_fault_guard.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <mutex>

namespace naiad {

namespace {

struct WatchSlot {
  // 0: free. Set last on watch (release), cleared first on unwatch.
  std::atomic<uintptr_t> base{0};
  std::atomic<size_t> length{0};
  std::atomic<int> prot{0};
  std::atomic<uint64_t> faults{0};
  std::atomic<bool> taken{false};  // claimed by a watch(), base possibly not set yet
};

WatchSlot g_slots[kShmGuardSlots];
// Slots at and past this index were never taken: the handler scans below it only.
std::atomic<size_t> g_high{0};
struct sigaction g_previous;
std::once_flag g_installed;

void chain(int signum, siginfo_t* info, void* context) {
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction != nullptr) g_previous.sa_sigaction(signum, info, context);
    return;
  }
  if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(signum);
    return;
  }
  // The default action: restore it; a fault then recurs when we return and kills the
  // process as it would have without us; a signal sent by someone is sent again.
  struct sigaction dfl = {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(signum, &dfl, nullptr);
  if (info == nullptr || info->si_code <= 0) ::raise(signum);
}

void on_sigbus(int signum, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  const uintptr_t address = info != nullptr ? reinterpret_cast<uintptr_t>(info->si_addr) : 0;
  const size_t high = g_high.load(std::memory_order_acquire);
  for (size_t i = 0; address != 0 && info->si_code > 0 && i < high; ++i) {
    WatchSlot& slot = g_slots[i];
    const uintptr_t base = slot.base.load(std::memory_order_acquire);
    if (base == 0 || address < base) continue;
    const size_t length = slot.length.load(std::memory_order_relaxed);
    if (address - base >= length) continue;
    // The raw syscall: no interceptor (sanitizers) or lock between us and the kernel.
    const long mapped = ::syscall(SYS_mmap, base, length, slot.prot.load(std::memory_order_relaxed),
                                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (mapped == -1) break;  // cannot repair: let the fault take its course
    slot.faults.fetch_add(1, std::memory_order_release);
    errno = saved_errno;
    return;
  }
  chain(signum, info, context);
  errno = saved_errno;
}

}  // namespace

void shm_guard_install() {
  std::call_once(g_installed, [] {
    struct sigaction action = {};
    action.sa_sigaction = on_sigbus;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGBUS, &action, &g_previous);
  });
}

int shm_guard_watch(void* base, size_t length, bool writable) {
  if (base == nullptr || length == 0) return -1;
  shm_guard_install();
  for (size_t i = 0; i < kShmGuardSlots; ++i) {
    WatchSlot& slot = g_slots[i];
    bool expected = false;
    if (!slot.taken.compare_exchange_strong(expected, true, std::memory_order_acq_rel)) continue;
    slot.length.store(length, std::memory_order_relaxed);
    slot.prot.store(writable ? PROT_READ | PROT_WRITE : PROT_READ, std::memory_order_relaxed);
    slot.faults.store(0, std::memory_order_relaxed);
    slot.base.store(reinterpret_cast<uintptr_t>(base), std::memory_order_release);
    size_t high = g_high.load(std::memory_order_relaxed);
    while (high < i + 1 && !g_high.compare_exchange_weak(high, i + 1, std::memory_order_acq_rel)) {
    }
    return static_cast<int>(i);
  }
  return -1;
}

void shm_guard_unwatch(int handle) {
  if (handle < 0 || static_cast<size_t>(handle) >= kShmGuardSlots) return;
  WatchSlot& slot = g_slots[handle];
  slot.base.store(0, std::memory_order_release);
  slot.taken.store(false, std::memory_order_release);
}

uint64_t shm_guard_faults(int handle) {
  if (handle < 0 || static_cast<size_t>(handle) >= kShmGuardSlots) return 0;
  return g_slots[handle].faults.load(std::memory_order_acquire);
}

}  // namespace naiad
