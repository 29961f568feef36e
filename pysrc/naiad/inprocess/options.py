"""The in-process server's options: Triton's `tritonserver.Options` names, as flags.

Each option is turned into the `naiad serve` flag with Triton's meaning, and the
flags are read by the one command-line parser (naiad/cli.py): a value is checked,
and defaults, exactly as `naiad serve` does, and `extra_args` takes any other flag.
Where in-process differs from `naiad serve`: nothing listens unless a port is given
(`http_port`, `grpc_port`, `metrics_port`, `openai_port`), the front ends bind 127.0.0.1 unless
`host` says otherwise, and Triton's in-process log defaults apply (info, warning and
error logging off).
"""

from __future__ import annotations

import contextlib
import enum
import io
import os
from dataclasses import dataclass, field
from typing import Any

from naiad.inprocess.errors import InvalidArgumentError


class ModelControlMode(str, enum.Enum):
    """Triton's model control modes (tritonserver.ModelControlMode)."""

    NONE = "none"
    POLL = "poll"
    EXPLICIT = "explicit"


class RateLimitMode(str, enum.Enum):
    """Triton's rate limiter modes (tritonserver.RateLimitMode)."""

    OFF = "off"
    EXEC_COUNT = "execution_count"


@dataclass
class Options:
    """Server options: Triton's names (tritonserver.Options) where Naiad has the
    setting, and Naiad's own after them. See docs/in_process.md for the list."""

    model_repository: str | list[str] = field(default_factory=list)
    model_control_mode: ModelControlMode | str = ModelControlMode.NONE
    startup_models: list[str] = field(default_factory=list)
    strict_model_config: bool = False
    rate_limiter_mode: RateLimitMode | str = RateLimitMode.OFF
    pinned_memory_pool_size: int = 1 << 28
    # {"local": {"size": bytes}}: the response cache, as Triton's.
    cache_config: dict[str, dict[str, Any]] = field(default_factory=dict)
    exit_on_error: bool = True
    strict_readiness: bool = True
    exit_timeout: int = 30
    model_load_thread_count: int = 4
    log_file: str | None = None
    log_info: bool = False
    log_warn: bool = False
    log_error: bool = False
    log_format: str = "default"
    log_verbose: int = 0
    metrics_interval: int = 2000
    backend_configuration: dict[str, dict[str, str]] = field(default_factory=dict)
    # Where Python-based backends (<name>/model.py) are found, as tritonserver's default.
    backend_directory: str = "/opt/tritonserver/backends"
    # Naiad's own: the front ends, each started only when its port is given.
    http_port: int | None = None
    grpc_port: int | None = None
    metrics_port: int | None = None
    openai_port: int | None = None  # the OpenAI-compatible frontend (docs/openai.md)
    host: str = "127.0.0.1"
    repository_poll_secs: int = 15
    arena_size: int | None = None  # bytes of the shared-memory arena (`--arena-size`)
    extra_args: list[str] = field(default_factory=list)  # any other `naiad serve` flag

    def flags(self) -> list[str]:
        """The `naiad serve` command line these options are."""
        repositories = self.model_repository
        if isinstance(repositories, str) or hasattr(repositories, "__fspath__"):
            repositories = [repositories]
        if not repositories:
            raise InvalidArgumentError("Model repository must be specified.")
        args = [f"--model-repository={r}" for r in repositories]
        args.append(f"--model-control-mode={_value(self.model_control_mode)}")
        args += [f"--load-model={name}" for name in self.startup_models]
        args.append(f"--strict-model-config={_bool(self.strict_model_config)}")
        args.append(f"--rate-limit={_value(self.rate_limiter_mode)}")
        args.append(f"--pinned-memory-pool-byte-size={self.pinned_memory_pool_size}")
        for cache, settings in self.cache_config.items():
            args += [f"--cache-config={cache},{k}={v}" for k, v in settings.items()]
        args.append(f"--exit-on-error={_bool(self.exit_on_error)}")
        args.append(f"--strict-readiness={_bool(self.strict_readiness)}")
        args.append(f"--exit-timeout-secs={self.exit_timeout}")
        args.append(f"--model-load-thread-count={self.model_load_thread_count}")
        if self.log_file:
            args.append(f"--log-file={self.log_file}")
        args.append(f"--log-info={_bool(self.log_info)}")
        args.append(f"--log-warning={_bool(self.log_warn)}")
        args.append(f"--log-error={_bool(self.log_error)}")
        args.append(f"--log-format={self.log_format}")
        args.append(f"--log-verbose={int(self.log_verbose)}")
        args.append(f"--metrics-interval-ms={self.metrics_interval}")
        for backend, settings in self.backend_configuration.items():
            args += [f"--backend-config={backend},{k}={v}" for k, v in settings.items()]
        args.append(f"--backend-directory={os.fspath(self.backend_directory)}")
        args.append(f"--http-address={self.host}")
        for name, port in (
            ("http", self.http_port),
            ("grpc", self.grpc_port),
            ("metrics", self.metrics_port),
        ):
            args.append(f"--allow-{name}={_bool(port is not None)}")
            if port is not None:
                args.append(f"--{name}-port={port}")
        if self.openai_port is not None:
            args.append(f"--openai-port={self.openai_port}")
        args.append(f"--repository-poll-secs={self.repository_poll_secs}")
        if self.arena_size is not None:
            args.append(f"--arena-size={self.arena_size}")
        return args + list(self.extra_args)

    def namespace(self):
        """The options as `naiad serve` reads them (its argparse namespace, completed
        as its main() completes it); InvalidArgumentError names a value it refuses."""
        from naiad import cli

        errors = io.StringIO()
        try:
            with contextlib.redirect_stderr(errors):
                options = cli.build_parser().parse_args(["serve", *self.flags()])
        except SystemExit:
            # argparse's own words: "naiad serve: error: argument --x: invalid ..."
            lines = errors.getvalue().strip().splitlines()
            raise InvalidArgumentError(lines[-1] if lines else "invalid options") from None
        try:
            cli.complete_serve_options(options)
        except cli.OptionsError as exc:
            raise InvalidArgumentError(str(exc)) from None
        return options


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _value(value) -> str:
    return value.value if isinstance(value, enum.Enum) else str(value)
