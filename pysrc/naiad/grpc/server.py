"""The gRPC front end on the C++ I/O loop (naiad/io_engine.py, csrc/http2/grpc_io.cc).

C++ accepts every gRPC connection, runs its HTTP/2 and answers the ModelInfer calls the
gRPC lane takes; every other call comes here as events of its connection's
`GrpcProtocol` (grpc/protocol.py), which answers through the loop."""

from __future__ import annotations

import asyncio

from naiad import _core
from naiad.flags.restrictions import Restrictions
from naiad.grpc.compression import COMPRESSION_LEVELS
from naiad.grpc.keepalive import Keepalive, PingPolicy
from naiad.grpc.protocol import MAX_MESSAGE_SIZE, GrpcProtocol
from naiad.grpc.service import Service
from naiad.io_engine import engine_for, listening_socket

__all__ = ["GrpcServer", "start_grpc_server"]


class GrpcServer:
    """The listening socket and the handlers of its connections. close() stops accepting
    and sends GOAWAY on every connection (their open calls are still answered);
    close_clients() closes what is left."""

    def __init__(self, engine, sock, make_protocol, plain: bool):
        self.engine = engine
        self.sock = sock
        self.protocols: dict[int, GrpcProtocol] = {}
        self._make_protocol = make_protocol
        # No call needs Python at its start (restricted protocols, header forwarding):
        # C++ takes lane calls.
        self.plain = plain
        self._open = True

    def event(self, kind: int, connection: int, data) -> None:
        if kind == _core.IO_GRPC_ACCEPTED:
            protocol = self._make_protocol(self, connection)
            self.protocols[connection] = protocol
            protocol.start()
            return
        protocol = self.protocols.get(connection)
        if protocol is None:
            return
        if kind == _core.IO_GRPC_CALL:
            protocol.on_event(data)
        elif kind == _core.IO_GRPC_PINGS:
            protocol.on_pings(*data)
        elif kind == _core.IO_CLOSED:
            self.lost(connection)

    def lost(self, connection: int) -> None:
        protocol = self.protocols.pop(connection, None)
        if protocol is not None:
            protocol.connection_lost(None)

    def on_done_of(self, connection: int, stream: int):
        """The answer to a lane call of the loop's that Python answers (a completion C++
        left to Python): written on its stream, if its connection is still there."""

        def on_done(payload, exc, final=True) -> None:
            protocol = self.protocols.get(connection)
            if protocol is not None:
                protocol.answer_adopted(stream, payload, exc)

        return on_done

    def close(self) -> None:
        if self._open:
            self._open = False
            self.engine.io.stop_listening_grpc()
            self.sock.close()
        for protocol in list(self.protocols.values()):
            protocol.shutdown()

    def close_clients(self) -> None:
        for protocol in list(self.protocols.values()):
            protocol.close()
        for connection in list(self.protocols):
            self.lost(connection)
        self.engine.detach(self)

    @property
    def sockets(self):
        return [self.sock]


async def start_grpc_server(
    manager,
    host: str,
    port: int,
    *,
    backlog: int = 1024,
    reuse_port: bool = False,
    restrictions=None,
    forward=None,
    max_connection_age_ms: int | None = None,
    max_connection_age_grace_ms: int | None = None,
    compression_level: str = "none",
    keepalive: Keepalive | None = None,
    ping_policy: PingPolicy | None = None,
    tls=None,
) -> GrpcServer:
    """Serve GRPCInferenceService (and grpc.health.v1.Health/Check) for `manager`;
    `restrictions` and `forward`: --grpc-restricted-protocol and
    --grpc-header-forward-pattern (naiad/flags/restrictions.py); `max_connection_age_ms` and
    its grace: --grpc-max-connection-age(-grace) (None: connections never age out);
    `compression_level`: --grpc-infer-response-compression-level (COMPRESSION_LEVELS);
    `keepalive`: the server's keepalive PINGs (None: it sends none); `ping_policy`: what
    it allows of the client's PINGs (None: any number); `tls`: naiad.tls.TlsSettings
    (None: plaintext)."""
    loop = asyncio.get_running_loop()
    # Large messages reuse freed memory instead of faulting in fresh pages each time.
    _core.keep_large_blocks()
    service = Service(manager, restrictions, forward)
    arrivals = getattr(manager, "arrivals", None)
    engine = engine_for(manager, loop)
    sock = listening_socket(host, port, backlog, reuse_port)

    def make_protocol(server: GrpcServer, connection: int) -> GrpcProtocol:
        return GrpcProtocol(
            service,
            loop,
            engine,
            connection,
            arrivals,
            (max_connection_age_ms, max_connection_age_grace_ms),
            keepalive,
            ping_policy,
        )

    # The loop's lane checks a restricted inference protocol itself; forwarding headers
    # to the model is Python's, per call.
    plain = service.forward is None
    server = GrpcServer(engine, sock, make_protocol, plain)
    io = engine.io
    # Restricted protocols and header forwarding read call metadata (naiad/flags/restrictions.py).
    io.grpc_metadata = bool(service.restrictions) or not plain
    rule = service.restrictions.rule("inference")
    if rule is not None:
        io.set_grpc_inference_rule(rule[0], rule[1], Restrictions.grpc_denial(rule[0]))
    io.set_grpc_watch_pings(ping_policy is not None)
    io.set_tls(True, None if tls is None else tls.context)
    io.listen_grpc(
        manager.grpc_lane,
        sock.fileno(),
        MAX_MESSAGE_SIZE,
        COMPRESSION_LEVELS.index(compression_level),
    )
    engine.attach(server, "grpc")
    return server
