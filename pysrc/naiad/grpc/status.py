"""gRPC status codes, and the status of an exception: a NaiadError's error kind maps to
its gRPC code through the core's one table (csrc/codec/error_status.h, beside the HTTP
column), read through _core."""

from __future__ import annotations

from naiad import _core
from naiad.errors import NaiadError

OK = 0
CANCELLED = 1
UNKNOWN = 2
INVALID_ARGUMENT = 3
DEADLINE_EXCEEDED = 4
NOT_FOUND = 5
ALREADY_EXISTS = 6
RESOURCE_EXHAUSTED = 8
UNIMPLEMENTED = 12
INTERNAL = 13
UNAVAILABLE = 14


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
