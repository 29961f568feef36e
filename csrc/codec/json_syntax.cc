#include "codec/json_syntax.h"

#include <cstdint>
#include <vector>

namespace naiad {

namespace {

constexpr const char* kDocumentEmpty = "The document is empty.";
constexpr const char* kRootNotSingular = "The document root must not be followed by other values.";
constexpr const char* kValueInvalid = "Invalid value.";
constexpr const char* kMissName = "Missing a name for object member.";
constexpr const char* kMissColon = "Missing a colon after a name of object member.";
constexpr const char* kMissCommaOrCurly = "Missing a comma or '}' after an object member.";
constexpr const char* kMissCommaOrSquare = "Missing a comma or ']' after an array element.";
constexpr const char* kInvalidHex = "Incorrect hex digit after \\u escape in string.";
constexpr const char* kSurrogateInvalid = "The surrogate pair in string is invalid.";
constexpr const char* kEscapeInvalid = "Invalid escape character in string.";
constexpr const char* kMissQuotationMark = "Missing a closing quotation mark in string.";
constexpr const char* kNumberTooBig = "Number too big to be stored in double.";
constexpr const char* kMissFraction = "Miss fraction part in number.";
constexpr const char* kMissExponent = "Miss exponent in number.";

// rapidjson's reader, its checks in its order; values are not kept. Containers are
// walked with a stack of their kinds (rapidjson recurses).
class SyntaxWalker {
 public:
  SyntaxWalker(const char* text, size_t size)
      : base_(reinterpret_cast<const unsigned char*>(text)), p_(base_), end_(base_ + size) {}

  bool document(JsonSyntaxError* error) {
    error_ = error;
    // The byte order mark's bytes, each skipped if it comes next (rapidjson's
    // EncodedInputStream<UTF8, MemoryStream>).
    for (unsigned char bom : {0xEFu, 0xBBu, 0xBFu}) {
      if (p_ < end_ && *p_ == bom) ++p_;
    }
    skip_whitespace();
    if (peek() == '\0') return fail(kDocumentEmpty, tell());
    if (!value()) return false;
    skip_whitespace();
    if (peek() != '\0') return fail(kRootNotSingular, tell());
    return true;
  }

 private:
  // A NUL byte reads as the end, as in rapidjson's MemoryStream.
  char peek() const { return p_ < end_ ? static_cast<char>(*p_) : '\0'; }
  size_t tell() const { return static_cast<size_t>(p_ - base_); }
  bool consume(char c) {
    if (peek() != c) return false;
    ++p_;
    return true;
  }
  bool digit() const { return peek() >= '0' && peek() <= '9'; }
  int take_digit() { return *p_++ - '0'; }
  void skip_whitespace() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }
  bool fail(const char* what, size_t offset) {
    error_->what = what;
    error_->offset = offset;
    return false;
  }

  bool value() {
    std::vector<char> open;  // '{' or '[' of each container the walk is in
    for (;;) {
      bool member = false;  // an object's member name is next
      const char c = peek();
      if (c == '{' || c == '[') {
        ++p_;
        skip_whitespace();
        if (!consume(c == '{' ? '}' : ']')) {
          open.push_back(c);
          if (c == '[') continue;  // its first element
          member = true;
        }
      } else if (!scalar()) {
        return false;
      }
      // A value ended (or an object opened): what its container takes next.
      while (!member) {
        if (open.empty()) return true;
        skip_whitespace();
        if (open.back() == '{') {
          if (consume(',')) {
            skip_whitespace();
            member = true;
          } else if (consume('}')) {
            open.pop_back();
          } else {
            return fail(kMissCommaOrCurly, tell());
          }
        } else if (consume(',')) {
          skip_whitespace();
          break;  // the next element
        } else if (consume(']')) {
          open.pop_back();
        } else {
          return fail(kMissCommaOrSquare, tell());
        }
      }
      if (!member) continue;
      if (peek() != '"') return fail(kMissName, tell());
      if (!string()) return false;
      skip_whitespace();
      if (!consume(':')) return fail(kMissColon, tell());
      skip_whitespace();
    }
  }

  bool literal(const char* rest) {
    ++p_;
    for (; *rest != '\0'; ++rest) {
      if (!consume(*rest)) return fail(kValueInvalid, tell());
    }
    return true;
  }

  bool scalar() {
    switch (peek()) {
      case 'n':
        return literal("ull");
      case 't':
        return literal("rue");
      case 'f':
        return literal("alse");
      case '"':
        return string();
      default:
        return number();
    }
  }

  bool hex4(unsigned* code) {
    *code = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = peek();
      unsigned v;
      if (c >= '0' && c <= '9') {
        v = static_cast<unsigned>(c - '0');
      } else if (c >= 'A' && c <= 'F') {
        v = static_cast<unsigned>(c - 'A' + 10);
      } else if (c >= 'a' && c <= 'f') {
        v = static_cast<unsigned>(c - 'a' + 10);
      } else {
        return false;
      }
      *code = (*code << 4) | v;
      ++p_;
    }
    return true;
  }

