"""Naiad's benchmark harness: runs the scenarios of perf/scenarios.py with Triton's perf_analyzer
against one or more servers, one server at a time, alternating the order over rounds, the client
pinned away from the server's CPUs; checks each server's answers before timing it; reads the
server's own statistics (queue, compute, batch sizes formed); measures the in-process limit of
each model at the batch sizes the server formed; writes a markdown table, a PNG plot and the raw
numbers under perf/results/.

    perf/.tools/venv/bin/python perf/bench.py --servers naiad            # make bench
    perf/.tools/venv/bin/python perf/bench.py --servers naiad,triton     # make bench-compare
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import echo_limit  # noqa: E402
import h2load_load  # noqa: E402
from cpus import split_cpus  # noqa: E402
from scenarios import DEPENDS, MODELS, SCENARIOS, Scenario, reference, select  # noqa: E402
from servers import PERF, TOOLS, NaiadServer, Server, TritonServer  # noqa: E402
from wrk_load import run_wrk  # noqa: E402

REPO_ROOT = PERF.parent
BY_KEY = {s.key: s for s in SCENARIOS}
MODELS_DIR = PERF / "models"
RESULTS = PERF / "results"


@dataclass
class Settings:
    window_ms: int = 2000
    windows: int = 3
    rounds: int = 2
    scenarios: list[str] | None = None


@dataclass
class Point:
    """One measurement: a scenario at one concurrency on one server in one round."""

    scenario: str
    key: str
    concurrency: int
    server: str
    round: int
    status: str  # ok | skipped | error
    reason: str = ""
    throughput: float = 0.0  # inferences/s
    p50_us: float = 0.0
    p99_us: float = 0.0
    avg_us: float = 0.0
    server_cpu_pct: float = 0.0
    client_cpu_pct: float = 0.0
    requests: int = 0
    avg_batch: float = 0.0
    batches: dict = field(default_factory=dict)  # batch size -> executions
    queue_us: float = 0.0  # mean per request, from the server's statistics
    compute_us: float = 0.0  # mean compute_infer per request
    limit_throughput: float = 0.0  # in-process, same batch sizes


# ---------------------------------------------------------------------------- tools


def perf_analyzer_path() -> Path:
    return TOOLS / "venv" / "bin" / "perf_analyzer"


def perf_analyzer_env() -> dict[str, str]:
    env = dict(os.environ)
    libs = list((TOOLS / "venv" / "lib").glob("python3*/site-packages/nvidia/cuda_runtime/lib"))
    env["LD_LIBRARY_PATH"] = ":".join([str(p) for p in libs] + [env.get("LD_LIBRARY_PATH", "")])
    return env


def ensure_tools(need_triton: bool) -> None:
    missing = not perf_analyzer_path().exists()
    if need_triton and not (TOOLS / "triton" / "bin" / "tritonserver").exists():
        missing = True
    if missing:
        subprocess.run([str(PERF / "setup_tools.sh")], check=True)


# ---------------------------------------------------------------------------- model repository


def build_repository(dest: Path, scenarios: list[Scenario]) -> Path:
    """A copy of perf/models holding only the models some scenario can run (a model whose files
    are missing, e.g. an ONNX entry without model.onnx, would stop the server from starting)."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    models = {s.model for s in scenarios}
    models |= {d for s in scenarios for d in DEPENDS.get(s.model, ())}
    for model in sorted(models):
        if model_missing(model) is None:
            shutil.copytree(MODELS_DIR / model, dest / model)
    return dest


def model_missing(model: str) -> str | None:
    root = MODELS_DIR / model
    backend = MODELS[model][1]
    ensemble = 'platform: "ensemble"' in (root / "config.pbtxt").read_text()
    if backend == "python" and not ensemble and not (root / "1" / "model.py").exists():
        return f"{root}/1/model.py missing"
    if backend == "onnxruntime" and not (root / "1" / "model.onnx").exists():
        return "no 1/model.onnx in perf/models/add_sub_onnx (not generated yet)"
    return None


# ---------------------------------------------------------------------------- correctness


def kserve_infer(url: str, model: str, inputs: dict[str, np.ndarray], timeout: float = 15.0):
    """One KServe v2 request with binary tensors; returns {output name: array}."""
    header = {
        "inputs": [
            {
                "name": n,
                "datatype": "FP32",
                "shape": list(a.shape),
                "parameters": {"binary_data_size": a.nbytes},
            }
            for n, a in inputs.items()
        ],
        "parameters": {"binary_data_output": True},
    }
    head = json.dumps(header).encode()
    body = head + b"".join(np.ascontiguousarray(a).tobytes() for a in inputs.values())
    req = urllib.request.Request(
        f"http://{url}/v2/models/{model}/infer",
        data=body,
        headers={
            "Content-Type": "application/octet-stream",
            "Inference-Header-Content-Length": str(len(head)),
        },
    )
    with urllib.request.urlopen(req, timeout=timeout) as r:
        data = r.read()
        hlen = r.headers.get("Inference-Header-Content-Length")
    hlen = int(hlen) if hlen is not None else len(data)
    reply = json.loads(data[:hlen])
    out, offset = {}, hlen
    for o in reply["outputs"]:
        size = (o.get("parameters") or {}).get("binary_data_size")
        if size is None:
            arr = np.asarray(o.get("data", []), dtype=np.float32)
        else:
            arr = np.frombuffer(data[offset : offset + size], dtype=np.float32)
            offset += size
        out[o["name"]] = arr.reshape(o["shape"]) if arr.size else arr
    return out


