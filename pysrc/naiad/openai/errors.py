"""OpenAI's error body, with the status Triton's OpenAI frontend answers.

Triton's frontend (FastAPI) answers a body its schema refuses with 422, a request its
engine refuses (ClientError) with 400, an unknown model id on GET /v1/models/{id} with
404 and its own failures with 500; the body here is OpenAI's shape, which OpenAI's
clients read (`{"error": {"message", "type", "param", "code"}}`).
"""

from __future__ import annotations

import orjson

SCHEMA = 422  # FastAPI's status for a body the request schema refuses
CLIENT = 400
NOT_FOUND = 404
SERVER = 500

_TYPES = {
    SCHEMA: "invalid_request_error",
    CLIENT: "invalid_request_error",
    NOT_FOUND: "invalid_request_error",
    SERVER: "server_error",
}


class OpenAIError(Exception):
    """A request answered with an error: `status`, and the body's fields."""

    def __init__(
        self, status: int, message: str, param: str | None = None, code: str | None = None
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code

    def body(self) -> bytes:
        return orjson.dumps(
            {
                "error": {
                    "message": self.message,
                    "type": _TYPES.get(self.status, "invalid_request_error"),
                    "param": self.param,
                    "code": self.code,
                }
            }
        )


def schema_error(message: str, param: str | None = None) -> OpenAIError:
    return OpenAIError(SCHEMA, message, param)


def client_error(message: str, param: str | None = None, code: str | None = None):
    return OpenAIError(CLIENT, message, param, code)
