"""Errors that travel from any layer to a protocol front end.

Each carries the HTTP status Triton answers with; the gRPC front end maps the same
kinds to gRPC status codes.
"""


class NaiadError(Exception):
    """An error a client sees, with Triton's HTTP status for it."""

    http_status = 500

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class InvalidArgument(NaiadError):
    http_status = 400


class NotFound(NaiadError):
    # Triton answers unknown models with 400 on inference; NotFound keeps the kind
    # for front ends that distinguish it (gRPC NOT_FOUND) and picks the status per path.
    http_status = 400


class Unavailable(NaiadError):
    http_status = 503


class Internal(NaiadError):
    http_status = 500


class Unsupported(NaiadError):
    http_status = 501
