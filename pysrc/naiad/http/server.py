"""Start the HTTP/REST front end on the running event loop."""

from __future__ import annotations

import asyncio

from naiad.http.connection_limits import ConnectionLimits
from naiad.http.io_server import IoServer, listening_socket
from naiad.http.protocol import HttpProtocol
from naiad.http.routes import DEFAULT_MAX_BODY_SIZE, Router
from naiad.io_engine import engine_for

__all__ = ["start_http_server"]


async def start_http_server(
    manager,
    host: str,
    port: int | None,
    *,
    max_body_size: int | None = None,
    router: Router | None = None,
    reuse_port: bool = False,
    backlog: int = 1024,
    limits: ConnectionLimits | None = None,
    io_loop: bool = True,
    tls=None,
):
    """Serve KServe v2 + Triton's HTTP extensions for `manager` on host:port.

    Pass `router` to share one (e.g. with extra `/v2/<segment>` handlers registered); its
    `max_body_size` (--http-max-input-size) is the connections' too, unless given here.
    `io_loop`: connections are read and answered by the C++ I/O loop (http/io_server.py),
    when the manager has a fast lane; else by uvloop's transports. `tls`:
    naiad.tls.TlsSettings (None: plaintext). `port` None: the C++ loop's server with no
    HTTP port, for the SageMaker and Vertex AI endpoints alone (IoServer.listen_endpoint)."""
    loop = asyncio.get_running_loop()
    if max_body_size is None:
        max_body_size = DEFAULT_MAX_BODY_SIZE if router is None else router.max_body_size
    if router is None:
        router = Router(manager, max_body_size=max_body_size)

    arrivals = getattr(manager, "arrivals", None)
    limits = limits or ConnectionLimits()
    limits.start(loop)

    if io_loop and getattr(manager, "lane", None) is not None and manager.fast_lane:
        sock = None if port is None else listening_socket(host, port, backlog, reuse_port)
        engine_for(manager, loop).io.set_tls(False, None if tls is None else tls.context)
        return IoServer(manager, router, loop, sock, max_body_size, limits)

    def factory() -> HttpProtocol:
        return HttpProtocol(router, loop, max_body_size, arrivals, limits)

    return await loop.create_server(
        factory,
        host,
        port,
        reuse_address=True,
        reuse_port=reuse_port or None,
        backlog=backlog,
        ssl=None if tls is None else tls.ssl_context(),
    )
