"""`naiad serve`: the command line, with tritonserver's flag names and meanings."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from naiad import tls
from naiad.flags import cli_triton, io_threads
from naiad.flags.rate_limit import parse_rate_limit, parse_rate_limit_resource
from naiad.grpc.compression import COMPRESSION_LEVELS
from naiad.openai import options as openai_options
from naiad.tracing import options as tracing_options

_bool = cli_triton.parse_bool


def _size(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    text = text.strip().lower().rstrip("b")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def _int_bool(text: str) -> int:
    # tritonserver's --log-verbose: true/false or a level
    value = text.strip().lower()
    if value in ("true", "false"):
        return int(value == "true")
    return int(value)


def _shm_max_regions(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 65536:
        raise argparse.ArgumentTypeError(f"{value} is not between 1 and 65536")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="naiad", description="A Triton-compatible inference server"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve a model repository")
    serve.add_argument(
        "--id",
        default="naiad",
        help="the server's name in GET /v2 and gRPC ServerMetadata (default naiad; "
        "Triton's is triton)",
    )
    serve.add_argument(
        "--model-repository",
        "--model-store",
        required=True,
        action="append",
        help="path of the model repository (Triton's flag)",
    )
    serve.add_argument(
        "--host",
        "--http-address",
        default="0.0.0.0",
        help="address the HTTP server binds (default 0.0.0.0, as Triton); also the "
        "gRPC and metrics servers' address unless --grpc-address / --metrics-address say "
        "otherwise",
    )
    serve.add_argument(
        "--grpc-address",
        default=None,
        help="address the gRPC server binds (default: --http-address's)",
    )
    serve.add_argument(
        "--metrics-address",
        default=None,
        help="address the metrics server binds (default: --http-address's)",
    )
    serve.add_argument("--http-port", type=int, default=8000)
    serve.add_argument("--grpc-port", type=int, default=8001)
    serve.add_argument("--metrics-port", type=int, default=8002)
    # None: true, unless AIP_MODE=PREDICTION (cli_triton.environment_defaults).
    serve.add_argument("--allow-http", type=_bool, default=None)
    serve.add_argument("--allow-grpc", type=_bool, default=None)
    serve.add_argument("--allow-metrics", type=_bool, default=True)
    serve.add_argument(
        "--allow-gpu-metrics",
        type=_bool,
        default=True,
        help="false: no GPU gauges on /metrics (none without a GPU either)",
    )
    serve.add_argument(
        "--allow-cpu-metrics",
        type=_bool,
        default=True,
        help="false: no nv_cpu_utilization and nv_cpu_memory_* gauges on /metrics",
    )
    serve.add_argument(
        "--reuse-http-port",
        type=_bool,
        default=False,
        help="SO_REUSEPORT on the HTTP port: servers that all set it share the port",
    )
    serve.add_argument(
        "--reuse-grpc-port",
        type=_bool,
        default=False,
        help="SO_REUSEPORT on the gRPC port: servers that all set it share the port",
    )
    serve.add_argument(
        "--grpc-infer-response-compression-level",
        type=lambda text: text.strip().lower(),
        choices=COMPRESSION_LEVELS,
        default="none",
        help="compress gRPC answers as Triton (gRPC core) does at this level, with gzip "
        "or deflate as the client accepts them (default none)",
    )
    serve.add_argument(
        "--grpc-keepalive-time",
        type=int,
        default=None,
        help="ms between the server's keepalive PINGs (default: none are sent; Triton's "
        "default is 7200000)",
    )
    serve.add_argument(
        "--grpc-keepalive-timeout",
        type=int,
        default=20000,
        help="ms a keepalive PING's ACK may take before the connection is closed "
        "(default 20000, as Triton)",
    )
    serve.add_argument(
        "--grpc-keepalive-permit-without-calls",
        type=_bool,
        default=False,
        help="keepalive PINGs also on connections with no call open (default false)",
    )
    serve.add_argument(
        "--grpc-http2-max-pings-without-data",
        type=int,
        default=2,
        help="keepalive PINGs in a row without call activity; 0: no limit (default 2)",
    )
    serve.add_argument(
        "--grpc-http2-min-recv-ping-interval-without-data",
        type=int,
        default=None,
        help="ms a client must leave between PINGs while the server sends nothing, else "
        "a strike (given, or with --grpc-http2-max-ping-strikes: policed, default 300000; "
        "not given: every PING is answered)",
    )
    serve.add_argument(
        "--grpc-http2-max-ping-strikes",
        type=int,
        default=None,
        help="strikes after which a client gets GOAWAY too_many_pings; 0: no limit "
        "(policed when given, default 2)",
    )
    serve.add_argument(
        "--grpc-max-connection-age",
        type=int,
        default=None,
        help="ms after which a gRPC connection gets GOAWAY (its client reconnects for "
        "new calls; default: never, as Triton)",
    )
    serve.add_argument(
        "--grpc-max-connection-age-grace",
        type=int,
        default=None,
        help="ms after that GOAWAY before the connection is closed with calls still open "
        "(default: never)",
    )
    # Logging, as tritonserver's flags (observability/triton_log.py); /v2/logging changes them live.
    serve.add_argument("--log-verbose", type=_int_bool, default=0)
    serve.add_argument("--log-info", type=_bool, default=True)
    serve.add_argument("--log-warning", type=_bool, default=True)
    serve.add_argument("--log-error", type=_bool, default=True)
    serve.add_argument("--log-format", choices=["default", "ISO8601"], default="default")
    serve.add_argument("--log-file", default="", help="append the log here, not to stderr")
    # Metrics, as tritonserver's flags (naiad/observability/metrics.py).
    serve.add_argument(
        "--metrics-config",
        action="append",
        default=[],
        help="<setting>=<value> (repeatable), as Triton: summary_latencies=true, "
        "counter_latencies=false, summary_quantiles=<q>:<error>,...",
    )
    serve.add_argument(
        "--metrics-interval-ms",
        type=float,
        default=2000,
        help="how often CPU, GPU and pinned-memory gauges are read (default 2000, as Triton)",
    )
    serve.add_argument(
        "--pinned-memory-pool-byte-size",
        type=int,
        default=268435456,
        help="reported as nv_pinned_memory_pool_total_bytes (default 256 MiB, as Triton)",
    )
    serve.add_argument(
        "--exit-on-error",
        type=_bool,
        default=True,
        help="exit when a model fails to load (default true, as Triton)",
    )
    serve.add_argument(
        "--exit-timeout-secs",
        type=int,
        default=30,
        help="how long shutdown waits for requests in flight",
    )
    serve.add_argument(
        "--strict-model-config",
        type=_bool,
        default=False,
        help="true: every model needs a complete config.pbtxt; false (the default, as "
        "Triton): configs are auto-completed from the model files",
    )
    serve.add_argument(
        "--backend-config",
        action="append",
        default=[],
        help="<backend>,<setting>=<value> (repeatable), as Triton; used: "
        "onnxruntime,default-max-batch-size=N (auto-complete's max_batch_size, default 4)",
    )
    serve.add_argument(
        "--disable-auto-complete-config",
        action="store_true",
        help="do not auto-complete model configs (as --strict-model-config=true)",
    )
    serve.add_argument(
        "--strict-readiness",
        type=_bool,
        default=True,
        help="/v2/health/ready only when every model is ready (default true, as Triton)",
    )
    serve.add_argument(
        "--model-control-mode",
        choices=["none", "poll", "explicit"],
        default="none",
        help="none: load every model at start; poll: also follow the repositories; "
        "explicit: load what --load-model names and the repository API asks for",
    )
    serve.add_argument(
        "--load-model",
        action="append",
        default=[],
        help="in explicit mode, a model to load at start (repeatable; '*' for all)",
    )
    serve.add_argument(
        "--repository-poll-secs",
        type=int,
        default=15,
        help="seconds between two looks at the repositories in poll mode (default 15)",
    )
    serve.add_argument(
        "--model-load-thread-count",
        type=int,
        default=4,
        help="model versions loaded at the same time (default 4, as Triton)",
    )
    serve.add_argument(
        "--model-load-retry-count",
        type=int,
        default=0,
        help="times a model version that failed to load is loaded again before it is "
        "marked UNAVAILABLE (default 0, as Triton)",
    )
    serve.add_argument(
        "--model-config-name",
        default="",
        help="load <model>/configs/<name>.pbtxt where it exists, else config.pbtxt, as "
        "Triton's custom model configurations",
    )
    serve.add_argument(
        "--rate-limit",
        type=parse_rate_limit,
        default="off",
        help="execution_count: an instance runs a batch only when the rate_limiter "
        "resources of its instance group are free, by priority; off (the default, as "
        "Triton): rate_limiter configs are ignored",
    )
    serve.add_argument(
        "--rate-limit-resource",
        type=parse_rate_limit_resource,
        action="append",
        default=[],
        help="<name>:<count>[:<device>] (repeatable), as Triton: the copies of a "
        "resource available (default: the most any instance asks for)",
    )
    serve.add_argument(
        "--arena-size",
        type=_size,
        default=1 << 30,
        help="bytes of the shared-memory arena for tensors in flight (default 1G)",
    )
    serve.add_argument(
        "--cache-config",
        action="append",
        default=[],
        help="<cache>,<setting>=<value> (repeatable), as Triton: local,size=N turns on the "
        "response cache of N bytes for models with response_cache { enable: true }",
    )
    serve.add_argument(
        "--response-cache-byte-size",
        type=int,
        default=None,
        help="deprecated in Triton: as --cache-config local,size=N",
    )
    serve.add_argument(
        "--cache-directory",
        "--cache-dir",
        default="/opt/tritonserver/caches",
        help="accepted for Triton's command lines; the local cache is built in",
    )
    serve.add_argument(
        "--http-max-input-size",
        type=_size,
        default=1 << 30,
        help="largest HTTP request body in bytes, else 413 (default 1G; later "
        "tritonserver releases have this flag, default 64M; Triton 2.51 has no limit)",
    )
    serve.add_argument(
        "--http-client-timeout-secs",
        type=int,
        default=60,
        help="Naiad's own: a request's head must arrive within it and its body not pause "
        "longer, else 408 and close (slow clients); 0: never (default 60)",
    )
    serve.add_argument(
        "--http-idle-timeout-secs",
        type=int,
        default=0,
        help="Naiad's own: close a keep-alive connection idle that long (default 0: never, "
        "as Triton)",
    )
    serve.add_argument(
        "--http-max-connections",
        type=int,
        default=0,
        help="Naiad's own: a connection past this many gets 503 and is closed (default 0: "
        "no limit, as Triton)",
    )
    serve.add_argument(
        "--fast-lane",
        type=_bool,
        default=True,
        help="Naiad's own: false sends every infer request through the general Python "
        "path (differential tests, diagnosis); answers are the same either way",
    )
    serve.add_argument(
        "--shm-max-regions",
        type=_shm_max_regions,
        default=1024,
        help="Naiad's own: shared-memory regions (system and CUDA) the server holds at once, "
        "for all clients together, not per client (default 1024, at most 65536)",
    )
    serve.add_argument(
        "--http-io-loop",
        type=_bool,
        default=True,
        help="Naiad's own: true (default) reads and answers HTTP connections in the C++ I/O "
        "loop, with no Python per fast-lane request; false uses uvloop's transports",
    )
    _add_access_flags(serve)
    tracing_options.add_arguments(serve)
    cli_triton.add_arguments(serve)
    io_threads.add_arguments(serve)
    tls.add_arguments(serve, _bool)
    openai_options.add_arguments(serve)
    check = commands.add_parser(
        "check",
        help="say what each model of a repository would do when served (load, refused, "
        "warned, and why), loading nothing; exit status 1 when any would not load",
    )
    _add_check_arguments(check)
    return parser


def _add_check_arguments(check) -> None:
    check.add_argument("repositories", nargs="+", metavar="REPOSITORY", type=Path)
    check.add_argument(
        "--strict-model-config",
        type=_bool,
        default=False,
        help="as `naiad serve`: true turns auto-complete off (a config.pbtxt is required)",
    )
    check.add_argument(
        "--disable-auto-complete-config",
        action="store_true",
        help="as `naiad serve`: auto-complete off",
    )
    check.add_argument(
        "--model-config-name",
        default="",
        help="as `naiad serve`: check configs/<name>.pbtxt where a model has one",
    )
    check.add_argument(
        "--backend-directory",
        default=None,
        help="as `naiad serve`: where Python-based backends (<name>/model.py) are found "
        "(default /opt/tritonserver/backends)",
    )
    check.add_argument("--json", action="store_true", help="one JSON document on stdout")


def _add_access_flags(serve) -> None:
    # Restricted APIs and header forwarding, as tritonserver (naiad/flags/restrictions.py).
    serve.add_argument(
        "--http-restricted-api",
        action="append",
        default=[],
        metavar="<apis>:<key>=<value>",
        help="answer the comma-separated API categories over HTTP only to requests with "
        "header <key>: <value> (repeatable); categories: health, metadata, inference, "
        "shared-memory, model-config, model-repository, statistics, trace, logging",
    )
    serve.add_argument(
        "--grpc-restricted-protocol",
        action="append",
        default=[],
        metavar="<protocols>:<key>=<value>",
        help="the same for gRPC: calls need metadata triton-grpc-protocol-<key>: <value>",
    )
    serve.add_argument(
        "--http-header-forward-pattern",
        default="",
        help="request headers whose name matches this regex (any case) reach the model "
        "as request parameters",
    )
    serve.add_argument(
        "--grpc-header-forward-pattern",
        default="",
        help="the same for the metadata of gRPC inference calls",
    )


def _parse_access_flags(options) -> None:
    from naiad.flags.restrictions import GRPC_KEY_PREFIX, forward_pattern, parse_restrictions

    options.http_restrictions = parse_restrictions(
        options.http_restricted_api, "http-restricted-api"
    )
    options.grpc_restrictions = parse_restrictions(
        options.grpc_restricted_protocol, "grpc-restricted-protocol", GRPC_KEY_PREFIX, "protocol"
    )
    options.http_forward = forward_pattern(options.http_header_forward_pattern)
    options.grpc_forward = forward_pattern(options.grpc_header_forward_pattern)


class OptionsError(Exception):
    """A `naiad serve` option refused after parsing: the message, and the exit status."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


