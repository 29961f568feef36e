"""The logging extension over HTTP: GET/POST /v2/logging (observability/triton_log.py decides)."""

from __future__ import annotations

import json

import orjson

from naiad.http.codec import _json_error
from naiad.http.routes import TEXT, HttpRequest, Reply, Router, error_reply, json_reply
from naiad.observability import triton_log
from naiad.scheduling.instance import send_log_settings


def register_logging_routes(router: Router) -> None:
    def handle(request: HttpRequest, parts: list) -> Reply:
        if len(parts) != 3:
            return error_reply(404, "Not Found", TEXT)  # Triton's, as text/plain
        if request.method not in ("GET", "POST"):
            return error_reply(405, "Method Not Allowed")
        if request.method == "GET":
            return json_reply(triton_log.settings())
        try:
            document = orjson.loads(bytes(request.body))
        except orjson.JSONDecodeError as exc:
            if "64-bit" not in exc.msg:
                raise _json_error(request.body, exc) from None
            # Valid JSON with an integer beyond 64 bits (rapidjson reads it as a double,
            # which update() refuses as a verbose level, as Triton does).
            document = json.loads(bytes(request.body))
        try:
            # Triton reads members only of an object; anything else changes nothing.
            triton_log.update(document if isinstance(document, dict) else {})
        finally:
            applied = send_log_settings()  # also what was applied before a refused setting
        return _settings_once_applied(applied)

    async def _settings_once_applied(applied) -> Reply:
        # Answered once the workers follow the change: the next request's model logs
        # with it, as in Triton, whose settings are its one process's.
        await applied
        return json_reply(triton_log.settings())

    router.register("logging", handle)
