// libFuzzer target: what a Redis server sends the Redis response cache. The bytes are
// read as a stream of RESP replies (as RedisClient reads them: one at a time, each cut
// anywhere first), and each bulk string, and the whole input, as a cache entry value
// (CacheEntry::parse). Seeds are written by the writers themselves (NAIAD_FUZZ_SEEDS).
// The contract: a reply read takes no more bytes than it was given and every prefix of
// it is incomplete, never bad; an entry parsed has every output inside its bytes and
// serializes back to the same value.
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "core/resp.h"
#include "core/response_cache.h"
#include "fuzz_support.h"

using namespace naiad;

namespace {

std::string entry_value() {
  std::string value;
  auto put = [&](uint64_t v) { value.append(reinterpret_cast<const char*>(&v), 8); };
  put(0x4e434531);  // the layout's mark (response_cache.cc)
  put(2);
  put(1);
  for (uint64_t size : {4, 4, 5, 8}) put(size);
  value += "{}OUT0FP32[1,2]12345678";
  return value;
}

void write_seeds(const std::string& dir) {
  std::string get;
  resp_command({"GET", "k"}, &get);
  const std::string value = entry_value();
  const std::vector<std::string> seeds = {
      "+OK\r\n$-1\r\n:12\r\n-ERR x\r\n",
      "$" + std::to_string(value.size()) + "\r\n" + value + "\r\n",
      get,
      value,
  };
  for (size_t i = 0; i < seeds.size(); ++i) {
    std::ofstream(dir + "/seed" + std::to_string(i), std::ios::binary) << seeds[i];
  }
}

void check_entry(std::string_view value) {
  auto entry = CacheEntry::parse("k", 0, value);
  if (!entry) return;
  for (const ResultOutput& output : entry->outputs) {
    FUZZ_CHECK(output.offset <= entry->bytes.size() &&
               output.size <= entry->bytes.size() - output.offset);
  }
  FUZZ_CHECK(entry->serialize() == value);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("NAIAD_FUZZ_SEEDS")) write_seeds(dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  check_entry(in);
  size_t at = 0;
  while (at < in.size()) {
    RespReply reply;
    std::string error;
    size_t used = 0;
    const std::string_view rest = in.substr(at);
    if (resp_read(rest, &used, &reply, &error) != RespRead::kDone) break;
    FUZZ_CHECK(used > 0 && used <= rest.size());
    if (used < 64) {
      for (size_t cut = 0; cut < used; ++cut) {
        RespReply partial;
        size_t ignored = 0;
        FUZZ_CHECK(resp_read(rest.substr(0, cut), &ignored, &partial, &error) ==
                   RespRead::kIncomplete);
      }
    }
    if (reply.type == RespReply::Type::kBulk) check_entry(reply.text);
    at += used;
  }
  return 0;
}
