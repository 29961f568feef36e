// The Redis response cache (Triton's `--cache-config redis,host=H,port=P,...`): the same
// keys (cache_key()) and entries (CacheEntry::serialize()) as the local cache, kept in a
// Redis server that several Naiad servers may share, so one server's miss is the others'
// hit. GET on lookup, SET NX on insert (an entry filled meanwhile by another server is
// kept, as the local cache keeps the first). Entries stay in Redis when a model is
// unloaded (other servers may use them); Redis's own memory policy evicts them.
//
// Redis unreachable, slow past socket_timeout, or answering what is not an entry: the
// lookup is a miss and the insert is skipped (still a miss), so requests are answered
// uncached and none waits longer than one timeout; the client reconnects after its
// backoff (redis_client.h). Calls are serialised by `mutex_` (one connection) and run
// on the caller's thread: the front end's event loop, so each costs it one round trip.
#pragma once

#include <mutex>
#include <string>

#include "core/redis_client.h"
#include "core/response_cache.h"

namespace naiad {

class RedisCache : public ResponseCache {
 public:
  // Prefixes every key, so the cache's keys are told apart from others in the database.
  static constexpr std::string_view kKeyPrefix = "naiad:response:";

  explicit RedisCache(RedisOptions options) : client_(std::move(options)) {}

  // Connects and PINGs, as Triton's cache does at start-up; false with `*error` when
  // Redis cannot be reached or refuses the AUTH or SELECT.
  bool open(std::string* error);

  Found lookup(std::string_view key) override;
  Inserted insert(std::shared_ptr<CacheEntry> entry, uint64_t start_ns,
                  uint64_t* insert_ns) override;
  void drop_owner(uint32_t) override {}
  // Lookups, hits, misses and durations; capacity, used bytes, entries and evictions
  // are Redis's (0 here). `errors` counts the calls that failed.
  CacheTotals totals() const override;
  // The last failure's message (empty: none yet).
  std::string last_error() const;

 private:
  std::string redis_key(std::string_view key) const;

  mutable std::mutex mutex_;
  RedisClient client_;
  CacheTotals totals_;
  std::string last_error_;
};

}  // namespace naiad
