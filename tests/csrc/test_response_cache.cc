// The response cache (csrc/core/response_cache.h): keys, LRU by bytes, eviction, dropping a
// model's entries, counters, callers on several threads (TSan), and a hit answered by
// the HTTP lane over the codec with the same bytes its miss got.
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "add_sub_model.h"
#include "codec/kserve_json.h"
#include "codec/request_validator.h"
#include "core/core.h"
#include "core/response_cache.h"
#include "http1/http_framer.h"
#include "ipc/response_block.h"
#include "lane_support.h"
#include "testing.h"

using namespace naiad;

namespace {

// An add_sub request (validated) with `fill` in every byte of INPUT0 and INPUT1.
struct Request {
  std::vector<uint8_t> input0, input1;
  ParsedRequest parsed;
};

void make_request(Request* r, const ModelSpec& model, uint8_t fill, int batch = 1,
                  bool swap_inputs = false, std::vector<const char*> outputs = {}) {
  r->input0.assign(64 * batch, fill);
  r->input1.assign(64 * batch, static_cast<uint8_t>(fill + 1));
  r->parsed = ParsedRequest();
  for (int i = 0; i < 2; ++i) {
    RequestInput input;
    bool first = (i == 0) != swap_inputs;
    input.name = first ? "INPUT0" : "INPUT1";
    input.datatype = "FP32";
    input.shape = {batch, 16};
    const std::vector<uint8_t>& bytes = first ? r->input0 : r->input1;
    input.data = bytes.data();
    input.size = bytes.size();
    r->parsed.inputs.push_back(input);
  }
  for (const char* output : outputs) r->parsed.output_names.push_back(output);
  std::string error;
  CHECK(validate_request(model, &r->parsed, &error));
}

std::string key_of(const ModelSpec& model, const Request& r) {
  std::string key;
  cache_key(model, r.parsed, &key);
  return key;
}

// A result block: one final response with `outputs` as `json` lists them.
std::string block_of(std::string_view json, const std::vector<const std::string*>& outputs) {
  return naiad::result_block({ok_entry(0, json, outputs)}, {1, 2, 3, 4});
}

// add_sub's two [1,16] outputs and a response parameter.
std::string result_block(const std::string& out0, const std::string& out1) {
  return block_of(
      "{\"outputs\":[[\"OUTPUT0\",\"FP32\",[1,16]],[\"OUTPUT1\",\"FP32\",[1,16]]],"
      "\"parameters\":{\"p\":7}}",
      {&out0, &out1});
}

// An entry of `bytes` tensor bytes for `key` (one output).
std::shared_ptr<CacheEntry> entry_of(const std::string& key, uint32_t owner, size_t bytes) {
  std::string tensor(bytes, 'x');
  std::string block = block_of("{\"outputs\":[[\"OUTPUT0\",\"UINT8\",[1]]]}", {&tensor});
  ResultBlock result;
  parse_result_block(reinterpret_cast<const uint8_t*>(block.data()), block.size(), &result);
  return CacheEntry::from_result(key, owner, result, result.outcomes[0],
                                 reinterpret_cast<const uint8_t*>(block.data()));
}

ResponseCache::Inserted insert(ResponseCache& cache, std::shared_ptr<CacheEntry> entry) {
  uint64_t ns = 0;
  return cache.insert(std::move(entry), monotonic_ns(), &ns);
}

}  // namespace

