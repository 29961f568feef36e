"""The C++ I/O engine on 1 and 2 loops side by side (perf/io_threads_bench.cc, no Python):
wrk posts add_sub (binary tensors) at the given concurrency to the bench for each loop
count in turn, in one run, and the table gives infer/s (wrk's count) and the engine's CPU
per request (the bench process's CPU over the run, less its stand-in worker's, divided by
the requests it answered).

    make build/io_threads_bench
    .venv/bin/python perf/io_threads.py --concurrency 64 --seconds 10 --rounds 3

The machine's cores are shared with wrk (one thread): on a 2-core host two loops compete
with the client for the second core, so the rate says how the hand-off behaves, not what
a second core would add; the CPU per request says what a loop pays per request with one
loop and with two.

`--serve`: the same through `naiad serve --http-thread-count N` (this tree, built in
place; add_sub's Python model in a worker process), unpinned; the CPU per request is the
frontend process's (every I/O thread's and the event loop's), its workers' left out.

    .venv/bin/python perf/io_threads.py --serve --concurrency 64 --seconds 10 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from wrk_load import run_wrk  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
BENCH = REPO_ROOT / "build" / "io_threads_bench"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_run(loops: int, concurrency: int, seconds: float) -> dict:
    port = _free_port()
    bench = subprocess.Popen(
        [str(BENCH), str(port), str(loops)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        if bench.stdout.readline().strip() != "ready":
            raise RuntimeError("io_threads_bench did not start")

        def snapshot() -> dict:
            bench.stdin.write("\n")
            bench.stdin.flush()
            return json.loads(bench.stdout.readline())

        before = snapshot()
        wrk = run_wrk(f"127.0.0.1:{port}", "binary", concurrency, seconds)
        after = snapshot()
    finally:
        bench.stdin.close()
        bench.wait(timeout=30)
    answered = after["answered"] - before["answered"]
    engine_cpu = (after["cpu_s"] - before["cpu_s"]) - (
        after["worker_cpu_s"] - before["worker_cpu_s"]
    )
    return _row(loops, wrk, answered, engine_cpu)


def _row(loops: int, wrk: dict, answered: int, cpu_s: float) -> dict:
    """One run's figures: wrk's, and `cpu_s` over the `answered` requests."""
    return {
        "loops": loops,
        "rps": wrk["rps"],
        "errors": wrk["errors"],
        "answered": answered,
        "us_per_request": cpu_s / answered * 1e6 if answered else 0.0,
        "p99_us": wrk["p99_us"],
    }


def _cpu_s(pid: int) -> float:
    """User + kernel CPU seconds of one live process (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def serve_run(loops: int, concurrency: int, seconds: float, repo: Path, logs: Path) -> dict:
    from servers import NaiadServer

    server = NaiadServer(
        REPO_ROOT,
        REPO_ROOT / ".venv" / "bin" / "python",
        extra_args=[f"--http-thread-count={loops}"],
    )
    server.start(repo, None, logs / f"naiad-{loops}.log")
    try:
        run_wrk(server.http_url, "binary", concurrency, 1.0)  # warm-up: workers, caches
        before = _cpu_s(server.proc.pid)
        wrk = run_wrk(server.http_url, "binary", concurrency, seconds)
        used = _cpu_s(server.proc.pid) - before
    finally:
        server.stop()
    return _row(loops, wrk, wrk["requests"], used)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--loops", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--serve", action="store_true", help="through `naiad serve`")
    args = parser.parse_args()
    if not args.serve and not BENCH.exists():
        raise SystemExit(f"{BENCH} is missing: run make build/io_threads_bench")
    runs = {loops: [] for loops in args.loops}
    with tempfile.TemporaryDirectory(prefix="naiad-io-threads-") as tmp:
        repo = Path(tmp) / "models"
        shutil.copytree(REPO_ROOT / "perf" / "models" / "add_sub", repo / "add_sub")
        for _ in range(args.rounds):
            for loops in args.loops:  # interleaved: the host's load falls on both alike
                if args.serve:
                    run = serve_run(loops, args.concurrency, args.seconds, repo, Path(tmp))
                else:
                    run = one_run(loops, args.concurrency, args.seconds)
                runs[loops].append(run)
    where = "naiad serve --http-thread-count N" if args.serve else "io_threads_bench"
    print(f"add_sub binary, wrk c={args.concurrency}, {args.seconds:g} s x {args.rounds}, {where}")
    cost = "frontend" if args.serve else "engine"
    print(f"loops  infer/s (median)  {cost} us/request (median)  p99 us  errors")
    for loops, results in runs.items():
        print(
            f"{loops:5d}  {statistics.median(r['rps'] for r in results):16,.0f}"
            f"  {statistics.median(r['us_per_request'] for r in results):26.2f}"
            f"  {statistics.median(r['p99_us'] for r in results):6.0f}"
            f"  {sum(r['errors'] for r in results):6d}"
        )


if __name__ == "__main__":
    main()
