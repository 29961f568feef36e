"""Routing and handlers for the KServe v2 HTTP API (with Triton's status codes and bodies).

A handler gets an `HttpRequest` and returns a `Reply` (status, pre-encoded header lines, body
parts), or a coroutine that resolves to one for the paths that wait on a model (infer). Paths
are split on '/', never matched with a regex.

Other front-end modules may add handlers for further `/v2/<segment>/...` trees
(`repository`, `systemsharedmemory`, ...) with `Router.register(segment, handler)`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Union

import orjson

from naiad import _core
from naiad.errors import NaiadError, NotFound, Unavailable
from naiad.flags.restrictions import (
    MODEL_ACTION_CATEGORIES,
    SECTION_CATEGORIES,
    Restrictions,
    add_forwarded,
)
from naiad.http.codec import (
    compress_body,
    decompress,
    encode_infer_response,
    parse_header_length,
    parse_infer_request,
)
from naiad.scheduling.model import DECOUPLED_HTTP_INFER

__all__ = ["HttpRequest", "Reply", "Router"]

log = logging.getLogger("naiad.http")

JSON = b"Content-Type: application/json\r\n"
TEXT = b"Content-Type: text/plain\r\n"
OCTET = b"Content-Type: application/octet-stream\r\n"

DEFAULT_MAX_BODY_SIZE = 1 << 30  # 1 GiB


class HttpRequest:
    """One parsed HTTP request; `headers` holds lower-cased names of interest only."""

    __slots__ = ("method", "path", "query", "headers", "body")

    def __init__(self, method: str, path: str, query: str, headers: dict, body):
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body


class Reply:
    """status, header lines (bytes, each ending CRLF) and body parts."""

    __slots__ = ("status", "headers", "body")

    def __init__(self, status: int, headers: bytes = b"", body=()):
        self.status = status
        self.headers = headers
        self.body = body


class StreamedReply:
    """A reply whose body comes in pieces, as HTTP/1.1 chunks (Server-Sent Events of
    the generate extension, http/generate_routes.py). The protocol writes what has come
    each time `write_to` is called and holds the replies behind it until it ends.

    `start(status)` sets the status once the first piece is known; `push(data)` adds a
    chunk; `end()` closes the body. `on_abort` is called when the connection closes
    before the body ended (the client went away)."""

    __slots__ = ("status", "headers", "chunks", "ended", "started", "protocol", "on_abort")

    def __init__(self, headers: bytes, on_abort=None):
        self.status = 0  # not known yet: nothing is written before start()
        self.headers = headers
        self.chunks: list = []
        self.ended = False
        self.started = False  # the head was written
        self.protocol = None  # the connection's protocol, once it holds the reply
        self.on_abort = on_abort

    def start(self, status: int) -> None:
        if not self.status:
            self.status = status

    def push(self, data: bytes) -> None:
        self.chunks.append(b"%x\r\n%s\r\n" % (len(data), data))
        self._wake()

    def end(self) -> None:
        if not self.status:
            self.status = 200
        self.ended = True
        self._wake()

    def _wake(self) -> None:
        protocol = self.protocol
        if protocol is not None and not protocol.closed:
            protocol._flush()

    def write_to(self, transport, keep_alive: bool) -> bool:
        """Writes what came since the last call; True once the whole body is out."""
        if not self.status or transport is None:
            return False
        out = []
        if not self.started:
            self.started = True
            status_line = b"HTTP/1.1 %d %s\r\n" % (self.status, _REASONS.get(self.status, b""))
            connection = b"" if keep_alive else b"Connection: close\r\n"
            out.append(
                b"%s%sTransfer-Encoding: chunked\r\n%s\r\n"
                % (status_line, self.headers, connection)
            )
        out.extend(self.chunks)
        self.chunks.clear()
        if self.ended:
            out.append(b"0\r\n\r\n")
        if out:
            transport.write(b"".join(out))
        return self.ended

    def abort(self) -> None:
        """The connection closed with the body unfinished."""
        self.protocol = None
        if not self.ended and self.on_abort is not None:
            self.ended = True
            self.on_abort()


_REASONS = {200: b"OK", 400: b"Bad Request", 500: b"Internal Server Error"}


ReplyOrAwaitable = Union[Reply, Awaitable[Reply]]
Handler = Callable[[HttpRequest, list], ReplyOrAwaitable]


def error_reply(status: int, message: str, content_type: bytes = JSON) -> Reply:
    return Reply(status, content_type, (orjson.dumps({"error": message}),))


def json_reply(doc, status: int = 200) -> Reply:
    return Reply(status, JSON, (orjson.dumps(doc),))


_OK_EMPTY = Reply(200, TEXT, ())
_BAD_EMPTY = Reply(400, TEXT, ())
_NOT_FOUND = error_reply(404, "Not Found", TEXT)
_METHOD_NOT_ALLOWED = error_reply(405, "Method Not Allowed")
# Triton's health, model-ready and infer handlers send their 405 as text/plain.
_METHOD_NOT_ALLOWED_TEXT = error_reply(405, "Method Not Allowed", TEXT)
_MODEL_NOT_READY = error_reply(400, "Model version not ready", TEXT)
_MODEL_ACTIONS = frozenset(("infer", "ready", "config", "stats"))


FORWARDED = ":forwarded"  # HttpRequest.headers key of the headers to forward (no name has ':')


class Router:
    def __init__(
        self,
        manager,
        restrictions: Restrictions | None = None,
        forward=None,
        max_body_size: int = DEFAULT_MAX_BODY_SIZE,
    ):
        self.manager = manager
        self.max_body_size = max_body_size  # --http-max-input-size, also once inflated
        self._extra: dict[str, Handler] = {}
        # /v2/models/{m}[/versions/{v}]/{action} served by other modules (generate).
        self._model_actions: dict[str, Callable] = {}
        # /v2/models/{m}/{a}/{b} (no version) served by other modules: (a, b) -> handler.
        self._model_paths: dict[tuple, Callable] = {}
        # Looked up once: it runs for every read of every connection.
        self._take_http_requests = getattr(manager, "take_http_requests", None)
        # --http-restricted-api and --http-header-forward-pattern (naiad/flags/restrictions.py).
        self.restrictions = restrictions or Restrictions()
        self.forward = forward  # a compiled pattern, or None
        # The header names the protocol keeps for us, lower-cased.
        self.wanted_headers = {
            header.lower(): header.lower() for header, _ in self.restrictions.rules.values()
        }
        inference = self.restrictions.rule("inference")
        self._infer_rule = (inference[0].lower(), inference[1]) if inference else None
        if inference is not None or forward is not None:
            # The lane reads no header it does not know: requests go through the parser,
            # whose headers say whether one may still take the lane (infer_fast).
            self.take_http = None
        # Trace mode opentelemetry: requests with a traceparent go the general path,
        # which reads it (tracing/otel.py). None in every other mode.
        tracer = getattr(manager, "tracer", None)
        self._otel = tracer if tracer is not None and tracer.opentelemetry else None
        if self._otel is None and self._take_http_requests is not None and self.take_http:
            # Nothing to check per read: the protocol calls the manager itself.
            self.take_http = self._take_http_requests

    def take_http(self, data: bytes, max_body: int, new_on_done, max_requests: int) -> int:
        """Hands received bytes to the infer fast lane first: it takes the plain infer
        requests at the front, at most `max_requests` (ModelManager.take_http_requests).
        Returns the bytes taken."""
        if self._take_http_requests is None:
            return 0
        if self._otel is not None and self._otel.active and _has_traceparent(data):
            return 0
        return self._take_http_requests(data, max_body, new_on_done, max_requests)

    def infer_fast(self, url: bytes, headers: dict, body, new_on_done) -> bool:
        """Sends a request the parser put together through the infer fast lane when the
        lane takes it (SubmitPath.submit_fast); False leaves it to `dispatch`."""
        submit_fast = getattr(self.manager, "submit_fast", None)
        if submit_fast is None or type(body) is not bytes:
            return False
        if FORWARDED in headers:
            return False  # parameters for the model: the general path adds them
        rule = self._infer_rule
        if rule is not None and headers.get(rule[0]) != rule[1]:
            return False  # the general path answers 403
        accept = headers.get("accept-encoding")
        # The lane compresses the answer as the general path would.
        encoding = _core.response_encoding(accept) if accept else _core.RESPONSE_IDENTITY
        if self._otel is not None and self._otel.active and "traceparent" in headers:
            return False
        header_length = headers.get("inference-header-content-length")
        if header_length is not None:
            if not header_length.isdigit():
                return False
            header_length = int(header_length)
        # None: a JSON body (the lane reads JSON tensor data too). A compressed body is
        # inflated by the lane, within the same limit as one sent that large.
        return submit_fast(
            url,
            body,
            header_length,
            new_on_done,
            encoding,
            headers.get("content-encoding"),
            self.max_body_size,
        )

    def register(self, segment: str, handler: Handler) -> None:
        """Serve `/v2/<segment>...` with `handler(request, parts)` (parts: path split on '/')."""
        self._extra[segment] = handler

    def register_model_action(self, action: str, handler: Callable) -> None:
        """Serve POST `/v2/models/{m}[/versions/{v}]/{action}` with
        `handler(request, name, version)`."""
        self._model_actions[action] = handler

    def register_model_path(self, path: tuple, handler: Callable) -> None:
        """Serve `/v2/models/{m}/<path[0]>/<path[1]>` (any method) with
        `handler(request, name)`: the trace extension's per-model setting."""
        self._model_paths[path] = handler

    def dispatch(self, request: HttpRequest) -> ReplyOrAwaitable:
        try:
            if self.restrictions:
                denied = self._denied(request)
                if denied is not None:
                    return denied
            return self._dispatch(request)
        except NaiadError as exc:
            return error_reply(exc.http_status, exc.message)

    def _denied(self, request: HttpRequest) -> Reply | None:
        """Triton's 403 when the path's category is restricted and the request lacks the
        header or its value; None lets it through. Paths that are not found have none."""
        parts = request.path.split("/")
        n = len(parts)
        if n < 2 or parts[0] or parts[1] != "v2":
            return None
        if n == 2:
            category = "metadata"
        elif parts[2] == "models":
            category = _model_path_category(parts)
        elif _exact_path(parts):
            category = SECTION_CATEGORIES.get(parts[2])
        else:
            category = None  # Triton's 404: not one of its paths
        rule = self.restrictions.rule(category) if category else None
        if rule is None or request.headers.get(rule[0].lower()) == rule[1]:
            return None
        return error_reply(403, Restrictions.http_denial(rule[0]), TEXT)

    def _dispatch(self, request: HttpRequest) -> ReplyOrAwaitable:
        parts = request.path.split("/")
        # parts[0] is '' (the path starts with '/'); parts[1] must be 'v2'.
        n = len(parts)
        if n < 2 or parts[0] or parts[1] != "v2":
            return _NOT_FOUND
        method = request.method
        if n == 2:
            if method != "GET":
                return _METHOD_NOT_ALLOWED
            return json_reply(self.manager.server_metadata())
        section = parts[2]
        if section == "models":
            return self._models(request, parts, n, method)
        if section == "health":
            if n != 4 or parts[3] not in ("live", "ready"):
                return _NOT_FOUND
            if method != "GET":
                return _METHOD_NOT_ALLOWED_TEXT
            ok = self.manager.server_live() if parts[3] == "live" else self.manager.server_ready()
            return _OK_EMPTY if ok else _BAD_EMPTY
        handler = self._extra.get(section)
        if handler is not None:
            return handler(request, parts)
        return _NOT_FOUND

    def _models(self, request: HttpRequest, parts: list, n: int, method: str) -> ReplyOrAwaitable:
        # /v2/models/stats | /v2/models/{m}[/versions/{v}][/{action}]
        if n < 4 or not parts[3]:
            return _NOT_FOUND
        name = parts[3]
        if n == 4 and name == "stats":
            if method != "GET":
                return _METHOD_NOT_ALLOWED
            return self._stats("", "")
        version = ""
        i = 4
        if n > 5 and parts[4] == "versions":
            version = parts[5]
            if not version.isdigit() or not version.isascii():
                return _NOT_FOUND
            i = 6
        action = ""
        if n == i + 1:
            action = parts[i]
            if action not in _MODEL_ACTIONS:
                extra = self._model_actions.get(action)
                if extra is None:
                    return _NOT_FOUND
                if method != "POST":
                    return _METHOD_NOT_ALLOWED
                return extra(request, name, version)
        elif n == 6 and i == 4 and (parts[4], parts[5]) in self._model_paths:
            return self._model_paths[parts[4], parts[5]](request, name)
        elif n != i:
            return _NOT_FOUND

        if action == "infer":
            if method != "POST":
                return _METHOD_NOT_ALLOWED_TEXT
            return self._infer(request, name, version)
        if method != "GET":
            return _METHOD_NOT_ALLOWED_TEXT if action == "ready" else _METHOD_NOT_ALLOWED
        if action == "":
            return json_reply(self.manager.get(name, version).metadata())
        if action == "ready":
            return _OK_EMPTY if self.manager.model_ready(name, version) else _MODEL_NOT_READY
        if action == "config":
            return json_reply(self.manager.get(name, version).config_json())
        return self._stats(name, version)

    def _stats(self, name: str, version: str) -> Reply:
        try:
            return json_reply(self.manager.statistics(name, version))
        except (NotFound, Unavailable):
            # Triton's statistics endpoint words these its own way, always with a 400.
            if version and self.manager.model_ready(name):
                message = f"requested model version is not available for model '{name}'"
            else:
                message = f"requested model '{name}' is not available"
            return error_reply(400, message)

    def _infer(self, request: HttpRequest, name: str, version: str) -> ReplyOrAwaitable:
        model = self.manager.get(name, version)
        if getattr(model, "decoupled", False):  # Triton answers so, as text/plain
            return error_reply(501, DECOUPLED_HTTP_INFER, TEXT)
        encoding = request.headers.get("content-encoding")
        if encoding and encoding != "identity":
            return self._infer_inflated(request, model, name, version, encoding)
        return self._infer_body(request, model, name, version, request.body)

    async def _infer_inflated(
        self, request: HttpRequest, model, name: str, version: str, encoding: str
    ) -> Reply:
        """A compressed request: inflated off the loop, within --http-max-input-size."""
        try:
            body = await decompress(request.body, encoding, self.max_body_size)
            request.body = None  # the compressed bytes are not needed any more
            reply = self._infer_body(request, model, name, version, body)
        except NaiadError as exc:
            return error_reply(exc.http_status, exc.message)
        if isinstance(reply, Deferred):
            try:
                await reply.future
            except Exception:
                pass  # the encoder answers with the request's error
            return reply.finish(reply.future)
        return reply

    def _infer_body(self, request: HttpRequest, model, name: str, version: str, body):
        headers = request.headers
        header_length = parse_header_length(
            headers.get("inference-header-content-length"), len(body)
        )
        infer_request = parse_infer_request(
            body, name, version, header_length, getattr(model, "config", None)
        )
        forwarded = headers.get(FORWARDED)
        if forwarded:  # --http-header-forward-pattern: string parameters, named as sent
            add_forwarded(infer_request, forwarded)
        if self._otel is not None:
            infer_request.traceparent = headers.get("traceparent")
            infer_request.tracestate = headers.get("tracestate")
        # No task per request, only a callback on the request's future.
        encoding = headers.get("accept-encoding")
        compression = _core.response_encoding(encoding) if encoding else _core.RESPONSE_IDENTITY
        return Deferred(
            model.submit(infer_request), _InferReplyEncoder(model, infer_request, compression)
        )