def check_answers(server: Server, model: str) -> str | None:
    """None when the server answers `model` right for batch 1 and 2; else what went wrong."""
    rng = np.random.default_rng(7)
    shapes = MODELS[model][0]
    for batch in (1, 2):
        inputs = {
            n: rng.standard_normal((batch, *shape)).astype(np.float32)
            for n, shape in shapes.items()
        }
        try:
            got = kserve_infer(server.http_url, model, inputs)
        except Exception as exc:  # noqa: BLE001 - any failure is the answer
            return f"{model}: request failed: {type(exc).__name__}: {exc}"
        for name, want in reference(model, inputs).items():
            have = got.get(name)
            if have is None or have.shape != want.shape or not np.allclose(have, want):
                shape = None if have is None else have.shape
                return f"{model}: wrong {name} (shape {shape}, want {want.shape})"
    return None


# ---------------------------------------------------------------------------- statistics


def stats_delta(before: dict | None, after: dict | None) -> dict:
    if not before or not after:
        return {}

    def ns(d, key, sub):
        return int(d.get("inference_stats", {}).get(key, {}).get(sub, 0))

    requests = ns(after, "success", "count") - ns(before, "success", "count")
    inferences = int(after.get("inference_count", 0)) - int(before.get("inference_count", 0))
    executions = int(after.get("execution_count", 0)) - int(before.get("execution_count", 0))
    out = {"requests": requests}
    if requests > 0:
        out["queue_us"] = (ns(after, "queue", "ns") - ns(before, "queue", "ns")) / requests / 1e3
        out["compute_us"] = (
            (ns(after, "compute_infer", "ns") - ns(before, "compute_infer", "ns")) / requests / 1e3
        )
    if executions > 0:
        out["avg_batch"] = inferences / executions
    prior = {
        int(b["batch_size"]): int(b["compute_infer"]["count"])
        for b in before.get("batch_stats", [])
    }
    batches = {}
    for b in after.get("batch_stats", []):
        n = int(b["compute_infer"]["count"]) - prior.get(int(b["batch_size"]), 0)
        if n > 0:
            batches[int(b["batch_size"])] = n
    out["batches"] = batches
    return out


# ---------------------------------------------------------------------------- the limit

_LIMIT_CACHE: dict[tuple[str, int], float] = {}


def seconds_per_batch(model: str, batch: int, cpus: list[int] | None) -> float:
    key = (model, batch)
    if key not in _LIMIT_CACHE:
        rng = np.random.default_rng(1)
        inputs = {
            n: rng.standard_normal((batch, *shape)).astype(np.float32)
            for n, shape in MODELS[model][0].items()
        }
        fn = limit_function(model, inputs)
        saved = os.sched_getaffinity(0)
        if cpus:
            os.sched_setaffinity(0, cpus)  # the server's CPUs: the same silicon
        try:
            fn()
            n, best = 1, float("inf")
            while True:  # grow until one timing run takes >= 20 ms
                t0 = time.perf_counter()
                for _ in range(n):
                    fn()
                dt = time.perf_counter() - t0
                if dt >= 0.02:
                    break
                n *= 4
            for _ in range(5):
                t0 = time.perf_counter()
                for _ in range(n):
                    fn()
                best = min(best, (time.perf_counter() - t0) / n)
        finally:
            os.sched_setaffinity(0, saved)
        _LIMIT_CACHE[key] = best
    return _LIMIT_CACHE[key]


def limit_function(model: str, inputs: dict[str, np.ndarray]):
    if MODELS[model][1] == "onnxruntime":
        import onnxruntime as ort

        session = ort.InferenceSession(
            str(MODELS_DIR / model / "1" / "model.onnx"), providers=["CPUExecutionProvider"]
        )
        return lambda: session.run(None, inputs)
    return lambda: reference(model, inputs)


def limit_throughput(model: str, batches: dict[int, int], cpus: list[int] | None) -> float:
    """Inferences/s of the bare model, in-process, at the mix of batch sizes the server formed."""
    if not batches:
        batches = {1: 1}
    seconds = sum(n * seconds_per_batch(model, b, cpus) for b, n in batches.items())
    return sum(n * b for b, n in batches.items()) / seconds if seconds > 0 else 0.0


# ---------------------------------------------------------------------------- perf_analyzer