TEST(cache_key_holds_the_inputs_shapes_and_requested_outputs) {
  ModelSpec model = add_sub_model();
  Request a, b;
  make_request(&a, model, 1);
  make_request(&b, model, 1);
  CHECK(key_of(model, a) == key_of(model, b));
  // The request's input order and its parameters do not matter.
  make_request(&b, model, 1, 1, true);
  b.parsed.parameters = "{\"anything\":1}";
  CHECK(key_of(model, a) == key_of(model, b));
  // One byte, the shape (same bytes), the requested outputs, the version: another key.
  make_request(&b, model, 1);
  b.input1[63] ^= 1;
  CHECK(key_of(model, a) != key_of(model, b));
  Request two;
  make_request(&two, model, 1, 2);
  Request as_one;
  make_request(&as_one, model, 1, 1);
  as_one.parsed.inputs[0].shape = {2, 8};  // (not valid for add_sub: the key still differs)
  CHECK(key_of(model, two) != key_of(model, a) && key_of(model, as_one) != key_of(model, a));
  make_request(&b, model, 1, 1, false, {"OUTPUT1"});
  CHECK(key_of(model, a) != key_of(model, b));
  // Every output listed asks what none listed does.
  make_request(&b, model, 1, 1, false, {"OUTPUT1", "OUTPUT0"});
  CHECK(key_of(model, a) == key_of(model, b));
  ModelSpec version2 = add_sub_model();
  version2.version = "2";
  CHECK(key_of(model, a) != key_of(version2, a));
}

TEST(cache_evicts_least_recently_used_by_bytes) {
  const uint64_t one = entry_of("k1", 0, 1000)->charge;
  CHECK(one >= 1000 + 2 + LocalCache::kEntryOverhead);
  LocalCache cache(2 * one + one / 2);  // room for two entries
  CHECK(insert(cache, entry_of("k1", 0, 1000)) == ResponseCache::Inserted::kInserted);
  CHECK(insert(cache, entry_of("k2", 0, 1000)) == ResponseCache::Inserted::kInserted);
  CHECK(insert(cache, entry_of("k2", 0, 1000)) == ResponseCache::Inserted::kExists);
  CHECK(cache.totals().used == 2 * one && cache.totals().entries == 2);
  // k1 used last: k2 is the one evicted for k3.
  CHECK(cache.lookup("k1").entry != nullptr);
  CHECK(insert(cache, entry_of("k3", 0, 1000)) == ResponseCache::Inserted::kInserted);
  CHECK(cache.lookup("k2").entry == nullptr);
  CHECK(cache.lookup("k1").entry != nullptr && cache.lookup("k3").entry != nullptr);
  // A larger entry evicts as many as it needs; one larger than the cache is not kept.
  CHECK(insert(cache, entry_of("big", 0, 2000)) == ResponseCache::Inserted::kInserted);
  CHECK(cache.totals().entries == 1 && cache.lookup("big").entry != nullptr);
  CHECK(insert(cache, entry_of("huge", 0, 3 * one)) == ResponseCache::Inserted::kTooLarge);
  CacheTotals totals = cache.totals();
  CHECK(totals.evictions == 3 && totals.entries == 1);
  CHECK(totals.used <= totals.capacity && totals.capacity == 2 * one + one / 2);
  CHECK(totals.lookups == 5 && totals.hits == 4 && totals.misses == 1);
}

TEST(cache_entry_keeps_the_outputs_and_parameters) {
  std::string out0(64, 'a'), out1(64, 'b');
  std::string block = result_block(out0, out1);
  ResultBlock result;
  CHECK(parse_result_block(reinterpret_cast<const uint8_t*>(block.data()), block.size(), &result));
  auto entry = CacheEntry::from_result("key", 3, result, result.outcomes[0],
                                       reinterpret_cast<const uint8_t*>(block.data()));
  block.assign(block.size(), '\0');  // the entry holds copies
  CHECK(entry->parameters == "{\"p\":7}" && entry->outputs.size() == 2);
  CHECK(entry->outputs[1].name == "OUTPUT1" && entry->outputs[1].datatype == "FP32");
  CHECK(entry->outputs[1].shape == "[1,16]" && entry->outputs[1].size == 64);
  CHECK(std::string(reinterpret_cast<const char*>(entry->data() + entry->outputs[1].offset), 64) ==
        out1);
  CHECK(entry->owner == 3 && entry->charge == 3 + entry->bytes.size() + LocalCache::kEntryOverhead);
}

