"""Triton's model repository extension over HTTP: /v2/repository/...

    POST /v2/repository/index                       body optional: {"ready": true}
    POST /v2/repository/models/{m}/load             {"parameters": {"config": "...",
                                                                    "file:<path>": "<base64>"}}
    POST /v2/repository/models/{m}/unload           {"parameters": {"unload_dependents": true}}

The work is the manager's protocol-neutral methods (the gRPC RPCs call the same ones);
this module only reads the JSON bodies and writes Triton's replies.
"""

from __future__ import annotations

import base64
import binascii

import orjson

from naiad.errors import Internal, NaiadError
from naiad.http.codec import _json_error
from naiad.http.routes import TEXT, HttpRequest, Reply, Router, error_reply, json_reply

__all__ = ["register_repository_routes"]

_OK = Reply(200, TEXT, ())


def register_repository_routes(router: Router, manager) -> None:
    def handle(request: HttpRequest, parts: list):
        n = len(parts)
        # parts: ['', 'v2', 'repository', ...]
        if n == 4 and parts[3] == "index":
            if request.method != "POST":
                return error_reply(405, "Method Not Allowed")
            return _index(manager, request.body)
        if n == 6 and parts[3] == "models" and parts[4] and parts[5] in ("load", "unload"):
            if request.method != "POST":
                return error_reply(405, "Method Not Allowed")
            if parts[5] == "load":
                return _load(manager, parts[4], request.body)
            return _unload(manager, parts[4], request.body)
        return error_reply(404, "Not Found")

    router.register("repository", handle)


def _body(body) -> dict:
    """The request's JSON object ({} for an empty body); Internal, as Triton, when it
    is not JSON or not an object."""
    if not body:
        return {}
    try:
        document = orjson.loads(bytes(body))
    except orjson.JSONDecodeError as exc:
        raise _json_error(body, exc) from None
    if not isinstance(document, dict):
        # Triton reads members of the document only when it is an object.
        return {}
    return document


def _parameters(document: dict) -> dict:
    parameters = document.get("parameters", {})
    if not isinstance(parameters, dict):
        raise Internal("request member 'parameters' must be a JSON object")
    return parameters


def _index(manager, body) -> Reply:
    try:
        ready = _body(body).get("ready", False)
        if not isinstance(ready, bool):
            raise Internal("request member 'ready' must be a boolean")
    except NaiadError as exc:
        return error_reply(exc.http_status, exc.message)
    return json_reply(manager.repository_index(ready))


async def _load(manager, name: str, body) -> Reply:
    try:
        parameters = {}
        for key, value in _parameters(_body(body)).items():
            if key == "config":
                if not isinstance(value, str):
                    raise Internal("load parameter 'config' must be a string of JSON")
            elif key.startswith("file:"):
                value = _decode_file(key, value)
            parameters[key] = value
        await manager.load_model(name, parameters)
    except NaiadError as exc:
        return error_reply(exc.http_status, exc.message)
    return _OK


def _decode_file(key: str, value) -> bytes:
    if not isinstance(value, str):
        raise Internal(f"load parameter '{key}' must be a string of base64")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise Internal(f"load parameter '{key}' is not valid base64") from None


async def _unload(manager, name: str, body) -> Reply:
    try:
        dependents = _parameters(_body(body)).get("unload_dependents", False)
        await manager.unload_model(name, dependents is True)
    except NaiadError as exc:
        return error_reply(exc.http_status, exc.message)
    return _OK
