#include "http2/grpc_wire.h"

namespace naiad::grpc {

bool parse_timeout(std::string_view text, int64_t* microseconds) {
  if (text.size() < 2 || text.size() > 9) return false;
  int64_t value = 0;
  for (size_t i = 0; i + 1 < text.size(); ++i) {
    char c = text[i];
    if (c < '0' || c > '9') return false;
    value = value * 10 + (c - '0');
  }
  // At most 8 digits: value < 10^8, so hours in microseconds (3.6e9 * 1e8) still fits.
  switch (text.back()) {
    case 'H':
      *microseconds = value * 3600 * 1000000;
      return true;
    case 'M':
      *microseconds = value * 60 * 1000000;
      return true;
    case 'S':
      *microseconds = value * 1000000;
      return true;
    case 'm':
      *microseconds = value * 1000;
      return true;
    case 'u':
      *microseconds = value;
      return true;
    case 'n':
      *microseconds = (value + 999) / 1000;
      return true;
    default:
      return false;
  }
}

std::string percent_encode(std::string_view message) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(message.size());
  for (char ch : message) {
    uint8_t c = static_cast<uint8_t>(ch);
    if (c >= 0x20 && c <= 0x7e && c != '%') {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

}  // namespace naiad::grpc
