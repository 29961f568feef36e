"""How a benchmark splits this host's CPUs between the server and its load generator: the
first half for the server, the second for the client, so that neither steals the other's
cycles (one CPU: nothing pinned, and the line printed says so)."""

from __future__ import annotations

import os


def split_cpus() -> tuple[list[int] | None, list[int] | None, str]:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None, None, f"not pinned (only CPU {cpus} available)"
    half = len(cpus) // 2
    server, client = cpus[:half], cpus[half:]
    return (
        server,
        client,
        f"server on CPU {server}, client (the load generator: perf_analyzer, wrk or grpcio) on CPU {client}",
    )
