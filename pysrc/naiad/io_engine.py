"""The front end's C++ I/O loops (csrc/http1/http_io.h, `_core.HttpIo`): loop 0 on the
event loop, HTTP/1.1 connections (http/io_server.py) and gRPC connections
(grpc/server.py) in one epoll set; with --http-thread-count N, loops 1..N-1 on threads of
their own (`_core.IoLoops`), serving the HTTP connections loop 0 hands them.

C++ accepts and reads every connection, takes plain HTTP infer requests and lane
ModelInfer calls, answers them and writes the answers with no Python per request. One
`_turn` per wake-up of the loop's epoll fd (its sockets) hands Python that turn's events,
which go to the protocol handler of their connection's kind; one `drain` per wake-up of
the core's notify eventfd (the manager's reader) hands it the completions C++ leaves to
Python and one statistics record per completion it answered. A turn with none of these
(most turns) hands Python nothing.

Loops 1..N-1 hand Python nothing themselves: a connection that needs Python moves to
loop 0, and their leftovers for Python come with loop 0's turns. Python reaches loop k
only while it holds k's thread paused (LoopLane, Engine.answer, each()).
"""

from __future__ import annotations

import logging
import socket
from contextlib import contextmanager

from naiad import _core

__all__ = ["Engine", "LoopLane", "engine_for", "listening_socket"]

log = logging.getLogger("naiad")

_GRPC_EVENTS = (_core.IO_GRPC_ACCEPTED, _core.IO_GRPC_CALL, _core.IO_GRPC_PINGS)