def run_perf_analyzer(
    server: Server,
    scenario: Scenario,
    concurrency: int,
    settings: Settings,
    client_cpus: list[int] | None,
    csv_path: Path,
) -> tuple[dict, float, str]:
    """Returns (the CSV row, client CPU seconds, error text or '')."""
    url = server.http_url if scenario.protocol == "http" else server.grpc_url
    cmd = [
        str(perf_analyzer_path()),
        "-m",
        scenario.model,
        "-u",
        url,
        "-i",
        scenario.protocol,
        "--concurrency-range",
        str(concurrency),
        # a fixed number of windows (-r) with a stability bound (-s, percent) no run misses:
        # perf_analyzer's stability loop never settles on noisy machines
        "-s",
        "100000",
        "-r",
        str(settings.windows),
        "--measurement-interval",
        str(settings.window_ms),
        "-f",
        str(csv_path),
        "-v",  # a line per pass: what a run that overruns its budget got through
        *scenario.extra_args,
    ]
    if scenario.shm == "system":
        cmd += [
            "--shared-memory",
            "system",
            "--output-shared-memory-size",
            str(scenario.output_bytes()),
        ]
    if client_cpus:
        cmd = ["taskset", "-c", ",".join(map(str, client_cpus)), *cmd]
    budget = 60 + settings.windows * settings.window_ms / 1000 * 4
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    for _attempt in range(2):  # one retry: "Failed to obtain stable measurement" happens
        try:
            done = subprocess.run(
                cmd, env=perf_analyzer_env(), capture_output=True, text=True, timeout=budget
            )
        except subprocess.TimeoutExpired as exc:
            return {}, 0.0, timed_out_reason(budget, exc.stdout)
        if done.returncode == 0 or "stable measurement" not in done.stdout + done.stderr:
            break
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    client_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode != 0 or not csv_path.exists():
        text = (done.stdout + done.stderr).strip().splitlines()
        return {}, client_cpu, "perf_analyzer failed: " + " | ".join(text[-3:])
    with open(csv_path) as f:
        rows = list(csv.DictReader(f))
    if not rows:
        return {}, client_cpu, "perf_analyzer wrote no result"
    return rows[0], client_cpu, ""


_PASS_LINE = re.compile(r"Pass \[(\d+)\] throughput: ([\d.]+) infer/sec")


def timed_out_reason(budget: float, stdout: bytes | str | None) -> str:
    """Why a perf_analyzer run was stopped, with the passes it had measured. At a few
    tens of thousands of infer/s on one client core, perf_analyzer 2.41 can spend
    minutes between passes in its own summary: InferenceProfiler::ValidLatencyMeasurement
    erases each request it counted from the middle of a vector of every request so far
    (quadratic). The server is still answering then; its passes so far say at what
    rate."""
    if isinstance(stdout, bytes):
        stdout = stdout.decode(errors="replace")
    passes = [f"{float(rate):,.0f}" for _, rate in _PASS_LINE.findall(stdout or "")]
    reason = f"perf_analyzer timed out after {budget:.0f}s"
    if passes:
        reason += (
            f" after {len(passes)} of its passes ({', '.join(passes)} infer/s): its own"
            " summary of a pass is quadratic in requests (perf/README.md)"
        )
    return reason


# perf_analyzer's CSV has no average latency column: its parts add up to it.
_LATENCY_PARTS = (
    "Client Send",
    "Network+Server Send/Recv",
    "Server Queue",
    "Server Compute Input",
    "Server Compute Infer",
    "Server Compute Output",
    "Client Recv",
)


def average_latency_us(row: dict) -> float:
    try:
        return float(sum(float(row[part]) for part in _LATENCY_PARTS))
    except (KeyError, ValueError):
        return 0.0


def run_wrk_point(
    server: Server, scenario: Scenario, concurrency: int, settings: Settings, client_cpus
) -> tuple[dict, float, str]:
    """wrk for the scenario's windows, as run_perf_analyzer reports: (a row with
    perf_analyzer's column names, client CPU seconds, error text or '')."""
    seconds = max(1.0, settings.windows * settings.window_ms / 1000)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        result = run_wrk(server.http_url, scenario.body, concurrency, seconds, client_cpus)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        return {}, 0.0, f"wrk failed: {exc}"
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    client_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if result["errors"] or not result["rps"]:
        return {}, client_cpu, f"wrk: {result['errors']} non-200 answers of {result['requests']}"
    row = {
        "Inferences/Second": result["rps"],
        "p50 latency": result["p50_us"],
        "p99 latency": result["p99_us"],
        "Avg latency": result["avg_us"],
    }
    return row, client_cpu, ""


def scenario_inputs(model: str) -> dict[str, np.ndarray]:
    """One request of batch 1 for `model`: what the light clients send."""
    rng = np.random.default_rng(7)
    return {
        n: rng.standard_normal((1, *shape)).astype(np.float32)
        for n, shape in MODELS[model][0].items()
    }


