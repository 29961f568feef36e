"""The server log as Triton 2.51 writes it: its settings, its line format, where lines go.

One module for the frontend and every worker process, so a line looks the same whoever
writes it:

    I1201 19:24:51.123456 4242 server.py:97] "Started HTTPService at 127.0.0.1:8000"
    2026-12-01T19:24:51Z I 4242 server.py:97] "Started HTTPService at 127.0.0.1:8000"

(`default` and `ISO8601` formats: severity letter, UTC time, the server's pid, the source
file's base name and line, then the message as a JSON string unless
TRITON_SERVER_ESCAPE_LOG_MESSAGES=0, as Triton's common/logging.cc does.)

The settings are the logging extension's (`GET/POST /v2/logging`, gRPC `LogSettings`):
log_file, log_info, log_warning, log_error, log_verbose_level, log_format. The frontend
holds the authority (`update()` validates a request in Triton's order and with its
messages); each worker gets the whole settings as one JSON line on its settings pipe when
it starts and again after every change (scheduling/instance.py writes it, `follow()` reads
it on a thread of the worker, which acknowledges each later line with SETTINGS_APPLIED on
its control pipe), so a running model's `pb_utils.Logger` lines follow the server's
level, format and file without a per-call question to anyone.

Python's `logging` records of the process (frontend or worker) go through `TritonHandler`:
ERROR and above are Triton's E, WARNING its W, INFO its I, DEBUG a verbose line (level 1).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time

__all__ = [
    "DEFAULT",
    "ISO8601",
    "settings",
    "settings_line",
    "apply",
    "update",
    "enabled",
    "write",
    "write_table",
    "TritonHandler",
    "install",
    "follow",
]

DEFAULT = "default"
ISO8601 = "ISO8601"

# Severity letters and the setting that turns each on.
ERROR, WARNING, INFO, VERBOSE = "E", "W", "I", "V"

_ESCAPE = os.environ.get("TRITON_SERVER_ESCAPE_LOG_MESSAGES") != "0"


class _State:
    """This process's current settings and where its lines go."""

    def __init__(self):
        self.file = ""
        self.info = True
        self.warning = True
        self.error = True
        self.verbose = 0
        self.format = DEFAULT
        self.pid = os.getpid()  # the server's pid: a worker writes its frontend's, as Triton
        self.fd = -1  # the log file, opened for appending; -1: stderr
        self.lock = threading.Lock()


_state = _State()


def settings() -> dict:
    """The logging extension's answer, keys in Triton's order."""
    s = _state
    return {
        "log_file": s.file,
        "log_info": s.info,
        "log_warning": s.warning,
        "log_error": s.error,
        "log_verbose_level": s.verbose,
        "log_format": s.format,
    }


def settings_line() -> bytes:
    """The settings a worker follows, as the one JSON line its settings pipe carries."""
    return json.dumps({**settings(), "pid": _state.pid}).encode() + b"\n"


def _open(path: str) -> int:
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)


def apply(values: dict) -> None:
    """Takes settings already checked (start-up flags, a worker's settings line)."""
    s = _state
    with s.lock:
        path = values.get("log_file", s.file) or ""
        if path != s.file:
            fd = _open(path) if path else -1  # OSError: the caller says which flag
            if s.fd >= 0:
                os.close(s.fd)
            s.fd = fd
            s.file = path
        s.info = bool(values.get("log_info", s.info))
        s.warning = bool(values.get("log_warning", s.warning))
        s.error = bool(values.get("log_error", s.error))
        s.verbose = int(values.get("log_verbose_level", s.verbose))
        s.format = values.get("log_format", s.format)
        if "pid" in values:
            s.pid = int(values["pid"])
    _set_python_level()


def _refuse(kind: str, message: str):
    """The error (naiad.errors, by class name) a refused request raises; imported here
    because only the frontend validates requests, and workers need no core for logging."""
    from naiad import errors

    return getattr(errors, kind)(message)


def _verbose_level(number: int) -> int:
    # Triton keeps the level as int32 (LOG_SET_VERBOSE), negative clamped to 0.
    number &= 0xFFFFFFFF
    if number >= 1 << 31:
        return 0
    return number


def update(request: dict, grpc: bool = False) -> dict:
    """Applies a logging-extension request as Triton 2.51 does and returns the new settings.

    HTTP (`grpc=False`): `request` is the JSON body; a null value leaves a setting as it is.
    gRPC: `request` maps each name to (kind, value), kind the SettingValue oneof's field.
    Settings are applied one by one in Triton's order (file, info, warning, error,
    verbose level, format) until the first bad one, which raises Triton's error (a
    naiad.errors.NaiadError); the ones before it stay applied, as in Triton."""
    s = _state
    # gRPC refuses a log_file of any kind, even empty; HTTP one that is not null.
    if ("log_file" in request) if grpc else (request.get("log_file") is not None):
        raise _refuse(
            "Unsupported", "log file location can not be updated through network protocol"
        )
    for name, attr in (("log_info", "info"), ("log_warning", "warning"), ("log_error", "error")):
        value = _field(request, name, "bool_param", grpc)
        if value is None:
            continue
        if type(value) is not bool:
            raise _type_error(name, "boolean", grpc)
        setattr(s, attr, value)
    value = _field(request, "log_verbose_level", "uint32_param", grpc)
    if value is not None:
        if type(value) is not int or value < 0 or value >= 1 << 64:
            raise _type_error("log_verbose_level", "unsigned-integer", grpc)
        s.verbose = _verbose_level(value)
        _set_python_level()
    value = _field(request, "log_format", "string_param", grpc)
    if value is not None:
        if type(value) is not str:
            raise _type_error("log_format", "string", grpc)
        if value not in (DEFAULT, ISO8601):
            if grpc:
                raise _refuse("InvalidArgument", f"invalid argument for log_format, got: {value}")
            raise _refuse("Unavailable", f"invalid argument for --log_format, got: {value}")
        s.format = value
    return settings()