TEST(cache_drops_one_models_entries_and_counts_per_model) {
  LocalCache cache(1 << 20);
  CHECK(insert(cache, entry_of("a1", 1, 10)) == ResponseCache::Inserted::kInserted);
  CHECK(insert(cache, entry_of("a2", 1, 10)) == ResponseCache::Inserted::kInserted);
  CHECK(insert(cache, entry_of("b1", 2, 10)) == ResponseCache::Inserted::kInserted);
  cache.count_hit(1, 5, 50, 7);
  cache.count_hit(1, 5, 50, 7);
  cache.count_miss(1, 30);
  cache.drop_owner(1);
  CHECK(cache.lookup("a1").entry == nullptr && cache.lookup("a2").entry == nullptr);
  CHECK(cache.lookup("b1").entry != nullptr);
  CacheTotals totals = cache.totals();
  CHECK(totals.entries == 1 && totals.evictions == 0);
  // The counters stay for the model's statistics.
  CacheModelCounters counted = cache.counters(1);
  CHECK(counted.hits == 2 && counted.hit_ns == 10 && counted.hit_request_ns == 100);
  CHECK(counted.hit_queue_ns == 14 && counted.misses == 1 && counted.miss_ns == 30);
  CHECK(cache.counters(2).hits == 0 && cache.counters(9).misses == 0);
}

