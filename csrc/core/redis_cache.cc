#include "core/redis_cache.h"

#include "core/core.h"

namespace naiad {

std::string RedisCache::redis_key(std::string_view key) const {
  std::string out;
  out.reserve(kKeyPrefix.size() + key.size());
  out.append(kKeyPrefix);
  out.append(key);
  return out;
}

bool RedisCache::open(std::string* error) {
  std::lock_guard<std::mutex> lock(mutex_);
  RespReply reply;
  if (!client_.call({"PING"}, &reply, error)) return false;
  if (reply.type == RespReply::Type::kError) {
    *error = "Redis at " + client_.options().host + ":" + std::to_string(client_.options().port) +
             " answered PING with: " + reply.text;
    return false;
  }
  return true;
}

RedisCache::Found RedisCache::lookup(std::string_view key) {
  Found found;
  const std::string name = redis_key(key);
  std::lock_guard<std::mutex> lock(mutex_);
  found.start_ns = monotonic_ns();
  RespReply reply;
  std::string error;
  if (!client_.call({"GET", name}, &reply, &error)) {
    ++totals_.errors;
    last_error_ = std::move(error);
  } else if (reply.type == RespReply::Type::kBulk) {
    // The key is not kept in the entry: the caller has it, and a hit never stores it.
    found.entry = CacheEntry::parse(std::string(), 0, reply.text);
    if (!found.entry) {
      ++totals_.errors;
      last_error_ = "Redis held a value that is no cache entry under a cache key";
    }
  } else if (reply.type != RespReply::Type::kNil) {
    ++totals_.errors;
    last_error_ = "Redis answered GET with: " + reply.text;
  }
  ++totals_.lookups;
  ++(found.entry ? totals_.hits : totals_.misses);
  found.end_ns = monotonic_ns();
  totals_.lookup_ns += found.end_ns - found.start_ns;
  return found;
}

RedisCache::Inserted RedisCache::insert(std::shared_ptr<CacheEntry> entry, uint64_t start_ns,
                                        uint64_t* insert_ns) {
  const std::string name = redis_key(entry->key);
  const std::string value = entry->serialize();
  std::lock_guard<std::mutex> lock(mutex_);
  Inserted result = Inserted::kFailed;
  if (value.size() > kRespMaxBulk) {
    result = Inserted::kTooLarge;  // Redis's own limit on a value
  } else {
    RespReply reply;
    std::string error;
    if (!client_.call({"SET", name, value, "NX"}, &reply, &error)) {
      ++totals_.errors;
      last_error_ = std::move(error);
    } else if (reply.type == RespReply::Type::kStatus) {
      result = Inserted::kInserted;
    } else if (reply.type == RespReply::Type::kNil) {
      result = Inserted::kExists;
    } else {
      ++totals_.errors;
      last_error_ = "Redis answered SET with: " + reply.text;
    }
  }
  const uint64_t end_ns = monotonic_ns();
  *insert_ns = end_ns > start_ns ? end_ns - start_ns : 0;
  totals_.insert_ns += *insert_ns;
  return result;
}

CacheTotals RedisCache::totals() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return totals_;
}

std::string RedisCache::last_error() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return last_error_;
}

}  // namespace naiad
