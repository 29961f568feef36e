"""tritonserver's trace flags: --trace-config [<mode>,]<setting>=<value> (repeatable) and
the deprecated --trace-file, --trace-level, --trace-rate, --trace-count and
--trace-log-frequency that Triton 2.51 still takes (a --trace-config value wins), read
as Triton's command_line_parser.cc reads them into the start-up setting."""

from __future__ import annotations

import argparse

from naiad.tracing.settings import (
    LEVEL_OFF,
    LEVEL_TENSORS,
    LEVEL_TIMESTAMPS,
    MODE_OPENTELEMETRY,
    MODE_TRITON,
    Setting,
)
from naiad.tracing.trace_file import TraceFile

_LEVELS = {
    "false": LEVEL_OFF,
    "off": LEVEL_OFF,
    "true": LEVEL_TIMESTAMPS,
    "on": LEVEL_TIMESTAMPS,
    "min": LEVEL_TIMESTAMPS,
    "max": LEVEL_TIMESTAMPS,
    "timestamps": LEVEL_TIMESTAMPS,
    "tensors": LEVEL_TENSORS,
}


def add_arguments(serve: argparse.ArgumentParser) -> None:
    serve.add_argument(
        "--trace-config",
        action="append",
        default=[],
        help="[<mode>,]<setting>=<value> (repeatable), as Triton: level=OFF|TIMESTAMPS|"
        "TENSORS, rate=N, count=N, mode=triton|opentelemetry, triton,file=PATH, "
        "triton,log-frequency=N, opentelemetry,url=URL, opentelemetry,resource=K=V",
    )
    serve.add_argument("--trace-file", help="deprecated: --trace-config triton,file=PATH")
    serve.add_argument("--trace-level", action="append", default=[], help="deprecated")
    serve.add_argument("--trace-rate", help="deprecated: --trace-config rate=N")
    serve.add_argument("--trace-count", help="deprecated: --trace-config count=N")
    serve.add_argument("--trace-log-frequency", help="deprecated")


def _level(text: str) -> int:
    level = _LEVELS.get(text.lower())
    if level is None:
        raise ValueError(f"invalid value for trace level option: {text.lower()}")
    return level


def _mode(text: str) -> str:
    mode = text.lower()
    if mode not in (MODE_TRITON, MODE_OPENTELEMETRY):
        raise ValueError(
            f'invalid value for trace mode option: {mode}. Available options are "triton" '
            'and "opentelemetry"'
        )
    return mode


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"invalid value: {text}") from None


def parse_config(arg: str) -> tuple[str, str, str]:
    """One --trace-config value: (mode or '' for a global setting, setting, value)."""
    comma = arg.find(",")
    if comma == 0:
        raise ValueError(
            "No trace mode specified. --trace-config option format is <trace mode>,"
            f"<setting>=<value> or <setting>=<value>. Got {arg}"
        )
    mode = _mode(arg[:comma]) if comma > 0 else ""
    equals = arg.find("=", comma + 1)
    setting, value = arg[comma + 1 : equals], arg[equals + 1 :]
    if equals < 0 or not setting or not value:
        raise ValueError(
            f"--trace-config option format is '<trace mode>,<setting>=<value>'. Got {arg}"
        )
    return mode, setting, value


def setting_from(options) -> Setting:
    """The start-up trace setting the flags give (Triton's PostProcessTraceArgs)."""
    level, disabled = LEVEL_OFF, False
    for text in options.trace_level:
        parsed = _level(text)
        disabled |= parsed == LEVEL_OFF
        level |= parsed
    rate = _int(options.trace_rate) if options.trace_rate is not None else 1000
    count = _int(options.trace_count) if options.trace_count is not None else -1
    frequency = options.trace_log_frequency
    log_frequency = _int(frequency) if frequency is not None else 0
    path = options.trace_file or ""
    mode = MODE_TRITON
    by_mode: dict[str, list] = {"": [], MODE_TRITON: [], MODE_OPENTELEMETRY: []}
    for arg in options.trace_config:
        config_mode, key, value = parse_config(arg)
        by_mode[config_mode].append((key, value))
    for key, value in by_mode[""]:
        if key == "rate":
            rate = _int(value)
        elif key == "level":
            parsed = _level(value)
            disabled |= parsed == LEVEL_OFF
            level |= parsed
        elif key == "mode":
            mode = _mode(value)
        elif key == "count":
            count = _int(value)
    if mode == MODE_TRITON:
        for key, value in by_mode[MODE_TRITON]:
            if key == "file":
                path = value
            elif key == "log-frequency":
                log_frequency = _int(value)
    if disabled:
        level = LEVEL_OFF
    config = by_mode[mode]
    if mode == MODE_OPENTELEMETRY:
        config = _with_batch_defaults(config)
    return Setting(
        level, rate % (1 << 32), count, log_frequency % (1 << 32), TraceFile(path), mode, config
    )


def _with_batch_defaults(config: list) -> list:
    """Triton adds the batch span processor's settings it was not given."""
    import os

    given = {key for key, _ in config}
    out = list(config)
    for key, env, default in (
        ("bsp_max_queue_size", "OTEL_BSP_MAX_QUEUE_SIZE", "2048"),
        ("bsp_schedule_delay", "OTEL_BSP_SCHEDULE_DELAY", "5000"),
        ("bsp_max_export_batch_size", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "512"),
    ):
        if key not in given:
            out.append((key, _int(os.environ.get(env, default))))
    return out


def tracer_for(options):
    """The server's Tracer for its parsed options (the defaults when none were read)."""
    from naiad.tracing.settings import TraceSettings
    from naiad.tracing.tracer import Tracer

    setting = getattr(options, "trace", None)
    if setting is None:
        setting = Setting(LEVEL_OFF, 1000, -1, 0, TraceFile(""), MODE_TRITON, [])
    return Tracer(TraceSettings(setting))
