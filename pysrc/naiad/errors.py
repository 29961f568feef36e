"""Errors that travel from any layer to a protocol front end.

Each has an error kind (Triton's TRITONSERVER_Error_Code kinds, csrc/codec/infer_types.h);
its HTTP status and its gRPC code come from the core's one table (csrc/codec/error_status.h),
the one the infer fast lanes answer with.
"""

from naiad import _core


class NaiadError(Exception):
    """An error a client sees, with Triton's HTTP status for it."""

    kind = _core.ERROR_INTERNAL
    http_status = _core.http_status_of_kind(kind)

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class InvalidArgument(NaiadError):
    kind = _core.ERROR_INVALID_ARGUMENT
    http_status = _core.http_status_of_kind(kind)


class NotFound(NaiadError):
    # Triton answers an unknown model or version with 404 on inference, metadata and
    # config; the statistics endpoint words it its own way (http/routes.py).
    kind = _core.ERROR_NOT_FOUND
    http_status = _core.http_status_of_kind(kind)


class Unavailable(NaiadError):
    kind = _core.ERROR_UNAVAILABLE
    http_status = _core.http_status_of_kind(kind)


class Internal(NaiadError):
    kind = _core.ERROR_INTERNAL
    http_status = _core.http_status_of_kind(kind)


class Cancelled(NaiadError):
    """The client cancelled the request (Core.cancel dropped it before it ran). Its
    client is gone (a reset stream, a closed connection), so no status reaches anyone."""

    kind = _core.ERROR_INTERNAL
    http_status = _core.http_status_of_kind(kind)


class Unsupported(NaiadError):
    kind = _core.ERROR_UNSUPPORTED
    http_status = _core.http_status_of_kind(kind)


class AlreadyExists(NaiadError):
    # HTTP 400 as an invalid argument; gRPC keeps ALREADY_EXISTS (csrc/codec/error_status.h).
    kind = _core.ERROR_ALREADY_EXISTS
    http_status = _core.http_status_of_kind(kind)


_ERROR_OF_KIND = {
    _core.ERROR_NOT_FOUND: NotFound,
    _core.ERROR_INVALID_ARGUMENT: InvalidArgument,
    _core.ERROR_ALREADY_EXISTS: AlreadyExists,
    _core.ERROR_UNAVAILABLE: Unavailable,
    _core.ERROR_UNSUPPORTED: Unsupported,
}


def error_of_triton_code(code, message: str) -> NaiadError:
    """The error a model's pb_utils.TritonError `code` reaches the client as."""
    known = type(code) is int and -(2**63) <= code < 2**63
    kind = _core.error_kind_of_code(code) if known else _core.ERROR_INTERNAL
    return _ERROR_OF_KIND.get(kind, Internal)(message)


def error_of_kind(kind: int, message: str) -> NaiadError:
    """The error of an answer the core marked with error `kind` (csrc/codec/infer_types.h)."""
    return _ERROR_OF_KIND.get(kind, Internal)(message)
