#include "core/response_cache.h"

#include <algorithm>
#include <cstring>

#include "core/core.h"

namespace naiad {

namespace {

template <typename T>
void put(std::string* out, T value) {
  out->append(reinterpret_cast<const char*>(&value), sizeof value);
}

void put_text(std::string* out, std::string_view text) {
  put<uint64_t>(out, text.size());
  out->append(text.data(), text.size());
}

}  // namespace

void cache_key(const ModelSpec& model, const ParsedRequest& request, std::string* key) {
  // Inputs in the config's order: a request may list them in any order.
  std::vector<const RequestInput*> inputs;
  inputs.reserve(request.inputs.size());
  uint64_t size = model.name.size() + model.version.size() + 32;
  for (const RequestInput& input : request.inputs) {
    inputs.push_back(&input);
    size += 32 + input.datatype.size() + 8 * input.shape.size() + input.size;
  }
  std::sort(inputs.begin(), inputs.end(),
            [](const RequestInput* a, const RequestInput* b) { return a->spec < b->spec; });
  key->clear();
  key->reserve(size);
  put_text(key, model.name);
  put_text(key, model.version);
  put<uint32_t>(key, static_cast<uint32_t>(inputs.size()));
  for (const RequestInput* input : inputs) {
    put<uint32_t>(key, input->spec);
    put_text(key, input->datatype);
    put<uint32_t>(key, static_cast<uint32_t>(input->shape.size()));
    for (int64_t dim : input->shape) put<int64_t>(key, dim);
    put<uint64_t>(key, input->size);
    if (input->size) key->append(reinterpret_cast<const char*>(input->data), input->size);
  }
  // The outputs asked for, as the validator resolved them; every output listed is the
  // same request as none listed.
  std::vector<uint32_t> outputs(request.outputs);
  std::sort(outputs.begin(), outputs.end());
  outputs.erase(std::unique(outputs.begin(), outputs.end()), outputs.end());
  if (outputs.size() == model.outputs.size()) outputs.clear();
  put<uint32_t>(key, static_cast<uint32_t>(outputs.size()));
  for (uint32_t output : outputs) put<uint32_t>(key, output);
}

std::shared_ptr<CacheEntry> CacheEntry::from_result(std::string key, uint32_t owner,
                                                    const ResultBlock& result,
                                                    const ResultOutcome& outcome,
                                                    const uint8_t* block) {
  auto entry = std::make_shared<CacheEntry>();
  entry->key = std::move(key);
  entry->owner = owner;
  // One buffer: parameters, then per output its name, datatype and shape text and its
  // tensor bytes. Views are set once the buffer no longer grows.
  uint64_t size = outcome.parameters.size();
  for (size_t j = 0; j < outcome.output_count; ++j) {
    const ResultOutput& output = result.outputs[outcome.first_output + j];
    size += output.name.size() + output.datatype.size() + output.shape.size() + output.size;
  }
  std::string& bytes = entry->bytes;
  bytes.reserve(size);
  bytes.append(outcome.parameters.data(), outcome.parameters.size());
  struct Offsets {
    size_t name, datatype, shape, data;
  };
  std::vector<Offsets> offsets;
  offsets.reserve(outcome.output_count);
  for (size_t j = 0; j < outcome.output_count; ++j) {
    const ResultOutput& output = result.outputs[outcome.first_output + j];
    Offsets at;
    at.name = bytes.size();
    bytes.append(output.name.data(), output.name.size());
    at.datatype = bytes.size();
    bytes.append(output.datatype.data(), output.datatype.size());
    at.shape = bytes.size();
    bytes.append(output.shape.data(), output.shape.size());
    at.data = bytes.size();
    bytes.append(reinterpret_cast<const char*>(block + output.offset), output.size);
    offsets.push_back(at);
  }
  const char* base = bytes.data();
  entry->parameters = std::string_view(base, outcome.parameters.size());
  entry->outputs.reserve(outcome.output_count);
  for (size_t j = 0; j < outcome.output_count; ++j) {
    const ResultOutput& output = result.outputs[outcome.first_output + j];
    const Offsets& at = offsets[j];
    ResultOutput out;
    out.name = std::string_view(base + at.name, output.name.size());
    out.datatype = std::string_view(base + at.datatype, output.datatype.size());
    out.shape = std::string_view(base + at.shape, output.shape.size());
    out.size = output.size;
    out.offset = at.data;
    entry->outputs.push_back(out);
  }
  entry->charge = entry->key.size() + entry->bytes.size() + ResponseCache::kEntryOverhead;
  return entry;
}

ResponseCache::Found ResponseCache::lookup(std::string_view key) {
  Found found;
  found.start_ns = monotonic_ns();
  std::lock_guard<std::mutex> lock(mutex_);
  ++totals_.lookups;
  auto at = table_.find(key);
  if (at == table_.end()) {
    ++totals_.misses;
  } else {
    ++totals_.hits;
    lru_.splice(lru_.begin(), lru_, at->second);  // iterators stay valid
    found.entry = *at->second;
  }
  found.end_ns = monotonic_ns();
  totals_.lookup_ns += found.end_ns - found.start_ns;
  return found;
}

ResponseCache::Inserted ResponseCache::insert(std::shared_ptr<CacheEntry> entry, uint64_t start_ns,
                                              uint64_t* insert_ns) {
  std::lock_guard<std::mutex> lock(mutex_);
  Inserted result = Inserted::kInserted;
  if (table_.count(entry->key)) {
    result = Inserted::kExists;
  } else if (entry->charge > capacity_) {
    result = Inserted::kTooLarge;
  } else {
    while (totals_.used + entry->charge > capacity_ && !lru_.empty()) {
      evict_locked(std::prev(lru_.end()), true);
    }
    totals_.used += entry->charge;
    ++totals_.entries;
    lru_.push_front(std::move(entry));
    table_.emplace(lru_.front()->key, lru_.begin());
  }
  const uint64_t end_ns = monotonic_ns();
  *insert_ns = end_ns > start_ns ? end_ns - start_ns : 0;
  totals_.insert_ns += *insert_ns;
  return result;
}

void ResponseCache::evict_locked(std::list<std::shared_ptr<CacheEntry>>::iterator it, bool count) {
  table_.erase((*it)->key);
  totals_.used -= (*it)->charge;
  --totals_.entries;
  if (count) ++totals_.evictions;
  lru_.erase(it);
}

void ResponseCache::drop_owner(uint32_t owner) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = lru_.begin(); it != lru_.end();) {
    auto next = std::next(it);
    if ((*it)->owner == owner) evict_locked(it, false);
    it = next;
  }
}

void ResponseCache::count_hit(uint32_t owner, uint64_t lookup_ns, uint64_t request_ns,
                              uint64_t queue_ns) {
  std::lock_guard<std::mutex> lock(mutex_);
  CacheModelCounters& counters = owners_[owner];
  ++counters.hits;
  counters.hit_ns += lookup_ns;
  counters.hit_request_ns += request_ns;
  counters.hit_queue_ns += queue_ns;
}

void ResponseCache::count_miss(uint32_t owner, uint64_t ns) {
  std::lock_guard<std::mutex> lock(mutex_);
  CacheModelCounters& counters = owners_[owner];
  ++counters.misses;
  counters.miss_ns += ns;
}

CacheModelCounters ResponseCache::counters(uint32_t owner) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = owners_.find(owner);
  return found == owners_.end() ? CacheModelCounters{} : found->second;
}

CacheTotals ResponseCache::totals() const {
  std::lock_guard<std::mutex> lock(mutex_);
  CacheTotals out = totals_;
  out.capacity = capacity_;
  return out;
}

}  // namespace naiad
