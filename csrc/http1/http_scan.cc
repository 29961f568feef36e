#include "http1/http_scan.h"

#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

namespace naiad {

namespace {

constexpr size_t kMaxDigits = 15;

// RFC 9110's tchar, as a table: header names are checked byte by byte.
constexpr std::array<bool, 256> kTokenChars = [] {
  std::array<bool, 256> table{};
  for (int c = '0'; c <= '9'; ++c) table[c] = true;
  for (int c = 'a'; c <= 'z'; ++c) table[c] = table[c - 'a' + 'A'] = true;
  for (char c : std::string_view("!#$%&'*+-.^_`|~")) table[static_cast<unsigned char>(c)] = true;
  return table;
}();

bool is_token_char(unsigned char c) { return kTokenChars[c]; }

// Where the head ends: just past the first CRLF CRLF in data[0, limit), or null. memchr
// for each CR rather than a test of every byte.
const char* find_head_end(const char* data, size_t limit) {
  if (limit < 4) return nullptr;
  const char* last = data + limit - 3;  // the last place a CRLF CRLF can start, exclusive
  for (const char* p = data; p < last;) {
    const char* cr = static_cast<const char*>(std::memchr(p, '\r', static_cast<size_t>(last - p)));
    if (cr == nullptr) return nullptr;
    if (cr[1] == '\n' && cr[2] == '\r' && cr[3] == '\n') return cr + 4;
    p = cr + 1;
  }
  return nullptr;
}

// ASCII case-insensitive equality with a lower-case `word`.
bool equals_lower(std::string_view text, std::string_view word) {
  if (text.size() != word.size()) return false;
  for (size_t i = 0; i < text.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 'A' && c <= 'Z') c = static_cast<unsigned char>(c | 0x20);
    if (c != static_cast<unsigned char>(word[i])) return false;
  }
  return true;
}

bool parse_digits(std::string_view text, size_t* out) {
  if (text.empty() || text.size() > kMaxDigits) return false;
  size_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + static_cast<size_t>(c - '0');
  }
  *out = value;
  return true;
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

}  // namespace

ScanResult scan_request(const char* data, size_t size, size_t max_body, ScannedRequest* out) {
  // The request line, as far as it has arrived: `POST ` must come first.
  static constexpr std::string_view kMethod = "POST ";
  size_t prefix = size < kMethod.size() ? size : kMethod.size();
  if (std::string_view(data, prefix) != kMethod.substr(0, prefix)) return ScanResult::kOther;
  const char* head_end = find_head_end(data, size < kHttpMaxHead ? size : kHttpMaxHead);
  if (head_end == nullptr) {
    return size < kHttpMaxHead ? ScanResult::kIncomplete : ScanResult::kOther;
  }
  std::string_view head(data, static_cast<size_t>(head_end - data) - 2);  // ends in one CRLF

  size_t line_end = head.find("\r\n");
  std::string_view line = head.substr(0, line_end);
  static constexpr std::string_view kVersion = " HTTP/1.1";
  static constexpr std::string_view kVersion10 = " HTTP/1.0";
  if (line.size() <= kMethod.size() + kVersion.size()) return ScanResult::kOther;
  const std::string_view version = line.substr(line.size() - kVersion.size());
  const bool http10 = version == kVersion10;
  if (version != kVersion && !http10) return ScanResult::kOther;
  std::string_view target =
      line.substr(kMethod.size(), line.size() - kMethod.size() - kVersion.size());
  if (target.empty() || target[0] != '/') return ScanResult::kOther;
  for (char c : target) {
    unsigned char u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7F) return ScanResult::kOther;
  }

  bool has_length = false, has_connection = false, close = false;
  size_t length = 0;
  ScannedRequest request;
  size_t position = line_end + 2;
  while (position < head.size()) {
    size_t end = head.find("\r\n", position);
    std::string_view header = head.substr(position, end - position);
    position = end + 2;
    size_t colon = header.find(':');
    if (colon == std::string_view::npos || colon == 0) return ScanResult::kOther;
    std::string_view name = header.substr(0, colon);
    for (char c : name) {
      if (!is_token_char(static_cast<unsigned char>(c))) return ScanResult::kOther;
    }
    std::string_view value = header.substr(colon + 1);
    for (char c : value) {
      unsigned char u = static_cast<unsigned char>(c);
      if ((u < 0x20 && u != '\t') || u >= 0x7F) return ScanResult::kOther;
    }
    value = trim(value);
    if (equals_lower(name, "content-length")) {
      if (has_length || !parse_digits(value, &length)) return ScanResult::kOther;
      has_length = true;
    } else if (equals_lower(name, "inference-header-content-length")) {
      if (request.has_header_length || !parse_digits(value, &request.header_length)) {
        return ScanResult::kOther;
      }
      request.has_header_length = true;
    } else if (equals_lower(name, "connection")) {
      if (has_connection) return ScanResult::kOther;
      has_connection = true;
      if (equals_lower(value, "close")) {
        close = true;
      } else if (!equals_lower(value, "keep-alive")) {
        return ScanResult::kOther;
      }
    } else if (equals_lower(name, "content-encoding")) {
      request.content = content_encoding(value);  // the last one, as httptools' reader
    } else if (equals_lower(name, "transfer-encoding") || equals_lower(name, "expect") ||
               equals_lower(name, "upgrade")) {
      return ScanResult::kOther;
    } else if (name.size() == 15 && equals_lower(name, "accept-encoding")) {
      request.encoding = response_encoding(value);  // the last one, as httptools' reader
    }
  }
  if (!has_length || length > max_body) return ScanResult::kOther;
  if (http10) {
    request.connection =
        has_connection && !close ? HttpConnection::kKeepAlive10 : HttpConnection::kClose10;
  } else if (close) {
    request.connection = HttpConnection::kClose;
  }
  size_t head_size = static_cast<size_t>(head_end - data);
  request.target = target;
  request.body_offset = head_size;
  request.body_size = length;
  request.total = head_size + length;
  *out = request;
  return size - head_size < length ? ScanResult::kIncomplete : ScanResult::kRequest;
}

