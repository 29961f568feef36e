"""gRPC status codes (the C++ lane's enum, read through _core), and the status of an
exception: a NaiadError's error kind maps to its gRPC code through the core's one table
(csrc/codec/error_status.h, beside the HTTP column), read through _core."""

from __future__ import annotations

from naiad import _core
from naiad.errors import NaiadError

# The codes of the C++ lane's one enum (csrc/http2/grpc_wire.h).
OK = _core.GRPC_OK
CANCELLED = _core.GRPC_CANCELLED
UNKNOWN = _core.GRPC_UNKNOWN
INVALID_ARGUMENT = _core.GRPC_INVALID_ARGUMENT
DEADLINE_EXCEEDED = _core.GRPC_DEADLINE_EXCEEDED
NOT_FOUND = _core.GRPC_NOT_FOUND
ALREADY_EXISTS = _core.GRPC_ALREADY_EXISTS
RESOURCE_EXHAUSTED = _core.GRPC_RESOURCE_EXHAUSTED
FAILED_PRECONDITION = _core.GRPC_FAILED_PRECONDITION
UNIMPLEMENTED = _core.GRPC_UNIMPLEMENTED
INTERNAL = _core.GRPC_INTERNAL
UNAVAILABLE = _core.GRPC_UNAVAILABLE


class GrpcError(Exception):
    """An RPC ends with this status and message."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def status_of(exc: BaseException) -> tuple[int, str]:
    """(gRPC status code, message) for an exception a call ended with."""
    if isinstance(exc, GrpcError):
        return exc.code, exc.message
    if isinstance(exc, NaiadError):
        return _core.grpc_code_of_kind(exc.kind), exc.message
    return INTERNAL, str(exc) or type(exc).__name__