_WRONG = object()  # a gRPC setting of another kind than its name takes


def _field(request: dict, name: str, grpc_kind: str, grpc: bool):
    value = request.get(name)
    if not grpc or value is None:
        return value
    kind, content = value
    return content if kind == grpc_kind else _WRONG


def _type_error(name: str, what: str, grpc: bool) -> Exception:
    if grpc:
        expected = {"boolean": "boolean", "unsigned-integer": "int32", "string": "string"}[what]
        return _refuse("InvalidArgument", f"expect {expected} for '{name}'")
    # rapidjson's words through TritonJson, HTTP 500 (Internal)
    return _refuse("Internal", f"attempt to access JSON non-{what} as {what}")


def enabled(severity: str, level: int = 1) -> bool:
    s = _state
    if severity == INFO:
        return s.info
    if severity == WARNING:
        return s.warning
    if severity == ERROR:
        return s.error
    return s.verbose >= level


def _preamble(letter: str, path: str, line: int, now: float) -> str:
    s = _state
    seconds = int(now)
    tm = time.gmtime(seconds)
    if s.format == ISO8601:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", tm)
        return f"{stamp} {letter} {s.pid} {path}:{line}] "
    micros = int((now - seconds) * 1_000_000)
    stamp = time.strftime("%m%d %H:%M:%S", tm)
    return f"{letter}{stamp}.{micros:06d} {s.pid} {path}:{line}] "


def _emit(text: str) -> None:
    s = _state
    with s.lock:
        if s.fd >= 0:
            os.write(s.fd, text.encode("utf-8", "replace"))  # one append per record
        else:
            stream = sys.stderr
            stream.write(text)
            stream.flush()


def write(severity: str, path: str, line: int, message: str, level: int = 1) -> None:
    """One record, when its severity is on: `severity` is E, W, I or V (verbose `level`)."""
    if not enabled(severity, level):
        return
    letter = "I" if severity == VERBOSE else severity
    body = json.dumps(message, ensure_ascii=False) if _ESCAPE else message
    _emit(_preamble(letter, os.path.basename(path), line, time.time()) + body + "\n")


def write_table(path: str, line: int, table: str) -> None:
    """An INFO record holding a table, unescaped on the lines after the preamble
    (Triton's LOG_TABLE_INFO: the model load table)."""
    if _state.info:
        _emit(_preamble("I", os.path.basename(path), line, time.time()) + "\n" + table + "\n")


# Formats a record's exception and stack as logging's default Formatter does; the
# handler writes the rest of the line itself.
_TRACEBACKS = logging.Formatter()


class TritonHandler(logging.Handler):
    """Python logging records, written as Triton's log lines under the current settings."""

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR:
            severity = ERROR
        elif record.levelno >= logging.WARNING:
            severity = WARNING
        elif record.levelno >= logging.INFO:
            severity = INFO
        else:
            severity = VERBOSE
        if not enabled(severity):
            return
        try:
            message = record.getMessage()
            if record.exc_info:
                message += "\n" + _TRACEBACKS.formatException(record.exc_info)
            if record.stack_info:
                message += "\n" + _TRACEBACKS.formatStack(record.stack_info)
            write(severity, record.filename, record.lineno, message)
        except Exception:
            self.handleError(record)


def _set_python_level() -> None:
    # DEBUG records are only built while verbose logging is on.
    logging.getLogger().setLevel(logging.DEBUG if _state.verbose > 0 else logging.INFO)


def install() -> None:
    """Routes this process's Python logging through Triton's format (once)."""
    root = logging.getLogger()
    if not any(isinstance(h, TritonHandler) for h in root.handlers):
        for handler in list(root.handlers):
            root.removeHandler(handler)
        root.addHandler(TritonHandler())
    _set_python_level()


# What a worker writes on its control pipe for each settings line it applied after the
# first (scheduling/instance.py waits for it before answering a settings change).
SETTINGS_APPLIED = b"L"


def follow(fd: int, applied=None) -> None:
    """In a worker: apply the settings line waiting on `fd` now (the frontend wrote it
    before the worker started), then every later one from a daemon thread, calling
    `applied()` after each (also when a line could not be applied: it was read)."""
    stream = os.fdopen(fd, "rb")
    first = stream.readline()
    if first:
        apply(json.loads(first))

    def loop() -> None:
        for line in stream:  # ends when the frontend closes its end
            try:
                apply(json.loads(line))
            except (ValueError, OSError) as exc:
                logging.getLogger("naiad").error("log settings not applied: %s", exc)
            if applied is not None:
                applied()

    threading.Thread(target=loop, name="naiad-log-settings", daemon=True).start()
