"""The server process: load the repository, start the front ends, shut down cleanly."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path

from naiad.flags import cli_triton, io_threads
from naiad.flags.cache_config import CacheConfigError
from naiad.memory.gc_tuning import settle_after_startup
from naiad.observability import triton_log
from naiad.scheduling.manager import ModelManager, format_load_table
from naiad.tracing.options import tracer_for

log = logging.getLogger("naiad")


def _configure_logging(options) -> None:
    """The server log from tritonserver's --log-* flags (workers get it from the frontend)."""
    settings = {
        "log_info": options.log_info,
        "log_warning": options.log_warning,
        "log_error": options.log_error,
        "log_verbose_level": max(0, options.log_verbose),
        "log_format": options.log_format,
    }
    triton_log.apply(settings)
    triton_log.install()
    try:
        triton_log.apply({"log_file": options.log_file})
    except OSError as exc:
        # Triton logs to stderr when it cannot open the file (silently; we say so).
        log.warning("cannot open --log-file=%s (%s): logging to stderr", options.log_file, exc)


class StartupError(Exception):
    """The server cannot start: `naiad serve` logs `log_line` and exits 1; the
    in-process Server raises it as Triton's error of that kind (naiad/inprocess/)."""

    def __init__(self, message: str, log_line: str | None = None, internal: bool = False):
        super().__init__(message)
        self.message = message
        self.log_line = log_line or message
        self.internal = internal  # Triton's Internal kind (else InvalidArgument: a setting)


@dataclass
class Running:
    """A started server: its manager and the front ends listening (none in-process
    unless asked for)."""

    manager: ModelManager
    servers: list = field(default_factory=list)
    poller: object = None
    exit_timeout_secs: float = 30.0


async def serve(options) -> int:
    """`naiad serve`: start, serve until SIGINT/SIGTERM, shut down."""
    # From here a SIGINT/SIGTERM (to us or to the whole process group, workers included,
    # which ignore it) stops the server cleanly, also while the models load.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        running = await start(options, stop)
    except StartupError as exc:
        log.error("%s", exc.log_line)
        return 1
    if running is None:
        return 0
    settle_after_startup()
    await stop.wait()
    await shutdown(running)
    return 0


async def start(options, stop: asyncio.Event | None = None) -> Running | None:
    """Loads the repository and starts the front ends `options` allow (the `naiad
    serve` flags' namespace), on the running loop. Raises StartupError when it cannot
    start (nothing is left running then); returns None when `stop` was set while the
    models loaded (everything is shut down again)."""
    for note in cli_triton.startup_notes(options):
        log.warning("%s", note)  # a tritonserver flag and what it does here
    threads_note = io_threads.startup_note(options)
    if threads_note is not None:
        log.info("%s", threads_note)
    from naiad.backends import python_based

    # Before any model loads: its workers and auto-complete read it (Python-based backends).
    python_based.set_backend_directory(getattr(options, "backend_directory", None))
    from naiad.observability import latency_summary
    from naiad.repository import autocomplete

    try:
        latency_summary.configure(
            latency_summary.parse_metrics_config(options.metrics_config, warn=log.error)
        )
    except ValueError as exc:
        raise StartupError(str(exc)) from None

    try:
        autocomplete.configure(
            not (options.strict_model_config or options.disable_auto_complete_config),
            options.backend_config,
        )
    except ValueError as exc:
        raise StartupError(str(exc)) from None
    repositories = await _open_repositories(options.model_repository)
    try:
        manager = ModelManager(
            repositories,
            options.arena_size,
            control_mode=options.model_control_mode,
            load_threads=options.model_load_thread_count,
            strict_readiness=options.strict_readiness,
            drain_timeout=options.exit_timeout_secs,
            fast_lane=options.fast_lane,
            shm_max_regions=options.shm_max_regions,
            cache=getattr(options, "cache", None),
            rate_limit=(options.rate_limit == "execution_count", options.rate_limit_resource),
            server_id=getattr(options, "id", "naiad"),
            load_retries=getattr(options, "model_load_retry_count", 0),
            config_name=getattr(options, "model_config_name", ""),
            io_threads=getattr(options, "io_threads", 1),
        )
    except CacheConfigError as exc:  # the Redis cache could not reach its server
        _close_remotes(repositories)
        raise StartupError(str(exc)) from None
    except BaseException:
        _close_remotes(repositories)
        raise
    try:
        manager.set_tracer(tracer_for(options))
    except ValueError as exc:  # trace mode opentelemetry without the SDK installed
        raise StartupError(str(exc)) from None
    loop = asyncio.get_running_loop()
    # NVML's first init can take seconds on a GPU host (no persistence daemon): the GPUs
    # are opened while the models load, so that it does not delay the ports after them.
    gpus_opening = None
    gpu_metrics = getattr(options, "allow_gpu_metrics", True)
    if options.allow_metrics and gpu_metrics and options.metrics_interval_ms is not None:
        from naiad.observability.gpu_metrics import open_gpus

        gpus_opening = loop.run_in_executor(None, open_gpus)
    all_loaded = await manager.load_all(options.load_model)
    triton_log.write_table(
        __file__, sys._getframe().f_lineno, format_load_table(manager.load_table)
    )
    if stop is not None and stop.is_set():
        log.info("Stopping: a signal arrived while the models loaded")
        await manager.shutdown(options.exit_timeout_secs)
        return None
    if not all_loaded and options.exit_on_error:
        await manager.shutdown(options.exit_timeout_secs)
        raise StartupError(
            "failed to load all models",
            "error: creating server: Internal - failed to load all models",
            internal=True,
        )
    running = Running(manager, exit_timeout_secs=options.exit_timeout_secs)
    try:
        await _start_front_ends(options, running, gpus_opening)
    except BaseException:
        # A port in use, ...: nothing stays running (the in-process caller goes on).
        await shutdown(running)
        raise
    return running


async def _open_repositories(paths: list[str]) -> list:
    """The --model-repository folders, and the cloud repositories (s3://, gs://, as://)
    opened and listed; raises StartupError naming the first that cannot be used."""
    from naiad.repository.cloud_url import CloudPathError, is_cloud_path

    repositories: list = []
    for index, text in enumerate(paths):
        if not is_cloud_path(text):
            if not Path(text).is_dir():
                _close_remotes(repositories)
                raise StartupError(f"failed to stat model repository path '{text}'")
            repositories.append(Path(text))
            continue
        from naiad.repository.remote_repository import RepositoryUnreachable, open_remote

        try:
            repositories.append(
                await asyncio.get_running_loop().run_in_executor(None, open_remote, text, index)
            )
        except (CloudPathError, RepositoryUnreachable) as exc:
            _close_remotes(repositories)
            raise StartupError(str(exc), internal=True) from None
    return repositories


def _close_remotes(repositories: list) -> None:
    for repository in repositories:
        if not isinstance(repository, Path):
            repository.close()


async def _start_front_ends(options, running: Running, gpus_opening) -> None:
    """The repository poller and the front ends `options` allow, each kept in
    `running` as it starts (so that a failure after it stops it)."""
    manager = running.manager
    servers = running.servers
    if options.model_control_mode == "poll":
        from naiad.repository.poll import RepositoryPoller

        running.poller = RepositoryPoller(manager.control, options.repository_poll_secs)
        running.poller.start()

    # gRPC listens before HTTP (as Triton starts them): once /v2/health/ready answers,
    # the gRPC port takes connections too.
    if options.allow_grpc:
        from naiad.grpc.keepalive import keepalive_from, ping_policy_from
        from naiad.grpc.server import start_grpc_server

        grpc_address = options.grpc_address or options.host
        servers.append(
            await start_grpc_server(
                manager,
                grpc_address,
                options.grpc_port,
                restrictions=getattr(options, "grpc_restrictions", None),
                forward=getattr(options, "grpc_forward", None),
                reuse_port=getattr(options, "reuse_grpc_port", False),
                max_connection_age_ms=getattr(options, "grpc_max_connection_age", None),
                max_connection_age_grace_ms=getattr(options, "grpc_max_connection_age_grace", None),
                compression_level=getattr(options, "grpc_infer_response_compression_level", "none"),
                keepalive=keepalive_from(options),
                ping_policy=ping_policy_from(options),
                tls=getattr(options, "grpc_tls", None),
            )
        )
        log.info("Started GRPCInferenceService at %s:%d", grpc_address, options.grpc_port)
    # The metrics port listens before HTTP, as gRPC does: the HTTP I/O thread answers
    # /v2/health/ready as soon as it listens, and this loop may take a while yet to get
    # to the metrics port (0.37 s on an H200 host, where a test found it closed). The
    # log lines keep Triton's order.
    metrics_server = None
    if options.allow_metrics:
        from naiad.observability.metrics import start_metrics_server

        metrics_address = options.metrics_address or options.host
        metrics_server = await start_metrics_server(
            manager,
            metrics_address,
            options.metrics_port,
            interval_ms=options.metrics_interval_ms,
            pinned_pool_bytes=options.pinned_memory_pool_byte_size,
            gpus=await gpus_opening if gpus_opening is not None else None,
            cpu=getattr(options, "allow_cpu_metrics", True),
        )
        servers.append(metrics_server)
    # The OpenAI port listens before HTTP too: once /v2/health/ready answers, it takes
    # connections.
    if getattr(options, "openai_port", None) is not None:
        from naiad.openai.server import start_openai_server

        try:
            servers.append(
                await start_openai_server(
                    manager,
                    options.host,
                    options.openai_port,
                    tokenizer=options.tokenizer,
                    chat_template=options.chat_template,
                    default_max_tokens=options.default_max_tokens,
                )
            )
        except ValueError as exc:  # --tokenizer or --chat-template cannot be read
            raise StartupError(str(exc)) from None
        log.info("Started OpenAI-compatible frontend at %s:%d", options.host, options.openai_port)
    endpoints = _endpoints(options, manager)
    io_loop = getattr(options, "http_io_loop", True)
    if endpoints and not (io_loop and manager.fast_lane and manager.lane is not None):
        raise StartupError(
            "the SageMaker and Vertex AI endpoints are served by the C++ I/O loop, which "
            "--fast-lane=false and --http-io-loop=false turn off"
        )
    if options.allow_http or endpoints:
        from naiad.http.connection_limits import ConnectionLimits
        from naiad.http.generate_routes import register_generate_routes
        from naiad.http.logging_routes import register_logging_routes
        from naiad.http.naiad_routes import register_naiad_routes
        from naiad.http.repository_routes import register_repository_routes
        from naiad.http.routes import Router
        from naiad.http.server import start_http_server
        from naiad.http.shm_routes import register_shm_routes
        from naiad.http.trace_routes import register_trace_routes

        router = Router(
            manager,
            getattr(options, "http_restrictions", None),
            getattr(options, "http_forward", None),
            max_body_size=options.http_max_input_size,
        )
        register_naiad_routes(
            router,
            manager,
            metrics_server.text if metrics_server is not None else None,
            next((e.models for e in endpoints if e.models is not None), None),
        )
        register_repository_routes(router, manager)
        register_shm_routes(router, manager)
        register_generate_routes(router, manager)
        register_logging_routes(router)
        register_trace_routes(router, manager)
        http_server = await start_http_server(
            manager,
            options.host,
            options.http_port if options.allow_http else None,
            router=router,
            limits=ConnectionLimits(
                options.http_client_timeout_secs,
                options.http_idle_timeout_secs,
                options.http_max_connections,
            ),
            io_loop=io_loop,
            reuse_port=getattr(options, "reuse_http_port", False),
            tls=getattr(options, "http_tls", None),
        )
        servers.append(http_server)
        if options.allow_http:
            log.info("Started HTTPService at %s:%d", options.host, options.http_port)
        _listen_endpoints(http_server, endpoints, options.host)
    if metrics_server is not None:
        log.info("Started Metrics Service at %s:%d", metrics_address, options.metrics_port)


def _endpoints(options, manager) -> list:
    """The SageMaker and Vertex AI endpoints to serve (http/endpoint_routes.py), the
    Vertex AI default model resolved against the loaded models."""
    from naiad.http.endpoint_routes import EndpointError, endpoints_for, resolve_vertex_model
    from naiad.http.sagemaker_models import SageMakerModels

    try:
        endpoints = endpoints_for(options)
        for endpoint in endpoints:
            if endpoint.kind == "sagemaker":
                endpoint.models = SageMakerModels(manager)
            if endpoint.kind == "vertex_ai":
                ready = [entry["name"] for entry in manager.repository_index(ready_only=True)]
                endpoint.model = resolve_vertex_model(
                    getattr(options, "vertex_ai_default_model", None), ready
                )
    except EndpointError as exc:
        raise StartupError(
            str(exc), f"failed to start {exc.service} service: Invalid argument - {exc}"
        ) from None
    return endpoints


def _listen_endpoints(http_server, endpoints: list, host: str) -> None:
    from naiad.http.io_server import listening_socket

    for endpoint in endpoints:
        try:
            sock = listening_socket(host, endpoint.port, 1024, False)
        except OSError as exc:
            raise StartupError(
                f"failed to start {endpoint.name} service: {exc.strerror} ({host}:{endpoint.port})"
            ) from None
        http_server.listen_endpoint(sock, endpoint)
        log.info("Started %s HTTPService at %s:%d", endpoint.name, host, endpoint.port)


async def shutdown(running: Running) -> None:
    """Stops taking connections, answers the requests in flight (up to the exit
    timeout), stops the workers."""
    log.info(
        "Stopping: no new connections; waiting up to %ds for requests in flight",
        running.exit_timeout_secs,
    )
    servers = running.servers
    for server in servers:
        server.close()
    if running.poller is not None:
        await running.poller.stop()
    await running.manager.shutdown(running.exit_timeout_secs)
    for server in servers:
        # Connections still open get closed; their requests were answered above.
        if hasattr(server, "close_clients"):
            server.close_clients()


def run(options) -> int:
    _configure_logging(options)
    try:
        import uvloop
    except ImportError:  # uvloop is a dependency; this keeps odd platforms running
        return asyncio.run(serve(options))
    return uvloop.run(serve(options))
