// The Redis response cache's parts that need no Redis: RESP written and read (split at
// every byte, damaged replies refused), cache entries serialized and parsed back
// (truncated and damaged values refused), and the client against a listener that never
// answers (a timeout, then the backoff failing calls at once). Against a real
// redis-server: tests/test_redis_cache.py.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "core/redis_cache.h"
#include "core/resp.h"
#include "core/response_cache.h"
#include "testing.h"

using namespace naiad;

namespace {

RespRead read_all(std::string_view in, RespReply* reply, std::string* error) {
  size_t used = 0;
  RespRead got = resp_read(in, &used, reply, error);
  if (got == RespRead::kDone) CHECK(used == in.size());
  return got;
}

// An entry as the local cache keeps one: parameters, two outputs.
std::shared_ptr<CacheEntry> sample_entry() {
  auto entry = std::make_shared<CacheEntry>();
  const std::vector<std::string> parts = {"{\"p\":1}", "OUT0",     "FP32",
                                          "[1,2]",     "12345678", "OUT1",
                                          "BYTES",     "[1]",      std::string("\3\0\0\0a\0b", 7)};
  for (const std::string& part : parts) entry->bytes += part;
  // Parse a hand-laid value, so that the layout is checked and not only round-tripped.
  std::string laid;
  auto put = [&](uint64_t v) { laid.append(reinterpret_cast<const char*>(&v), 8); };
  put(0x4e434531);
  put(parts[0].size());
  put(2);
  for (int i = 0; i < 2; ++i) {
    for (int j = 1; j <= 4; ++j) put(parts[4 * i + j].size());
  }
  laid += entry->bytes;
  auto parsed = CacheEntry::parse("key", 3, laid);
  CHECK(parsed != nullptr);
  return parsed;
}

// A socket bound to a free loopback port, listening when `listen` (the kernel then
// completes connects that nobody accepts); its port in `*port`.
int loopback_socket(bool listen, int* port) {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  CHECK(::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  if (listen) CHECK(::listen(s, 4) == 0);
  socklen_t len = sizeof addr;
  CHECK(::getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  *port = ntohs(addr.sin_port);
  return s;
}

}  // namespace

TEST(resp_command_is_binary_safe) {
  std::string out;
  const std::string value("a\r\n\0b", 5);
  resp_command({"SET", "k", value}, &out);
  CHECK(out == std::string("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\na\r\n\0b\r\n", 31));
  // A command is a reply too (an array of bulk strings): read back whole.
  RespReply reply;
  std::string error;
  CHECK(read_all(out, &reply, &error) == RespRead::kDone);
  CHECK(reply.type == RespReply::Type::kArray && reply.elements.size() == 3);
  CHECK(reply.elements[2].type == RespReply::Type::kBulk && reply.elements[2].text == value);
}

TEST(resp_reads_every_reply_type_split_anywhere) {
  const std::string bulk("x\r\ny\0", 5);
  const std::string stream = "+OK\r\n-ERR wrong pass\r\n:-42\r\n$5\r\n" + bulk +
                             "\r\n$-1\r\n*2\r\n$1\r\na\r\n:7\r\n*-1\r\n";
  // Every prefix of each reply is incomplete, never bad; the whole is read exactly.
  size_t at = 0;
  std::vector<RespReply> replies;
  while (at < stream.size()) {
    std::string_view rest(stream.data() + at, stream.size() - at);
    RespReply reply;
    std::string error;
    size_t used = 0;
    RespRead got = resp_read(rest, &used, &reply, &error);
    CHECK(got == RespRead::kDone);
    for (size_t cut = 0; cut < used; ++cut) {
      RespReply partial;
      size_t ignored = 0;
      CHECK(resp_read(rest.substr(0, cut), &ignored, &partial, &error) == RespRead::kIncomplete);
    }
    replies.push_back(reply);
    at += used;
  }
  CHECK(replies.size() == 7);
  CHECK(replies[0].type == RespReply::Type::kStatus && replies[0].text == "OK");
  CHECK(replies[1].type == RespReply::Type::kError && replies[1].text == "ERR wrong pass");
  CHECK(replies[2].type == RespReply::Type::kInteger && replies[2].integer == -42);
  CHECK(replies[3].type == RespReply::Type::kBulk && replies[3].text == bulk);
  CHECK(replies[4].type == RespReply::Type::kNil);
  CHECK(replies[5].type == RespReply::Type::kArray && replies[5].elements[1].integer == 7);
  CHECK(replies[6].type == RespReply::Type::kNil);
}

TEST(resp_refuses_damaged_replies) {
  const std::vector<std::string> damaged = {
      "?what\r\n",                     // unknown type byte
      ":12x\r\n",                      // not an integer
      ":\r\n",                         // no digits
      "$-2\r\n",                       // negative length
      "$3\r\nabcd\r\n",                // length shorter than the bytes
      "$999999999999\r\n",             // past Redis's limit
      "*-5\r\n",                       // negative count
      "*99999999\r\n",                 // past the array bound
      "$99999999999999999999999\r\n",  // overflows
      "*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n",  // too deep
  };
  for (const std::string& in : damaged) {
    RespReply reply;
    std::string error;
    size_t used = 0;
    CHECK(resp_read(in, &used, &reply, &error) == RespRead::kBad);
    CHECK(error.rfind("RESP: ", 0) == 0);
  }
}

TEST(cache_entry_serializes_and_parses_back) {
  auto entry = sample_entry();
  CHECK(entry->parameters == "{\"p\":1}");
  CHECK(entry->outputs.size() == 2);
  CHECK(entry->outputs[0].name == "OUT0" && entry->outputs[0].shape == "[1,2]");
  CHECK(std::string(reinterpret_cast<const char*>(entry->data() + entry->outputs[0].offset),
                    entry->outputs[0].size) == "12345678");
  CHECK(entry->outputs[1].datatype == "BYTES" && entry->outputs[1].size == 7);
  CHECK(entry->outputs[1].offset + 7 == entry->bytes.size());
  const std::string value = entry->serialize();
  auto back = CacheEntry::parse("k", 1, value);
  CHECK(back != nullptr && back->bytes == entry->bytes && back->serialize() == value);
  CHECK(back->outputs.size() == 2 && back->outputs[1].offset == entry->outputs[1].offset);
  CHECK(back->charge == 1 + back->bytes.size() + LocalCache::kEntryOverhead);
  // Every truncation, and every header byte changed, is refused or still fits its bytes.
  for (size_t cut = 0; cut < value.size(); ++cut) {
    CHECK(CacheEntry::parse("k", 1, std::string_view(value).substr(0, cut)) == nullptr);
  }
  for (size_t at = 0; at < 24 + 2 * 32; ++at) {
    std::string bad = value;
    bad[at] = static_cast<char>(bad[at] ^ 0x80);
    auto parsed = CacheEntry::parse("k", 1, bad);
    if (parsed == nullptr) continue;
    size_t sum = parsed->parameters.size();
    for (const ResultOutput& o : parsed->outputs) {
      sum += o.name.size() + o.datatype.size() + o.shape.size() + o.size;
    }
    CHECK(sum == parsed->bytes.size());
  }
}

TEST(redis_client_times_out_then_backs_off) {
  // A listener that never accepts: the kernel completes the connect, nobody answers.
  RedisOptions options;
  options.host = "127.0.0.1";
  const int listener = loopback_socket(true, &options.port);
  options.socket_timeout_ms = 20;
  RedisCache cache(options);
  std::string error;
  CHECK(!cache.open(&error));
  CHECK(error.find("no answer within 20 ms") != std::string::npos);
  CHECK(error.find("127.0.0.1:" + std::to_string(options.port)) != std::string::npos);
  // During the backoff a lookup is a miss at once, counted as an error.
  ResponseCache::Found found = cache.lookup("key");
  CHECK(found.entry == nullptr);
  CHECK(cache.last_error().find("next attempt in") != std::string::npos);
  CacheTotals totals = cache.totals();
  CHECK(totals.lookups == 1 && totals.misses == 1 && totals.errors == 1);
  uint64_t insert_ns = 0;
  auto entry = sample_entry();
  CHECK(cache.insert(entry, 0, &insert_ns) == ResponseCache::Inserted::kFailed);
  CHECK(cache.totals().errors == 2);
  ::close(listener);
}

TEST(redis_client_names_a_refused_connection) {
  // A port with nobody listening: bound, then closed.
  RedisOptions options;
  options.host = "127.0.0.1";
  ::close(loopback_socket(false, &options.port));
  RedisCache cache(options);
  std::string error;
  CHECK(!cache.open(&error));
  CHECK(error.find("cannot connect: Connection refused") != std::string::npos);
}
