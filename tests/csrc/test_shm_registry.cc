// The shared-memory region registry (csrc/shm/shm_registry.h): registration checks, bounds
// on every resolve, unregister while referenced (deferred unmap), the workers' table,
// no leaked mapping or fd, the core reading inputs through it, damaged inputs, and
// threads racing register/resolve/release/unregister (TSan).
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/core.h"
#include "fake_worker.h"
#include "shm/shm_registry.h"
#include "testing.h"

using namespace naiad;
using namespace naiad_testing;

namespace {

// A POSIX shared-memory object for one test, filled with bytes 0, 1, 2, ...
struct ShmObject {
  std::string key;
  explicit ShmObject(size_t size, const char* tag = "obj") {
    key = "/naiad_test_" + std::string(tag) + "_" + std::to_string(::getpid());
    int fd = ::shm_open(key.c_str(), O_CREAT | O_RDWR | O_EXCL, 0600);
    if (fd < 0) {
      ::shm_unlink(key.c_str());
      fd = ::shm_open(key.c_str(), O_CREAT | O_RDWR | O_EXCL, 0600);
    }
    if (fd >= 0) {
      (void)!::ftruncate(fd, static_cast<off_t>(size));
      std::vector<uint8_t> bytes(size);
      for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<uint8_t>(i);
      (void)!::pwrite(fd, bytes.data(), size, 0);
      ::close(fd);
    }
  }
  ~ShmObject() { ::shm_unlink(key.c_str()); }
};

size_t open_fds() {
  size_t count = 0;
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  while (::readdir(dir) != nullptr) ++count;
  ::closedir(dir);
  return count;
}

// Lines of /proc/self/maps that map `key`'s object.
size_t mappings_of(const std::string& key) {
  FILE* maps = std::fopen("/proc/self/maps", "r");
  if (maps == nullptr) return 0;
  char line[1024];
  size_t count = 0;
  while (std::fgets(line, sizeof(line), maps) != nullptr) {
    if (std::strstr(line, ("/dev/shm" + key).c_str()) != nullptr) ++count;
  }
  std::fclose(maps);
  return count;
}

}  // namespace

TEST(shm_key_checks) {
  CHECK(valid_shm_key("/abc"));
  CHECK(valid_shm_key("abc"));
  CHECK(!valid_shm_key(""));
  CHECK(!valid_shm_key("/"));
  CHECK(!valid_shm_key("/a/b"));
  CHECK(!valid_shm_key("//a"));
  CHECK(!valid_shm_key("/.."));
  CHECK(!valid_shm_key("/."));
  CHECK(!valid_shm_key("/../etc/passwd"));
  CHECK(!valid_shm_key(std::string("/a\0b", 4)));
  CHECK(!valid_shm_key("/" + std::string(300, 'x')));
}

TEST(shm_register_checks_and_messages) {
  ShmObject object(4096, "reg");
  ShmRegistry registry;
  std::string error;
  CHECK(registry.register_system("r0", object.key, 0, 4096, &error) == ErrorKind::kNone);
  // The same name again: Triton's ALREADY_EXISTS.
  CHECK(registry.register_system("r0", object.key, 0, 16, &error) == ErrorKind::kAlreadyExists);
  CHECK(error == "shared memory region 'r0' already in manager");
  // A key that names nothing.
  CHECK(registry.register_system("r1", "/naiad_no_such_object", 0, 16, &error) ==
        ErrorKind::kInternal);
  CHECK(error == "Unable to open shared memory region: '/naiad_no_such_object'");
  // Path tricks never reach shm_open.
  for (const char* key : {"/a/b", "/..", "/../../etc/passwd", "", "/"}) {
    CHECK(registry.register_system("r1", key, 0, 16, &error) == ErrorKind::kInternal);
    CHECK(error.find("Unable to open shared memory region") == 0);
  }
  // Beyond the object's real size, counted with the offset, without overflow.
  CHECK(registry.register_system("r1", object.key, 0, 4097, &error) == ErrorKind::kInvalidArgument);
  CHECK(error.find("failed to register shared memory region 'r1': invalid args") == 0);
  CHECK(error.find("4097") != std::string::npos && error.find("4096") != std::string::npos);
  CHECK(registry.register_system("r1", object.key, 4000, 97, &error) ==
        ErrorKind::kInvalidArgument);
  CHECK(registry.register_system("r1", object.key, UINT64_MAX, 2, &error) ==
        ErrorKind::kInvalidArgument);
  CHECK(registry.register_system("r1", object.key, 2, UINT64_MAX, &error) ==
        ErrorKind::kInvalidArgument);
  CHECK(registry.register_system("r1", object.key, 0, 0, &error) == ErrorKind::kInvalidArgument);
  CHECK(registry.mapped() == 1);
  std::vector<RegionStatus> listed;
  CHECK(registry.status(InputKind::kSystemShm, "", &listed, &error) == ErrorKind::kNone);
  CHECK(listed.size() == 1 && listed[0].name == "r0" && listed[0].key == object.key);
  listed.clear();
  CHECK(registry.status(InputKind::kSystemShm, "zz", &listed, &error) == ErrorKind::kNotFound);
  CHECK(error == "Unable to find system shared memory region: 'zz'");
  CHECK(registry.status(InputKind::kCudaIpc, "r0", &listed, &error) == ErrorKind::kNotFound);
  CHECK(error == "Unable to find cuda shared memory region: 'r0'");
}

TEST(shm_offset_applied_once) {
  // Triton 2.51 adds the registration offset twice; the bytes at `offset` are region 0.
  ShmObject object(3 * 4096, "off");
  ShmRegistry registry;
  std::string error;
  for (uint64_t offset : {uint64_t{8}, uint64_t{4096}, uint64_t{5000}}) {
    std::string name = "o" + std::to_string(offset);
    CHECK(registry.register_system(name, object.key, offset, 64, &error) == ErrorKind::kNone);
    RegionRef ref;
    CHECK(registry.resolve(name, 4, 8, &ref, &error) == ErrorKind::kNone);
    CHECK(ref.data != nullptr && ref.object_offset == offset + 4);
    for (int i = 0; i < 8; ++i) CHECK(ref.data[i] == static_cast<uint8_t>(offset + 4 + i));
    CHECK(registry.map(InputKind::kSystemShm, ref.id, 4, 8) == ref.data);
    registry.release(ref.id);
  }
}

TEST(shm_write_lands_in_the_object_bounds_checked_and_unmapped_at_unregister) {
  // An ensemble's answer is written into the client's region by the frontend itself.
  ShmObject object(3 * 4096, "write");
  ShmRegistry registry;
  std::string error;
  const size_t fds = open_fds();
  CHECK(registry.register_system("w", object.key, 5000, 64, &error) == ErrorKind::kNone);
  RegionRef ref;
  CHECK(registry.resolve("w", 8, 16, &ref, &error) == ErrorKind::kNone);
  const uint8_t bytes[4] = {0xde, 0xad, 0xbe, 0xef};
  CHECK(registry.write(ref.id, 8, bytes, 4));
  CHECK(registry.write(ref.id, 60, bytes, 4));   // the region's last bytes
  CHECK(!registry.write(ref.id, 61, bytes, 4));  // one past its end
  CHECK(!registry.write(ref.id, UINT64_MAX, bytes, 1));
  CHECK(!registry.write(ref.id + 1000, 0, bytes, 1));  // no such region
  // An output's place: what fits is written; too big for its place, Triton's message.
  CHECK(registry.write_output(ref.id, 8, 4, "OUT", bytes, 4).empty());
  CHECK(registry.write_output(ref.id, 8, 3, "OUT", bytes, 4) ==
        output_too_small_message("OUT", 3, 4));
  CHECK(registry.write_output(ref.id + 1000, 0, 4, "OUT", bytes, 4) ==
        "failed to write output 'OUT' into its shared memory region");
  // The region starts at object offset 5000 (applied once).
  int fd = ::shm_open(object.key.c_str(), O_RDONLY, 0);
  CHECK(fd >= 0);
  uint8_t read_back[4] = {0, 0, 0, 0};
  CHECK(::pread(fd, read_back, 4, 5008) == 4);
  CHECK(std::memcmp(read_back, bytes, 4) == 0);
  CHECK(::pread(fd, read_back, 4, 5060) == 4);
  CHECK(std::memcmp(read_back, bytes, 4) == 0);
  CHECK(::pread(fd, read_back, 1, 5007) == 1 && read_back[0] == static_cast<uint8_t>(5007));
  ::close(fd);
  registry.release(ref.id);
  CHECK(registry.unregister(InputKind::kSystemShm, "w", &error) == ErrorKind::kNone);
  // Both mappings and the fd are gone with the region.
  CHECK(mappings_of(object.key) == 0);
  CHECK(open_fds() == fds);
}

