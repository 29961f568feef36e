#include "codec/error_status.h"

#include "http2/grpc_wire.h"

namespace naiad {

namespace {

// Triton answers UNSUPPORTED with 501 over HTTP and UNIMPLEMENTED over gRPC; over HTTP
// ALREADY_EXISTS is a 400, over gRPC it keeps its own code.
constexpr ErrorStatus kTable[] = {
    {ErrorKind::kNone, 200, grpc::kOk},
    {ErrorKind::kUnknown, 500, grpc::kUnknown},
    {ErrorKind::kInternal, 500, grpc::kInternal},
    {ErrorKind::kNotFound, 404, grpc::kNotFound},
    {ErrorKind::kInvalidArgument, 400, grpc::kInvalidArgument},
    {ErrorKind::kUnavailable, 503, grpc::kUnavailable},
    {ErrorKind::kUnsupported, 501, grpc::kUnimplemented},
    {ErrorKind::kAlreadyExists, 400, grpc::kAlreadyExists},
};

}  // namespace

const ErrorStatus& error_status_of(ErrorKind kind) {
  for (const ErrorStatus& row : kTable) {
    if (row.kind == kind) return row;
  }
  return kTable[2];  // kInternal
}

ErrorKind error_kind_of_triton_code(int64_t code) {
  for (const TritonCodeRow& row : kTritonCodes) {
    if (static_cast<int64_t>(row.code) == code) return row.kind;
  }
  return ErrorKind::kInternal;
}

}  // namespace naiad
