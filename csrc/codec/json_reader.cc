#include "codec/json_reader.h"

namespace naiad {

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// Length of the UTF-8 sequence starting at `p` (0 if it is not valid UTF-8).
size_t utf8_length(const unsigned char* p, const unsigned char* end) {
  unsigned char c = p[0];
  size_t length;
  uint32_t min;
  uint32_t code;
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) {
    length = 2, min = 0x80, code = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    length = 3, min = 0x800, code = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    length = 4, min = 0x10000, code = c & 0x07;
  } else {
    return 0;
  }
  if (static_cast<size_t>(end - p) < length) return 0;
  for (size_t i = 1; i < length; ++i) {
    if ((p[i] & 0xC0) != 0x80) return 0;
    code = (code << 6) | (p[i] & 0x3F);
  }
  if (code < min || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return 0;
  return length;
}

}  // namespace

bool JsonReader::at_end() {
  skip_whitespace();
  return p_ == end_;
}

bool JsonReader::string(std::string_view* out, std::forward_list<std::string>* owned) {
  skip_whitespace();
  const char* const start = p_;
  std::string_view raw;
  bool escaped = false;
  if (!scan_string(&raw, &escaped)) return false;
  if (!escaped) {
    *out = raw;
    return true;
  }
  p_ = start;
  owned->emplace_front();
  if (!string_into(&owned->front())) return false;
  *out = owned->front();
  return true;
}

bool JsonReader::raw_string(std::string_view* out) {
  bool escaped;
  return scan_string(out, &escaped);
}

bool JsonReader::scan_string(std::string_view* out, bool* escaped) {
  *escaped = false;
  if (!consume('"')) return false;
  const char* start = p_;
  while (p_ < end_) {
    unsigned char c = static_cast<unsigned char>(*p_);
    if (c == '"') {
      *out = std::string_view(start, static_cast<size_t>(p_ - start));
      ++p_;
      return true;
    }
    if (c < 0x20) return false;
    if (c == '\\') {
      *escaped = true;
      if (end_ - p_ < 2) return false;
      char e = p_[1];
      if (e == 'u') {
        if (end_ - p_ < 6) return false;
        for (int i = 2; i < 6; ++i) {
          if (!is_hex(p_[i])) return false;
        }
        p_ += 6;
        continue;
      }
      if (e != '"' && e != '\\' && e != '/' && e != 'b' && e != 'f' && e != 'n' && e != 'r' &&
          e != 't') {
        return false;
      }
      p_ += 2;
      continue;
    }
    size_t length = utf8_length(reinterpret_cast<const unsigned char*>(p_),
                                reinterpret_cast<const unsigned char*>(end_));
    if (length == 0) return false;
    p_ += length;
  }
  return false;
}

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return c - 'A' + 10;
}

void put_utf8(uint32_t code, std::string* out) {
  if (code < 0x80) {
    out->push_back(static_cast<char>(code));
  } else if (code < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (code >> 6)));
    out->push_back(static_cast<char>(0x80 | (code & 0x3F)));
  } else if (code < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (code >> 12)));
    out->push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (code & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (code >> 18)));
    out->push_back(static_cast<char>(0x80 | ((code >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (code & 0x3F)));
  }
}

}  // namespace

bool JsonReader::string_into(std::string* out) {
  if (!consume('"')) return false;
  while (p_ < end_) {
    unsigned char c = static_cast<unsigned char>(*p_);
    if (c == '"') {
      ++p_;
      return true;
    }
    if (c < 0x20) return false;
    if (c != '\\') {
      size_t length = utf8_length(reinterpret_cast<const unsigned char*>(p_),
                                  reinterpret_cast<const unsigned char*>(end_));
      if (length == 0) return false;
      out->append(p_, length);
      p_ += length;
      continue;
    }
    if (end_ - p_ < 2) return false;
    char e = p_[1];
    p_ += 2;
    switch (e) {
      case '"':
      case '\\':
      case '/':
        out->push_back(e);
        continue;
      case 'b':
        out->push_back('\b');
        continue;
      case 'f':
        out->push_back('\f');
        continue;
      case 'n':
        out->push_back('\n');
        continue;
      case 'r':
        out->push_back('\r');
        continue;
      case 't':
        out->push_back('\t');
        continue;
      case 'u':
        break;
      default:
        return false;
    }
    auto hex4 = [&](uint32_t* code) {
      if (end_ - p_ < 4) return false;
      uint32_t value = 0;
      for (int i = 0; i < 4; ++i) {
        if (!is_hex(p_[i])) return false;
        value = (value << 4) | static_cast<uint32_t>(hex_value(p_[i]));
      }
      p_ += 4;
      *code = value;
      return true;
    };
    uint32_t code;
    if (!hex4(&code)) return false;
    if (code >= 0xDC00 && code <= 0xDFFF) return false;  // a low surrogate alone
    if (code >= 0xD800 && code <= 0xDBFF) {
      uint32_t low;
      if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u') return false;
      p_ += 2;
      if (!hex4(&low) || low < 0xDC00 || low > 0xDFFF) return false;
      code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
    }
    put_utf8(code, out);
  }
  return false;
}