  bool string() {
    ++p_;  // the opening quote
    for (;;) {
      const char c = peek();
      if (c == '\\') {
        const size_t escape_at = tell();
        ++p_;
        const char e = peek();
        if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' ||
            e == 't') {
          ++p_;
          continue;
        }
        if (e != 'u') return fail(kEscapeInvalid, escape_at);
        ++p_;
        unsigned code;
        if (!hex4(&code)) return fail(kInvalidHex, escape_at);
        if (code >= 0xD800 && code <= 0xDBFF) {  // a high surrogate: its low one must follow
          if (!consume('\\') || !consume('u')) return fail(kSurrogateInvalid, escape_at);
          if (!hex4(&code)) return fail(kInvalidHex, escape_at);
          if (code < 0xDC00 || code > 0xDFFF) return fail(kSurrogateInvalid, escape_at);
        }
        continue;
      }
      if (c == '"') {
        ++p_;
        return true;
      }
      // Bytes past 0x7F are taken as they are (no UTF-8 check); control bytes are not.
      if (static_cast<unsigned char>(c) < 0x20) {
        return fail(c == '\0' ? kMissQuotationMark : kEscapeInvalid, tell());
      }
      ++p_;
    }
  }

  // rapidjson 1.1's ParseNumber with kParseNanAndInfFlag: the value is built as it
  // builds it only as far as its checks need (too big, how far an exponent may go).
  bool number() {
    const size_t start = tell();
    const bool minus = consume('-');
    unsigned i = 0;
    uint64_t i64 = 0;
    bool use64bit = false;
    int significand_digits = 0;
    double d = 0;
    if (peek() == '0') {
      ++p_;
    } else if (peek() >= '1' && peek() <= '9') {
      i = static_cast<unsigned>(take_digit());
      // Past 2^31 (negative) or 2^32 - 1: 64 bits.
      const unsigned limit = minus ? 214748364u : 429496729u;
      const char last = minus ? '8' : '5';
      while (digit()) {
        if (i >= limit && (i != limit || peek() > last)) {
          i64 = i;
          use64bit = true;
          break;
        }
        i = i * 10 + static_cast<unsigned>(take_digit());
        ++significand_digits;
      }
    } else if (peek() == 'I' || peek() == 'N') {
      if (consume('N') && consume('a') && consume('N')) {
      } else if (consume('I') && consume('n') && consume('f')) {
        if (peek() == 'i' &&
            !(consume('i') && consume('n') && consume('i') && consume('t') && consume('y'))) {
          return fail(kValueInvalid, tell());
        }
      } else {
        return fail(kValueInvalid, tell());
      }
    } else {
      return fail(kValueInvalid, tell());
    }
    bool use_double = false;
    if (use64bit) {
      // Past 2^63 (negative) or 2^64 - 1: a double.
      const uint64_t limit = minus ? 0x0CCCCCCCCCCCCCCCull : 0x1999999999999999ull;
      const char last = minus ? '8' : '5';
      while (digit()) {
        if (i64 >= limit && (i64 != limit || peek() > last)) {
          d = static_cast<double>(i64);
          use_double = true;
          break;
        }
        i64 = i64 * 10 + static_cast<uint64_t>(take_digit());
        ++significand_digits;
      }
    }
    if (use_double) {
      while (digit()) {
        if (d >= 1.7976931348623157e307) return fail(kNumberTooBig, start);
        d = d * 10 + take_digit();
      }
    }
    int64_t exp_frac = 0;
    if (consume('.')) {
      if (!digit()) return fail(kMissFraction, tell());
      if (!use_double) {
        if (!use64bit) i64 = i;
        while (digit()) {
          if (i64 > 0x1FFFFFFFFFFFFFull) break;  // 2^53 - 1
          i64 = i64 * 10 + static_cast<uint64_t>(take_digit());
          --exp_frac;
          if (i64 != 0) ++significand_digits;
        }
        d = static_cast<double>(i64);
        use_double = true;
      }
      while (digit()) {
        if (significand_digits < 17) {
          d = d * 10.0 + take_digit();
          --exp_frac;
          if (d > 0.0) ++significand_digits;
        } else {
          ++p_;
        }
      }
    }
    if (consume('e') || consume('E')) {
      bool exp_minus = false;
      if (!consume('+')) exp_minus = consume('-');
      if (!digit()) return fail(kMissExponent, tell());
      int64_t exp = take_digit();
      if (exp_minus) {
        while (digit()) {
          exp = exp * 10 + take_digit();
          if (exp >= 214748364) {
            while (digit()) ++p_;
          }
        }
      } else {
        const int64_t max_exp = 308 - exp_frac;
        while (digit()) {
          exp = exp * 10 + take_digit();
          if (exp > max_exp) return fail(kNumberTooBig, start);
        }
      }
    }
    return true;
  }

  const unsigned char* base_;
  const unsigned char* p_;
  const unsigned char* end_;
  JsonSyntaxError* error_ = nullptr;
};

}  // namespace

bool json_syntax_ok(const char* text, size_t size, JsonSyntaxError* error) {
  return SyntaxWalker(text, size).document(error);
}

std::string json_syntax_message(const JsonSyntaxError& error) {
  return std::string("failed to parse the request JSON buffer: ") + error.what + " at " +
         std::to_string(error.offset);
}

}  // namespace naiad
