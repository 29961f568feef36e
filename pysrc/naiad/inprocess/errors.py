"""The exceptions of the in-process API: Triton's `tritonserver` classes, by name.

Triton's in-process API raises `tritonserver.InvalidArgumentError`,
`NotFoundError`, ... (all `TritonError`s) with the core's message; the same request
over HTTP is answered with that message and the kind's status. Here a NaiadError from
the core (naiad/errors.py) becomes the class of its kind with its message unchanged,
so a test sees the text the HTTP front end would send.
"""

from __future__ import annotations

from naiad import _core
from naiad.errors import NaiadError


class TritonError(Exception):
    """Any error of the in-process server (Triton's base class)."""

    def __init__(self, message: str = ""):
        super().__init__(message)
        self.message = message


class UnknownError(TritonError):
    pass


class InternalError(TritonError):
    pass


class NotFoundError(TritonError):
    pass


class InvalidArgumentError(TritonError):
    pass


class UnavailableError(TritonError):
    pass


class UnsupportedError(TritonError):
    pass


class AlreadyExistsError(TritonError):
    pass


_CLASS_OF_KIND = {
    _core.ERROR_UNKNOWN: UnknownError,
    _core.ERROR_INTERNAL: InternalError,
    _core.ERROR_NOT_FOUND: NotFoundError,
    _core.ERROR_INVALID_ARGUMENT: InvalidArgumentError,
    _core.ERROR_UNAVAILABLE: UnavailableError,
    _core.ERROR_UNSUPPORTED: UnsupportedError,
    _core.ERROR_ALREADY_EXISTS: AlreadyExistsError,
}


def triton_error(exc: BaseException) -> TritonError:
    """The TritonError a request's or operation's failure raises: a NaiadError as the
    class of its kind (Triton's code) with its message, anything else as InternalError."""
    if isinstance(exc, TritonError):
        return exc
    if isinstance(exc, NaiadError):
        return _CLASS_OF_KIND.get(exc.kind, InternalError)(exc.message)
    return InternalError(str(exc) or type(exc).__name__)
