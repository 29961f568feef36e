// Hostile shared-memory objects (csrc/shm/shm_fault_guard.h, csrc/shm/shm_registry.h): a
// mapping whose object the client truncates costs zero pages, not the process, on
// several threads at once; the registry refuses such a region on the next resolve
// (fstat) and for good once the guard absorbed a fault, and its writes fail; a fault
// outside any watched mapping still kills the process; a FIFO as a key is refused
// without blocking.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "shm/shm_fault_guard.h"
#include "shm/shm_registry.h"
#include "testing.h"

using namespace naiad;

namespace {

constexpr size_t kObjectBytes = 4 * 4096;

// A shm object of kObjectBytes filled with 0x5a; the fd stays open to truncate it.
struct Object {
  std::string key;
  int fd = -1;
  explicit Object(const char* tag) {
    key = "/naiad_guard_" + std::string(tag) + "_" + std::to_string(::getpid());
    ::shm_unlink(key.c_str());
    fd = ::shm_open(key.c_str(), O_CREAT | O_RDWR | O_EXCL, 0600);
    if (fd >= 0) {
      (void)!::ftruncate(fd, kObjectBytes);
      std::vector<uint8_t> bytes(kObjectBytes, 0x5a);
      (void)!::pwrite(fd, bytes.data(), bytes.size(), 0);
    }
  }
  void resize(size_t size) const { (void)!::ftruncate(fd, static_cast<off_t>(size)); }
  ~Object() {
    if (fd >= 0) ::close(fd);
    ::shm_unlink(key.c_str());
  }
};

uint8_t* map_object(const Object& object, int prot) {
  void* base = ::mmap(nullptr, kObjectBytes, prot, MAP_SHARED, object.fd, 0);
  return base == MAP_FAILED ? nullptr : static_cast<uint8_t*>(base);
}

}  // namespace

TEST(shm_guard_turns_a_truncation_into_zero_pages) {
  Object object("zero");
  CHECK(object.fd >= 0);
  uint8_t* base = map_object(object, PROT_READ);
  CHECK(base != nullptr);
  const int watch = shm_guard_watch(base, kObjectBytes, false);
  CHECK(watch >= 0);
  CHECK(base[0] == 0x5a);
  CHECK(shm_guard_faults(watch) == 0);
  object.resize(0);
  // Several threads copy out of it at once, as the assembler and the lanes do.
  std::vector<std::thread> threads;
  std::vector<int> sums(4, -1);
  for (size_t t = 0; t < sums.size(); ++t) {
    threads.emplace_back([&, t] {
      std::vector<uint8_t> copy(kObjectBytes);
      std::memcpy(copy.data(), base, kObjectBytes);
      int sum = 0;
      for (uint8_t byte : copy) sum += byte;
      sums[t] = sum;
    });
  }
  for (auto& thread : threads) thread.join();
  for (int sum : sums) CHECK(sum == 0);
  CHECK(shm_guard_faults(watch) >= 1);
  shm_guard_unwatch(watch);
  ::munmap(base, kObjectBytes);
}

TEST(shm_guard_leaves_other_faults_fatal) {
  Object object("fatal");
  CHECK(object.fd >= 0);
  shm_guard_install();
  uint8_t* base = map_object(object, PROT_READ);
  CHECK(base != nullptr);
  object.resize(0);
  const pid_t child = ::fork();
  CHECK(child >= 0);
  if (child == 0) {
    // A sanitizer's handler, chained to, reports the fault: not this test's output.
    const int quiet = ::open("/dev/null", O_WRONLY);
    if (quiet >= 0) ::dup2(quiet, STDERR_FILENO);
    volatile uint8_t byte = base[0];  // not watched: the fault takes its course
    (void)byte;
    ::_exit(0);
  }
  int status = 0;
  CHECK(::waitpid(child, &status, 0) == child);
  CHECK(!(WIFEXITED(status) && WEXITSTATUS(status) == 0));
  ::munmap(base, kObjectBytes);
}

