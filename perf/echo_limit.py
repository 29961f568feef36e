"""The physical limit of large tensors in band: build/echo_limit (perf/echo_limit.cc, a bare
loopback echo server on one CPU and its client on another) run for a given message size and
number of connections. perf/bench.py runs it in each round and reports every large-tensor
scenario as a share of it.

    perf/.tools/venv/bin/python perf/echo_limit.py [--bytes 602112] [--connections 4] [--whole]
"""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

PERF = Path(__file__).resolve().parent
REPO_ROOT = PERF.parent
BINARY = REPO_ROOT / "build" / "echo_limit"


def build() -> Path:
    subprocess.run(["make", "-s", "build/echo_limit"], cwd=REPO_ROOT, check=True)
    return BINARY


def measure(
    nbytes: int,
    connections: int,
    seconds: float = 5.0,
    server_cpus: list[int] | None = None,
    client_cpus: list[int] | None = None,
    whole: bool = False,
) -> dict:
    """One run: {"round_trips_per_s", "mb_per_s_each_way", "server_cpu_share", ...} as the
    binary prints them. The server and the client each take the first of their CPUs."""
    cmd = [
        str(build()),
        "--bytes",
        str(nbytes),
        "--connections",
        str(connections),
        "--seconds",
        str(seconds),
        "--server-cpu",
        str(server_cpus[0] if server_cpus else -1),
        "--client-cpu",
        str(client_cpus[0] if client_cpus else -1),
        "--whole",
        "1" if whole else "0",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60)
    if proc.returncode != 0:
        raise RuntimeError(f"echo_limit failed ({proc.returncode}): {proc.stderr.strip()}")
    fields = dict(item.split("=", 1) for item in proc.stdout.split() if "=" in item)
    if "round_trips_per_s" not in fields:
        raise RuntimeError(f"echo_limit printed no round_trips_per_s: {proc.stdout!r}")
    return {k: float(v) for k, v in fields.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--bytes", type=int, default=3 * 224 * 224 * 4)
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--whole", action="store_true", help="echo whole messages only")
    args = ap.parse_args()
    from cpus import split_cpus

    server_cpus, client_cpus, pinning = split_cpus()
    result = measure(
        args.bytes, args.connections, args.seconds, server_cpus, client_cpus, args.whole
    )
    print(f"{pinning}: {result}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
