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

namespace {

// The lengths of one output's parts in CacheEntry::bytes, in their order there.
struct PartSizes {
  uint64_t name, datatype, shape, data;
};

// Points `entry`'s parameters and outputs into its bytes, laid out as the parameters
// then each output's parts; false when `sizes` do not add up to the bytes.
bool bind_views(CacheEntry* entry, uint64_t parameters, const std::vector<PartSizes>& sizes) {
  if (parameters > entry->bytes.size()) return false;
  uint64_t at = parameters;
  for (const PartSizes& part : sizes) {
    for (uint64_t size : {part.name, part.datatype, part.shape, part.data}) {
      if (size > entry->bytes.size() - at) return false;
      at += size;
    }
  }
  if (at != entry->bytes.size()) return false;
  const char* base = entry->bytes.data();
  entry->parameters = std::string_view(base, parameters);
  entry->outputs.clear();
  entry->outputs.reserve(sizes.size());
  at = parameters;
  for (const PartSizes& part : sizes) {
    ResultOutput out;
    out.name = std::string_view(base + at, part.name);
    at += part.name;
    out.datatype = std::string_view(base + at, part.datatype);
    at += part.datatype;
    out.shape = std::string_view(base + at, part.shape);
    at += part.shape;
    out.size = part.data;
    out.offset = at;
    at += part.data;
    entry->outputs.push_back(out);
  }
  entry->charge = entry->key.size() + entry->bytes.size() + LocalCache::kEntryOverhead;
  return true;
}

// Marks a serialized entry, and its layout's version.
constexpr uint32_t kSerialMagic = 0x4e434531;  // "NCE1"

bool take(std::string_view* in, uint64_t* value) {
  if (in->size() < sizeof *value) return false;
  std::memcpy(value, in->data(), sizeof *value);
  in->remove_prefix(sizeof *value);
  return true;
}

}  // namespace

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
  std::vector<PartSizes> sizes;
  sizes.reserve(outcome.output_count);
  for (size_t j = 0; j < outcome.output_count; ++j) {
    const ResultOutput& output = result.outputs[outcome.first_output + j];
    sizes.push_back({output.name.size(), output.datatype.size(), output.shape.size(), output.size});
    size += output.name.size() + output.datatype.size() + output.shape.size() + output.size;
  }
  std::string& bytes = entry->bytes;
  bytes.reserve(size);
  bytes.append(outcome.parameters.data(), outcome.parameters.size());
  for (size_t j = 0; j < outcome.output_count; ++j) {
    const ResultOutput& output = result.outputs[outcome.first_output + j];
    bytes.append(output.name.data(), output.name.size());
    bytes.append(output.datatype.data(), output.datatype.size());
    bytes.append(output.shape.data(), output.shape.size());
    bytes.append(reinterpret_cast<const char*>(block + output.offset), output.size);
  }
  bind_views(entry.get(), outcome.parameters.size(), sizes);
  return entry;
}

std::string CacheEntry::serialize() const {
  std::string out;
  out.reserve(24 + 32 * outputs.size() + bytes.size());
  put<uint64_t>(&out, kSerialMagic);
  put<uint64_t>(&out, parameters.size());
  put<uint64_t>(&out, outputs.size());
  for (const ResultOutput& output : outputs) {
    put<uint64_t>(&out, output.name.size());
    put<uint64_t>(&out, output.datatype.size());
    put<uint64_t>(&out, output.shape.size());
    put<uint64_t>(&out, output.size);
  }
  out.append(bytes);
  return out;
}

std::shared_ptr<CacheEntry> CacheEntry::parse(std::string key, uint32_t owner,
                                              std::string_view value) {
  uint64_t magic = 0, parameters = 0, count = 0;
  if (!take(&value, &magic) || magic != kSerialMagic || !take(&value, &parameters) ||
      !take(&value, &count) || count > value.size() / 32) {
    return nullptr;
  }
  std::vector<PartSizes> sizes(count);
  for (PartSizes& part : sizes) {
    if (!take(&value, &part.name) || !take(&value, &part.datatype) || !take(&value, &part.shape) ||
        !take(&value, &part.data)) {
      return nullptr;
    }
  }
  auto entry = std::make_shared<CacheEntry>();
  entry->key = std::move(key);
  entry->owner = owner;
  entry->bytes.assign(value.data(), value.size());
  if (!bind_views(entry.get(), parameters, sizes)) return nullptr;
  return entry;
}

LocalCache::Found LocalCache::lookup(std::string_view key) {
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

LocalCache::Inserted LocalCache::insert(std::shared_ptr<CacheEntry> entry, uint64_t start_ns,
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

void LocalCache::evict_locked(std::list<std::shared_ptr<CacheEntry>>::iterator it, bool count) {
  table_.erase((*it)->key);
  totals_.used -= (*it)->charge;
  --totals_.entries;
  if (count) ++totals_.evictions;
  lru_.erase(it);
}

void LocalCache::drop_owner(uint32_t owner) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = lru_.begin(); it != lru_.end();) {
    auto next = std::next(it);
    if ((*it)->owner == owner) evict_locked(it, false);
    it = next;
  }
}

void ResponseCache::count_hit(uint32_t owner, uint64_t lookup_ns, uint64_t request_ns,
                              uint64_t queue_ns) {
  std::lock_guard<std::mutex> lock(counters_mutex_);
  CacheModelCounters& counters = owners_[owner];
  ++counters.hits;
  counters.hit_ns += lookup_ns;
  counters.hit_request_ns += request_ns;
  counters.hit_queue_ns += queue_ns;
}

void ResponseCache::count_miss(uint32_t owner, uint64_t ns) {
  std::lock_guard<std::mutex> lock(counters_mutex_);
  CacheModelCounters& counters = owners_[owner];
  ++counters.misses;
  counters.miss_ns += ns;
}

CacheModelCounters ResponseCache::counters(uint32_t owner) const {
  std::lock_guard<std::mutex> lock(counters_mutex_);
  auto found = owners_.find(owner);
  return found == owners_.end() ? CacheModelCounters{} : found->second;
}

CacheTotals LocalCache::totals() const {
  std::lock_guard<std::mutex> lock(mutex_);
  CacheTotals out = totals_;
  out.capacity = capacity_;
  return out;
}

}  // namespace naiad
