"""Decoupled streaming over gRPC: responses per second, Naiad and the real Triton 2.51
side by side (issue 13's figure).

    .venv/bin/python perf/decoupled_stream.py [--servers naiad,triton] [--concurrency 1,4]
                                              [--responses 100] [--seconds 5] [--rounds 2]

Each server serves perf/models/stream_repeat (a decoupled Python model that answers a
request with N responses, the last flagged final) from a fresh repository, pinned to the
first half of the CPUs as perf/bench.py pins them; the client runs pinned to the other
half. It opens `concurrency` ModelStreamInfer streams (grpcio, asyncio), each with one
request in flight at a time: a request asks for N responses and the next goes once the
N-th has come. The client reads the responses as raw bytes (no decoding), so its cost
per response is small and the same for both servers; it also times each request's first
response (what a token stream's user waits for). Rounds alternate the server order; the
table gives the median responses/s per server, the ratio, and the median time to the
first response.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PERF = Path(__file__).resolve().parent
sys.path.insert(0, str(PERF))

MODEL = "stream_repeat"
METHOD = "/inference.GRPCInferenceService/ModelStreamInfer"


# -- the client (run in its own pinned process) ----------------------------------------------


def _request_bytes(n: int) -> bytes:
    from tritonclient.grpc import service_pb2 as pb

    request = pb.ModelInferRequest(model_name=MODEL, id="s")
    tensor = request.inputs.add(name="N", datatype="INT32", shape=[1])
    del tensor
    request.raw_input_contents.append(int(n).to_bytes(4, "little", signed=True))
    return request.SerializeToString()


async def _client(url: str, concurrency: int, n: int, seconds: float) -> dict:
    import grpc

    payload = _request_bytes(n)
    counts = {"responses": 0, "requests": 0}
    firsts: list[float] = []  # each request's time to its first response, seconds
    stop_at = time.monotonic() + seconds

    async def one_stream(channel):
        call = channel.stream_stream(
            METHOD, request_serializer=lambda b: b, response_deserializer=lambda b: b
        )()
        while time.monotonic() < stop_at:
            sent = time.perf_counter()
            await call.write(payload)
            for i in range(n):
                message = await call.read()
                if message is grpc.aio.EOF:
                    raise RuntimeError("the stream ended early")
                if i == 0:
                    firsts.append(time.perf_counter() - sent)
                counts["responses"] += 1
            counts["requests"] += 1
        await call.done_writing()

    async with grpc.aio.insecure_channel(url) as channel:
        # Warm up: one request per stream before timing would skew little; skip it.
        start = time.monotonic()
        await asyncio.gather(*(one_stream(channel) for _ in range(concurrency)))
        elapsed = time.monotonic() - start
    first_ms = statistics.median(firsts) * 1e3 if firsts else float("nan")
    return {**counts, "seconds": elapsed, "first_response_ms": first_ms}


# -- the driver --------------------------------------------------------------------------------


def _run_client(python: str, url: str, concurrency: int, n: int, seconds: float, cpus) -> dict:
    cmd = [python, __file__, "--client", url, "--concurrency", str(concurrency)]
    cmd += ["--responses", str(n), "--seconds", str(seconds)]
    if cpus:
        cmd = ["taskset", "-c", ",".join(map(str, cpus)), *cmd]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 120)
    if out.returncode != 0:
        raise RuntimeError(f"client failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--client", help=argparse.SUPPRESS)
    parser.add_argument("--servers", default="naiad,triton")
    parser.add_argument("--concurrency", default="1,4")
    parser.add_argument("--responses", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--naiad-arg",
        action="append",
        default=[],
        help="one more `naiad serve` flag (repeatable), e.g. --naiad-arg=--http-io-loop=false",
    )
    options = parser.parse_args()
    if options.client:
        result = asyncio.run(
            _client(options.client, int(options.concurrency), options.responses, options.seconds)
        )
        print(json.dumps(result))
        return 0

    from cpus import split_cpus
    from servers import NaiadServer, TritonServer

    tree = PERF.parent
    python = sys.executable
    server_cpus, client_cpus, pinning = split_cpus()
    print(pinning, flush=True)
    levels = [int(c) for c in options.concurrency.split(",")]
    kinds = options.servers.split(",")
    results: dict = {(kind, c): [] for kind in kinds for c in levels}
    firsts: dict = {(kind, c): [] for kind in kinds for c in levels}
    for round_ in range(options.rounds):
        order = kinds if round_ % 2 == 0 else list(reversed(kinds))
        for kind in order:
            with tempfile.TemporaryDirectory() as tmp:
                repo = Path(tmp) / "models"
                shutil.copytree(PERF / "models" / MODEL, repo / MODEL)
                server = (
                    NaiadServer(tree, Path(python), extra_args=options.naiad_arg)
                    if kind == "naiad"
                    else TritonServer()
                )
                server.start(repo, server_cpus, Path(tmp) / f"{kind}.log")
                try:
                    url = f"127.0.0.1:{server.grpc_port}"
                    _run_client(python, url, 1, options.responses, 1.0, client_cpus)  # warm up
                    for c in levels:
                        r = _run_client(
                            python, url, c, options.responses, options.seconds, client_cpus
                        )
                        rate = r["responses"] / r["seconds"]
                        results[(kind, c)].append(rate)
                        firsts[(kind, c)].append(r["first_response_ms"])
                        print(
                            f"round {round_ + 1} {kind:6} c={c}: {rate:10,.0f} responses/s "
                            f"({r['requests']} requests of {options.responses}; first response "
                            f"after {r['first_response_ms']:.3f} ms, median)",
                            flush=True,
                        )
                finally:
                    server.stop()
    print()
    heads = [f"{k} responses/s" for k in kinds] + [f"{k} first response ms" for k in kinds]
    print(f"| concurrency | {' | '.join(heads)} | ratio |")
    print(f"|---|{'---|' * len(heads)}---|")
    for c in levels:
        medians = [statistics.median(results[(k, c)]) for k in kinds]
        ratio = medians[0] / medians[1] if len(medians) > 1 and medians[1] else float("nan")
        cells = [f"{m:,.0f}" for m in medians]
        cells += [f"{statistics.median(firsts[(k, c)]):.3f}" for k in kinds]
        print(f"| {c} | {' | '.join(cells)} | {ratio:.2f}x |")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