bool JsonReader::number(std::string_view* text, bool* integral) {
  skip_whitespace();
  const char* start = p_;
  if (!skip_number()) return false;
  *text = std::string_view(start, static_cast<size_t>(p_ - start));
  *integral = text->find_first_of(".eE") == std::string_view::npos;
  return true;
}

bool JsonReader::uint(uint64_t* out) {
  skip_whitespace();
  const char* start = p_;
  uint64_t value = 0;
  while (p_ < end_ && is_digit(*p_)) {
    value = value * 10 + static_cast<uint64_t>(*p_ - '0');
    ++p_;
  }
  size_t digits = static_cast<size_t>(p_ - start);
  if (digits == 0 || digits > 18) return false;
  if (digits > 1 && *start == '0') return false;  // not JSON
  if (p_ < end_ && (*p_ == '.' || *p_ == 'e' || *p_ == 'E')) return false;
  *out = value;
  return true;
}

bool JsonReader::literal(std::string_view word) {
  if (static_cast<size_t>(end_ - p_) < word.size()) return false;
  if (std::string_view(p_, word.size()) != word) return false;
  p_ += word.size();
  return true;
}

bool JsonReader::boolean(bool* out) {
  skip_whitespace();
  if (literal("true")) {
    *out = true;
    return true;
  }
  if (literal("false")) {
    *out = false;
    return true;
  }
  return false;
}

bool JsonReader::skip_number() {
  // -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
  if (p_ < end_ && *p_ == '-') ++p_;
  if (p_ >= end_ || !is_digit(*p_)) return false;
  if (*p_ == '0') {
    ++p_;
  } else {
    while (p_ < end_ && is_digit(*p_)) ++p_;
  }
  if (p_ < end_ && *p_ == '.') {
    ++p_;
    if (p_ >= end_ || !is_digit(*p_)) return false;
    while (p_ < end_ && is_digit(*p_)) ++p_;
  }
  if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) {
    ++p_;
    if (p_ < end_ && (*p_ == '+' || *p_ == '-')) ++p_;
    if (p_ >= end_ || !is_digit(*p_)) return false;
    while (p_ < end_ && is_digit(*p_)) ++p_;
  }
  return true;
}

bool JsonReader::skip_value(const char** start) {
  skip_whitespace();
  if (start != nullptr) *start = p_;
  return skip_value_at(0);
}

bool JsonReader::skip_value_at(int depth) {
  if (depth > kMaxDepth) return false;
  skip_whitespace();
  if (p_ >= end_) return false;
  std::string_view ignored;
  switch (*p_) {
    case '"':
      return raw_string(&ignored);
    case '{':
      ++p_;
      if (consume('}')) return true;
      do {
        if (!raw_string(&ignored) || !consume(':') || !skip_value_at(depth + 1)) return false;
      } while (consume(','));
      return consume('}');
    case '[':
      ++p_;
      if (consume(']')) return true;
      do {
        if (!skip_value_at(depth + 1)) return false;
      } while (consume(','));
      return consume(']');
    case 't':
      return literal("true");
    case 'f':
      return literal("false");
    case 'n':
      return literal("null");
    default:
      return skip_number();
  }
}

bool read_tensor_entry(JsonReader& reader, std::string_view* name, std::string_view* datatype,
                       std::string_view* shape) {
  const char* shape_start = nullptr;
  if (!reader.consume('[') || !reader.raw_string(name) || !reader.consume(',') ||
      !reader.raw_string(datatype) || !reader.consume(',') || !reader.skip_value(&shape_start) ||
      *shape_start != '[') {
    return false;
  }
  *shape = std::string_view(shape_start, static_cast<size_t>(reader.position() - shape_start));
  return reader.consume(']');
}

}  // namespace naiad