def _exact_path(parts: list) -> bool:
    # The sections Triton matches whole: /v2/health/(live|ready), /v2/trace/setting,
    # /v2/logging; the others by prefix.
    section, n = parts[2], len(parts)
    if section == "health":
        return n == 4 and parts[3] in ("live", "ready")
    if section == "trace":
        return n == 4 and parts[3] == "setting"
    if section == "logging":
        return n == 3
    return True


def _model_path_category(parts: list) -> str | None:
    # /v2/models/stats | /v2/models/{m}[/versions/{v}][/{action}[/setting]]
    n = len(parts)
    if n == 4 and parts[3] == "stats":
        return "statistics"
    i = 6 if n > 5 and parts[4] == "versions" else 4
    if n == i:
        return "metadata"
    if n == i + 2 and parts[i] == "trace" and parts[i + 1] == "setting" and i == 4:
        return "trace"
    if n == i + 1 and parts[i] != "trace":
        return MODEL_ACTION_CATEGORIES.get(parts[i])
    return None


def _has_traceparent(data) -> bool:
    """Whether received bytes may hold a traceparent header (any letter case of its
    first letter; header names are case-insensitive, propagators send lower case)."""
    if type(data) is not bytes:
        data = bytes(data)
    return b"raceparent" in data or b"RACEPARENT" in data