def run_h2load_point(
    server: Server, scenario: Scenario, concurrency: int, settings: Settings, client_cpus
) -> tuple[dict, float, str]:
    """h2load for the scenario's windows, as run_wrk_point reports. The same request goes
    through grpcio before and after (grpc-status OK, outputs right): h2load itself only
    sees HTTP 200s."""
    inputs = scenario_inputs(scenario.model)
    expected = reference(scenario.model, inputs)
    request = h2load_load.infer_request(scenario.model, inputs, list(expected))
    for when in ("before", "after"):
        if when == "after":
            seconds = max(1.0, settings.windows * settings.window_ms / 1000)
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            try:
                result = h2load_load.run_h2load(
                    server.grpc_url, request, concurrency, seconds, client_cpus
                )
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                return {}, 0.0, f"h2load failed: {exc}"
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
        wrong = h2load_load.check_answer(server.grpc_url, scenario.model, inputs, expected)
        if wrong:
            return {}, 0.0, f"gRPC answer {when} the h2load run: {wrong}"
    client_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    # An answer with grpc-status not OK carries no outputs: the data h2load received must
    # hold every answer's outputs.
    output_bytes = sum(a.nbytes for a in expected.values())
    done = result["requests"]
    if result["failed"] or not result["rps"] or result["data_bytes"] < done * output_bytes:
        return (
            {},
            client_cpu,
            f"h2load: {result['succeeded']} of {done} answered 2xx, "
            f"{result['data_bytes']} data bytes for {output_bytes} bytes of outputs each",
        )
    row = {
        "Inferences/Second": result["rps"],
        "p50 latency": 0.0,  # h2load gives no percentiles: its mean only
        "p99 latency": 0.0,
        "Avg latency": result["avg_us"],
    }
    return row, client_cpu, ""


def measure_echo_limits(scenarios: list[Scenario], cpus, seconds: float, log) -> dict:
    """The loopback echo's round trips/s for each (bytes, concurrency) the large-tensor
    scenarios use, keyed "bytes:connections"."""
    server_cpus, client_cpus = cpus
    found = {}
    for s in scenarios:
        nbytes = s.in_band_bytes()
        for c in s.concurrency if nbytes else ():
            key = f"{nbytes}:{c}"
            if key not in found:
                result = echo_limit.measure(nbytes, c, seconds, server_cpus, client_cpus)
                found[key] = result["round_trips_per_s"]
                log(f"  echo limit {nbytes} bytes each way, {c} connections: {found[key]:,.0f}/s")
    return found


# ---------------------------------------------------------------------------- one server


def run_server(
    server: Server,
    scenarios: list[Scenario],
    settings: Settings,
    round_no: int,
    out: Path,
    cpus: tuple[list[int] | None, list[int] | None],
    log=print,
) -> list[Point]:
    server_cpus, client_cpus = cpus
    points: list[Point] = []

    def skip(s: Scenario, status: str, reason: str) -> None:
        for c in s.concurrency:
            points.append(Point(s.name, s.key, c, server.label, round_no, status, reason))

    runnable = []
    for s in scenarios:
        missing = model_missing(s.model)
        if s.backend not in server.backends():
            skip(s, "skipped", not_built_reason(server, [f"backend:{s.backend}"]))
        elif missing:
            skip(s, "skipped", missing)
        else:
            runnable.append(s)
    if not runnable:
        return points
    repo = build_repository(out / f"repo-{server.label}", runnable)
    try:
        server.start(repo, server_cpus, out / "logs" / f"{server.label}-round{round_no}.log")
    except RuntimeError as exc:
        log(f"  {server.label}: {exc}")
        for s in runnable:
            skip(s, "error", f"server did not start: {str(exc).splitlines()[0]}")
        return points
    try:
        features = server.features()
        checked: dict[str, str | None] = {}
        for s in runnable:
            lacking = sorted(s.needs() - features)
            if lacking:
                skip(s, "skipped", not_built_reason(server, lacking))
                continue
            if s.model not in checked:
                checked[s.model] = check_answers(server, s.model)
                if checked[s.model]:
                    log(f"  {server.label}: WRONG ANSWERS, not timed: {checked[s.model]}")
            if checked[s.model]:
                skip(s, "error", f"wrong answers: {checked[s.model]}")
                continue
            for c in s.concurrency:
                points.append(measure(server, s, c, settings, round_no, out, cpus, log))
    finally:
        server.stop()
    return points


def not_built_reason(server: Server, lacking: list[str]) -> str:
    names = {
        "grpc": "gRPC",
        "shm:system": "system shared memory",
        "backend:onnxruntime": "onnxruntime backend",
    }
    what = ", ".join(names.get(x, x) for x in lacking)
    if server.kind == "triton":
        return f"this Triton build has no {what}"
    return f"Naiad has no {what} yet"


