"""The ONNX example against its physical limit, one command (issue 11's performance target):

    NAIAD_PERF_TOOLS=/work/perftools .venv/bin/python perf/onnx_limit.py [--rounds 8]

Naiad serves model_repository/conv_onnx (a small conv classifier, dynamic batching);
perf_analyzer drives it at concurrency 16 over HTTP with binary tensors. After each
perf_analyzer run the same model runs in this process under onnxruntime, with the session
options the server built from the served config (`GET /v2/models/conv_onnx/config`,
through naiad.backends.onnxruntime.create_session: intra/inter-op threads, graph level,
execution mode), at the batch sizes the server formed in that run (the statistics
extension's batch_stats), for as long as the run lasted. Rounds repeat the pair, so the
two sides alternate on the same machine in the same run; the ratio of each round is the
served throughput over the in-process one.

What "the physical limit" means here. The model is given one core: the config runs one
onnxruntime thread per instance (intra_op_thread_count 1, sequential execution), and the
worker process is pinned to the last CPU, where the in-process run is pinned too. The
frontend and perf_analyzer share the other CPUs. So both sides get the same silicon for
the model, and neither pays for the other's threads: onnxruntime's threads do not fight
the frontend and the client for a core the in-process run has to itself, and the
in-process run does not get a second core the server's model cannot use. What the ratio
then shows is what serving costs the model's core: the worker's per-batch work (reading
the batch, binding, posting the response), the gaps while it waits for the next batch,
and nothing of the HTTP work. On a one-CPU machine nothing is pinned and the ratio
includes the frontend's and the client's CPU time.

Host copies per request, counted in the same run: the lane's copy of each input into the
arena (1), requests the HTTP protocol had to collect from several reads before the lane
took them (one more copy each: `lane_collected` of /v2/naiad/lanes), bytes the core
gathered into batch tensors (`gathered_bytes` of /v2/naiad/shm, per input byte), outputs
the worker copied into the response block (none when onnxruntime wrote them in place:
`outputs_copied` and `outputs_in_place` of /v2/naiad/shm, counted by the core from the
blocks' headers), and the lane's copy of the response block into the reply (1).

Results: perf/results/onnx-limit-<time>/ (raw.json, table.md; the perf_analyzer CSVs and
the server log). The machine may be shared: the load average is recorded next to every
round, and only the ratio within a round means anything.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import naiad_here, perf_analyzer_env, perf_analyzer_path, results_dir  # noqa: E402
from servers import http_get  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
MODEL = "conv_onnx"


def _get_json(server, path: str) -> dict:
    status, body = http_get(f"http://{server.http_url}{path}", timeout=10.0)
    if status != 200:
        raise RuntimeError(f"GET {path}: {status} {body[:200]!r}")
    return json.loads(body)


def _counters(server, model: str) -> dict:
    """The statistics and copy counters one round is the difference of."""
    stats = _get_json(server, f"/v2/models/{model}/stats")["model_stats"][0]
    return {
        "stats": stats,
        "shm": _get_json(server, "/v2/naiad/shm"),
        "lanes": _get_json(server, "/v2/naiad/lanes"),
    }


def _batches(before: dict, after: dict) -> dict[int, int]:
    """batch size -> executions at that size between two statistics."""
    prior = {
        int(b["batch_size"]): int(b["compute_infer"]["count"])
        for b in before["stats"].get("batch_stats", [])
    }
    found = {}
    for b in after["stats"].get("batch_stats", []):
        n = int(b["compute_infer"]["count"]) - prior.get(int(b["batch_size"]), 0)
        if n > 0:
            found[int(b["batch_size"])] = n
    return found


def _batch_ns(counters: dict) -> int:
    """The time the model's executions took so far (ns), over every batch size."""
    return sum(int(b["compute_infer"]["ns"]) for b in counters["stats"].get("batch_stats", []))