TEST(shm_resolve_bounds) {
  ShmObject object(4096, "bounds");
  ShmRegistry registry;
  std::string error;
  CHECK(registry.register_system("r", object.key, 0, 64, &error) == ErrorKind::kNone);
  RegionRef ref;
  CHECK(registry.resolve("zz", 0, 4, &ref, &error) == ErrorKind::kNotFound);
  CHECK(error == "Unable to find shared memory region: 'zz'");
  // Triton 2.51's words: the offset within the region first, then the end.
  CHECK(registry.resolve("r", 56, 16, &ref, &error) == ErrorKind::kInvalidArgument);
  CHECK(error == "Invalid offset + byte size for shared memory region: 'r'");
  CHECK(registry.resolve("r", UINT64_MAX, 1, &ref, &error) == ErrorKind::kInvalidArgument);
  CHECK(error == "Invalid offset for shared memory region: 'r'");
  CHECK(registry.resolve("r", 1, UINT64_MAX, &ref, &error) == ErrorKind::kInvalidArgument);
  CHECK(error == "Invalid offset + byte size for shared memory region: 'r'");
  CHECK(registry.resolve("r", 64, 0, &ref, &error) == ErrorKind::kInvalidArgument);
  CHECK(error == "Invalid offset for shared memory region: 'r'");
  CHECK(registry.resolve("r", 63, 0, &ref, &error) == ErrorKind::kNone);
  registry.release(ref.id);
  CHECK(registry.resolve("r", 0, 64, &ref, &error) == ErrorKind::kNone);
  registry.release(ref.id);
  // map() (the core's InputRegions) checks the same bounds by id.
  CHECK(registry.map(InputKind::kSystemShm, ref.id, 0, 65) == nullptr);
  CHECK(registry.map(InputKind::kSystemShm, ref.id, UINT64_MAX, 2) == nullptr);
  CHECK(registry.map(InputKind::kCudaIpc, ref.id, 0, 4) == nullptr);
  CHECK(registry.map(InputKind::kSystemShm, ref.id + 100, 0, 4) == nullptr);
}

TEST(shm_unregister_while_referenced_defers_the_unmap) {
  ShmObject object(4096, "defer");
  size_t fds_before = open_fds();
  {
    ShmRegistry registry;
    std::string error;
    CHECK(registry.register_system("r", object.key, 0, 128, &error) == ErrorKind::kNone);
    CHECK(mappings_of(object.key) == 1);
    CHECK(open_fds() == fds_before + 1);
    RegionRef ref;
    CHECK(registry.resolve("r", 0, 128, &ref, &error) == ErrorKind::kNone);
    CHECK(registry.unregister(InputKind::kSystemShm, "r", &error) == ErrorKind::kNone);
    // The name is gone for new requests; the referenced bytes stay mapped.
    RegionRef other;
    CHECK(registry.resolve("r", 0, 4, &other, &error) == ErrorKind::kNotFound);
    CHECK(ref.data[100] == 100);
    CHECK(mappings_of(object.key) == 1);
    CHECK(registry.mapped() == 1);
    CHECK(!registry.acquire(ref.id + 1000));
    // The name can be registered again meanwhile: a new region with a new id.
    CHECK(registry.register_system("r", object.key, 0, 64, &error) == ErrorKind::kNone);
    CHECK(registry.resolve("r", 0, 4, &other, &error) == ErrorKind::kNone);
    CHECK(other.id != ref.id);
    registry.release(other.id);
    registry.release(ref.id);  // the last reference: unmapped and closed now
    CHECK(registry.mapped() == 1);
    CHECK(registry.map(InputKind::kSystemShm, ref.id, 0, 4) == nullptr);
    CHECK(registry.unregister(InputKind::kSystemShm, "", &error) == ErrorKind::kNone);
    CHECK(registry.mapped() == 0);
    CHECK(mappings_of(object.key) == 0);
    CHECK(open_fds() == fds_before);
    registry.release(ref.id);  // a stray release changes nothing
  }
  CHECK(open_fds() == fds_before);
}

TEST(shm_destructor_releases_everything) {
  ShmObject object(4096, "dtor");
  size_t fds_before = open_fds();
  {
    ShmRegistry registry;
    std::string error;
    CHECK(registry.register_system("a", object.key, 0, 64, &error) == ErrorKind::kNone);
    CHECK(registry.register_system("b", object.key, 64, 64, &error) == ErrorKind::kNone);
    RegionRef ref;
    CHECK(registry.resolve("a", 0, 4, &ref, &error) == ErrorKind::kNone);
    CHECK(mappings_of(object.key) == 2);
  }
  CHECK(mappings_of(object.key) == 0);
  CHECK(open_fds() == fds_before);
}