class Deferred:
    """A reply that `finish(future)` builds once `future` is done."""

    __slots__ = ("future", "finish")

    def __init__(self, future, finish):
        self.future = future
        self.finish = finish


class _InferReplyEncoder:
    __slots__ = ("model", "request", "compression")

    def __init__(self, model, request, compression: int = _core.RESPONSE_IDENTITY):
        self.model = model
        self.request = request
        self.compression = compression  # what Accept-Encoding asked for

    def __call__(self, future) -> Reply:
        exc = future.exception()
        if exc is not None:
            return exception_reply(exc)
        return _infer_reply(self.model, self.request, future.result(), self.compression)


def _infer_reply(
    model, infer_request, response, compression: int = _core.RESPONSE_IDENTITY
) -> Reply:
    try:
        config = getattr(model, "config", None)
        batching = config is None or config.max_batch_size > 0
        parts, header_length = encode_infer_response(
            response, infer_request, batching, getattr(model, "labels", None)
        )
    except NaiadError as exc:
        # Triton fails a response it cannot write (classification of a BOOL output,
        # FP16 as JSON) as text/plain.
        return error_reply(exc.http_status, exc.message, TEXT)
    headers = JSON if header_length is None else OCTET
    if header_length is not None:
        # The length of the JSON before compression, as Triton says it.
        headers += b"Inference-Header-Content-Length: %d\r\n" % header_length
    if compression != _core.RESPONSE_IDENTITY:
        parts, coding = compress_body(parts, compression)
        headers += coding
    return Reply(200, headers, parts)


def exception_reply(exc: BaseException) -> Reply:
    """The error reply for an exception a request ended with."""
    if isinstance(exc, NaiadError):
        return error_reply(exc.http_status, exc.message)
    return internal_error_reply(exc)


def internal_error_reply(exc: BaseException) -> Reply:
    log.exception("unhandled error in an HTTP handler", exc_info=exc)
    return error_reply(500, str(exc) or type(exc).__name__)