def _worker_pids(server, model: str) -> list[int]:
    """The server's worker processes for `model` (its children, whatever their group)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == server.proc.pid and any(
            arg.startswith(f"--instance={model}/".encode()) for arg in cmdline
        ):
            pids.append(int(entry))
    return pids


def _cpu_seconds(pids: list[int]) -> float:
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / tick


def _pin_process(pid: int, cpus: list[int]) -> None:
    """Every thread of `pid` (affinity is per thread on Linux) onto `cpus`."""
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(task), cpus)
        except OSError:
            continue


def _perf_analyzer(server, model, concurrency, windows, window_ms, cpus, csv_path) -> dict:
    cmd = [
        str(perf_analyzer_path()),
        "-m",
        model,
        "-u",
        server.http_url,
        "-i",
        "http",
        "--concurrency-range",
        str(concurrency),
        "-s",
        "100000",  # a fixed number of windows: its stability loop never settles here
        "-r",
        str(windows),
        "--measurement-interval",
        str(window_ms),
        "-f",
        str(csv_path),
    ]
    if cpus:
        cmd = ["taskset", "-c", ",".join(map(str, cpus)), *cmd]
    budget = 60 + windows * window_ms / 1000 * 4
    for _attempt in range(2):  # one retry: "Failed to obtain stable measurement" happens
        done = subprocess.run(
            cmd, env=perf_analyzer_env(), capture_output=True, text=True, timeout=budget
        )
        if done.returncode == 0 or "stable measurement" not in done.stdout + done.stderr:
            break
    if done.returncode != 0 or not csv_path.exists():
        tail = " | ".join((done.stdout + done.stderr).strip().splitlines()[-3:])
        raise RuntimeError(f"perf_analyzer failed: {tail}")
    with open(csv_path) as f:
        rows = list(csv.DictReader(f))
    return rows[0]


def _in_process(session, input_name, shape, batches, seconds, cpus) -> dict:
    """Inferences/s of the bare session at the server's mix of batch sizes: the batches
    run in the server's proportions, over and over, for `seconds`, pinned to `cpus`."""
    rng = np.random.default_rng(1)
    feeds = {b: {input_name: rng.standard_normal((b, *shape)).astype(np.float32)} for b in batches}
    # The mix as a schedule of about 64 executions, in the server's proportions.
    total = sum(batches.values())
    schedule = []
    for b, n in sorted(batches.items()):
        schedule += [b] * max(1, round(64 * n / total))
    saved = os.sched_getaffinity(0)
    if cpus:
        os.sched_setaffinity(0, cpus)
    try:
        for b in batches:
            session.run(None, feeds[b])  # first runs allocate
        inferences = 0
        executions = 0
        cpu = time.thread_time()
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            for b in schedule:
                session.run(None, feeds[b])
                inferences += b
            executions += len(schedule)
        elapsed = time.perf_counter() - start
        cpu = time.thread_time() - cpu
    finally:
        os.sched_setaffinity(0, saved)
    return {
        "infer_per_s": inferences / elapsed,
        "executions": executions,
        "seconds": elapsed,
        "cpu_share": cpu / elapsed,
    }


