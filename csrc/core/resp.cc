#include "core/resp.h"

#include <charconv>

namespace naiad {

void resp_command(std::initializer_list<std::string_view> args, std::string* out) {
  out->append("*" + std::to_string(args.size()) + "\r\n");
  for (std::string_view arg : args) {
    out->append("$" + std::to_string(arg.size()) + "\r\n");
    out->append(arg.data(), arg.size());
    out->append("\r\n");
  }
}

namespace {

struct Reader {
  std::string_view in;
  size_t at = 0;
  std::string* error;

  // The line from `at` to its CRLF (not included); false when it has not arrived.
  bool line(std::string_view* text) {
    size_t end = in.find("\r\n", at);
    if (end == std::string_view::npos) return false;
    *text = in.substr(at, end - at);
    at = end + 2;
    return true;
  }

  RespRead bad(const std::string& why) {
    *error = why;
    return RespRead::kBad;
  }

  RespRead integer(std::string_view text, int64_t* value) {
    const char* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(text.data(), end, *value);
    if (text.empty() || ec != std::errc() || ptr != end) {
      return bad("RESP: '" + std::string(text.substr(0, 32)) + "' is not an integer");
    }
    return RespRead::kDone;
  }

  RespRead read(RespReply* reply, int depth) {
    if (at >= in.size()) return RespRead::kIncomplete;
    const char kind = in[at++];
    std::string_view text;
    if (!line(&text)) return RespRead::kIncomplete;
    switch (kind) {
      case '+':
        reply->type = RespReply::Type::kStatus;
        reply->text.assign(text);
        return RespRead::kDone;
      case '-':
        reply->type = RespReply::Type::kError;
        reply->text.assign(text);
        return RespRead::kDone;
      case ':':
        reply->type = RespReply::Type::kInteger;
        return integer(text, &reply->integer);
      case '$': {
        int64_t size = 0;
        if (integer(text, &size) != RespRead::kDone) return RespRead::kBad;
        if (size == -1) {
          reply->type = RespReply::Type::kNil;
          return RespRead::kDone;
        }
        if (size < 0 || static_cast<uint64_t>(size) > kRespMaxBulk) {
          return bad("RESP: bulk string of " + std::to_string(size) + " bytes");
        }
        if (in.size() - at < static_cast<uint64_t>(size) + 2) return RespRead::kIncomplete;
        if (in.compare(at + size, 2, "\r\n") != 0) {
          return bad("RESP: bulk string of " + std::to_string(size) + " bytes not ended by CRLF");
        }
        reply->type = RespReply::Type::kBulk;
        reply->text.assign(in.substr(at, size));
        at += size + 2;
        return RespRead::kDone;
      }
      case '*': {
        int64_t count = 0;
        if (integer(text, &count) != RespRead::kDone) return RespRead::kBad;
        if (count == -1) {
          reply->type = RespReply::Type::kNil;
          return RespRead::kDone;
        }
        if (count < 0 || static_cast<uint64_t>(count) > kRespMaxArray) {
          return bad("RESP: array of " + std::to_string(count) + " elements");
        }
        if (depth >= kRespMaxDepth) return bad("RESP: arrays nested too deep");
        reply->type = RespReply::Type::kArray;
        reply->elements.assign(count, RespReply());
        for (RespReply& element : reply->elements) {
          RespRead got = read(&element, depth + 1);
          if (got != RespRead::kDone) return got;
        }
        return RespRead::kDone;
      }
      default:
        return bad("RESP: reply type byte " + std::to_string(static_cast<unsigned char>(kind)) +
                   " unknown");
    }
  }
};

}  // namespace

RespRead resp_read(std::string_view in, size_t* used, RespReply* reply, std::string* error) {
  Reader reader{in, 0, error};
  *reply = RespReply();
  RespRead got = reader.read(reply, 0);
  if (got == RespRead::kDone) *used = reader.at;
  return got;
}

}  // namespace naiad
