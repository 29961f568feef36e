// RESP, Redis's wire protocol (version 2): commands written as arrays of bulk strings
// (binary-safe), replies read incrementally from whatever bytes have arrived. Only what
// the Redis response cache needs; every length is checked, so a damaged or hostile
// reply is an error, never a read past the buffer.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace naiad {

// Appends the command `args` (e.g. {"SET", key, value}) to `out`.
void resp_command(std::initializer_list<std::string_view> args, std::string* out);

struct RespReply {
  enum class Type { kStatus, kError, kInteger, kBulk, kNil, kArray };
  Type type = Type::kNil;
  std::string text;  // kStatus, kError, kBulk
  int64_t integer = 0;
  std::vector<RespReply> elements;  // kArray
};

enum class RespRead { kDone, kIncomplete, kBad };

// Bounds on what a reply may claim, so that a damaged length cannot make the reader
// wait for, or allocate, gigabytes: a bulk string of at most Redis's own limit, and
// arrays only as deep and long as the cache's commands ever get back.
constexpr uint64_t kRespMaxBulk = 512ull << 20;
constexpr uint64_t kRespMaxArray = 1 << 16;
constexpr int kRespMaxDepth = 8;

// Reads one reply from the front of `in`: kDone with `*used` the bytes it took,
// kIncomplete when more bytes are needed, kBad (with `*error`) when `in` is no RESP.
RespRead resp_read(std::string_view in, size_t* used, RespReply* reply, std::string* error);

}  // namespace naiad