TEST(shm_unlinked_object_stays_usable) {
  // A client that unlinks (or dies) after registering leaves the region usable until
  // unregistered: the registry holds the fd and the mapping.
  auto object = std::make_unique<ShmObject>(4096, "unlinked");
  ShmRegistry registry;
  std::string error;
  CHECK(registry.register_system("r", object->key, 16, 64, &error) == ErrorKind::kNone);
  object.reset();
  RegionRef ref;
  CHECK(registry.resolve("r", 0, 64, &ref, &error) == ErrorKind::kNone);
  CHECK(ref.data[0] == 16);
  std::string path = "/proc/self/fd/" + std::to_string(ref.fd);
  int fd = ::open(path.c_str(), O_RDWR);  // what a worker does to write outputs
  CHECK(fd >= 0);
  ::close(fd);
  registry.release(ref.id);
}

TEST(shm_kinds_share_one_namespace) {
  ShmObject object(4096, "kinds");
  ShmRegistry registry;
  std::string error;
  std::string handle(kCudaIpcHandleBytes, 'h');
  CHECK(registry.register_cuda("c", handle, 0, 1024, &error) == ErrorKind::kNone);
  CHECK(registry.register_system("c", object.key, 0, 64, &error) == ErrorKind::kAlreadyExists);
  CHECK(registry.register_cuda("d", "short", 0, 1024, &error) == ErrorKind::kInvalidArgument);
  CHECK(registry.unregister(InputKind::kSystemShm, "c", &error) == ErrorKind::kInvalidArgument);
  CHECK(error.find("registered as CUDA shared memory, not system shared memory") !=
        std::string::npos);
  std::vector<RegionStatus> listed;
  CHECK(registry.status(InputKind::kSystemShm, "", &listed, &error) == ErrorKind::kNone);
  CHECK(listed.empty());
  CHECK(registry.status(InputKind::kCudaIpc, "", &listed, &error) == ErrorKind::kNone);
  CHECK(listed.size() == 1 && listed[0].raw_handle == handle && listed[0].byte_size == 1024);
  RegionRef ref;
  CHECK(registry.resolve("c", 8, 16, &ref, &error) == ErrorKind::kNone);
  CHECK(ref.kind == InputKind::kCudaIpc && ref.data == nullptr && ref.object_offset == 8);
  CHECK(registry.map(InputKind::kSystemShm, ref.id, 0, 4) == nullptr);
  registry.release(ref.id);
  CHECK(registry.unregister(InputKind::kCudaIpc, "", &error) == ErrorKind::kNone);
  CHECK(registry.mapped() == 0);
}

TEST(shm_worker_table_tracks_live_ids) {
  ShmObject object(4096, "table");
  Arena arena = Arena::create(1 << 20);
  uint64_t blocks = arena.stats().blocks_in_use;
  {
    ShmRegistry registry(&arena);
    CHECK(registry.table_offset() != 0);
    RegionTable* table = arena.at<RegionTable>(registry.table_offset());
    auto live = [&](uint64_t id) {
      for (uint64_t i = 0; i < table->slots; ++i) {
        if (region_table_id(table, i) == id) return true;
      }
      return false;
    };
    std::string error;
    uint64_t epoch = table->epoch.load();
    CHECK(registry.register_system("r", object.key, 0, 64, &error) == ErrorKind::kNone);
    CHECK(table->epoch.load() != epoch);
    RegionRef ref;
    CHECK(registry.resolve("r", 0, 4, &ref, &error) == ErrorKind::kNone);
    CHECK(live(ref.id));
    CHECK(registry.unregister(InputKind::kSystemShm, "r", &error) == ErrorKind::kNone);
    CHECK(live(ref.id));  // still referenced: a worker may still write into it
    epoch = table->epoch.load();
    registry.release(ref.id);
    CHECK(!live(ref.id));
    CHECK(table->epoch.load() != epoch);
    // The table is bounded: registering past it fails cleanly, nothing leaks.
    for (uint32_t i = 0; i < kDefaultMaxRegions; ++i) {
      CHECK(registry.register_system("t" + std::to_string(i), object.key, 0, 8, &error) ==
            ErrorKind::kNone);
    }
    size_t fds = open_fds();
    CHECK(registry.register_system("over", object.key, 0, 8, &error) == ErrorKind::kInternal);
    CHECK(open_fds() == fds);
    CHECK(registry.unregister(InputKind::kSystemShm, "", &error) == ErrorKind::kNone);
    CHECK(mappings_of(object.key) == 0);
  }
  CHECK(arena.stats().blocks_in_use == blocks);
}

