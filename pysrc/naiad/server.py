"""The server process: load the repository, start the front ends, shut down cleanly."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from pathlib import Path

from naiad.gc_tuning import settle_after_startup
from naiad.scheduling.manager import ModelManager, format_load_table
from naiad.tracing.options import tracer_for

log = logging.getLogger("naiad")


def _configure_logging(verbose: int) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose > 0 else logging.INFO,
        format="%(asctime)s %(levelname).1s naiad] %(message)s",
        stream=sys.stderr,
    )


async def serve(options) -> int:
    repositories = [Path(r) for r in options.model_repository]
    for repository in repositories:
        if not repository.is_dir():
            log.error("failed to stat model repository path '%s'", repository)
            return 1
    from naiad.repository import autocomplete

    try:
        autocomplete.configure(
            not (options.strict_model_config or options.disable_auto_complete_config),
            options.backend_config,
        )
    except ValueError as exc:
        log.error("%s", exc)
        return 1
    manager = ModelManager(
        repositories,
        options.arena_size,
        control_mode=options.model_control_mode,
        load_threads=options.model_load_thread_count,
        strict_readiness=options.strict_readiness,
        drain_timeout=options.exit_timeout_secs,
        fast_lane=options.fast_lane,
    )
    try:
        manager.set_tracer(tracer_for(options))
    except ValueError as exc:  # trace mode opentelemetry without the SDK installed
        log.error("%s", exc)
        return 1
    # From here a SIGINT/SIGTERM (to us or to the whole process group, workers included,
    # which ignore it) stops the server cleanly, also while the models load.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    all_loaded = await manager.load_all(options.load_model)
    print(format_load_table(manager.load_table), file=sys.stderr, flush=True)
    if stop.is_set():
        log.info("Stopping: a signal arrived while the models loaded")
        await manager.shutdown(options.exit_timeout_secs)
        return 0
    if not all_loaded and options.exit_on_error:
        log.error("error: creating server: Internal - failed to load all models")
        await manager.shutdown(options.exit_timeout_secs)
        return 1
    poller = None
    if options.model_control_mode == "poll":
        from naiad.repository.poll import RepositoryPoller

        poller = RepositoryPoller(manager.control, options.repository_poll_secs)
        poller.start()

    servers = []
    # gRPC listens before HTTP (as Triton starts them): once /v2/health/ready answers,
    # the gRPC port takes connections too.
    if options.allow_grpc:
        from naiad.grpc.server import start_grpc_server

        servers.append(await start_grpc_server(manager, options.host, options.grpc_port))
        log.info("Started GRPCInferenceService at %s:%d", options.host, options.grpc_port)
    if options.allow_http:
        from naiad.http.generate_routes import register_generate_routes
        from naiad.http.naiad_routes import register_naiad_routes
        from naiad.http.repository_routes import register_repository_routes
        from naiad.http.routes import Router
        from naiad.http.server import start_http_server
        from naiad.http.shm_routes import register_shm_routes
        from naiad.http.trace_routes import register_trace_routes

        router = Router(manager)
        register_naiad_routes(router, manager)
        register_repository_routes(router, manager)
        register_shm_routes(router, manager)
        register_generate_routes(router, manager)
        register_trace_routes(router, manager)
        servers.append(
            await start_http_server(manager, options.host, options.http_port, router=router)
        )
        log.info("Started HTTPService at %s:%d", options.host, options.http_port)
    if options.allow_metrics:
        from naiad.metrics import start_metrics_server

        servers.append(await start_metrics_server(manager, options.host, options.metrics_port))
        log.info("Started Metrics Service at %s:%d", options.host, options.metrics_port)

    settle_after_startup()
    await stop.wait()

    log.info(
        "Stopping: no new connections; waiting up to %ds for requests in flight",
        options.exit_timeout_secs,
    )
    for server in servers:
        server.close()
    if poller is not None:
        await poller.stop()
    await manager.shutdown(options.exit_timeout_secs)
    for server in servers:
        # Connections still open get closed; their requests were answered above.
        if hasattr(server, "close_clients"):
            server.close_clients()
    return 0


def run(options) -> int:
    _configure_logging(options.log_verbose)
    # Workers inherit it: pb_utils.Logger.log_verbose prints only above 0, as in Triton.
    os.environ["NAIAD_LOG_VERBOSE"] = str(options.log_verbose)
    try:
        import uvloop
    except ImportError:  # uvloop is a dependency; this keeps odd platforms running
        return asyncio.run(serve(options))
    return uvloop.run(serve(options))
