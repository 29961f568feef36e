"""How many C++ I/O threads `naiad serve` runs (naiad/io_engine.py): Triton's
--http-thread-count, and --grpc-infer-thread-count as Triton releases after 2.51 take it.

One engine serves HTTP and gRPC, so the two flags size the same threads: given both, the
larger wins. Neither given: one thread. With --http-max-connections, one thread too:
Python counts the connections it admits, and those of loops past the first never reach
it. Loop 0 runs on the event loop; each further
thread serves a share of the HTTP connections (gRPC connections stay on loop 0, whose
Python keeps their keepalive and connection age)."""

from __future__ import annotations

import argparse

__all__ = ["MAX_IO_THREADS", "add_arguments", "io_threads", "startup_note"]

# Core::kMaxOwner: a request id names its loop in 6 bits.
MAX_IO_THREADS = 63


def add_arguments(serve: argparse.ArgumentParser) -> None:
    for flag in ("--http-thread-count", "--grpc-infer-thread-count"):
        serve.add_argument(
            flag,
            type=int,
            default=None,
            help="C++ I/O threads serving the HTTP and gRPC ports (one engine: the larger "
            f"of the two flags; default 1, at most {MAX_IO_THREADS})",
        )


def io_threads(options) -> int:
    """The I/O threads the flags ask for; ValueError naming the flag past the limits."""
    asked = []
    for flag in ("http_thread_count", "grpc_infer_thread_count"):
        value = getattr(options, flag, None)
        if value is None:
            continue
        if not 1 <= value <= MAX_IO_THREADS:
            name = "--" + flag.replace("_", "-")
            raise ValueError(f"{name} must be between 1 and {MAX_IO_THREADS}, got {value}")
        asked.append(value)
    if getattr(options, "http_max_connections", 0):
        return 1
    return max(asked, default=1)


def startup_note(options) -> str | None:
    """The start-up line saying how many I/O threads the given flags made; None when
    neither is given."""
    given = [
        f"--{flag.replace('_', '-')}={value}"
        for flag in ("http_thread_count", "grpc_infer_thread_count")
        if (value := getattr(options, flag, None)) is not None
    ]
    if not given:
        return None
    count = getattr(options, "io_threads", 1)
    why = (
        " (--http-max-connections counts on one)"
        if getattr(options, "http_max_connections", 0)
        else ""
    )
    return f"{', '.join(given)}: {count} C++ I/O thread(s) serve the HTTP and gRPC ports{why}"
