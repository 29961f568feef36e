// The error tables (error_status.h): each kind's HTTP status and gRPC code as Triton
// answers them, http_status_of() reading the same table, and Triton's error codes with
// the kind each answers as.
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

TEST(triton_error_codes_answer_as_their_kinds) {
  struct Row {
    int64_t code;
    const char* name;
    int http;
  } rows[] = {
      {0, "UNKNOWN", 500},        {1, "INTERNAL", 500},    {2, "NOT_FOUND", 404},
      {3, "INVALID_ARG", 400},    {4, "UNAVAILABLE", 503}, {5, "UNSUPPORTED", 501},
      {6, "ALREADY_EXISTS", 400}, {7, "CANCELLED", 500},
  };
  CHECK(naiad::kTritonCodeCount == sizeof(rows) / sizeof(rows[0]));
  for (size_t i = 0; i < naiad::kTritonCodeCount; ++i) {
    CHECK(static_cast<int64_t>(naiad::kTritonCodes[i].code) == rows[i].code);
    CHECK(naiad::kTritonCodes[i].name == rows[i].name);
    CHECK(http_status_of(naiad::error_kind_of_triton_code(rows[i].code)) == rows[i].http);
  }
  // A code Triton does not have (a model's own number) is an internal error.
  CHECK(naiad::error_kind_of_triton_code(99) == ErrorKind::kInternal);
  CHECK(naiad::error_kind_of_triton_code(-1) == ErrorKind::kInternal);
}
