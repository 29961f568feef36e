// The one table of what each error kind (infer_types.h ErrorKind, Triton's
// TRITONSERVER_Error_Code kinds) answers on each protocol: the HTTP status and the gRPC
// status code, as Triton 2.51 answers them. The HTTP/1.1 framer, the gRPC lane and
// Python's front ends (through _core.pyx: http_status_of_kind, grpc_code_of_kind) all
// read it. Constant data; any thread.
#pragma once

#include "codec/infer_types.h"

namespace naiad {

struct ErrorStatus {
  ErrorKind kind;
  int http_status;
  int grpc_code;  // grpc_wire.h grpc::Status
};

// The row of `kind`; an unknown value gets kInternal's row.
const ErrorStatus& error_status_of(ErrorKind kind);

}  // namespace naiad