TEST(shm_registry_refuses_a_truncated_region) {
  Object object("registry");
  CHECK(object.fd >= 0);
  ShmRegistry registry;
  std::string error;
  CHECK(registry.register_system("r", object.key, 0, kObjectBytes, &error) == ErrorKind::kNone);
  RegionRef ref;
  CHECK(registry.resolve("r", 0, 16, &ref, &error) == ErrorKind::kNone);
  object.resize(0);
  // The next request is refused before anything reads the region.
  RegionRef refused;
  error.clear();
  CHECK(registry.resolve("r", 0, 16, &refused, &error) == ErrorKind::kInvalidArgument);
  CHECK(error == "shared memory region 'r' was truncated after registration (its object '" +
                     object.key + "' has 0 bytes, the region needs offset 0 + byte_size " +
                     std::to_string(kObjectBytes) + ")");
  // A request resolved before the truncation: its copy and its write fault, and the
  // process goes on.
  const uint8_t* bytes = registry.map(InputKind::kSystemShm, ref.id, 0, 16);
  CHECK(bytes != nullptr);
  uint8_t copy[16];
  std::memcpy(copy, bytes, sizeof(copy));
  CHECK(copy[0] == 0 && copy[15] == 0);
  const uint8_t answer[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  CHECK(!registry.write(ref.id, 0, answer, sizeof(answer)));
  CHECK(registry.write_output(ref.id, 0, 16, "OUT", answer, sizeof(answer)) ==
        truncated_in_use_message("r"));
  // Grown back, the object is whole again, but our mapping of it is zeros: refused
  // until the client registers it again.
  object.resize(kObjectBytes);
  error.clear();
  CHECK(registry.resolve("r", 0, 16, &refused, &error) == ErrorKind::kInvalidArgument);
  CHECK(error == truncated_in_use_message("r"));
  registry.release(ref.id);
  CHECK(registry.unregister(InputKind::kSystemShm, "r", &error) == ErrorKind::kNone);
  CHECK(registry.mapped() == 0);
  const uint8_t fresh = 0x77;  // the truncation dropped the bytes: the client writes anew
  CHECK(::pwrite(object.fd, &fresh, 1, 0) == 1);
  CHECK(registry.register_system("r", object.key, 0, kObjectBytes, &error) == ErrorKind::kNone);
  CHECK(registry.resolve("r", 0, 16, &ref, &error) == ErrorKind::kNone);
  CHECK(ref.data[0] == 0x77);
  registry.release(ref.id);
}

TEST(shm_registry_names_a_region_truncated_under_a_request) {
  // The race made certain: the object shrinks after the request resolved its regions
  // and before the frontend copies out of one (the assembler's copy at dispatch).
  Object truncated_object("under");
  Object intact_object("intact");
  CHECK(truncated_object.fd >= 0 && intact_object.fd >= 0);
  ShmRegistry registry;
  std::string error;
  CHECK(registry.register_system("in", truncated_object.key, 0, kObjectBytes, &error) ==
        ErrorKind::kNone);
  CHECK(registry.register_system("ok", intact_object.key, 0, kObjectBytes, &error) ==
        ErrorKind::kNone);
  RegionRef in;
  RegionRef ok;
  CHECK(registry.resolve("in", 4096, 64, &in, &error) == ErrorKind::kNone);
  CHECK(registry.resolve("ok", 0, 64, &ok, &error) == ErrorKind::kNone);
  const std::vector<uint64_t> pins = {ok.id, in.id};
  // Copied whole before the truncation: the request's bytes are the client's.
  uint8_t copy[64];
  std::memcpy(copy, registry.map(InputKind::kSystemShm, in.id, 4096, 64), sizeof(copy));
  CHECK(copy[0] == 0x5a && copy[63] == 0x5a);
  CHECK(registry.truncated(pins).empty());
  truncated_object.resize(0);
  // Untouched since: nothing read zeros, nothing to refuse.
  CHECK(registry.truncated(pins).empty());
  std::memcpy(copy, registry.map(InputKind::kSystemShm, ok.id, 0, 64), sizeof(copy));
  CHECK(registry.truncated(pins).empty());
  std::memcpy(copy, registry.map(InputKind::kSystemShm, in.id, 4096, 64), sizeof(copy));
  CHECK(copy[0] == 0 && copy[63] == 0);  // the guard's zeros, not the client's bytes
  CHECK(registry.truncated(pins) == truncated_in_use_message("in"));
  CHECK(truncated_in_use_message("in") ==
        "shared memory region 'in' was truncated while in use; unregister it and register it "
        "again");
  // Only the requests that hold the region are refused.
  CHECK(registry.truncated({ok.id}).empty());
  registry.release(in.id);
  registry.release(ok.id);
}

TEST(shm_registry_refuses_a_fifo_without_blocking) {
  const std::string key = "/naiad_guard_fifo_" + std::to_string(::getpid());
  const std::string path = "/dev/shm" + key;
  ::unlink(path.c_str());
  CHECK(::mkfifo(path.c_str(), 0600) == 0);
  ShmRegistry registry;
  std::string error;
  // Without O_NONBLOCK this open waits for a writer that never comes.
  CHECK(registry.register_system("f", key, 0, 64, &error) == ErrorKind::kInternal);
  CHECK(error == "Unable to open shared memory region: '" + key + "' (not a shared memory object)");
  CHECK(registry.mapped() == 0);
  ::unlink(path.c_str());
}

TEST(shm_registry_cap_is_its_argument) {
  Object object("cap");
  CHECK(object.fd >= 0);
  ShmRegistry registry(nullptr, 2);
  std::string error;
  CHECK(registry.register_system("a", object.key, 0, 8, &error) == ErrorKind::kNone);
  CHECK(registry.register_system("b", object.key, 0, 8, &error) == ErrorKind::kNone);
  CHECK(registry.register_system("c", object.key, 0, 8, &error) == ErrorKind::kInternal);
  CHECK(error ==
        "failed to register shared memory region 'c': 2 regions are in use, the most this server "
        "serves (--shm-max-regions)");
  CHECK(registry.mapped() == 2);
}