def complete_serve_options(options) -> None:
    """Checks what argparse cannot and fills the derived settings (restrictions, cache
    size, trace setting): the one completion of `naiad serve`'s options, which the
    in-process naiad.Server uses too. OptionsError when a value is refused."""
    from naiad.flags.cache_config import CacheConfigError, cache_settings

    try:
        _parse_access_flags(options)
    except ValueError as exc:
        raise OptionsError(str(exc), 2) from None
    cli_triton.environment_defaults(options)
    refused = cli_triton.startup_error(options)
    if refused is not None:
        raise OptionsError(refused, 1)
    try:  # the certificates are read now: a file that cannot be used stops the start
        options.grpc_tls = tls.load(options, "grpc")
        options.http_tls = tls.load(options, "http")
    except ValueError as exc:
        raise OptionsError(str(exc), 1) from None
    try:
        options.io_threads = io_threads.io_threads(options)
    except ValueError as exc:
        raise OptionsError(str(exc), 2) from None
    if options.model_load_retry_count < 0:
        raise OptionsError("--model-load-retry-count must be at least 0", 2)
    if options.repository_poll_secs < 1 or options.model_load_thread_count < 1:
        raise OptionsError(
            "--repository-poll-secs and --model-load-thread-count must be at least 1", 2
        )
    try:
        options.cache = cache_settings(options.cache_config, options.response_cache_byte_size)
    except CacheConfigError as exc:
        raise OptionsError(str(exc), 1) from None
    try:
        options.trace = tracing_options.setting_from(options)
    except ValueError as exc:
        raise OptionsError(str(exc), 1) from None


def main(argv=None) -> int:
    options = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    if options.command == "check":
        from naiad import check  # the repository readers, only for this command

        return check.run(options)
    try:
        complete_serve_options(options)
    except OptionsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.status
    if options.load_model and options.model_control_mode != "explicit":
        # Triton ignores them outside explicit mode; say so rather than surprise.
        print(
            "warning: --load-model is only used with --model-control-mode=explicit",
            file=sys.stderr,
        )
    from naiad.server import run

    return run(options)


if __name__ == "__main__":
    raise SystemExit(main())
