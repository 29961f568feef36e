"""What TLS costs: server capacity over plaintext and over TLS side by side in one run,
with the light clients of the bench (perf/wrk_load.py, perf/h2load_load.py) against two
Naiad servers of this tree, one plaintext and one with `--grpc-use-ssl` and
`--http-use-ssl` (certificates of tools/tls_certs.py), alternating rounds.

    NAIAD_PERF_TOOLS=/work/main/perf/.tools perf/.tools/venv/bin/python perf/tls_load.py \
        [--seconds 5] [--rounds 2]

Loads: add_sub over HTTP/1.1 (wrk, tritonclient's binary request, 8 and 64 connections),
add_sub over gRPC (h2load, one ModelInfer, 8 and 64 connections) and identity_fp32 over
gRPC (h2load, 602 KB each way, 4 connections). Reports infer/s, the server's CPU per
request (the client decrypts too, on its own CPU) and the mean latency. The clients keep
their connections for the whole run, so this is the cost of the records, not of
handshakes. Every h2load run is bracketed by a grpcio check of the same request (over
TLS on the TLS server). Each server gets one CPU and the client the other (a 2-core
machine); the machine is shared, so only the ratios of one run mean anything."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

PERF = Path(__file__).resolve().parent
sys.path.insert(0, str(PERF))
sys.path.insert(0, str(PERF.parent / "tools"))

import h2load_load  # noqa: E402
from bench import scenario_inputs, split_cpus  # noqa: E402
from scenarios import reference  # noqa: E402
from servers import NaiadServer  # noqa: E402
from tls_certs import make_certs, tls_flags  # noqa: E402
from wrk_load import run_wrk  # noqa: E402

# (name, client, model, connections)
LOADS = (
    ("add_sub HTTP wrk c=8", "wrk", "add_sub", 8),
    ("add_sub HTTP wrk c=64", "wrk", "add_sub", 64),
    ("add_sub gRPC h2load c=8", "h2load", "add_sub", 8),
    ("add_sub gRPC h2load c=64", "h2load", "add_sub", 64),
    ("identity_fp32 602 KB gRPC h2load c=4", "h2load", "identity_fp32", 4),
)


def _measured(server, load) -> tuple[dict, float]:
    """`load()`'s result and the server's CPU µs per request during it: its CPU time over
    the requests its rate makes in the run's wall time (h2load's warm-up second counted
    at the measured rate)."""
    cpu, start = server.cpu_seconds(), time.monotonic()
    run = load()
    cpu, wall = server.cpu_seconds() - cpu, time.monotonic() - start
    return run, 1e6 * cpu / max(1.0, run["rps"] * wall)


def _h2load(server, scheme: str, root: bytes, model: str, connections: int, seconds: float, cpus):
    inputs = scenario_inputs(model)
    expected = reference(model, inputs)
    request = h2load_load.infer_request(model, inputs, list(expected))
    for when in ("before", "after"):
        if when == "after":
            run, cpu_us = _measured(
                server,
                lambda: h2load_load.run_h2load(
                    server.grpc_url, request, connections, seconds, cpus, scheme=scheme
                ),
            )
        wrong = h2load_load.check_answer(server.grpc_url, model, inputs, expected, root)
        if wrong:
            raise SystemExit(f"{scheme} gRPC answer {when} the h2load run: {wrong}")
    output_bytes = sum(a.nbytes for a in expected.values())
    if run["failed"] or run["data_bytes"] < run["requests"] * output_bytes:
        raise SystemExit(f"{scheme} h2load: {run['failed']} failed or answers without outputs")
    return run["rps"], run["avg_us"], cpu_us


def _wrk(server, scheme: str, connections: int, seconds: float, cpus):
    run, cpu_us = _measured(
        server,
        lambda: run_wrk(server.http_url, "binary", connections, seconds, cpus, scheme=scheme),
    )
    if run["errors"]:
        raise SystemExit(f"{scheme} wrk: {run['errors']} non-200 answers")
    return run["rps"], run["avg_us"], cpu_us


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args(argv)
    tree = PERF.parent
    python = tree / ".venv" / "bin" / "python"
    server_cpus, client_cpus, _ = split_cpus()
    results: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory(prefix="naiad-tls-load-") as tmp:
        certs = make_certs(Path(tmp) / "certs")
        root = certs.ca.read_bytes()
        plain = NaiadServer(tree, python, "plaintext")
        tls = NaiadServer(
            tree, python, "tls", [*tls_flags("grpc", certs), *tls_flags("http", certs)]
        )
        tls.scheme = "https"
        repo = Path(tmp) / "models"
        repo.mkdir()
        for model in ("add_sub", "identity_fp32"):
            shutil.copytree(PERF / "models" / model, repo / model)
        for round_index in range(args.rounds):
            order = (plain, tls) if round_index % 2 == 0 else (tls, plain)
            for server in order:
                scheme = server.scheme
                server.start(repo, server_cpus, Path(tmp) / f"{server.label}-{round_index}.log")
                try:
                    for name, client, model, connections in LOADS:
                        if client == "wrk":
                            _wrk(server, scheme, connections, 1, client_cpus)  # warm-up
                            got = _wrk(server, scheme, connections, args.seconds, client_cpus)
                        else:
                            key = root if scheme == "https" else b""
                            got = _h2load(
                                server, scheme, key, model, connections, args.seconds, client_cpus
                            )
                        results.setdefault((name, server.label), []).append(got)
                        print(
                            f"round {round_index + 1} {server.label} {name}: {got[0]:.0f} "
                            f"infer/s, avg {got[1]:.0f} us, server CPU {got[2]:.1f} us/request"
                        )
                finally:
                    server.stop()
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        "\n| load | plaintext infer/s | TLS infer/s | TLS / plaintext "
        "| server CPU us/request plain / TLS | avg latency us plain / TLS |"
    )
    print("|---|---|---|---|---|---|")
    for name, *_ in LOADS:
        plain_mean = [sum(x) / len(x) for x in zip(*results[(name, "plaintext")])]
        tls_mean = [sum(x) / len(x) for x in zip(*results[(name, "tls")])]
        print(
            f"| {name} | {plain_mean[0]:.0f} | {tls_mean[0]:.0f} | "
            f"{tls_mean[0] / plain_mean[0]:.2f} | {plain_mean[2]:.1f} / {tls_mean[2]:.1f} | "
            f"{plain_mean[1]:.0f} / {tls_mean[1]:.0f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