ScanResult ScanMemo::scan(const char* data, size_t size, size_t max_body, ScannedRequest* out) {
  const size_t head_size = head_.size();
  if (head_size != 0 && size >= head_size && scanned_.body_size <= max_body &&
      std::memcmp(data, head_.data(), head_size) == 0) {
    *out = scanned_;
    out->target = std::string_view(data + target_at_, scanned_.target.size());
    ++hits_;
    return size - head_size < scanned_.body_size ? ScanResult::kIncomplete : ScanResult::kRequest;
  }
  const ScanResult result = scan_request(data, size, max_body, out);
  if (result == ScanResult::kRequest) {
    head_.assign(data, out->body_offset);
    scanned_ = *out;
    target_at_ = static_cast<size_t>(out->target.data() - data);
  }
  return result;
}

size_t incomplete_request_size(const char* data, size_t size, size_t max_body) {
  ScannedRequest request;
  if (scan_request(data, size, max_body, &request) != ScanResult::kIncomplete) return 0;
  return request.total;
}

ContentEncoding content_encoding(std::string_view value) {
  if (value.empty() || value == "identity") return ContentEncoding::kIdentity;
  if (value == "gzip") return ContentEncoding::kGzip;
  if (value == "deflate") return ContentEncoding::kDeflate;
  return ContentEncoding::kUnsupported;
}

ResponseEncoding response_encoding(std::string_view accept_encoding) {
  ResponseEncoding chosen = ResponseEncoding::kIdentity;
  double chosen_weight = 0;
  size_t offset = 0;
  while (offset <= accept_encoding.size()) {
    size_t comma = accept_encoding.find(',', offset);
    if (comma == std::string_view::npos) comma = accept_encoding.size();
    std::string_view entry = accept_encoding.substr(offset, comma - offset);
    offset = comma + 1;
    size_t start = entry.find_first_not_of(' ');
    size_t weight_at = entry.find(";q=");
    if (start == std::string_view::npos ||
        (weight_at != std::string_view::npos && start >= weight_at)) {
      continue;
    }
    std::string_view type = entry.substr(
        start, weight_at == std::string_view::npos ? std::string_view::npos : weight_at - start);
    double weight = 1;
    if (weight_at != std::string_view::npos) {
      // As std::stod: a number at the start (after spaces), else the entry is skipped;
      // out of range too.
      std::string number(entry.substr(weight_at + 3));
      char* end = nullptr;
      errno = 0;
      weight = std::strtod(number.c_str(), &end);
      if (end == number.c_str() || errno == ERANGE) continue;
    }
    ResponseEncoding kind;
    if (type == "identity") {
      kind = ResponseEncoding::kIdentity;
    } else if (type == "gzip") {
      kind = ResponseEncoding::kGzip;
    } else if (type == "deflate") {
      kind = ResponseEncoding::kDeflate;
    } else {
      continue;
    }
    if (weight > chosen_weight) {
      chosen = kind;
      chosen_weight = weight;
    }
  }
  return chosen;
}

}  // namespace naiad