def measure(server, s: Scenario, c: int, settings, round_no, out, cpus, log) -> Point:
    server_cpus, client_cpus = cpus
    point = Point(s.name, s.key, c, server.label, round_no, "ok")
    before = server.statistics(s.model)
    cpu0, t0 = server.cpu_seconds(), time.monotonic()
    csv_path = out / "csv" / f"{server.label}-r{round_no}-{s.name}-c{c}.csv"
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    if s.client == "wrk":
        row, client_cpu, error = run_wrk_point(server, s, c, settings, client_cpus)
    elif s.client == "h2load":
        row, client_cpu, error = run_h2load_point(server, s, c, settings, client_cpus)
    else:
        row, client_cpu, error = run_perf_analyzer(server, s, c, settings, client_cpus, csv_path)
    wall = time.monotonic() - t0
    server_cpu = server.cpu_seconds() - cpu0
    after = server.statistics(s.model)
    if error:
        point.status, point.reason = "error", error
        log(f"  {server.label:>8} {s.key:<24} c={c:<3} ERROR {error}")
        return point
    point.throughput = float(row["Inferences/Second"])
    point.p50_us = float(row["p50 latency"])
    point.p99_us = float(row["p99 latency"])
    point.avg_us = float(row.get("Avg latency") or 0) or average_latency_us(row)
    point.server_cpu_pct = 100.0 * server_cpu / wall
    point.client_cpu_pct = 100.0 * client_cpu / wall
    delta = stats_delta(before, after)
    point.requests = delta.get("requests", 0)
    point.avg_batch = delta.get("avg_batch", 0.0)
    point.batches = delta.get("batches", {})
    point.queue_us = delta.get("queue_us", 0.0)
    point.compute_us = delta.get("compute_us", 0.0)
    point.limit_throughput = limit_throughput(s.model, point.batches, server_cpus)
    log(
        f"  {server.label:>8} {s.key:<24} c={c:<3} {point.throughput:9.1f} inf/s  "
        f"p50 {point.p50_us / 1e3:7.2f} ms  avg {point.avg_us / 1e3:7.2f} ms  "
        f"p99 {point.p99_us / 1e3:7.2f} ms  "
        f"batch {point.avg_batch:5.2f}  cpu srv {point.server_cpu_pct:3.0f}% "
        f"cli {point.client_cpu_pct:3.0f}%"
    )
    return point


# ---------------------------------------------------------------------------- several servers


def run_record(servers, scenarios, points, settings_record: dict, pinning, started) -> dict:
    """The raw record of one run that aggregate(), render() and perf/check read."""
    server_cpus, client_cpus, pinning_text = pinning
    return {
        "pinning": pinning_text,
        "server_cpus": server_cpus,
        "client_cpus": client_cpus,
        "settings": settings_record,
        "servers": [{"label": s.label, "describe": s.describe()} for s in servers],
        "scenarios": [
            {"key": s.key, "description": s.description, "concurrency": list(s.concurrency)}
            for s in scenarios
        ],
        "points": [asdict(p) for p in points],
        "elapsed_s": time.monotonic() - started,
        "machine": {"cpus": os.cpu_count(), "uname": " ".join(os.uname())},
    }


def run_rounds(servers: list[Server], settings: Settings, out: Path, log=print) -> dict:
    scenarios = select(settings.scenarios)
    server_cpus, client_cpus, pinning = split_cpus()
    log(f"pinning: {pinning}")
    points: list[Point] = []
    echo: dict[str, list[float]] = {}

    def take_echo_limits() -> None:
        seconds = max(1.0, settings.windows * settings.window_ms / 1000)
        found = measure_echo_limits(scenarios, (server_cpus, client_cpus), seconds, log)
        for key, rate in found.items():
            echo.setdefault(key, []).append(rate)

    started = time.monotonic()
    for r in range(settings.rounds):
        order = servers if r % 2 == 0 else list(reversed(servers))
        log(f"round {r + 1}/{settings.rounds}: " + " then ".join(s.label for s in order))
        take_echo_limits()  # before and after the round's servers: the machine's load moves
        for server in order:
            points += run_server(
                server, scenarios, settings, r, out, (server_cpus, client_cpus), log
            )
        take_echo_limits()
    record = run_record(
        servers, scenarios, points, asdict(settings), (server_cpus, client_cpus, pinning), started
    )
    record["echo_limit"] = echo
    return record


