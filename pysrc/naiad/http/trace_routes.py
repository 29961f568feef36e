"""Triton's trace extension over HTTP: GET/POST /v2/trace/setting and
/v2/models/{m}/trace/setting (the rules are tracing/settings.py's)."""

from __future__ import annotations

import orjson

from naiad.errors import InvalidArgument, NaiadError
from naiad.http.codec import _json_error
from naiad.http.routes import TEXT, error_reply, json_reply
from naiad.tracing.settings import update_from_json


def register_trace_routes(router, manager) -> None:
    def handle_global(request, parts):
        if len(parts) != 4 or parts[3] != "setting":
            return error_reply(404, "Not Found", TEXT)  # Triton's, as text/plain
        return _setting(manager, request, "")

    def handle_model(request, name):
        return _setting(manager, request, name)

    router.register("trace", handle_global)
    router.register_model_path(("trace", "setting"), handle_model)


def _setting(manager, request, model: str):
    if request.method not in ("GET", "POST"):
        return error_reply(405, "Method Not Allowed")
    tracer = manager.tracer
    try:
        if model and not manager.model_ready(model):
            raise InvalidArgument(f"Request for unknown model : {model}")
        if request.method == "POST":
            try:
                document = orjson.loads(bytes(request.body))
            except orjson.JSONDecodeError as exc:
                raise _json_error(request.body, exc) from None
            tracer.settings.update(model, update_from_json(document))
        return json_reply(tracer.settings.get(model).to_json())
    except NaiadError as exc:
        return error_reply(exc.http_status, exc.message)