class Engine:
    """The loop of one manager. `http` and `grpc`: the protocol handlers that attached
    (IoServer, GrpcServer), each with `protocols` (connection id -> its handler),
    `event(kind, connection, data)`, `lost(connection)` and `on_done_of(request_id,
    owned)`."""

    def __init__(self, manager, loop):
        self.manager = manager
        self.loop = loop
        self.arrivals = manager.arrivals
        self.io = _core.HttpIo(manager.lane, -1)
        # Loops 1..N-1, one per mirror of the manager's lane (ModelManager's io_threads).
        self.loops = _core.IoLoops(self.io, manager.lane) if manager.lane.mirrors else None
        self._flush_loops: set[int] = set()  # loops >= 1 whose answers await flush_writes
        self.http = None
        self.grpc = None
        self._taking = True  # the manager's say (tracing): see set_taking
        self._kicked = False
        self._flush_due = False
        self._reading = True
        manager.attach_io(self)
        loop.add_reader(self.io.epoll_fd, self.turn)

    def attach(self, handler, kind: str) -> None:
        setattr(self, kind, handler)
        self.set_taking(self._taking)

    def detach(self, handler) -> None:
        """The handler's connections are all closed: once both are, the loop stops."""
        if self.http is handler:
            self.http = None
        if self.grpc is handler:
            self.grpc = None
        if self.http is None and self.grpc is None and self._reading:
            self._reading = False
            self.loop.remove_reader(self.io.epoll_fd)
            if self.loops is not None:
                self.loops.stop()

    def set_taking(self, taking: bool) -> None:
        """Whether C++ takes the lane's requests (False while tracing needs Python at
        each take); each handler adds its own conditions (header rules, restrictions)."""
        self._taking = taking
        http, grpc = self.http, self.grpc
        http_taking = taking and http is not None and http.router_takes
        self.each(lambda io: io.set_taking(http_taking))
        self.io.set_grpc_taking(taking and grpc is not None and grpc.plain)

    def each(self, call) -> list:
        """`call(io)` for every loop (each owned meanwhile); their results, loop 0's first."""
        return [call(self.io)] if self.loops is None else self.loops.each(call)

    @contextmanager
    def owning(self, index: int):
        """Loop `index` is the caller's (its thread paused) for the block."""
        if index == 0:
            yield self.io
            return
        loops = self.loops
        loops.pause(index)
        try:
            yield loops.loops[index]
        finally:
            loops.resume(index)

    # -- the loop's turn ---------------------------------------------------------------
    def turn(self) -> None:
        self._kicked = False
        arrivals = self.arrivals
        turn = self.io.run(arrivals.open, arrivals.waiting)
        if turn is not None:  # most turns only took requests: nothing for Python
            self.handle(turn)

    def drain(self) -> None:
        """The core notified (the manager's reader of its eventfd calls this): completions."""
        arrivals = self.arrivals
        turn = self.io.poll(arrivals.open, arrivals.waiting)
        if turn is not None:
            self.handle(turn)

    def kick(self) -> None:
        """A call from Python left events for Python (a close, a write pause): a turn soon."""
        if not self._kicked and self.io.pending_events:
            self._kicked = True
            self.loop.call_soon(self.turn)

    def handle(self, turn) -> None:
        # The loop wrote what it answered before returning; the manager's answers to the
        # loop's requests among `completions` are written by flush_soon's flush.
        manager = self.manager
        events = turn.events
        if events:
            for kind, connection, data in events:
                if kind == _core.IO_TLS_FAILED:  # its close follows
                    log.warning("TLS connection closed: %s", data.decode(errors="replace"))
                    continue
                handler = self.grpc if kind in _GRPC_EVENTS else self._handler_of(connection)
                if handler is None:
                    continue
                try:
                    handler.event(kind, connection, data)
                except Exception:  # one connection's failure must not stop the others
                    log.exception("connection %d: handling an I/O event failed", connection)
                    self.io.close(connection, True)
                    handler.lost(connection)
            self.flush_soon()  # what the handlers answered
        if turn.answered:
            manager.record_io_answered(turn.answered)
        if turn.completions:
            manager.on_completions(turn.completions)

    def _handler_of(self, connection: int):
        http, grpc = self.http, self.grpc
        if grpc is not None and connection in grpc.protocols:
            return grpc
        return http

    # -- writes and closes from Python -----------------------------------------------
    def flush_soon(self) -> None:
        """What Python answered this loop iteration goes out in one write per connection."""
        if not self._flush_due:
            self._flush_due = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_due = False
        self.io.flush_writes()
        while self._flush_loops:
            with self.owning(self._flush_loops.pop()) as io:
                io.flush_writes()
        self.kick()

    def answer(self, index: int, request_id: int, http: bytes) -> None:
        """Python's whole answer to loop `index`'s request, written by the next flush."""
        with self.owning(index) as io:
            if not io.answer(request_id, http):
                return
        if index:
            self._flush_loops.add(index)
        self.flush_soon()

    def close(self, handler, connection: int, abort: bool) -> None:
        """Closes the connection (`abort`: now, else once its bytes are out)."""
        if self.io.close(connection, abort):
            self.loop.call_soon(handler.lost, connection)

    def on_done_of(self, request_id: int, owned: tuple, index: int = 0):
        """Where the answer to one of loop `index`'s requests that Python answers goes
        (`owned`: HttpIo.owned's), or None when its client is gone."""
        stream = owned[4]
        if stream == 0:
            return None if self.http is None else self.http.on_done_of(request_id, index)
        if self.grpc is None or not self.io.release_grpc(request_id):
            return None
        return self.grpc.on_done_of(owned[3], stream)


class LoopLane:
    """Loop `index` (>= 1)'s lane, for Python's calls on a request of that loop in a
    completion Python answers (IoLoopLink.pendings): each made while the loop is owned."""

    __slots__ = ("engine", "index", "lane")

    def __init__(self, engine: Engine, index: int):
        self.engine = engine
        self.index = index
        self.lane = engine.loops.lanes[index]

    def owned(self, request_id: int):
        with self.engine.owning(self.index) as io:
            return io.owned(request_id)

    def complete(self, *args):
        with self.engine.owning(self.index):
            return self.lane.complete(*args)

    def forget(self, request_id: int) -> None:
        with self.engine.owning(self.index):
            self.lane.forget(request_id)

    def in_flight_of(self, lane_model: int) -> int:
        with self.engine.owning(self.index):
            return self.lane.in_flight_of(lane_model)


def engine_for(manager, loop) -> Engine:
    """The manager's I/O loop, made on first use."""
    engine = getattr(manager, "engine", None)
    if engine is None:
        engine = Engine(manager, loop)
    return engine


def listening_socket(host: str, port: int, backlog: int, reuse_port: bool) -> socket.socket:
    """A non-blocking listening TCP socket on host:port, as loop.create_server makes one."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
        sock.listen(backlog)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock
