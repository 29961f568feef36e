"""Streamed tokens per second and time to first token from the example text model
(model_repository/tiny_llm), through the OpenAI-compatible frontend and, beside it, the
generate extension (issue 42's figure).

    .venv/bin/python perf/openai_stream.py [--concurrency 1,16] [--max-tokens 64]
                                           [--seconds 5]

One `naiad serve` with --openai-port serves tiny_llm from a fresh repository, pinned to
the first half of the CPUs; the client runs in this process, pinned to the other half.
For each concurrency and each route it opens that many keep-alive connections, each with
one streamed request at a time:

- openai:   POST /v1/completions {"stream": true, "stream_options": {"include_usage": true}}
- generate: POST /v2/models/tiny_llm/generate_stream with the model's inputs (text_input,
            stream, sampling_parameters, return_num_output_tokens)

Both ask for `max-tokens` tokens with ignore_eos (every request makes exactly that many)
at temperature 1. The client reads the chunked Server-Sent Events with asyncio streams
(no HTTP library), counts the tokens the server reports (the usage chunk; the sum of
num_output_tokens) and times each request's first event that carries text. The table
gives tokens/s over the run and the median and 90th percentile time to first token.
The figures depend on the machine and what else runs on it: they are indicative.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODEL = "tiny_llm"
PROMPT = "The river"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _cpu_halves() -> tuple[set, set]:
    cpus = sorted(os.sched_getaffinity(0))
    half = max(1, len(cpus) // 2)
    server, client = set(cpus[:half]), set(cpus[half:] or cpus[:half])
    return server, client


def _bodies(max_tokens: int) -> dict:
    sampling = {"max_tokens": max_tokens, "temperature": 1.0, "ignore_eos": True}
    openai = {
        "model": MODEL,
        "prompt": PROMPT,
        "stream": True,
        "stream_options": {"include_usage": True},
        **sampling,
    }
    generate = {
        "text_input": PROMPT,
        "stream": True,
        "exclude_input_in_output": True,
        "return_num_output_tokens": True,
        "sampling_parameters": json.dumps(sampling),
    }
    return {
        "openai": ("/v1/completions", json.dumps(openai).encode()),
        "generate": (f"/v2/models/{MODEL}/generate_stream", json.dumps(generate).encode()),
    }


async def _read_events(reader):
    """The `data:` payloads of one chunked SSE body, as they arrive."""
    buffer = b""
    while True:
        size = int((await reader.readline()).strip(), 16)
        if size == 0:
            await reader.readline()
            return
        buffer += await reader.readexactly(size)
        await reader.readexactly(2)
        while b"\n\n" in buffer:
            event, buffer = buffer.split(b"\n\n", 1)
            if event.startswith(b"data: "):
                yield event[6:]


async def _one_stream(host, port, path, body, stop_at, counts, firsts):
    reader, writer = await asyncio.open_connection(host, port)
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    try:
        while time.monotonic() < stop_at:
            sent = time.perf_counter()
            writer.write(head + body)
            status = await reader.readline()
            if b" 200 " not in status:
                raise RuntimeError(f"{path}: {status!r}")
            while (await reader.readline()) not in (b"\r\n", b""):
                pass
            first = True
            async for data in _read_events(reader):
                if data == b"[DONE]":
                    continue
                doc = json.loads(data)
                if "error" in doc:
                    raise RuntimeError(f"{path}: {doc['error']}")
                if first and (
                    doc.get("text_output") or (doc.get("choices") or [{}])[0].get("text")
                ):
                    firsts.append(time.perf_counter() - sent)
                    first = False
                if "num_output_tokens" in doc:
                    counts["tokens"] += doc["num_output_tokens"]
                elif doc.get("usage"):
                    counts["tokens"] += doc["usage"]["completion_tokens"]
            counts["requests"] += 1
    finally:
        writer.close()


async def _measure(port, path, body, concurrency, seconds) -> dict:
    counts = {"tokens": 0, "requests": 0}
    firsts: list[float] = []
    started = time.monotonic()
    stop_at = started + seconds
    await asyncio.gather(
        *(
            _one_stream("127.0.0.1", port, path, body, stop_at, counts, firsts)
            for _ in range(concurrency)
        )
    )
    elapsed = time.monotonic() - started
    firsts.sort()
    return {
        "tokens_per_s": counts["tokens"] / elapsed,
        "requests": counts["requests"],
        "ttft_ms_p50": 1000 * statistics.median(firsts) if firsts else None,
        "ttft_ms_p90": 1000 * firsts[int(0.9 * (len(firsts) - 1))] if firsts else None,
    }


def _wait_ready(url: str, process, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError("the server exited while starting")
        try:
            with urllib.request.urlopen(url + "/v2/health/ready", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError("the server did not become ready")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", default="1,16")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    server_cpus, client_cpus = _cpu_halves()
    folder = Path(tempfile.mkdtemp(prefix="naiad-openai-perf-"))
    try:
        shutil.copytree(
            REPO / "model_repository" / MODEL,
            folder / MODEL,
            ignore=shutil.ignore_patterns("__pycache__"),
        )
        http_port, openai_port = _free_port(), _free_port()
        command = [
            sys.executable,
            "-m",
            "naiad",
            "serve",
            f"--model-repository={folder}",
            f"--http-port={http_port}",
            f"--openai-port={openai_port}",
            "--allow-grpc=false",
            "--allow-metrics=false",
            "--host=127.0.0.1",
            "--log-info=false",
        ]
        log = open(folder / "server.log", "wb")
        process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=lambda: os.sched_setaffinity(0, server_cpus),
        )
        try:
            _wait_ready(f"http://127.0.0.1:{http_port}", process)
            os.sched_setaffinity(0, client_cpus)
            ports = {"openai": openai_port, "generate": http_port}
            rows = []
            for route, (path, body) in _bodies(args.max_tokens).items():
                # Warm-up, not counted: the worker's first requests build its tables.
                asyncio.run(_measure(ports[route], path, body, 1, 0.5))
            for concurrency in levels:
                for route, (path, body) in _bodies(args.max_tokens).items():
                    result = asyncio.run(
                        _measure(ports[route], path, body, concurrency, args.seconds)
                    )
                    rows.append({"route": route, "concurrency": concurrency, **result})
        finally:
            process.terminate()
            process.wait(timeout=60)
            log.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(
        f"tiny_llm, {args.max_tokens} tokens a request, {args.seconds:g} s each "
        f"(server CPUs {sorted(server_cpus)}, client CPUs {sorted(client_cpus)}; indicative)"
    )
    print(
        f"{'route':<9} {'streams':>7} {'tokens/s':>10} {'requests':>9} {'TTFT p50 ms':>12} "
        f"{'TTFT p90 ms':>12}"
    )
    for row in rows:
        print(
            f"{row['route']:<9} {row['concurrency']:>7} {row['tokens_per_s']:>10.0f} "
            f"{row['requests']:>9} {row['ttft_ms_p50'] or 0:>12.2f} {row['ttft_ms_p90'] or 0:>12.2f}"
        )
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