def run_interleaved(
    servers: list[Server], settings: Settings, pairs: int, out: Path, log=print
) -> dict:
    """All servers up at once (pinned to the same CPUs, idle while another is measured); every
    scenario point is measured `pairs` times per server, alternating A B / B A, so slow drifts
    of the machine's background load hit both sides alike. Used by perf/check."""
    scenarios = select(settings.scenarios)
    server_cpus, client_cpus, pinning = split_cpus()
    log(f"pinning: {pinning}")
    points: list[Point] = []
    started = time.monotonic()
    live: list[Server] = []
    try:
        plan: list[tuple[Scenario, list[Server]]] = []
        for server in servers:
            repo = build_repository(out / f"repo-{server.label}", scenarios)
            try:
                server.start(repo, server_cpus, out / "logs" / f"{server.label}.log")
            except RuntimeError as exc:
                log(f"  {server.label}: {exc}")
                for s in scenarios:
                    for c in s.concurrency:
                        points.append(
                            Point(s.name, s.key, c, server.label, 0, "error", "did not start")
                        )
                continue
            live.append(server)
        features = {srv.label: srv.features() for srv in live}
        answers: dict[tuple[str, str], str | None] = {}
        for s in scenarios:
            able = []
            for srv in live:
                reason = None
                if s.backend not in srv.backends():
                    reason = not_built_reason(srv, [f"backend:{s.backend}"])
                elif model_missing(s.model):
                    reason = model_missing(s.model)
                elif s.needs() - features[srv.label]:
                    reason = not_built_reason(srv, sorted(s.needs() - features[srv.label]))
                status = "skipped"
                if reason is None:
                    k = (srv.label, s.model)
                    if k not in answers:
                        answers[k] = check_answers(srv, s.model)
                    if answers[k]:
                        reason, status = f"wrong answers: {answers[k]}", "error"
                if reason:
                    for c in s.concurrency:
                        points.append(Point(s.name, s.key, c, srv.label, 0, status, reason))
                else:
                    able.append(srv)
            plan.append((s, able))
        for s, able in plan:
            for c in s.concurrency:
                for rep in range(pairs):
                    order = able if rep % 2 == 0 else list(reversed(able))
                    for srv in order:
                        points.append(
                            measure(srv, s, c, settings, rep, out, (server_cpus, client_cpus), log)
                        )
    finally:
        for srv in live:
            srv.stop()
    settings_record = {**asdict(settings), "rounds": pairs, "interleaved": True}
    return run_record(
        servers, scenarios, points, settings_record, (server_cpus, client_cpus, pinning), started
    )


def aggregate(raw: dict) -> dict:
    """(scenario key, concurrency, server) -> median over rounds (+ spread), or a reason."""
    groups: dict[tuple, list[dict]] = {}
    for p in raw["points"]:
        groups.setdefault((p["key"], p["concurrency"], p["server"]), []).append(p)
    table = {}
    for k, ps in groups.items():
        ok = [p for p in ps if p["status"] == "ok"]
        if not ok:
            table[k] = {"status": ps[0]["status"], "reason": ps[0]["reason"]}
            continue
        med = {
            f: statistics.median(p[f] for p in ok)
            for f in (
                "throughput",
                "p50_us",
                "avg_us",
                "p99_us",
                "avg_batch",
                "queue_us",
                "compute_us",
                "server_cpu_pct",
                "client_cpu_pct",
                "limit_throughput",
            )
        }
        med["per_cpu_s"] = statistics.median(
            100.0 * p["throughput"] / p["server_cpu_pct"] if p["server_cpu_pct"] else 0.0
            for p in ok
        )
        thr = [p["throughput"] for p in ok]
        med["spread_pct"] = 100.0 * (max(thr) - min(thr)) / med["throughput"] if thr[0] else 0.0
        med["status"], med["rounds"] = "ok", len(ok)
        med["failed_rounds"] = len(ps) - len(ok)
        table[k] = med
    return table


# ---------------------------------------------------------------------------- output


def fmt(x: float, digits: int = 1) -> str:
    return f"{x:,.{digits}f}"


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if a and b else "-"