TEST(shm_core_reads_inputs_from_regions) {
  ShmObject object(4096, "core");
  Core core(1 << 20, nullptr, false);
  ShmRegistry registry(&core.arena());
  core.set_input_regions(&registry);
  std::string error;
  CHECK(registry.register_system("r", object.key, 100, 64, &error) == ErrorKind::kNone);
  RegionRef ref;
  CHECK(registry.resolve("r", 0, 16, &ref, &error) == ErrorKind::kNone);
  ModelHandle model = core.add_model(batching(4, false));
  uint32_t instance = core.add_instance(model);
  core.instance_starting(instance);
  SubmitRequest request;
  request.request_id = 1;
  request.metadata = "{}";
  InputSource source;
  source.kind = InputKind::kSystemShm;
  source.region = ref.id;
  source.offset = 8;
  source.size = 16;
  request.inputs.push_back(source);
  CHECK(core.submit(model, request) == SubmitResult::kOk);
  // Outside the region, an unknown region, a CUDA region: refused, nothing queued.
  request.inputs[0].offset = 56;
  request.request_id = 2;
  CHECK(core.submit(model, request) == SubmitResult::kUnsupportedInput);
  request.inputs[0].offset = 0;
  request.inputs[0].region = ref.id + 7;
  CHECK(core.submit(model, request) == SubmitResult::kUnsupportedInput);
  request.inputs[0].region = ref.id;
  request.inputs[0].kind = InputKind::kCudaIpc;
  CHECK(core.submit(model, request) == SubmitResult::kUnsupportedInput);
  {
    FakeWorker worker(core, instance);
    core.instance_up(instance);
    core.flush();
    std::vector<Completion> done = collect(core, 1);
    CHECK(done.size() == 1 && done[0].request_ids.size() == 1 && done[0].request_ids[0] == 1);
    core.stop_instance(instance);
  }
  registry.release(ref.id);
  core.remove_model(model);
  core.instance_down(instance);
}

TEST(shm_damaged_requests_never_read_outside) {
  // Random names, offsets and sizes (many near the edges and the 64-bit limit):
  // resolve() either refuses or returns bytes inside the region.
  ShmObject object(8192, "fuzz");
  ShmRegistry registry;
  std::string error;
  CHECK(registry.register_system("r", object.key, 4000, 1000, &error) == ErrorKind::kNone);
  std::mt19937_64 random(7);
  const uint64_t edges[] = {
      0, 1, 999, 1000, 1001, 4096, UINT64_MAX, UINT64_MAX - 999, uint64_t{1} << 63};
  for (int i = 0; i < 20000; ++i) {
    uint64_t offset = (random() & 1) ? edges[random() % 9] : random() % 1200;
    uint64_t size = (random() & 1) ? edges[random() % 9] : random() % 1200;
    RegionRef ref;
    std::string name = (random() % 10 == 0) ? std::string("r\0x", 3) : "r";
    ErrorKind kind = registry.resolve(name, offset, size, &ref, &error);
    bool inside = name == "r" && offset < 1000 && size <= 1000 - offset;
    CHECK((kind == ErrorKind::kNone) == inside);
    if (kind == ErrorKind::kNone) {
      if (size > 0) CHECK(ref.data[size - 1] == static_cast<uint8_t>(4000 + offset + size - 1));
      registry.release(ref.id);
    }
  }
}

TEST(shm_threads_race_register_resolve_unregister) {
  ShmObject object(1 << 16, "race");
  ShmRegistry registry;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> reads{0};
  std::atomic<bool> torn{false};  // CHECK only on the main thread (its counters are not atomic)
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      std::string error;
      uint64_t sum = 0;
      while (!stop.load()) {
        RegionRef ref;
        if (registry.resolve("r" + std::to_string(t % 2), 0, 256, &ref, &error) ==
            ErrorKind::kNone) {
          for (int i = 0; i < 256; ++i) sum += ref.data[i];  // mapped while referenced
          registry.release(ref.id);
          reads++;
        }
      }
      if (sum % 32640 != 0) torn = true;  // 0 + 1 + ... + 255 per read
    });
  }
  std::string error;
  for (int i = 0; i < 2000; ++i) {
    std::string name = "r" + std::to_string(i % 2);
    registry.register_system(name, object.key, 0, 4096, &error);
    registry.unregister(InputKind::kSystemShm, name, &error);
  }
  stop = true;
  for (auto& thread : threads) thread.join();
  CHECK(!torn);
  CHECK(registry.mapped() == 0);
  CHECK(mappings_of(object.key) == 0);
}
