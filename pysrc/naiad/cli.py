"""`naiad serve`: the command line, with tritonserver's flag names and meanings."""

from __future__ import annotations

import argparse
import sys

from naiad.tracing import options as tracing_options


def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got '{text}'")


def _size(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    text = text.strip().lower().rstrip("b")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="naiad", description="A Triton-compatible inference server"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve a model repository")
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
        help="address the HTTP server binds (default 0.0.0.0, as Triton)",
    )
    serve.add_argument("--http-port", type=int, default=8000)
    serve.add_argument("--grpc-port", type=int, default=8001)
    serve.add_argument("--metrics-port", type=int, default=8002)
    serve.add_argument("--allow-http", type=_bool, default=True)
    serve.add_argument("--allow-grpc", type=_bool, default=True)
    serve.add_argument("--allow-metrics", type=_bool, default=True)
    serve.add_argument("--log-verbose", type=int, default=0)
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
        "--arena-size",
        type=_size,
        default=1 << 30,
        help="bytes of the shared-memory arena for tensors in flight (default 1G)",
    )
    serve.add_argument(
        "--fast-lane",
        type=_bool,
        default=True,
        help="Naiad's own: false sends every infer request through the general Python "
        "path (differential tests, diagnosis); answers are the same either way",
    )
    tracing_options.add_arguments(serve)
    return parser


def main(argv=None) -> int:
    options = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    if options.load_model and options.model_control_mode != "explicit":
        # Triton ignores them outside explicit mode; say so rather than surprise.
        print(
            "warning: --load-model is only used with --model-control-mode=explicit",
            file=sys.stderr,
        )
    if options.repository_poll_secs < 1 or options.model_load_thread_count < 1:
        print(
            "error: --repository-poll-secs and --model-load-thread-count must be at least 1",
            file=sys.stderr,
        )
        return 2
    try:
        options.trace = tracing_options.setting_from(options)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    from naiad.server import run

    return run(options)


if __name__ == "__main__":
    raise SystemExit(main())
