#include "core/rate_limiter.h"

#include <algorithm>

namespace naiad {

RateLimiter::RateLimiter(const RateLimiterConfig& config) : config_(config) {}

uint32_t RateLimiter::explicit_count(int32_t where, const std::string& name) const {
  // As Triton: a global resource takes the largest count given for its name on any
  // device; a per-device one the larger of its device's and the every-device count.
  uint32_t count = 0;
  for (const ServerResource& given : config_.resources) {
    if (given.name != name) continue;
    if (where == kGlobalResource || given.device == where || given.device == kEveryDevice) {
      count = std::max(count, given.count);
    }
  }
  return count;
}

std::string RateLimiter::compute_limits() {
  limits_.clear();
  for (const auto& instance : instances_) {
    for (const auto& [where, names] : instance.second.needs) {
      for (const auto& [name, count] : names) {
        uint32_t& limit = limits_[where][name];
        limit = std::max(limit, count);
      }
    }
  }
  // Triton's checks, in its order: the flags' counts first, then the kinds.
  if (!config_.resources.empty()) {
    for (auto& [where, names] : limits_) {
      for (auto& [name, needed] : names) {
        const uint32_t given = explicit_count(where, name);
        if (given < needed) {
          return "Resource count for \"" + name + "\" is limited to " + std::to_string(given) +
                 " which will prevent scheduling of one or more model instances, the minimum "
                 "required count is " +
                 std::to_string(needed);
        }
        needed = given;
      }
    }
  }
  auto global = limits_.find(kGlobalResource);
  if (global != limits_.end()) {
    for (const auto& entry : global->second) {
      for (const auto& [where, names] : limits_) {
        if (where != kGlobalResource && names.count(entry.first) != 0) {
          return "Resource \"" + entry.first +
                 "\" is present as both global and device-specific resource in the model "
                 "configuration.";
        }
      }
    }
  }
  return "";
}

std::string RateLimiter::add_instance(uint32_t id, const InstanceRateLimit& limits) {
  Entry entry;
  entry.priority = std::max<uint32_t>(limits.priority, 1);
  for (const RateLimitResource& resource : limits.resources) {
    // A name listed twice in one group: the last count stands, as in Triton's map.
    entry.needs[resource.global ? kGlobalResource : limits.device][resource.name] = resource.count;
  }
  instances_[id] = std::move(entry);
  std::string error = compute_limits();
  if (!error.empty()) {
    instances_.erase(id);
    compute_limits();  // what stood before: it passed then
  }
  return error;
}

void RateLimiter::remove_instance(uint32_t id) {
  auto it = instances_.find(id);
  if (it == instances_.end()) return;
  if (it->second.holds) release(id);
  unstage(id);
  instances_.erase(it);
  compute_limits();
}

void RateLimiter::order(std::vector<uint32_t>::iterator first,
                        std::vector<uint32_t>::iterator last) const {
  auto rank_of = [this](uint32_t id) {
    auto it = instances_.find(id);
    return it == instances_.end() ? 0 : rank(it->second);
  };
  std::stable_sort(first, last, [&](uint32_t a, uint32_t b) { return rank_of(a) < rank_of(b); });
}

void RateLimiter::stage(uint32_t id) {
  auto it = instances_.find(id);
  if (it == instances_.end() || it->second.staged || it->second.holds) return;
  Entry& entry = it->second;
  entry.staged = true;
  entry.stage_seq = next_seq_++;
  staged_.emplace(rank(entry), entry.stage_seq, id);
}

void RateLimiter::unstage(uint32_t id) {
  auto it = instances_.find(id);
  if (it == instances_.end() || !it->second.staged) return;
  staged_.erase({rank(it->second), it->second.stage_seq, id});
  it->second.staged = false;
}

bool RateLimiter::fits(const Entry& entry) const {
  for (const auto& [where, names] : entry.needs) {
    const auto limit = limits_.find(where);
    const auto used = in_use_.find(where);
    for (const auto& [name, count] : names) {
      const uint32_t total = limit == limits_.end() ? 0 : limit->second.at(name);
      uint32_t taken = 0;
      if (used != in_use_.end()) {
        const auto n = used->second.find(name);
        if (n != used->second.end()) taken = n->second;
      }
      if (taken + count > total) return false;
    }
  }
  return true;
}

bool RateLimiter::next(uint32_t* id) {
  if (staged_.empty()) return false;
  const uint32_t first = std::get<2>(*staged_.begin());
  Entry& entry = instances_.at(first);
  if (!fits(entry)) return false;
  staged_.erase(staged_.begin());
  entry.staged = false;
  entry.holds = true;
  for (const auto& [where, names] : entry.needs) {
    for (const auto& [name, count] : names) in_use_[where][name] += count;
  }
  *id = first;
  return true;
}

void RateLimiter::release(uint32_t id) {
  auto it = instances_.find(id);
  if (it == instances_.end() || !it->second.holds) return;
  Entry& entry = it->second;
  for (const auto& [where, names] : entry.needs) {
    for (const auto& [name, count] : names) in_use_[where][name] -= count;
  }
  entry.holds = false;
  ++entry.executions;
}

bool RateLimiter::holds(uint32_t id) const {
  auto it = instances_.find(id);
  return it != instances_.end() && it->second.holds;
}

bool RateLimiter::staged(uint32_t id) const {
  auto it = instances_.find(id);
  return it != instances_.end() && it->second.staged;
}

uint32_t RateLimiter::available(const std::string& name, int32_t device) const {
  uint32_t total = 0;
  uint32_t taken = 0;
  auto limit = limits_.find(device);
  if (limit != limits_.end() && limit->second.count(name) != 0) total = limit->second.at(name);
  auto used = in_use_.find(device);
  if (used != in_use_.end() && used->second.count(name) != 0) taken = used->second.at(name);
  return total - taken;
}

}  // namespace naiad
