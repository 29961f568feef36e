"""What a deadline costs on the gRPC lane: h2load posting add_sub `ModelInfer` with and
without a `grpc-timeout` header, to one Naiad server, alternating rounds, side by side in
one run. Calls with a deadline are the C++ I/O loop's (csrc/http1/deadline_timer.h): the
run checks that /v2/naiad/lanes counted every answered call as the loop's
(`io_loop_requests`), not Python's.

    NAIAD_PERF_TOOLS=/work/main/perf/.tools .venv/bin/python perf/grpc_timeout_cost.py

The server gets one CPU and h2load the other (a 2-core machine); the machine is shared,
so only the ratio of one run means anything. Prints infer/s and average latency per
configuration and the load average before and after."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import urllib.request
from pathlib import Path

import numpy as np

PERF = Path(__file__).resolve().parent
sys.path.insert(0, str(PERF))

import h2load_load  # noqa: E402
from servers import NaiadServer  # noqa: E402

CONFIGS = (("no grpc-timeout", ()), ("grpc-timeout: 10S", ("grpc-timeout: 10S",)))


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def loop_requests(server) -> int:
    with urllib.request.urlopen(f"http://{server.http_url}/v2/naiad/lanes") as answer:
        return json.load(answer)["io_loop_requests"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    tree = PERF.parent
    cpus = os.sched_getaffinity(0)
    server_cpus, client_cpus = ([min(cpus)], [max(cpus)]) if len(cpus) > 1 else (None, None)
    rng = np.random.default_rng(0)
    inputs = {f"INPUT{i}": rng.standard_normal((1, 16)).astype(np.float32) for i in (0, 1)}
    request = h2load_load.infer_request("add_sub", inputs, ["OUTPUT0", "OUTPUT1"])
    results = {name: [] for name, _ in CONFIGS}
    server = NaiadServer(tree, tree / ".venv" / "bin" / "python", "lane")
    print(f"load average before: {load()}")
    with tempfile.TemporaryDirectory(prefix="naiad-deadline-") as tmp:
        repo = Path(tmp) / "models"
        repo.mkdir()
        shutil.copytree(PERF / "models" / "add_sub", repo / "add_sub")
        server.start(repo, server_cpus, Path(tmp) / "server.log")
        try:
            for round_index in range(args.rounds):
                for name, headers in CONFIGS:
                    h2load_load.run_h2load(
                        server.grpc_url, request, args.connections, 1, client_cpus, headers=headers
                    )  # warm-up
                    before = loop_requests(server)
                    run = h2load_load.run_h2load(
                        server.grpc_url,
                        request,
                        args.connections,
                        args.seconds,
                        client_cpus,
                        headers=headers,
                    )
                    served = loop_requests(server) - before
                    if run["failed"] or served < run["succeeded"]:
                        raise SystemExit(
                            f"{name}: {run['failed']} failed; the loop served {served} "
                            f"of {run['succeeded']}"
                        )
                    results[name].append(run)
                    print(
                        f"round {round_index + 1} {name}: {run['rps']:.0f} infer/s, "
                        f"avg {run['avg_us']:.0f} us, loop served {served} (load {load()})"
                    )
        finally:
            server.stop()
    print(f"load average after: {load()}")
    print(f"\n| add_sub ModelInfer, h2load c={args.connections} | infer/s | avg latency us |")
    print("|---|---|---|")
    base = None
    for name, _ in CONFIGS:
        runs = results[name]
        rps = sum(r["rps"] for r in runs) / len(runs)
        avg = sum(r["avg_us"] for r in runs) / len(runs)
        base = base or rps
        print(f"| {name} | {rps:.0f} ({rps / base:.2f}x) | {avg:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
