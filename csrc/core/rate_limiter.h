// Triton's rate limiter (tritonserver --rate-limit=execution_count), its policy in one
// place: which instances may execute now, across every model of the server.
//
// - Resources: an instance lists the resources an execution needs (name, count,
//   global or not). A per-device resource is counted on the instance's device, a
//   global one once for the whole server. The counts available are the most any
//   registered instance asks for, or, once any --rate-limit-resource is given, what
//   those name (a resource they do not name has none): an instance asking for more is
//   refused with Triton's message, as is a name used both global and per device.
// - Lifecycle of an instance: available -> staged (the core formed a batch for it)
//   -> allocated (its resources are taken, the batch runs) -> available (released: the
//   resources come back and its execution count grows).
// - Priority: instances are ranked by execution count x priority (0 counts as 1), the
//   lowest first, so an instance of priority 2 gets half the executions of one of
//   priority 1 when they contend. The ranking chooses which idle instance of a model
//   takes its next batch (order()) and which staged instance runs next, across models
//   (next()): only the first staged one is tried, as in Triton, so a lower ranked
//   instance never overtakes it; equal ranks go first staged, first served.
//
// Pure: no clock (the policy counts executions, not time), no lock, no I/O; the core
// (core.h) calls it with its mutex held and owns the batches and channels around it.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace naiad {

// Where a resource is counted: a device id, or one of these (Triton's keys).
constexpr int32_t kGlobalResource = -2;  // shared by every device
constexpr int32_t kEveryDevice = -1;     // --rate-limit-resource without <device>

// One entry of an instance group's rate_limiter { resources [...] }.
struct RateLimitResource {
  std::string name;
  bool global = false;
  uint32_t count = 0;
};

// An instance's rate_limiter config and the device it runs on (0 for CPU instances,
// as Triton counts them).
struct InstanceRateLimit {
  int32_t device = 0;
  uint32_t priority = 0;
  std::vector<RateLimitResource> resources;
};

// One --rate-limit-resource=<name>:<count>[:<device>].
struct ServerResource {
  std::string name;
  uint32_t count = 0;
  int32_t device = kEveryDevice;
};

// tritonserver's --rate-limit (off: resources and priorities are ignored) and its
// --rate-limit-resource flags.
struct RateLimiterConfig {
  bool execution_count = false;
  std::vector<ServerResource> resources;
};

class RateLimiter {
 public:
  explicit RateLimiter(const RateLimiterConfig& config = {});

  bool enabled() const { return config_.execution_count; }

  // Registers instance `id`. Returns "" or the reason it cannot be scheduled (Triton's
  // message); then nothing is registered.
  std::string add_instance(uint32_t id, const InstanceRateLimit& limits);
  // Forgets the instance: unstaged, and what it holds is given back.
  void remove_instance(uint32_t id);

  // Sorts instance ids by rank, lowest first, keeping the given order among equals.
  void order(std::vector<uint32_t>::iterator first, std::vector<uint32_t>::iterator last) const;
  // The core formed a batch for idle instance `id`: it waits for its resources.
  void stage(uint32_t id);
  // Its batch went away before it ran (cancelled, failed): no longer waiting.
  void unstage(uint32_t id);
  // Allocates the first staged instance if its resources are free: true and its id.
  // False when none is staged or the first must wait (then every other waits too).
  bool next(uint32_t* id);
  // The instance's execution ended (or its worker died): its resources come back.
  void release(uint32_t id);

  // For the core and tests.
  bool holds(uint32_t id) const;
  bool staged(uint32_t id) const;
  size_t staged_count() const { return staged_.size(); }
  // Copies of resource `name` free now on `device` (kGlobalResource for a global one).
  uint32_t available(const std::string& name, int32_t device) const;

 private:
  using Counts = std::map<int32_t, std::map<std::string, uint32_t>>;  // where -> name -> n
  struct Entry {
    Counts needs;
    uint64_t priority = 1;
    uint64_t executions = 0;
    bool staged = false;
    bool holds = false;
    uint64_t stage_seq = 0;
  };
  uint64_t rank(const Entry& entry) const { return entry.executions * entry.priority; }
  // The counts available from the registered instances and the flags; "" or why not.
  std::string compute_limits();
  uint32_t explicit_count(int32_t where, const std::string& name) const;
  bool fits(const Entry& entry) const;

  RateLimiterConfig config_;
  std::unordered_map<uint32_t, Entry> instances_;
  Counts limits_;
  Counts in_use_;
  std::set<std::tuple<uint64_t, uint64_t, uint32_t>> staged_;  // (rank, stage_seq, id)
  uint64_t next_seq_ = 0;
};

}  // namespace naiad
