// The error table (error_status.h): each kind's HTTP status and gRPC code as Triton
// answers them, and http_status_of() reading the same table.
#include "codec/error_status.h"
#include "http2/grpc_wire.h"
#include "testing.h"

using naiad::error_status_of;
using naiad::ErrorKind;
using naiad::http_status_of;

TEST(error_table_has_tritons_http_and_grpc_columns) {
  struct Row {
    ErrorKind kind;
    int http;
    int grpc;
  } rows[] = {
      {ErrorKind::kNone, 200, 0},
      {ErrorKind::kUnknown, 500, 2},
      {ErrorKind::kInternal, 500, 13},
      {ErrorKind::kNotFound, 404, 5},
      {ErrorKind::kInvalidArgument, 400, 3},
      {ErrorKind::kUnavailable, 503, 14},
      {ErrorKind::kUnsupported, 501, 12},
      {ErrorKind::kAlreadyExists, 400, 6},
  };
  for (const Row& r : rows) {
    CHECK(error_status_of(r.kind).kind == r.kind);
    CHECK(error_status_of(r.kind).http_status == r.http);
    CHECK(error_status_of(r.kind).grpc_code == r.grpc);
    CHECK(http_status_of(r.kind) == r.http);
  }
  // A value outside the enum is an internal error on both protocols.
  CHECK(error_status_of(static_cast<ErrorKind>(200)).http_status == 500);
  CHECK(error_status_of(static_cast<ErrorKind>(200)).grpc_code == naiad::grpc::kInternal);
}
