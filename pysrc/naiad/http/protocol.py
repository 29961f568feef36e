"""A lean HTTP/1.1 server protocol over httptools (modelled on uvicorn's httptools_impl).

- keep-alive; pipelined requests are answered in order (each request takes a slot in a FIFO;
  replies that finish early wait for the ones before them); the fast lane's answers due in
  one wake-up go out in one write, and those it gives at once (cache hits, refusals) in
  one write with the read that brought them, without a slot when none is owed before them
- Content-Length and chunked request bodies (the parser's callbacks assemble them)
- a body size limit (`--http-max-input-size`): 413 and close
- the connection limits of connection_limits.py: a client too slow to send a request or
  read its answers (408, close), idle connections, a maximum number of connections
- unparseable HTTP: 400 and close
- `Expect: 100-continue` is answered right away so clients like curl don't stall
- a plain request that arrives in pieces is collected into one buffer of its size
  (its head says it), so its bytes are copied once before the core's copy, not joined
  (up to 1 MiB, or 64 MiB once a quarter of it has arrived; larger ones as before)
- a response goes out as one bytes object (the fast lane's, built in place) or as its
  parts with `writelines`, so tensor bytes are not joined into a new object
"""

from __future__ import annotations

import asyncio
from collections import deque
from http import HTTPStatus

import httptools

from naiad import _core
from naiad.http.codec import too_large_message
from naiad.http.connection_limits import ConnectionLimits
from naiad.http.routes import (
    DEFAULT_MAX_BODY_SIZE,
    FORWARDED,
    Deferred,
    HttpRequest,
    Reply,
    Router,
    StreamedReply,
    error_reply,
    exception_reply,
    internal_error_reply,
)

__all__ = ["HttpProtocol", "DEFAULT_MAX_BODY_SIZE", "reply_bytes"]

# Requests one connection has in flight (read, not answered yet), the lane's limit too:
# past it the connection is not read, and what it sent is held unparsed (`_held`).
MAX_PIPELINE = _core.HTTP_MAX_PIPELINE
LINGER_SECONDS = 2.0  # how long to drain input after an error reply before closing
# A request arriving in pieces is collected whole into a buffer of its size when it is
# at most MAX_COLLECT bytes and either small or a quarter of it has arrived: a client
# cannot make the server allocate much by announcing a body it does not send.
MAX_COLLECT = 64 << 20
# A head still incomplete after this many bytes is refused (431): HTTP_MAX_HEAD plus
# one read of uvloop's (256 KiB) that may hold earlier requests too.
_HEAD_GUARD = _core.HTTP_MAX_HEAD + (256 << 10)
SMALL_COLLECT = 1 << 20
SMALL_JOIN = 16 << 10  # a reply this small goes out as one joined bytes object

_WANTED_HEADERS = {
    b"content-length": "content-length",
    b"content-encoding": "content-encoding",
    b"accept-encoding": "accept-encoding",
    b"inference-header-content-length": "inference-header-content-length",
    b"expect": "expect",
    b"traceparent": "traceparent",  # trace mode opentelemetry (tracing/otel.py)
    b"tracestate": "tracestate",
}

_STATUS_LINES = {
    status.value: b"HTTP/1.1 %d %s\r\n" % (status.value, status.phrase.encode())
    for status in HTTPStatus
}
_CLOSE = b"Connection: close\r\n"
_KEEP_ALIVE = b"Connection: keep-alive\r\n"
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


def reply_head(reply: Reply, keep_alive: bool = True, http10: bool = False) -> tuple[bytes, int]:
    """The status line and headers of `reply` (ending with the blank line), and its body's
    length."""
    length = 0
    for part in reply.body:
        length += part.nbytes if isinstance(part, memoryview) else len(part)
    status_line = _STATUS_LINES.get(reply.status) or b"HTTP/1.1 %d Unknown\r\n" % reply.status
    if keep_alive:
        connection = _KEEP_ALIVE if http10 else b""
    else:
        connection = _CLOSE
    head = b"%sContent-Length: %d\r\n%s%s\r\n" % (status_line, length, reply.headers, connection)
    return head, length


def reply_bytes(reply: Reply) -> bytes:
    """A whole keep-alive HTTP/1.1 answer: what a lane request that failed is answered."""
    head, _ = reply_head(reply)
    return b"".join((head, *reply.body))


class _Slot:
    """A reply owed on a connection, in request order: a Reply, once known."""

    __slots__ = ("reply", "keep_alive", "head_only", "http10", "future")
    request_id = 0  # not a fast-lane request

    def __init__(self, reply, keep_alive: bool, head_only: bool, http10: bool):
        self.reply = reply
        self.keep_alive = keep_alive
        self.head_only = head_only
        self.http10 = http10
        self.future = None  # a general-path request's: cancelled if the client goes away


class _LaneSlot:
    """The reply owed to a request the fast lane took: the complete response bytes once
    answered (or the Reply of its error). Lane requests are keep-alive HTTP/1.1 POSTs."""

    __slots__ = ("reply", "protocol", "request_id")
    keep_alive = True
    head_only = False
    http10 = False
    future = None

    def __init__(self, reply, protocol, request_id: int):
        self.reply = reply
        self.protocol = protocol
        self.request_id = request_id  # its id in the core: cancelled if the client goes away

    def deliver(self, http, exc) -> None:
        """The fast lane's answer: the response bytes, or the error of a request that
        never ran."""
        protocol = self.protocol
        if protocol.closed:
            return
        pending = protocol.pending
        if exc is None and type(http) is bytes and len(pending) == 1 and not protocol._eof:
            # The common case (no pipelining): the only reply owed goes out at once.
            pending.clear()
            if protocol._waiting:
                protocol._waiting = False
                protocol.arrivals.waiting -= 1
            protocol.transport.write(http)
            if protocol.reading_paused and not protocol.writing_paused:
                protocol._resume_reading()
            return
        self.reply = http if exc is None else exception_reply(exc)
        if pending and pending[0] is self:
            # Pipelined: the answers of this wake-up that are due go out together, in
            # one write, once the completions are all delivered (_flush_soon).
            protocol._flush_soon()
        # Else an earlier reply is still owed: this one goes out after it.


class HttpProtocol(asyncio.Protocol):
    __slots__ = (
        "router",
        "loop",
        "max_body_size",
        "transport",
        "parser",
        "pending",
        "tasks",
        "closed",
        "no_more",
        "discard",
        "reading_paused",
        "writing_paused",
        "_url",
        "_headers",
        "_body",
        "_body_size",
        "arrivals",
        "_counted",
        "_waiting",
        "_in_message",
        "_take_http",
        "_eof",
        "_collect",
        "_collected",
        "_wanted",
        "_forward",
        "limits",
        "last_data",
        "received",
        "begun_at",
        "paused_at",
        "_head_done",
        "_head_size",
        "_head_fed",
        "_held",
        "_out",
        "_flush_due",
    )

    def __init__(
        self,
        router: Router,
        loop=None,
        max_body_size: int = DEFAULT_MAX_BODY_SIZE,
        arrivals=None,
        limits: ConnectionLimits | None = None,
    ):
        self.router = router
        # The batcher's hint (scheduling/arrivals.py): once it has sent a request that
        # is answered asynchronously (inference), this connection counts as open, and
        # as waiting while it has replies owed.
        self.arrivals = arrivals
        self._counted = False
        self._waiting = False
        self.loop = loop or asyncio.get_event_loop()
        self.max_body_size = max_body_size
        self.transport = None
        self.parser = None
        self.pending: deque[_Slot] = deque()
        self.tasks: set = set()
        self.closed = False
        self.no_more = False  # a request that ends the connection has been seen
        self.discard = False  # drop the body of the current request
        self.reading_paused = False
        self.writing_paused = False
        self._url = b""
        self._headers: dict = {}
        self._body: list = []
        self._body_size = 0
        self._in_message = False  # the parser holds part of a request
        self._eof = False  # the client half-closed; close once every reply is out
        self._take_http = getattr(router, "take_http", None)
        # The headers the router reads: ours, plus those restricted APIs name, plus any
        # that match the header forward pattern (None: no pattern, nothing to test).
        extra = getattr(router, "wanted_headers", None)
        self._wanted = (
            {**_WANTED_HEADERS, **{k.encode(): v for k, v in extra.items()}}
            if extra
            else _WANTED_HEADERS
        )
        self._forward = getattr(router, "forward", None)
        self._collect: bytearray | None = None  # a plain request arriving in pieces
        self._collected = 0
        # Ticks of the limits' sweep: bytes last received, the request head begun, the
        # client stopped reading (pause_writing).
        self.limits = limits or _NO_LIMITS
        self.last_data = self.begun_at = self.paused_at = self.limits.tick
        self.received = False  # a byte came: the sweep's silent-connection rule is off
        self._head_done = False
        self._head_size = 0  # bytes of the request line and headers parsed so far
        self._head_fed = 0  # bytes fed to the parser while it held a partial head
        self._held: bytes | None = None  # received past MAX_PIPELINE, taken once room
        # Answers the lane gave at once (cache hits, refusals) during one take, with no
        # reply owed before them: written together when the take returns (_write_out).
        self._out: list = []
        self._flush_due = False  # a _flush is scheduled (_flush_soon)

    # -- asyncio.Protocol -----------------------------------------------------------------

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.parser = httptools.HttpRequestParser(self)
        if not self.limits.admit(self):
            self.no_more = True
            self._write(
                error_reply(
                    503,
                    f"the server has reached its maximum of {self.limits.max_connections} "
                    "connections (--http-max-connections)",
                ),
                False,
                False,
                False,
            )

    def connection_lost(self, exc) -> None:
        self.limits.connections.discard(self)
        if self._counted:
            self._set_waiting(False)
            self._counted = False
            self.arrivals.open -= 1
        self.closed = True
        self.no_more = True  # nothing more is read
        self.transport = None
        # What the client sent is dropped now, not when a garbage collection finds the
        # protocol: it and its parser refer to each other.
        self._collect = None
        self._body = []
        self._held = None
        self._out = []
        self.parser = None
        for task in self.tasks:
            task.cancel()
        self.tasks.clear()
        for slot in self.pending:
            if type(slot.reply) is StreamedReply:  # its client went away mid-stream
                slot.reply.abort()
            elif slot.future is not None and not slot.future.done():
                slot.future.cancel()  # the manager cancels the request in the core
            elif slot.request_id and slot.reply is None:  # a fast-lane request not answered
                self.router.manager.cancel(slot.request_id)
        self.pending.clear()

    def eof_received(self) -> bool:
        # The client half-closed: answer the requests it already sent, then close.
        self.no_more = True
        if not self.pending:
            return False  # asyncio closes the transport
        self._eof = True
        return True

    def data_received(self, data: bytes) -> None:
        self.last_data = self.limits.tick
        self.received = True
        if self.no_more:
            return
        if self._held is not None:  # still no room: keep the order
            self._held += data
            return
        self._process(data)

    def _process(self, data: bytes) -> None:
        if self._collect is not None:
            data = self._collect_more(data)
            if not data or self.no_more:
                return
        if not self._in_message and self._take_http is not None and type(data) is bytes:
            room = MAX_PIPELINE - len(self.pending)
            if room <= 0:
                self._hold(data)
                return
            # The infer fast lane takes the plain infer requests at the front without a
            # Python call each; the parser gets what is left.
            consumed = self._take_http(data, self.max_body_size, self._lane_slot, room)
            if self._out:
                self._write_out()
            if consumed == len(data):
                return
            if len(self.pending) >= MAX_PIPELINE:  # the lane stopped for want of room
                self._hold(data[consumed:])
                return
            wanted = _core.http_request_size(data, consumed, self.max_body_size)
            rest = len(data) - consumed
            if 0 < wanted <= MAX_COLLECT and (wanted <= SMALL_COLLECT or 4 * rest >= wanted):
                # A plain request whose body has not all arrived: collect it whole.
                self._collect = bytearray(wanted)
                self._collect[:rest] = memoryview(data)[consumed:]
                self._collected = rest
                return
            if consumed:
                data = data[consumed:]
        self._feed(data)

    def _hold(self, data: bytes) -> None:
        """Keeps bytes that found no room; taken when answers make room (_take_held)."""
        self._held = data
        self._pause_reading()

    def _take_held(self) -> None:
        if self._held is None or self.closed or len(self.pending) >= MAX_PIPELINE:
            return
        data, self._held = self._held, None
        self._process(data)  # also after the client half-closed: it sent them before

    def _collect_more(self, data: bytes):
        """Adds received bytes to the request being collected; once it is whole, hands
        it to the lane or else the parser. Returns the bytes after it, if any."""
        collect = self._collect
        start = self._collected
        taken = min(len(collect) - start, len(data))
        collect[start : start + taken] = memoryview(data)[:taken]
        self._collected = start + taken
        if self._collected < len(collect):
            return None
        self._collect = None
        rest = data[taken:] if taken < len(data) else None
        room = max(MAX_PIPELINE - len(self.pending), 1)  # a single request
        consumed = self._take_http(collect, self.max_body_size, self._lane_slot, room)
        if self._out:
            self._write_out()
        if consumed != len(collect):
            self._feed(collect)
        return rest

    def _feed(self, data) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(400, "Unsupported upgrade request.")
        except httptools.HttpParserError:
            self._fail(400, "Invalid HTTP request received.")
        if self._in_message and not self._head_done and not self.no_more:
            # The parser buffers a header until its line ends: bound what a head that
            # never ends holds (one read of slack, as the bytes before it in the chunk
            # may belong to the previous request).
            self._head_fed += len(data)
            if self._head_fed > _HEAD_GUARD:
                self._fail(431, self._head_too_large())

    def pause_writing(self) -> None:
        self.writing_paused = True
        self.paused_at = self.limits.tick
        self._pause_reading()

    def resume_writing(self) -> None:
        self.writing_paused = False
        if len(self.pending) < MAX_PIPELINE:
            self._resume_reading()

    # -- httptools callbacks --------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._in_message = True
        self._url = b""
        self._headers = {}
        self._body = []
        self._body_size = 0
        self.discard = self.no_more
        self.begun_at = self.limits.tick
        self._head_done = False
        self._head_size = self._head_fed = 0

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._count_head(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_head(len(name) + len(value) + 4)  # ": " and CRLF
        key = self._wanted.get(name.lower())
        if key is not None:
            self._headers[key] = value.decode("latin-1")
        if self._forward is not None:
            text = name.decode("latin-1")
            if self._forward.search(text):
                self._headers.setdefault(FORWARDED, []).append((text, value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        self._head_done = True
        length = self._headers.get("content-length")
        if length is not None:
            try:
                too_large = int(length) > self.max_body_size
            except ValueError:
                too_large = False
            if too_large:
                self._fail(413, self._too_large(length))
                return
        expect = self._headers.get("expect")
        if expect is not None and expect.lower() == "100-continue" and self.transport:
            self.transport.write(_CONTINUE)

    def on_body(self, body: bytes) -> None:
        if self.discard or self.no_more:
            return
        self._body_size += len(body)
        if self._body_size > self.max_body_size:
            self._body = []
            self._fail(413, self._too_large(f"more than {self.max_body_size}"))
            return
        self._body.append(body)

    def on_message_complete(self) -> None:
        self._in_message = False
        if self.no_more or self.discard:
            return
        parser = self.parser
        keep_alive = parser.should_keep_alive()
        http10 = parser.get_http_version() == "1.0"
        method = parser.get_method().decode("latin-1")
        body = self._body
        if not body:
            body = b""
        elif len(body) == 1:
            body = body[0]
        else:
            body = b"".join(body)
        self._body = []
        url = self._url
        if method == "POST" and keep_alive and not http10:
            # The infer fast lane, for a request that came in pieces: the response
            # comes back whole, as bytes.
            if self.router.infer_fast(url, self._headers, body, self._lane_slot):
                if self._out:
                    self._write_out()
                return
        path, _, query = url.partition(b"?")
        request = HttpRequest(
            method,
            path.decode("utf-8", "replace"),
            query.decode("latin-1"),
            self._headers,
            body,
        )
        if not keep_alive:
            self.no_more = True
        try:
            result = self.router.dispatch(request)
        except Exception as exc:  # a handler bug must not kill the connection silently
            result = internal_error_reply(exc)
        head_only = method == "HEAD"
        if type(result) is StreamedReply:  # a body in chunks, written as they come
            self._set_waiting(True)
            self.pending.append(_Slot(result, keep_alive, head_only, http10))
            result.protocol = self
            self._flush()
            return
        if isinstance(result, Reply):
            if not self.pending:
                self._write(result, keep_alive, head_only, http10)
            else:
                self.pending.append(_Slot(result, keep_alive, head_only, http10))
            return
        slot = _Slot(None, keep_alive, head_only, http10)
        self._set_waiting(True)
        self.pending.append(slot)
        if isinstance(result, Deferred):
            slot.future = result.future
            result.future.add_done_callback(
                lambda future, s=slot, finish=result.finish: self._deferred_done(future, s, finish)
            )
        else:
            task = self.loop.create_task(result)
            self.tasks.add(task)
            task.add_done_callback(lambda t, s=slot: self._task_done(t, s))
        if len(self.pending) >= MAX_PIPELINE:
            self._pause_reading()

    def _lane_slot(self, request_id: int = 0, reply: bytes | None = None):
        """A reply slot for a request the fast lane took (`request_id`: its id in the
        core); returns where its answer goes. With `reply` (request_id 0: the lane
        answered it at once, a cache hit or a refusal) it returns None: the reply goes
        out when the take returns if none is owed before it, else after those."""
        if reply is not None:
            if not self.pending:
                self._out.append(reply)  # no slot, no callback: _write_out sends it
                return None
            self.pending.append(_LaneSlot(reply, self, 0))
            if len(self.pending) >= MAX_PIPELINE:
                self._pause_reading()
            return None
        slot = _LaneSlot(None, self, request_id)
        if not self._waiting:
            if self._counted:  # _set_waiting(True), inlined: once per request
                self._waiting = True
                self.arrivals.waiting += 1
            else:
                self._set_waiting(True)
        self.pending.append(slot)
        if len(self.pending) >= MAX_PIPELINE:
            self._pause_reading()
        return slot.deliver

    # -- replies --------------------------------------------------------------------------

    def _write_out(self) -> None:
        """Sends the answers the lane gave at once during a take, in one write."""
        out = self._out
        self._out = []
        if self.transport is None or self.closed:
            return
        self.transport.write(out[0] if len(out) == 1 else b"".join(out))

    def _flush_soon(self) -> None:
        """Writes the replies due from the loop, once, after the callbacks now running
        (the completions of one wake-up): pipelined answers go out in one write."""
        if not self._flush_due:
            self._flush_due = True
            self.loop.call_soon(self._due_flush)

    def _due_flush(self) -> None:
        self._flush_due = False
        if not self.closed:
            self._flush()

    def _task_done(self, task, slot: _Slot) -> None:
        self.tasks.discard(task)
        if task.cancelled() or self.closed:
            return
        exc = task.exception()
        slot.reply = internal_error_reply(exc) if exc is not None else task.result()
        self._flush()

    def _deferred_done(self, future, slot: _Slot, finish) -> None:
        if self.closed or future.cancelled():
            return
        try:
            slot.reply = finish(future)
        except Exception as exc:  # an encoder bug must still answer the request
            slot.reply = internal_error_reply(exc)
        self._flush()

    def _flush(self) -> None:
        pending = self.pending
        while pending and pending[0].reply is not None and not self.closed:
            if type(pending[0].reply) is StreamedReply:
                if not pending[0].reply.write_to(self.transport, pending[0].keep_alive):
                    break  # more of its body is coming; the replies behind it wait
                if not pending[0].keep_alive:
                    self.closed = True
                    self.transport.close()
                pending.popleft()
                if not pending:
                    self._set_waiting(False)
                continue
            slot = pending.popleft()
            reply = slot.reply
            if type(reply) is bytes and pending and type(pending[0].reply) is bytes:
                # Lane answers due one after another (pipelined): one write.
                replies = [reply]
                size = len(reply)
                while pending and type(pending[0].reply) is bytes:
                    reply = pending.popleft().reply
                    replies.append(reply)
                    size += len(reply)
                if not pending:
                    self._set_waiting(False)
                if size <= SMALL_JOIN:
                    self.transport.write(b"".join(replies))
                else:
                    self.transport.writelines(replies)
                continue
            if not pending:
                self._set_waiting(False)
            self._write(reply, slot.keep_alive, slot.head_only, slot.http10)
        if (
            self._eof
            and not pending
            and self._held is None
            and self.transport is not None
            and not self.closed
        ):
            self.closed = True
            self.transport.close()
            return
        if not self.writing_paused and len(pending) < MAX_PIPELINE:
            self._resume_reading()

    def _write(self, reply: Reply, keep_alive: bool, head_only: bool, http10: bool) -> None:
        transport = self.transport
        if transport is None or self.closed:
            return
        if type(reply) is bytes:  # the fast lane's whole (keep-alive) response
            transport.write(reply)
            return
        body = reply.body
        head, length = reply_head(reply, keep_alive, http10)
        if head_only or not body:
            transport.write(head)
        elif length <= SMALL_JOIN:
            transport.write(b"".join((head, *body)))
        else:
            # Tensor bytes go out as they are: no joined copy (writev where it can).
            transport.writelines((head, *body))
        if not keep_alive:
            self.closed = True
            if self.discard and transport.can_write_eof():
                # An error cut the request short and the client may still be sending: half
                # close and keep draining for a moment, so that closing with unread input
                # doesn't reset the connection before the client has read our answer.
                transport.write_eof()
                self.loop.call_later(LINGER_SECONDS, transport.close)
            else:
                transport.close()

    def _set_waiting(self, waiting: bool) -> None:
        # Only connections that send inference requests count: a monitoring client's
        # idle keep-alive connection (stats, health) would otherwise hold every batch.
        if waiting and not self._counted and self.arrivals is not None:
            self._counted = True
            self.arrivals.open += 1
        if self._counted and waiting != self._waiting:
            self._waiting = waiting
            self.arrivals.waiting += 1 if waiting else -1

    def _count_head(self, size: int) -> None:
        self._head_size += size
        if self._head_size > _core.HTTP_MAX_HEAD and not self.no_more:
            self._fail(431, self._head_too_large())

    @staticmethod
    def _head_too_large() -> str:
        return f"the request head exceeds {_core.HTTP_MAX_HEAD} bytes"

    def _too_large(self, size) -> str:
        return too_large_message(size, self.max_body_size)

    def lane_idle(self) -> bool:
        """Owes and holds nothing, so the C++ I/O loop may take the connection back
        (http/io_server.py)."""
        return not (
            self.pending
            or self._in_message
            or self._collect is not None
            or self._held is not None
            or self._out
            or self.no_more
            or self.closed
            or self.writing_paused
            or self._take_http is None
        )

    # -- the connection limits' sweep -----------------------------------------------------

    def holds_partial_request(self) -> bool:
        return self._in_message or self._collect is not None

    def in_head(self) -> bool:
        return self._in_message and not self._head_done

    def time_out(self, timeout: int) -> None:
        self._collect = None
        self._fail(
            408,
            f"the request did not arrive within {timeout}s (--http-client-timeout-secs)",
        )

    def _fail(self, status: int, message: str) -> None:
        """Answer `status` after any replies still owed, then close."""
        self.no_more = True
        self.discard = True
        reply = error_reply(status, message)
        if not self.pending:
            self._write(reply, False, False, False)
        else:
            self.pending.append(_Slot(reply, False, False, False))

    def _pause_reading(self) -> None:
        if not self.reading_paused and self.transport is not None:
            self.reading_paused = True
            self.transport.pause_reading()

    def _resume_reading(self) -> None:
        if self._held is not None:
            # Answers made room: the held bytes first, from the loop (not inside the
            # reply being written), then reading again unless they fill it anew.
            self.loop.call_soon(self._take_held_and_read)
            return
        if self.reading_paused and self.transport is not None:
            self.reading_paused = False
            self.transport.resume_reading()

    def _take_held_and_read(self) -> None:
        self._take_held()
        if self._held is None and len(self.pending) < MAX_PIPELINE and not self.writing_paused:
            self._resume_reading()


_NO_LIMITS = ConnectionLimits(client_timeout=0)  # never started: no sweep
