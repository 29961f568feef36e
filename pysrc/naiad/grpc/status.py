"""gRPC status codes and the mapping from Naiad's error kinds (naiad.errors)."""

from __future__ import annotations

from naiad.errors import (
    Cancelled,
    Internal,
    InvalidArgument,
    NaiadError,
    NotFound,
    Unavailable,
    Unsupported,
)

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

_CODE_OF_KIND = (
    (Cancelled, CANCELLED),
    (NotFound, NOT_FOUND),
    (InvalidArgument, INVALID_ARGUMENT),
    (Unavailable, UNAVAILABLE),
    (Unsupported, UNIMPLEMENTED),
    (Internal, INTERNAL),
)


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
        for kind, code in _CODE_OF_KIND:
            if isinstance(exc, kind):
                return code, exc.message
        return INTERNAL, exc.message
    return INTERNAL, str(exc) or type(exc).__name__
