// A pull reader over JSON text, for the infer fast lane (kserve_json.h,
// result_block.h): it walks a document in place, with no tree and no copies, and
// answers false at anything it does not expect. Its callers treat false as "not for
// the fast lane" and leave the request to the general path, which gives the exact
// error when there is one, so this reader never has to explain what is wrong.
#pragma once

#include <cstddef>
#include <cstdint>
#include <forward_list>
#include <string>
#include <string_view>

namespace naiad {

class JsonReader {
 public:
  JsonReader(const char* data, size_t size) : p_(data), end_(data + size) {}

  // Skips whitespace, then takes `c` if it comes next. Inline, as skip_whitespace:
  // they run at every token of a document.
  bool consume(char c) {
    skip_whitespace();
    if (p_ < end_ && *p_ == c) {
      ++p_;
      return true;
    }
    return false;
  }
  // Any valid JSON string (UTF-8, escapes), unescaped: a view of its bytes between the
  // quotes when it has no escape, else of its unescaped text, kept in `owned` (whose
  // strings stay put while it lives, moved or not).
  bool string(std::string_view* out, std::forward_list<std::string>* owned);
  // Any valid JSON string, its text between the quotes with escapes kept as they are,
  // for copying into another JSON document unchanged.
  bool raw_string(std::string_view* out);
  // Any valid JSON string, unescaped: its UTF-8 bytes appended to `out`. A \u escape
  // of a surrogate must be a high one followed by a low one (a pair).
  bool string_into(std::string* out);
  // A non-negative integer without fraction or exponent, at most 18 digits.
  bool uint(uint64_t* out);
  // Any JSON number: its text, and whether it has neither fraction nor exponent.
  bool number(std::string_view* text, bool* integral);
  bool boolean(bool* out);
  // Any JSON value, nested at most `kMaxDepth` deep. `start` (optional) gets where it
  // began, after whitespace.
  bool skip_value(const char** start = nullptr);
  // Only whitespace is left.
  bool at_end();
  // Skips whitespace; the next byte, or 0 at the end.
  char peek() {
    skip_whitespace();
    return p_ < end_ ? *p_ : '\0';
  }

  // Walks an object: `on_member(key)` reads each value, the key unescaped (valid until
  // the next key). False if the object is malformed or `on_member` returns false.
  template <typename OnMember>
  bool object(OnMember&& on_member) {
    if (!consume('{')) return false;
    if (consume('}')) return true;
    std::forward_list<std::string> unescaped;  // an escaped key's text (rare)
    do {
      std::string_view key;
      unescaped.clear();
      if (!string(&key, &unescaped) || !consume(':') || !on_member(key)) return false;
    } while (consume(','));
    return consume('}');
  }

  // Walks an array: `on_item()` reads each item.
  template <typename OnItem>
  bool array(OnItem&& on_item) {
    if (!consume('[')) return false;
    if (consume(']')) return true;
    do {
      if (!on_item()) return false;
    } while (consume(','));
    return consume(']');
  }
  const char* position() const { return p_; }

  static constexpr int kMaxDepth = 64;

 private:
  void skip_whitespace() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\n' || *p_ == '\r')) ++p_;
  }
  // raw_string(), and whether the string has an escape.
  bool scan_string(std::string_view* out, bool* escaped);
  bool skip_value_at(int depth);
  bool skip_number();
  bool literal(std::string_view word);

  const char* p_;
  const char* end_;
};

// One [name, datatype, shape] entry of a block's JSON (a request block's "inputs", a
// response's outcome record "outputs"): the name and datatype as raw JSON string text,
// the shape as its JSON array text.
bool read_tensor_entry(JsonReader& reader, std::string_view* name, std::string_view* datatype,
                       std::string_view* shape);

}  // namespace naiad
