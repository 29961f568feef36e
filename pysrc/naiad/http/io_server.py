"""The HTTP front end over the C++ I/O loop (naiad/io_engine.py, `_core.HttpIo`).

C++ accepts and reads every connection and takes its plain infer requests to the lane,
answers them and writes the answers, with no Python per request. What the lane does not
take (other routes, requests in pieces, malformed input) goes to the connection's
`HttpProtocol`, as with uvloop's transports: `IoTransport` is its transport, over the
C++ connection. The engine hands this server the events of its connections.

A connection whose protocol owes and holds nothing goes back to the lane with the next
bytes it receives (`HttpIo.take_back`).
"""

from __future__ import annotations

import asyncio
import logging

from naiad import _core
from naiad.http.connection_limits import ConnectionLimits
from naiad.http.protocol import HttpProtocol, reply_bytes
from naiad.http.routes import exception_reply
from naiad.io_engine import engine_for, listening_socket

__all__ = ["IoServer", "IoTransport", "listening_socket"]

log = logging.getLogger("naiad")


class IoTransport(asyncio.Transport):
    """A connection of the C++ I/O loop, as an asyncio transport for HttpProtocol."""

    __slots__ = ("_server", "_io", "_id", "_closing")

    def __init__(self, server: IoServer, connection: int):
        super().__init__()
        self._server = server
        self._io = server.engine.io
        self._id = connection
        self._closing = False

    def write(self, data) -> None:
        if self._closing:
            return
        self._io.write(self._id, data)
        self._server.engine.kick()

    def writelines(self, parts) -> None:
        if self._closing:
            return
        write = self._io.write
        for part in parts:
            write(self._id, part)
        self._server.engine.kick()

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        if self._io.close(self._id, False):
            self._server.lost_soon(self._id)

    def abort(self) -> None:
        self._closing = True
        if self._io.close(self._id, True):
            self._server.lost_soon(self._id)

    def is_closing(self) -> bool:
        return self._closing

    def pause_reading(self) -> None:
        self._io.pause_reading(self._id)

    def resume_reading(self) -> None:
        self._io.resume_reading(self._id)

    def is_reading(self) -> bool:
        return not self._closing

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self._io.write_eof(self._id)

    def get_write_buffer_size(self) -> int:
        return self._io.unsent(self._id)

    def in_lane_mode(self) -> bool:
        """C++ holds the connection's requests (the limits' sweep leaves it to `sweep`)."""
        return self._io.in_lane_mode(self._id)

    def get_extra_info(self, name, default=None):
        return default


def _sweep_relaying(io, before: int, idle_before: int) -> None:
    """The sweep of a loop >= 1 (owned by the caller), whose connections have no Python
    protocol: idle ones close there; one holding part of a request too long moves to
    loop 0, whose protocol for it answers 408 once its own clock says so."""
    timed_out, idle = io.sweep(before, idle_before)
    for connection in timed_out:
        io.hand_over(connection)
    for connection in idle:
        io.close(connection, False)


