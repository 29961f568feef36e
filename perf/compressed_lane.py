"""What a compressed answer costs: the add_sub JSON scenario (JSON tensors in and out,
wrk) with `Accept-Encoding: gzip` through the fast lane (the lane compresses in C++,
csrc/codec/http_compress.h), through the general path (`--fast-lane=false`: where every gzip
request went before the lane took them), and without compression through the lane, side
by side in one run, alternating rounds.

    NAIAD_PERF_TOOLS=/work/perftools .venv/bin/python perf/compressed_lane.py [--seconds 5]

Each server gets one CPU and wrk the other (a 2-core machine); the machine is shared, so
only the ratios of one run mean anything. Prints infer/s and average latency per
configuration and the load average before and after."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

PERF = Path(__file__).resolve().parent
sys.path.insert(0, str(PERF))

from servers import NaiadServer  # noqa: E402
from wrk_load import run_wrk  # noqa: E402

GZIP = {"Accept-Encoding": "gzip"}


class GeneralPathServer(NaiadServer):
    """Naiad with the fast lane off: every request takes the Python general path."""

    def command(self, repo: Path) -> list[str]:
        return [*super().command(repo), "--fast-lane=false"]


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args(argv)
    tree = PERF.parent
    python = tree / ".venv" / "bin" / "python"
    cpus = os.sched_getaffinity(0)
    server_cpus, client_cpus = ([min(cpus)], [max(cpus)]) if len(cpus) > 1 else (None, None)
    configs = [
        ("lane, gzip", NaiadServer(tree, python, "lane"), GZIP),
        ("general path, gzip (before)", GeneralPathServer(tree, python, "general"), GZIP),
        ("lane, uncompressed", NaiadServer(tree, python, "lane"), None),
    ]
    results = {name: [] for name, _, _ in configs}
    print(f"load average before: {load()}")
    with tempfile.TemporaryDirectory(prefix="naiad-gzip-") as tmp:
        repo = Path(tmp) / "models"
        repo.mkdir()
        shutil.copytree(PERF / "models" / "add_sub", repo / "add_sub")
        for round_index in range(args.rounds):
            for name, server, headers in configs:
                server.start(repo, server_cpus, Path(tmp) / f"{server.label}-{round_index}.log")
                try:
                    run_wrk(
                        server.http_url,
                        "json",
                        args.connections,
                        1,
                        client_cpus,
                        extra_headers=headers,
                    )  # warm-up
                    run = run_wrk(
                        server.http_url,
                        "json",
                        args.connections,
                        args.seconds,
                        client_cpus,
                        extra_headers=headers,
                    )
                finally:
                    server.stop()
                if run["errors"]:
                    raise SystemExit(f"{name}: {run['errors']} non-200 answers")
                results[name].append(run)
                print(
                    f"round {round_index + 1} {name}: {run['rps']:.0f} infer/s, "
                    f"avg {run['avg_us']:.0f} us (load {load()})"
                )
    print(f"load average after: {load()}")
    print(f"\n| add_sub JSON, wrk c={args.connections} | infer/s | avg latency us |")
    print("|---|---|---|")
    base = None
    for name, _, _ in configs:
        runs = results[name]
        rps = sum(r["rps"] for r in runs) / len(runs)
        avg = sum(r["avg_us"] for r in runs) / len(runs)
        base = base or rps
        print(f"| {name} | {rps:.0f} ({rps / base:.2f}x of lane gzip) | {avg:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
