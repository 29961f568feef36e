// gRPC over HTTP/2 details that are not HTTP/2 itself (gRPC's PROTOCOL-HTTP2.md):
// the grpc-timeout header, the percent-encoding of grpc-message, the status codes.
// Pure functions; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace naiad::grpc {

// The gRPC status codes the server sends.
enum Status : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
};

// "1-8 ASCII digits" followed by a unit H M S m u n. Writes microseconds (rounded up,
// so "1n" is still a deadline) and returns true; false when malformed.
bool parse_timeout(std::string_view text, int64_t* microseconds);

// grpc-message: bytes outside 0x20..0x7E, and '%' itself, become %XX.
std::string percent_encode(std::string_view message);

}  // namespace naiad::grpc
