// The response cache (Triton's `response_cache { enable: true }` with
// `--cache-config local,size=N`; the Redis one, redis_cache.h, keeps the same keys and
// entries in Redis): the result tensors of successful requests, kept by
// the request's key, least recently used out first, bounded by bytes. One cache serves
// every model (as Triton's local cache), each entry owned by one model version so that
// unloading it drops its entries.
//
// Keys: cache_key() writes the canonical key of a validated request: the model's name
// and version, then each input in the config's order (the same for every request, as
// Triton's name order is) with its datatype, shape, byte size and bytes, then the
// requested outputs. Triton hashes the model name, version and the inputs' names and
// bytes, not datatypes, shapes, requested outputs or parameters (its docs count the
// shape as part of the request). Here shapes and datatypes are in the key, and the
// requested outputs: Triton answers a hit with the outputs of the request that filled
// the entry (a request for OUTPUT1 alone got OUTPUT0 too, as JSON, from Triton 2.51),
// here a hit answers exactly what a miss would. Request parameters are not in the key,
// as in Triton. The whole key is kept and compared, so two requests share an entry only
// when their keys are equal (Triton compares 64-bit hashes only).
//
// Entries: the outputs as the worker wrote them in the response block (name, datatype
// and shape as JSON text, the tensor bytes) plus the response parameters. A framer
// builds any of its answers from one (HTTP binary or JSON, gRPC) as it would from a
// result block: CacheEntry::outputs are ResultOutputs whose offsets point into
// CacheEntry::bytes.
//
// Charged bytes: an entry counts its key, its bytes (tensors, JSON text) and
// kEntryOverhead for its bookkeeping; the cache keeps the sum at or below its
// capacity, evicting from the least recently used end. An entry larger than the whole
// capacity is not kept (Triton: "Requested byte_size ... is greater than total cache
// size", and the request still counts as a miss).
//
// Threads and locks: every public method may be called from any thread. In LocalCache
// one mutex, `mutex_`, guards the table, the LRU list, the byte count and the totals
// (the per-model counters have the base class's own); it is held only for the table
// work, never while a key is built or an entry is filled (cache_key() and CacheEntry
// construction are the caller's, lock-free). lookup()
// hands out a shared_ptr: an entry evicted or dropped while a framer builds an answer
// from it stays alive until that answer is written. Today the callers are the front
// end's event loop (the HTTP and gRPC lanes through KServeCodec, the general path
// through _core.pyx) and the statistics and metrics readers on the same loop; the
// lock is what makes the TSan test's concurrent callers safe, and it costs one
// uncontended lock per lookup and per insert.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "codec/infer_types.h"
#include "ipc/result_block.h"

namespace naiad {

// The canonical key of `request` (validated: RequestInput::spec set) for `model`.
// Every input's bytes must be readable (`data` set): CUDA-region inputs are not keyed.
void cache_key(const ModelSpec& model, const ParsedRequest& request, std::string* key);

// What one model version's requests did with the cache, as Triton's statistics
// count it (InferenceStatsAggregator::UpdateSuccessCacheHit / ...CacheMiss).
struct CacheModelCounters {
  uint64_t hits = 0;
  uint64_t hit_ns = 0;          // the lookups of the hits
  uint64_t hit_request_ns = 0;  // submit to answer of the hits (success duration)
  uint64_t hit_queue_ns = 0;    // submit to the lookup's start (queue duration)
  uint64_t misses = 0;
  uint64_t miss_ns = 0;  // lookup + insert of the misses; Triton adds it to success too
};

// The whole cache, as Triton's local cache reports it (nv_cache_* gauges).
struct CacheTotals {
  uint64_t capacity = 0;
  uint64_t used = 0;  // charged bytes
  uint64_t entries = 0;
  uint64_t lookups = 0;
  uint64_t hits = 0;
  uint64_t misses = 0;  // lookups that found nothing
  uint64_t evictions = 0;
  uint64_t lookup_ns = 0;
  uint64_t insert_ns = 0;
  uint64_t errors = 0;  // a cache outside the process: calls that failed (redis_cache.h)
};

struct CacheEntry {
  std::string key;
  uint32_t owner = 0;  // the model version it belongs to (drop_owner)
  // The response parameters (a raw JSON object) and every output's JSON text and
  // tensor bytes; `outputs`' text views and offsets point into `bytes`.
  std::string bytes;
  std::string_view parameters;
  std::vector<ResultOutput> outputs;
  uint64_t charge = 0;  // bytes counted against the capacity

