"""Triton's shared-memory extensions over HTTP:

    POST /v2/systemsharedmemory/region/{name}/register   {"key", "offset", "byte_size"}
    POST /v2/systemsharedmemory/region/{name}/unregister
    POST /v2/systemsharedmemory/unregister               (every system region)
    GET  /v2/systemsharedmemory[/region/{name}]/status
    POST /v2/cudasharedmemory/region/{name}/register     {"raw_handle": {"b64": ...},
                                                          "device_id", "byte_size"}
    POST /v2/cudasharedmemory/region/{name}/unregister, /v2/cudasharedmemory/unregister
    GET  /v2/cudasharedmemory[/region/{name}]/status

The registry is naiad/memory/shm.py (the gRPC RPCs use the same); this module reads the bodies
and writes Triton's replies, with its status codes and messages.
"""

from __future__ import annotations

import base64
import binascii
from urllib.parse import unquote

import orjson

from naiad.errors import Internal, InvalidArgument, NaiadError
from naiad.http.codec import _json_error
from naiad.http.routes import TEXT, HttpRequest, Reply, Router, error_reply, json_reply
from naiad.memory import shm

__all__ = ["register_shm_routes"]

_OK = Reply(200, TEXT, ())
_NOT_FOUND = error_reply(404, "Not Found", TEXT)
_METHOD_NOT_ALLOWED = error_reply(405, "Method Not Allowed")
_NON_UINT = "attempt to access JSON non-unsigned-integer as unsigned-integer"
_NON_INT = "attempt to access JSON non-signed-integer as signed-integer"


def register_shm_routes(router: Router, manager) -> None:
    for segment, kind in (("systemsharedmemory", shm.SYSTEM), ("cudasharedmemory", shm.CUDA)):
        router.register(segment, _handler(manager, kind))


def _handler(manager, kind: int):
    def handle(request: HttpRequest, parts: list):
        # parts: ['', 'v2', segment, ...]
        n = len(parts)
        try:
            if n == 4 and parts[3] in ("status", "unregister"):
                return _action(manager, kind, parts[3], "", request)
            if n == 6 and parts[3] == "region" and parts[4]:
                if parts[5] in ("status", "register", "unregister"):
                    return _action(manager, kind, parts[5], unquote(parts[4]), request)
            return _NOT_FOUND
        except NaiadError as exc:
            return error_reply(exc.http_status, exc.message)

    return handle


def _action(manager, kind: int, action: str, name: str, request: HttpRequest) -> Reply:
    if action == "status":
        if request.method != "GET":
            return _METHOD_NOT_ALLOWED
        return json_reply(manager.shm.status(kind, name))
    if request.method != "POST":
        return _METHOD_NOT_ALLOWED
    if action == "unregister":
        manager.shm.unregister(kind, name)
        return _OK
    body = _body(request.body)
    if kind == shm.SYSTEM:
        if "key" not in body:
            raise InvalidArgument("Shared memory register request has no 'key' field")
        key = body["key"]
        if type(key) is not str:
            raise Internal("attempt to access JSON non-string as string")
        offset = _uint(body, "offset", 0)
        if "byte_size" not in body:
            raise InvalidArgument("Shared memory register request has no 'byte_size' field")
        manager.shm.register_system(name, key, offset, _uint(body, "byte_size"))
        return _OK
    if "raw_handle" not in body:
        raise InvalidArgument("Shared memory register request has no 'raw_handle' field")
    handle = body["raw_handle"]
    b64 = handle.get("b64") if isinstance(handle, dict) else None
    if type(b64) is not str:
        raise Internal("Unable to parse 'b64': attempt to access non-existing object member 'b64'")
    try:
        raw = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidArgument(
            f"failed to register shared memory region '{name}': raw_handle is not valid base64"
        ) from None
    if "device_id" not in body:
        raise InvalidArgument("Shared memory register request has no 'device_id' field")
    device_id = body["device_id"]
    if type(device_id) is not int:
        raise Internal(_NON_INT)
    if "byte_size" not in body:
        raise InvalidArgument("Shared memory register request has no 'byte_size' field")
    manager.shm.register_cuda(name, raw, device_id, _uint(body, "byte_size"))
    return _OK


def _body(body) -> dict:
    try:
        doc = orjson.loads(body) if body else {}
    except orjson.JSONDecodeError as exc:
        raise _json_error(body, exc) from None
    if not isinstance(doc, dict):
        raise InvalidArgument("Shared memory register request has no 'key' field")
    return doc


def _uint(body: dict, member: str, default=None) -> int:
    value = body.get(member, default)
    if type(value) is not int or value < 0 or value >= 1 << 64:
        raise Internal(_NON_UINT)
    return value