TEST(cache_callers_on_several_threads) {
  const uint64_t one = entry_of("k00", 0, 100)->charge;
  LocalCache cache(8 * one);
  std::atomic<uint64_t> hits{0};
  // The harness's CHECK counters are not atomic: threads count what they saw, the main
  // thread checks it.
  std::atomic<uint64_t> unreadable{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&cache, &hits, &unreadable, t] {
      for (int i = 0; i < 2000; ++i) {
        const int n = (i * 7 + t) % 24;
        std::string key = (n < 10 ? "k0" : "k") + std::to_string(n);
        ResponseCache::Found found = cache.lookup(key);
        if (found.entry) {
          // An entry stays readable while others evict it.
          if (found.entry->outputs.size() != 1 || found.entry->key != key) ++unreadable;
          ++hits;
          cache.count_hit(t, 1, 2, 3);
        } else {
          insert(cache, entry_of(key, static_cast<uint32_t>(i % 3), 100));
          cache.count_miss(t, 1);
        }
        if (i % 500 == 499) cache.drop_owner(static_cast<uint32_t>(t % 3));
        cache.totals();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  CHECK(unreadable.load() == 0);
  CacheTotals totals = cache.totals();
  CHECK(totals.lookups == 8000 && totals.hits == hits.load());
  CHECK(totals.used <= 8 * one && totals.entries <= 8 && totals.used == totals.entries * one);
  uint64_t counted = 0;
  for (uint32_t t = 0; t < 4; ++t) counted += cache.counters(t).hits + cache.counters(t).misses;
  CHECK(counted == 8000);
}

TEST(lane_answers_a_hit_from_the_cache_as_its_miss) {
  LocalCache cache(1 << 20);
  LaneFixture f(1 << 20, &cache);
  f.lane.add_route("/v2/models/add_sub/infer", f.lane_model);

  std::string header =
      "{\"id\":\"one\",\"inputs\":[{\"name\":\"INPUT0\",\"datatype\":\"FP32\",\"shape\":[1,16],"
      "\"parameters\":{\"binary_data_size\":64}},{\"name\":\"INPUT1\",\"datatype\":\"FP32\","
      "\"shape\":[1,16],\"parameters\":{\"binary_data_size\":64}}]}";
  std::string body = header + std::string(128, '\x01');
  const uint8_t* bytes = reinterpret_cast<const uint8_t*>(body.data());
  HttpLane::Taken miss;
  CHECK(
      f.lane.submit_to("/v2/models/add_sub/infer", bytes, body.size(), header.size(), 1000, &miss));
  CHECK(miss.request_id != 0 && miss.reply.empty());
  CHECK(cache.totals().lookups == 1 && cache.totals().misses == 1);

  std::string out0(64, 'a'), out1(64, 'b');
  std::string block = result_block(out0, out1);
  std::vector<KServeCodec::Answer> answers;
  uint64_t timings[4];
  CHECK(f.lane.codec().complete(reinterpret_cast<const uint8_t*>(block.data()), block.size(),
                                {miss.request_id}, 1500, 4000, &answers, timings));
  CHECK(answers.size() == 1);
  const std::string answered = f.lane.writer().text(answers[0].response);
  CHECK(cache.totals().entries == 1 && cache.counters(f.lane_model).misses == 1);

  // The same request again: answered at once, byte for byte as the miss, nothing queued.
  const uint64_t blocks = f.core.arena().stats().blocks_in_use;
  HttpLane::Taken hit;
  CHECK(
      f.lane.submit_to("/v2/models/add_sub/infer", bytes, body.size(), header.size(), 5000, &hit));
  CHECK(hit.request_id == 0 && hit.batch_size == 1 && hit.reply == answered);
  CHECK(f.core.arena().stats().blocks_in_use == blocks);
  CacheModelCounters counted = cache.counters(f.lane_model);
  CHECK(counted.hits == 1 && counted.hit_request_ns >= counted.hit_ns);

  // JSON outputs of the same request: the same entry, written as JSON.
  std::string json_header =
      header.substr(0, header.size() - 1) + ",\"parameters\":{\"binary_data_output\":false}}";
  std::string json_body = json_header + std::string(128, '\x01');
  HttpLane::Taken as_json;
  CHECK(f.lane.submit_to("/v2/models/add_sub/infer",
                         reinterpret_cast<const uint8_t*>(json_body.data()), json_body.size(),
                         json_header.size(), 6000, &as_json));
  CHECK(as_json.request_id == 0);
  CHECK(as_json.reply.find("Content-Type: application/json") != std::string::npos);
  CHECK(as_json.reply.find("\"parameters\":{\"p\":7}") != std::string::npos);
  CHECK(cache.counters(f.lane_model).hits == 2);

  // Another input misses; a model without the cache never looks.
  body[header.size() + 5] = '\x02';
  HttpLane::Taken other;
  CHECK(f.lane.submit_to("/v2/models/add_sub/infer", bytes, body.size(), header.size(), 7000,
                         &other));
  CHECK(other.request_id != 0 && cache.totals().misses == 2);
  ModelSpec plain = add_sub_model();
  plain.core_model_id = f.model.core_model_id;
  const uint32_t plain_model = f.lane.codec().add_model(plain);
  f.lane.add_route("/v2/models/plain/infer", plain_model);
  HttpLane::Taken uncached;
  body[header.size() + 5] = '\x01';
  CHECK(f.lane.submit_to("/v2/models/plain/infer", bytes, body.size(), header.size(), 8000,
                         &uncached));
  CHECK(uncached.request_id != 0 && cache.totals().lookups == 4);
  f.lane.codec().forget(uncached.request_id);

  // A failed request is not kept and counts no miss (Triton 2.51 keeps the failure as an
  // empty response and answers the next ones with it as successes).
  ResponseEntry failed;
  failed.flags = kResponseFinal | kResponseError;
  failed.error_code = 3;
  failed.json = "{\"error\":\"no\"}";
  std::vector<ResponseEntry> failures{failed};
  std::string error_block(response_block_size(failures), '\0');
  write_response_block(reinterpret_cast<uint8_t*>(&error_block[0]), failures, timings);
  answers.clear();
  CHECK(f.lane.codec().complete(reinterpret_cast<const uint8_t*>(error_block.data()),
                                error_block.size(), {other.request_id}, 7500, 9000, &answers,
                                timings));
  CHECK(answers.size() == 1 && answers[0].response.error == ErrorKind::kInvalidArgument);
  CHECK(cache.totals().entries == 1 && cache.counters(f.lane_model).misses == 1);
  // Nor is the result of a model that stopped taking requests (unloading).
  body[header.size() + 5] = '\x03';
  HttpLane::Taken late;
  CHECK(
      f.lane.submit_to("/v2/models/add_sub/infer", bytes, body.size(), header.size(), 9500, &late));
  f.lane.remove_model(f.lane_model);
  answers.clear();
  CHECK(f.lane.codec().complete(reinterpret_cast<const uint8_t*>(block.data()), block.size(),
                                {late.request_id}, 9600, 9700, &answers, timings));
  CHECK(answers.size() == 1 && cache.totals().entries == 1);
}