  // Copies response `outcome` of a parsed result block at `block` (its outputs and
  // parameters) into a new entry for `key`.
  static std::shared_ptr<CacheEntry> from_result(std::string key, uint32_t owner,
                                                 const ResultBlock& result,
                                                 const ResultOutcome& outcome,
                                                 const uint8_t* block);
  const uint8_t* data() const { return reinterpret_cast<const uint8_t*>(bytes.data()); }

  // The entry as one self-describing value (for a cache outside the process: the
  // lengths of the parameters and of each output's parts, then `bytes`), and back:
  // null when `value` is not one (damaged, truncated, another writer's).
  std::string serialize() const;
  static std::shared_ptr<CacheEntry> parse(std::string key, uint32_t owner, std::string_view value);
};

// What every response cache does (the codec and the general path talk to this): look a
// key up, keep an entry, drop a model version's entries, and count each model version's
// hits and misses (Triton's statistics; the same for every cache, so kept here).
// LocalCache is the in-process LRU; RedisCache (redis_cache.h) a shared Redis server.
class ResponseCache {
 public:
  ResponseCache() = default;
  ResponseCache(const ResponseCache&) = delete;
  ResponseCache& operator=(const ResponseCache&) = delete;
  virtual ~ResponseCache() = default;

  struct Found {
    std::shared_ptr<const CacheEntry> entry;  // null: a miss
    uint64_t start_ns = 0;                    // monotonic_ns() around the lookup
    uint64_t end_ns = 0;
  };
  // The entry for `key`. Counts a lookup, a hit or a miss, and its duration.
  virtual Found lookup(std::string_view key) = 0;

  // kExists: the key has an entry already (kept as it is, as Triton's local cache does);
  // kTooLarge: it is larger than the cache takes; kFailed: the cache could not be reached
  // (not kept). Every outcome but kExists is a miss of the request that filled it.
  enum class Inserted { kInserted, kExists, kTooLarge, kFailed };
  // Keeps `entry`. The time from `start_ns` (when the caller began building the entry)
  // to the end is the insert's duration, added to the totals and returned in
  // `*insert_ns`.
  virtual Inserted insert(std::shared_ptr<CacheEntry> entry, uint64_t start_ns,
                          uint64_t* insert_ns) = 0;

  // Drops every entry of `owner` (the model version was unloaded); its counters stay
  // (its statistics and metrics are still read).
  virtual void drop_owner(uint32_t owner) = 0;

  virtual CacheTotals totals() const = 0;

  // Statistics of model version `owner`: a hit answered, a miss inserted.
  void count_hit(uint32_t owner, uint64_t lookup_ns, uint64_t request_ns, uint64_t queue_ns);
  void count_miss(uint32_t owner, uint64_t ns);
  CacheModelCounters counters(uint32_t owner) const;

 private:
  mutable std::mutex counters_mutex_;
  std::unordered_map<uint32_t, CacheModelCounters> owners_;
};

// The local cache (`--cache-config local,size=N`): least recently used out first,
// bounded by charged bytes.
class LocalCache : public ResponseCache {
 public:
  // Bookkeeping an entry costs beyond its key and bytes (list node, table slot,
  // output records): counted so that many tiny entries cannot exceed the capacity.
  static constexpr uint64_t kEntryOverhead = 256;

  explicit LocalCache(uint64_t capacity) : capacity_(capacity) {}

  uint64_t capacity() const { return capacity_; }

  // Also makes the entry the most recently used.
  Found lookup(std::string_view key) override;
  // Evicts the least recently used entries until `entry` fits; kTooLarge when it is
  // larger than the capacity.
  Inserted insert(std::shared_ptr<CacheEntry> entry, uint64_t start_ns,
                  uint64_t* insert_ns) override;
  void drop_owner(uint32_t owner) override;
  CacheTotals totals() const override;

 private:
  void evict_locked(std::list<std::shared_ptr<CacheEntry>>::iterator it, bool count);

  const uint64_t capacity_;
  mutable std::mutex mutex_;
  // Most recently used first; the table's keys view the entries' own keys.
  std::list<std::shared_ptr<CacheEntry>> lru_;
  std::unordered_map<std::string_view, std::list<std::shared_ptr<CacheEntry>>::iterator> table_;
  CacheTotals totals_;
};

}  // namespace naiad