def _copies(before: dict, after: dict, requests: int, input_bytes: int) -> dict:
    """Host copies per request over one round (see the module's docstring)."""

    def delta(group, key):
        return after[group].get(key, 0) - before[group].get(key, 0)

    collected = delta("lanes", "lane_collected")
    gathered = delta("shm", "gathered_bytes")
    in_place = delta("shm", "outputs_in_place")
    copied = delta("shm", "outputs_copied")
    outputs = in_place + copied
    per_request_in = 1 + collected / requests + gathered / (requests * input_bytes)
    per_request_out = (copied / outputs if outputs else 0.0) + 1
    return {
        "input": round(per_request_in, 3),
        "output": round(per_request_out, 3),
        "collected_requests": collected,
        "gathered_bytes": gathered,
        "outputs_in_place": in_place,
        "outputs_copied": copied,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--windows", type=int, default=3, help="at least 3 (perf_analyzer)")
    parser.add_argument("--window-ms", type=int, default=1500)
    parser.add_argument("--model", default=MODEL, help="a model of model_repository/")
    options = parser.parse_args(argv)
    if not perf_analyzer_path().exists():
        raise SystemExit(f"{perf_analyzer_path()} missing: set NAIAD_PERF_TOOLS")

    from naiad.backends.onnxruntime import create_session

    cpus = sorted(os.sched_getaffinity(0))
    model_cpus = cpus[-1:] if len(cpus) > 1 else None
    other_cpus = cpus[:-1] if len(cpus) > 1 else None
    out = results_dir("onnx-limit")
    repo = out / "models"
    shutil.copytree(REPO_ROOT / "model_repository" / options.model, repo / options.model)
    server = naiad_here()
    server.start(repo, other_cpus, out / "naiad.log", timeout=180)
    rounds = []
    try:
        workers = _worker_pids(server, options.model)
        if not workers:
            raise RuntimeError(f"no worker process of {options.model} in the server's group")
        if model_cpus:
            for pid in workers:
                _pin_process(pid, model_cpus)
                for task in os.listdir(f"/proc/{pid}/task"):
                    if sorted(os.sched_getaffinity(int(task))) != model_cpus:
                        raise RuntimeError(f"could not pin thread {task} of worker {pid}")
        config = _get_json(server, f"/v2/models/{options.model}/config")
        path = repo / options.model / "1" / "model.onnx"
        session = create_session(path, config, "CPU", 0)  # the server's session options
        (input_config,) = config["input"]
        shape = [int(d) for d in input_config["dims"]]
        input_bytes = 4 * int(np.prod(shape))
        for index in range(options.rounds):
            load = os.getloadavg()
            before = _counters(server, options.model)
            worker_cpu = _cpu_seconds(workers)
            wall = time.perf_counter()
            row = _perf_analyzer(
                server,
                options.model,
                options.concurrency,
                options.windows,
                options.window_ms,
                other_cpus,
                out / f"pa-{index}.csv",
            )
            after = _counters(server, options.model)
            wall = time.perf_counter() - wall
            worker_cpu = _cpu_seconds(workers) - worker_cpu
            served = float(row["Inferences/Second"])
            batches = _batches(before, after)
            requests = int(after["stats"]["inference_count"]) - int(
                before["stats"]["inference_count"]
            )
            seconds = options.windows * options.window_ms / 1000
            limit = _in_process(session, input_config["name"], shape, batches, seconds, model_cpus)
            executions = sum(batches.values())
            # The worker's time in execute() per execution (batch_stats' compute_infer).
            infer_ns = _batch_ns(after) - _batch_ns(before)
            served_per_cpu = served / max(worker_cpu / wall, 1e-9)
            limit_per_cpu = limit["infer_per_s"] / max(limit["cpu_share"], 1e-9)
            record = {
                "round": index,
                "load_average": [round(x, 2) for x in load],
                "load_average_after": [round(x, 2) for x in os.getloadavg()],
                "served_infer_per_s": served,
                "limit_infer_per_s": limit["infer_per_s"],
                "ratio": served / limit["infer_per_s"],
                "batches": batches,
                "avg_batch": sum(b * n for b, n in batches.items()) / max(executions, 1),
                "p50_us": float(row.get("p50 latency", 0)),
                "worker_ms_per_execution": infer_ns / max(executions, 1) / 1e6,
                # the worker's CPU time and its time in execute(), over the run's wall time
                "worker_cpu_share": worker_cpu / wall,
                "worker_busy_share": infer_ns / 1e9 / wall,
                "in_process_cpu_share": limit["cpu_share"],
                # inferences per CPU-second of the model's process, served over in-process:
                # what is left when other jobs take the model's CPU unevenly
                "ratio_per_cpu_second": served_per_cpu / limit_per_cpu,
                "in_process_ms_per_execution": (
                    limit["seconds"] * 1e3 / max(limit["executions"], 1)
                ),
                "copies_per_request": _copies(before, after, max(requests, 1), input_bytes),
            }
            rounds.append(record)
            print(
                f"round {index}: load {record['load_average'][0]:.2f} served {served:,.0f} "
                f"infer/s, in-process {limit['infer_per_s']:,.0f} infer/s at the same batch "
                f"sizes: {record['ratio']:.1%} (avg batch {record['avg_batch']:.2f}; ms per "
                f"execution: worker {record['worker_ms_per_execution']:.2f}, in-process "
                f"{record['in_process_ms_per_execution']:.2f}; worker busy "
                f"{record['worker_busy_share']:.0%}, on CPU {record['worker_cpu_share']:.0%} (in-process "
                f"{record['in_process_cpu_share']:.0%}); copies "
                f"per request {record['copies_per_request']})",
                flush=True,
            )
    finally:
        server.stop()
    ratios = [r["ratio"] for r in rounds]
    summary = {
        "model": options.model,
        "concurrency": options.concurrency,
        "pinning": (
            f"model worker and in-process run on CPU {model_cpus}, frontend and "
            f"perf_analyzer on CPU {other_cpus}"
            if model_cpus
            else "not pinned (one CPU)"
        ),
        "session": {"parameters": config.get("parameters", {})},
        "median_ratio": statistics.median(ratios) if ratios else None,
        "best_ratio": max(ratios) if ratios else None,
        "rounds": rounds,
    }
    (out / "raw.json").write_text(json.dumps(summary, indent=2))
    lines = [
        f"# {options.model} at concurrency {options.concurrency}: served / in-process onnxruntime",
        "",
        summary["pinning"],
        "",
        "| round | load avg (1 min) | served infer/s | in-process infer/s | ratio | avg batch "
        "| batch sizes (size: executions) | model's CPU share: worker / in-process "
        "| ratio per CPU-second | copies in / out per request |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rounds:
        sizes = ", ".join(f"{b}: {n}" for b, n in sorted(r["batches"].items()))
        copies = r["copies_per_request"]
        lines.append(
            f"| {r['round']} | {r['load_average'][0]:.2f} | {r['served_infer_per_s']:,.0f} | "
            f"{r['limit_infer_per_s']:,.0f} | {r['ratio']:.1%} | {r['avg_batch']:.2f} | "
            f"{sizes} | {r['worker_cpu_share']:.0%} / {r['in_process_cpu_share']:.0%} | "
            f"{r['ratio_per_cpu_second']:.1%} | {copies['input']} / {copies['output']} |"
        )
    if ratios:
        lines += [
            "",
            f"median ratio {summary['median_ratio']:.1%}, best {summary['best_ratio']:.1%}",
        ]
    (out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
