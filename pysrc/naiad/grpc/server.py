"""Start the gRPC front end on the running event loop."""

from __future__ import annotations

import asyncio

from naiad import _core
from naiad.grpc.compression import COMPRESSION_LEVELS
from naiad.grpc.keepalive import Keepalive, PingPolicy
from naiad.grpc.protocol import GrpcProtocol
from naiad.grpc.service import Service

__all__ = ["GrpcServer", "start_grpc_server"]


class GrpcServer:
    """The listening socket and its connections. close() stops accepting and sends
    GOAWAY on every connection (their open calls are still answered); close_clients()
    closes what is left."""

    def __init__(self, server: asyncio.Server, connections: set):
        self.server = server
        self.connections = connections

    def close(self) -> None:
        self.server.close()
        for protocol in list(self.connections):
            protocol.shutdown()

    def close_clients(self) -> None:
        for protocol in list(self.connections):
            protocol.close()

    @property
    def sockets(self):
        return self.server.sockets


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
) -> GrpcServer:
    """Serve GRPCInferenceService (and grpc.health.v1.Health/Check) for `manager`;
    `restrictions` and `forward`: --grpc-restricted-protocol and
    --grpc-header-forward-pattern (naiad/restrictions.py); `max_connection_age_ms` and
    its grace: --grpc-max-connection-age(-grace) (None: connections never age out);
    `compression_level`: --grpc-infer-response-compression-level (COMPRESSION_LEVELS);
    `keepalive`: the server's keepalive PINGs (None: it sends none); `ping_policy`: what
    it allows of the client's PINGs (None: any number)."""
    loop = asyncio.get_running_loop()
    # Large messages reuse freed memory instead of faulting in fresh pages each time.
    _core.keep_large_blocks()
    service = Service(manager, restrictions, forward)
    arrivals = getattr(manager, "arrivals", None)
    connections: set = set()

    def factory() -> GrpcProtocol:
        return GrpcProtocol(
            service,
            loop,
            arrivals,
            connections,
            (max_connection_age_ms, max_connection_age_grace_ms),
            COMPRESSION_LEVELS.index(compression_level),
            keepalive,
            ping_policy,
        )

    server = await loop.create_server(
        factory, host, port, reuse_address=True, reuse_port=reuse_port or None, backlog=backlog
    )
    return GrpcServer(server, connections)