class IoServer:
    """Serves HTTP on a listening socket through the C++ I/O loop; an asyncio.Server's
    close() / wait_closed() / close_clients() for server.py."""

    def __init__(
        self,
        manager,
        router,
        loop: asyncio.AbstractEventLoop,
        sock,
        max_body_size: int,
        limits: ConnectionLimits,
    ):
        self.manager = manager
        self.router = router
        self.loop = loop
        self.sock = sock
        self.max_body_size = max_body_size
        self.limits = limits
        self.arrivals = manager.arrivals
        self.engine = engine_for(manager, loop)
        self.io = self.engine.io
        self.engine.each(lambda io: io.set_max_body(max_body_size))
        self.protocols: dict[int, HttpProtocol] = {}
        self._open = True
        # The lane's take needs nothing per read from Python only when the router
        # hands reads to the manager as they are (no header rules, no traceparent).
        self.router_takes = getattr(router, "take_http", None) == getattr(
            manager, "take_http_requests", None
        )
        self.engine.attach(self, "http")
        self.endpoint_sockets: list = []
        if sock is not None:  # None: only endpoints listen (listen_endpoint)
            self.io.listen_http(sock.fileno())
        limits.sweeps.append(self.sweep)

    def event(self, kind: int, connection: int, data) -> None:
        if kind == _core.IO_ACCEPTED:
            protocol = HttpProtocol(
                self.router, self.loop, self.max_body_size, self.arrivals, self.limits
            )
            self.protocols[connection] = protocol
            protocol.connection_made(IoTransport(self, connection))
            return
        protocol = self.protocols.get(connection)
        if protocol is None:
            return
        if kind == _core.IO_DATA:
            if self.router_takes and protocol.lane_idle():
                turn = self.io.take_back(connection, data)
                self.engine.handle(turn)
                if turn.queued:  # dispatched with the rest of this loop turn's requests
                    self.manager.schedule_flush()
            else:
                protocol.data_received(data)
        elif kind == _core.IO_HAND_OVER:
            protocol.data_received(data)
        elif kind == _core.IO_EOF:
            if not protocol.eof_received():
                protocol.transport.close()
        elif kind == _core.IO_CLOSED:
            self.lost(connection)
        elif kind == _core.IO_PAUSE_WRITING:
            protocol.pause_writing()
        elif kind == _core.IO_RESUME_WRITING:
            protocol.resume_writing()

    def lost(self, connection: int) -> None:
        protocol = self.protocols.pop(connection, None)
        if protocol is not None:
            transport = protocol.transport
            if transport is not None:
                transport._closing = True
            protocol.connection_lost(None)

    def lost_soon(self, connection: int) -> None:
        """Python closed the connection: its protocol hears of it from the loop."""
        self.loop.call_soon(self.lost, connection)

    def on_done_of(self, request_id: int, index: int = 0):
        return lambda http, exc: self.answer(request_id, http, exc, index)

    def answer(
        self, request_id: int, http: bytes | None, exc: BaseException | None, index: int = 0
    ) -> None:
        """The manager's answer to one of loop `index`'s requests: its response bytes, or
        the error it ended with. Written once the completions being answered are all in
        (one write per connection), also when they came from outside a turn."""
        if exc is not None:
            http = reply_bytes(exception_reply(exc))
        self.engine.answer(index, request_id, http)

    def listen_endpoint(self, sock, endpoint) -> None:
        """Serves a SageMaker or Vertex AI endpoint (http/endpoint_routes.py) on `sock`:
        its connections are this server's, their requests rewritten by the loop."""
        self.endpoint_sockets.append(sock)
        self.io.listen_endpoint(
            sock.fileno(),
            endpoint.kind,
            endpoint.model,
            endpoint.ping_mode,
            endpoint.predict_route,
            endpoint.health_route,
            endpoint.models.names if endpoint.models is not None else None,
        )

    @property
    def sockets(self) -> list:
        return ([self.sock] if self.sock is not None else []) + self.endpoint_sockets

    # -- the connection limits' sweep (http/connection_limits.py) ------------------------
    def sweep(self, limits: ConnectionLimits) -> None:
        now = _core.now_ns()
        client = limits.client_timeout
        before = now - client * 1_000_000_000 if client else 0
        idle_before = now - limits.idle_timeout * 1_000_000_000 if limits.idle_timeout else 0
        timed_out, idle = self.io.sweep(before, idle_before)
        for connection in timed_out:
            self.io.hand_over(connection)
        if timed_out:
            self.engine.turn()  # the protocols get the partial requests
            for connection in timed_out:
                protocol = self.protocols.get(connection)
                if protocol is not None and protocol.holds_partial_request():
                    protocol.time_out(client)
        for connection in idle:
            protocol = self.protocols.get(connection)
            if protocol is not None and protocol.transport is not None:
                protocol.transport.close()
        if self.engine.loops is not None:
            self.engine.each(lambda io: io is self.io or _sweep_relaying(io, before, idle_before))

    # -- asyncio.Server's surface for server.py --------------------------------------------
    def close(self) -> None:
        """No new connections; those open stay until close_clients()."""
        if self._open:
            self._open = False
            self.io.stop_listening()
            for sock in self.sockets:
                sock.close()

    async def wait_closed(self) -> None:
        return None

    def close_clients(self) -> None:
        for connection in list(self.protocols):
            self.io.close(connection, True)
            self.lost(connection)
        self.engine.detach(self)