def render(raw: dict, table: dict, ratio_pair: tuple[str, str] | None) -> str:
    labels = [s["label"] for s in raw["servers"]]
    lines = []
    head = ["scenario", "conc"]
    for label in labels:
        head += [f"{label} inf/s", f"{label} p50 ms", f"{label} avg ms", f"{label} p99 ms"]
    if ratio_pair:
        a, b = ratio_pair
        head += [f"{a}/{b} inf/s", f"{a}/{b} avg", f"{a}/{b} p99"]
    head += ["limit inf/s"] + [f"{label} % limit" for label in labels]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "|".join("---" for _ in head) + "|")
    skipped = []
    for sc in raw["scenarios"]:
        for c in sc["concurrency"]:
            cells = [sc["key"], str(c)]
            rows = {label: table.get((sc["key"], c, label), {}) for label in labels}
            if all(r.get("status") != "ok" for r in rows.values()):
                reasons = sorted({f"{label}: {r.get('reason', '?')}" for label, r in rows.items()})
                skipped.append(f"- {sc['key']} c={c}: " + "; ".join(reasons))
                continue
            for label in labels:
                r = rows[label]
                if r.get("status") == "ok":
                    cells += [
                        fmt(r["throughput"])
                        + (f" ±{r['spread_pct']:.0f}%" if r["rounds"] > 1 else ""),
                        # "-": the client gives no percentiles (h2load: its mean only)
                        fmt(r["p50_us"] / 1e3, 2) if r["p50_us"] else "-",
                        fmt(r.get("avg_us", 0) / 1e3, 2),
                        fmt(r["p99_us"] / 1e3, 2) if r["p99_us"] else "-",
                    ]
                else:
                    cells += [r.get("status", "-"), "-", "-", "-"]
                    skipped.append(f"- {sc['key']} c={c} on {label}: {r.get('reason', '?')}")
            if ratio_pair:
                ra, rb = rows[ratio_pair[0]], rows[ratio_pair[1]]
                cells += [
                    ratio(ra.get("throughput", 0), rb.get("throughput", 0)),
                    ratio(ra.get("avg_us", 0), rb.get("avg_us", 0)),
                    ratio(ra.get("p99_us", 0), rb.get("p99_us", 0)),
                ]
            limits = [r["limit_throughput"] for r in rows.values() if r.get("status") == "ok"]
            limit = max(limits) if limits else 0
            cells.append(fmt(limit, 0) if limit else "-")
            for label in labels:
                r = rows[label]
                ok = r.get("status") == "ok" and r.get("limit_throughput")
                cells.append(f"{100 * r['throughput'] / r['limit_throughput']:.2f}%" if ok else "-")
            lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("Server-side, from GET /v2/models/{m}/stats (mean per request over the run):")
    lines.append("")
    lines.append(
        "| scenario | conc | server | avg batch | queue µs | compute µs | server CPU | client CPU "
        "| inf/s per server CPU-s |"
    )
    lines.append("|---|---|---|---|---|---|---|---|---|")
    for sc in raw["scenarios"]:
        for c in sc["concurrency"]:
            for label in labels:
                r = table.get((sc["key"], c, label), {})
                if r.get("status") != "ok":
                    continue
                # Throughput per second of the server's CPU: on a shared machine a server
                # may get a fraction of its core, and this figure moves less with that.
                per_cpu = r["per_cpu_s"]
                lines.append(
                    f"| {sc['key']} | {c} | {label} | {r['avg_batch']:.2f} | {fmt(r['queue_us'])} "
                    f"| {fmt(r['compute_us'])} | {r['server_cpu_pct']:.0f}% | {r['client_cpu_pct']:.0f}% "
                    f"| {fmt(per_cpu, 0) if per_cpu else '-'} |"
                )
    lines += render_echo_shares(raw, table, labels)
    if skipped:
        lines += ["", "Skipped or failed:", ""] + skipped
    lines += [
        "",
        f"Pinning: {raw['pinning']}. Rounds: {raw['settings']['rounds']} (order alternates), "
        f"{raw['settings']['windows']} windows x {raw['settings']['window_ms']} ms per point; "
        "median over rounds, ± is the spread of throughput over rounds. "
        "Limit: the model run in-process (numpy/onnxruntime) on the server's CPUs at the batch "
        "sizes the server formed.",
    ]
    return "\n".join(lines)


def render_echo_shares(raw: dict, table: dict, labels: list[str]) -> list[str]:
    """The large-tensor scenarios as a share of the loopback echo limit measured in the
    same run (perf/echo_limit.py): median round trips/s over the rounds."""
    echo = raw.get("echo_limit") or {}
    rows = []
    for sc in raw["scenarios"]:
        nbytes = BY_KEY[sc["key"]].in_band_bytes() if sc["key"] in BY_KEY else 0
        for c in sc["concurrency"] if nbytes else ():
            rates = echo.get(f"{nbytes}:{c}")
            if not rates:
                continue
            limit = statistics.median(rates)
            cells = [sc["key"], str(c), fmt(limit, 0)]
            for label in labels:
                r = table.get((sc["key"], c, label), {})
                ok = r.get("status") == "ok"
                cells.append(f"{100 * r['throughput'] / limit:.1f}%" if ok else "-")
            rows.append("| " + " | ".join(cells) + " |")
    if not rows:
        return []
    head = ["scenario", "conc", "echo limit round trips/s"] + [f"{x} % of echo" for x in labels]
    return [
        "",
        "Large tensors in band against the physical limit: a bare loopback echo server on the "
        "server's CPU, its client on the client's, the same bytes each way and connections "
        "(perf/echo_limit.cc; median of its runs before and after each round's servers):",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "|".join("---" for _ in head) + "|",
        *rows,
    ]


