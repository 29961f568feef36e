// The one table of Triton's error codes: each TRITONSERVER_Error_Code (the codes of
// pb_utils.TritonError, which a worker reports a failed response with) and the error
// kind (infer_types.h ErrorKind) it answers as; and what each kind answers on each
// protocol: the HTTP status and the gRPC status code, as Triton 2.51 answers them. The
// HTTP/1.1 framer, the gRPC lane, the codec and Python (through _core.pyx:
// triton_error_codes, http_status_of_kind, grpc_code_of_kind) all read it. Constant
// data; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "codec/infer_types.h"

namespace naiad {

struct ErrorStatus {
  ErrorKind kind;
  int http_status;
  int grpc_code;  // grpc_wire.h grpc::Status
};

// The row of `kind`; an unknown value gets kInternal's row.
const ErrorStatus& error_status_of(ErrorKind kind);

// TRITONSERVER_Error_Code values.
enum class TritonCode : int32_t {
  kUnknown = 0,
  kInternal = 1,
  kNotFound = 2,
  kInvalidArg = 3,
  kUnavailable = 4,
  kUnsupported = 5,
  kAlreadyExists = 6,
  kCancelled = 7,
};

struct TritonCodeRow {
  TritonCode code;
  std::string_view name;  // as pb_utils.TritonError names the constant
  ErrorKind kind;         // what a response that failed with the code answers as
};

// A cancelled request answers as an internal error: ErrorKind has no kind of its own
// for it.
inline constexpr TritonCodeRow kTritonCodes[] = {
    {TritonCode::kUnknown, "UNKNOWN", ErrorKind::kUnknown},
    {TritonCode::kInternal, "INTERNAL", ErrorKind::kInternal},
    {TritonCode::kNotFound, "NOT_FOUND", ErrorKind::kNotFound},
    {TritonCode::kInvalidArg, "INVALID_ARG", ErrorKind::kInvalidArgument},
    {TritonCode::kUnavailable, "UNAVAILABLE", ErrorKind::kUnavailable},
    {TritonCode::kUnsupported, "UNSUPPORTED", ErrorKind::kUnsupported},
    {TritonCode::kAlreadyExists, "ALREADY_EXISTS", ErrorKind::kAlreadyExists},
    {TritonCode::kCancelled, "CANCELLED", ErrorKind::kInternal},
};
inline constexpr size_t kTritonCodeCount = sizeof(kTritonCodes) / sizeof(kTritonCodes[0]);

// The kind a worker's TritonError `code` answers as; an unknown code is kInternal.
ErrorKind error_kind_of_triton_code(int64_t code);

}  // namespace naiad