def plot(raw: dict, table: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [s["label"] for s in raw["servers"]]
    colors = {label: f"C{i}" for i, label in enumerate(labels)}  # one color per server throughout
    rows = [
        sc
        for sc in raw["scenarios"]
        if any(
            table.get((sc["key"], c, label), {}).get("status") == "ok"
            for c in sc["concurrency"]
            for label in labels
        )
    ]
    if not rows:
        return
    fig, axes = plt.subplots(len(rows), 2, figsize=(11, 3.2 * len(rows)), squeeze=False)
    for i, sc in enumerate(rows):
        ax_t, ax_p = axes[i]
        for label in labels:
            xs, thr, p99 = [], [], []
            for c in sc["concurrency"]:
                r = table.get((sc["key"], c, label), {})
                if r.get("status") == "ok":
                    xs.append(c)
                    thr.append(r["throughput"])
                    p99.append(r["p99_us"] / 1e3)
            if xs:
                ax_t.plot(xs, thr, marker="o", label=label, color=colors[label])
                ax_p.plot(xs, p99, marker="o", label=label, color=colors[label])
        ax_t.set_title(f"{sc['key']}: throughput")
        ax_t.set_xlabel("concurrency")
        ax_t.set_ylabel("inferences/s")
        ax_p.set_title(f"{sc['key']}: p99 latency")
        ax_p.set_xlabel("concurrency")
        ax_p.set_ylabel("ms")
        for ax in (ax_t, ax_p):
            ax.set_xscale("log", base=2)
            ax.set_xticks(sc["concurrency"], [str(c) for c in sc["concurrency"]])
            ax.grid(True, alpha=0.3)
            ax.legend()
            ax.set_ylim(bottom=0)
    fig.suptitle(f"perf/: {', '.join(labels)} — {raw['pinning']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def write_results(raw: dict, table: dict, out: Path, text: str, title: str) -> None:
    (out / "raw.json").write_text(json.dumps(raw, indent=1))
    (out / "table.md").write_text(f"# {title}\n\n{text}\n")
    try:
        plot(raw, table, out / "plot.png")
    except ImportError:  # run by a Python without matplotlib (perf/.tools/venv has it)
        print(f"no plot: matplotlib does not import here; the figures are in {out}")


def results_dir(kind: str) -> Path:
    out = RESULTS / f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    return out


# ---------------------------------------------------------------------------- CLI


def naiad_here(
    tree: Path | None = None, python: Path | None = None, extra_args: list[str] | None = None
) -> NaiadServer:
    tree = Path(tree or REPO_ROOT).resolve()
    python = Path(python or REPO_ROOT / ".venv" / "bin" / "python")
    if not python.exists():
        raise SystemExit(f"{python} missing: run `make install` first")
    return NaiadServer(tree, python, "naiad", extra_args)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--servers", default="naiad", help="comma list of naiad, triton")
    ap.add_argument("--rounds", type=int, default=None, help="default 1 for one server, else 2")
    ap.add_argument("--window-ms", type=int, default=2000)
    ap.add_argument("--windows", type=int, default=3)
    ap.add_argument("--scenario", action="append", help="run only these (repeatable)")
    ap.add_argument("--list", action="store_true", help="list the scenarios and exit")
    ap.add_argument(
        "--naiad-tree", type=Path, help="Naiad source tree (built in place); default: this one"
    )
    ap.add_argument(
        "--naiad-python", type=Path, help="Python with Naiad's dependencies; default .venv"
    )
    ap.add_argument(
        "--naiad-arg",
        action="append",
        default=[],
        help="one more `naiad serve` flag (repeatable), e.g. --naiad-arg=--http-io-loop=false",
    )
    ap.add_argument(
        "--naiad-other",
        action="append",
        default=[],
        metavar="LABEL=TREE",
        help="one more Naiad server, another built tree (same --naiad-python), in the same "
        "run under LABEL: before and after a change side by side with Triton (repeatable)",
    )
    args = ap.parse_args(argv)
    if args.list:
        for s in SCENARIOS:
            print(f"{s.key:<24} c={','.join(map(str, s.concurrency)):<8} {s.description}")
        return 0
    names = [n.strip() for n in args.servers.split(",") if n.strip()]
    servers: list[Server] = []
    for n in names:
        if n == "naiad":
            servers.append(naiad_here(args.naiad_tree, args.naiad_python, args.naiad_arg))
        elif n == "triton":
            servers.append(TritonServer())
        else:
            raise SystemExit(f"unknown server {n!r}")
    for other in args.naiad_other:
        label, sep, tree = other.partition("=")
        if not sep or not label or label in names:
            raise SystemExit(f"--naiad-other wants LABEL=TREE with a new label, got {other!r}")
        names.append(label)
        other_server = naiad_here(Path(tree), args.naiad_python, args.naiad_arg)
        other_server.label = label
        servers.append(other_server)
    ensure_tools(need_triton="triton" in names)
    rounds = args.rounds or (1 if len(servers) == 1 else 2)
    settings = Settings(args.window_ms, args.windows, rounds, args.scenario)
    kind = "bench-compare" if len(servers) > 1 else "bench"
    out = results_dir(kind)
    raw = run_rounds(servers, settings, out)
    table = aggregate(raw)
    pair = ("naiad", "triton") if {"naiad", "triton"} <= set(names) else None
    text = render(raw, table, pair)
    write_results(raw, table, out, text, kind)
    for name in ("table.md", "plot.png"):  # stable names for the latest run of each kind
        src = out / name
        if src.exists():
            shutil.copyfile(src, RESULTS / f"{kind}-latest-{name}")
    print()
    print(text)
    print()
    print(f"results: {out}/table.md, plot: {out}/plot.png (also {RESULTS}/{kind}-latest-*)")
    print(f"elapsed: {raw['elapsed_s']:.0f}s")
    bad = [p for p in raw["points"] if p["status"] == "error"]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
