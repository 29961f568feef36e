"""Soak: does Naiad stay flat over a long mixed load? (issue 16)

Starts Naiad (this tree) on add_sub, runs one load generator per kind of traffic
(perf/soak_load.py: HTTP binary, HTTP JSON, gRPC, HTTP and gRPC with system shared memory,
every answer checked), and samples once a second: the server's answered requests, the RSS and
open fds of every process of the server (frontend and workers) and the arena's use. It stops
the load after --requests answered requests, waits for the server to go idle, shuts it down,
and checks:

- no request lost or answered wrong (every generator's counts);
- RSS of each process and the frontend's fds flat over the run: the median of the last tenth
  of the samples against the median of the second tenth (the first tenth is warm-up), within
  --rss-slack-mib;
- the arena back to its idle use once the load stops;
- after shutdown: exit code 0, no process of the server left, no new object in /dev/shm, no
  `naiad-model-*` folder left in the temp dir.

Writes samples.jsonl (as it goes), samples.csv, summary.json and (when matplotlib imports) soak.png into --out.

    .venv/bin/python perf/soak.py --requests 1000000 --out perf/results/soak
    perf/.tools/venv/bin/python perf/soak.py ...   # same, with matplotlib for the plot

Exit status 0 when every check passes, 1 otherwise (the verdict is in summary.json).
"""

from __future__ import annotations

import argparse
import csv
import http.client
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PERF = Path(__file__).resolve().parent
sys.path.insert(0, str(PERF))
from servers import NaiadServer  # noqa: E402

ROOT = PERF.parent
KINDS = ("http_binary", "http_json", "grpc", "http_shm", "grpc_shm")
FOREIGN_SHM_PREFIXES = ("triton_python_backend_shm_region_",)


def _proc_rss_kib(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _proc_fds(pid: int) -> int | None:
    """Open fds of `pid`, less those of the load generators' /dev/shm regions: a worker
    maps a client region when a request first needs it (a mmap keeps a dup of its fd),
    whenever that falls in the run; one per registered region, not a leak."""
    folder = f"/proc/{pid}/fd"
    try:
        names = os.listdir(folder)
    except OSError:
        return None
    count = 0
    for name in names:
        try:
            target = os.readlink(f"{folder}/{name}")
        except OSError:
            continue  # closed meanwhile
        if not target.startswith("/dev/shm/soak"):
            count += 1
    return count


def _proc_name(pid: int) -> str:
    """`frontend` for the server's own process, else the worker's instance name from argv."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return f"pid{pid}"
    text = b" ".join(argv).decode(errors="replace")
    return "worker" if "naiad.worker" in text else f"pid{pid}"


class _Probe:
    """The sampler's own keep-alive connection to the server. A new connection per sample
    would churn the frontend's heap (each connection's buffers), which glibc keeps up to
    its trim threshold (`_core.pyx` raises it to 64 MiB): RSS would grow with the
    sampling, not with the load."""

    def __init__(self, server: NaiadServer) -> None:
        self.port = server.http_port
        self.conn: http.client.HTTPConnection | None = None

    def get(self, path: str) -> dict | None:
        for _ in range(2):
            try:
                if self.conn is None:
                    self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
                self.conn.request("GET", path)
                response = self.conn.getresponse()
                body = response.read()
                return json.loads(body) if response.status == 200 else None
            except (OSError, http.client.HTTPException):
                if self.conn is not None:
                    self.conn.close()
                self.conn = None
        return None

    def answered(self, model: str) -> tuple[int, int]:
        stats = ((self.get(f"/v2/models/{model}/stats") or {}).get("model_stats") or [{}])[0]
        infer = stats.get("inference_stats", {})
        return infer.get("success", {}).get("count", 0), infer.get("fail", {}).get("count", 0)

    def arena_used(self) -> int:
        return int((self.get("/v2/naiad/arena") or {}).get("bytes_in_use", -1))

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else float("nan")


# The load generators start one after the other and connect as they start: the first
# second of samples is warm-up however short the run (a 5 s run's first tenth is not).
WARMUP_SECS = 1.0


def _flat(series: list[float], slack: float, warmup_samples: int = 0) -> dict:
    """The tenth after the warm-up vs the last tenth of a series (warm-up: the first
    tenth, or `warmup_samples` when more)."""
    n = len(series)
    tenth = max(1, n // 10)
    start = min(max(tenth, warmup_samples), n - tenth)
    early = _median(series[start : start + tenth])
    late = _median(series[-tenth:])
    return {"early": early, "late": late, "growth": late - early, "ok": late - early <= slack}


def _plot(rows: list[dict], columns: list[str], path: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib not installed: no plot (perf/.tools/venv has it)"
    x = [r["answered"] / 1e3 for r in rows]
    fig, axes = plt.subplots(3, 1, figsize=(9, 9), sharex=True)
    for column in columns:
        if column.startswith("rss_"):
            axes[0].plot(x, [r[column] / 1024 for r in rows], label=column[4:])
        elif column.startswith("fds_"):
            axes[1].plot(x, [r[column] for r in rows], label=column[4:])
    axes[2].plot(x, [r["arena_used"] / 1024 for r in rows], label="arena used")
    axes[0].set_ylabel("RSS (MiB)")
    axes[1].set_ylabel("open fds")
    axes[2].set_ylabel("arena used (KiB)")
    axes[2].set_xlabel("answered requests (thousands)")
    for axis in axes:
        axis.legend(loc="upper left", fontsize="small")
        axis.grid(alpha=0.3)
    fig.suptitle("Naiad soak: RSS, fds and arena use against requests answered")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    return str(path)


def run(args) -> dict:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    repo = Path(tempfile.mkdtemp(prefix="naiad-soak-repo-"))
    shutil.copytree(PERF / "models" / "add_sub", repo / "add_sub")
    tmp = Path(tempfile.gettempdir())
    shm_before = set(os.listdir("/dev/shm"))
    models_before = {p.name for p in tmp.glob("naiad-model-*")}

    server = NaiadServer(ROOT, Path(args.python))
    server.start(repo, None, out / "server.log")
    loads = []
    summary: dict = {"requests_target": args.requests, "kinds": list(args.kinds)}
    rows: list[dict] = []
    try:
        probe = _Probe(server)
        idle_arena = probe.arena_used()
        for kind in args.kinds:
            loads.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        str(PERF / "soak_load.py"),
                        kind,
                        "--http-port",
                        str(server.http_port),
                        "--grpc-port",
                        str(server.grpc_port),
                    ],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        started = time.monotonic()
        names: dict[int, str] = {}
        # Each sample is also written as it is taken, so a long run shows progress (and keeps
        # what it measured if it is stopped): one JSON object a line.
        progress = open(out / "samples.jsonl", "w")
        while True:
            time.sleep(args.sample_secs)
            answered, failed = probe.answered("add_sub")
            row = {
                "seconds": round(time.monotonic() - started, 2),
                "answered": answered,
                "failed": failed,
                "arena_used": probe.arena_used(),
            }
            for pid in sorted(server.group_pids()):
                name = names.get(pid)
                if name is None:  # a process's name is read from /proc once, not per sample
                    name = "frontend" if pid == server.proc.pid else f"{_proc_name(pid)}{pid}"
                    names[pid] = name
                rss, fds = _proc_rss_kib(pid), _proc_fds(pid)
                if rss is not None:
                    row[f"rss_{name}"] = rss
                if fds is not None:
                    row[f"fds_{name}"] = fds
            rows.append(row)
            progress.write(json.dumps(row) + "\n")
            progress.flush()
            if answered >= args.requests:
                break
            if any(p.poll() is not None for p in loads):
                summary["load_generator_exited_early"] = True
                break
            if row["seconds"] > args.max_seconds:
                summary["timed_out"] = True
                break
        progress.close()
        summary["seconds"] = rows[-1]["seconds"]
        summary["rate"] = round(rows[-1]["answered"] / max(rows[-1]["seconds"], 1e-9))
        for p in loads:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        generators = []
        for p in loads:
            stdout, stderr = p.communicate(timeout=60)
            lines = [line for line in stdout.splitlines() if line.startswith("{")]
            generators.append(
                json.loads(lines[-1]) if lines else {"broken": stderr[-2000:], "lost": 0}
            )
        summary["generators"] = generators
        # Idle again: what the arena held for requests in flight must be back.
        deadline = time.monotonic() + 10
        while (arena := probe.arena_used()) != idle_arena and time.monotonic() < deadline:
            time.sleep(0.2)
        summary["arena_idle_before"], summary["arena_idle_after"] = idle_arena, arena
        summary["answered"], summary["failed"] = probe.answered("add_sub")
        probe.close()
    finally:
        for p in loads:
            if p.poll() is None:
                p.kill()
        # The server's processes (workers have sessions of their own: not by group).
        processes = server.group_pids()
        exit_code = None
        if server.proc is not None:
            server.proc.send_signal(signal.SIGTERM)
            try:
                exit_code = server.proc.wait(60)
            except subprocess.TimeoutExpired:
                exit_code = "did not exit within 60 s"
        left = []
        if processes:
            time.sleep(0.5)
            left = [pid for pid in processes if Path(f"/proc/{pid}").exists()]
        server.stop()
        shutil.rmtree(repo, ignore_errors=True)
    summary["server_exit_code"] = exit_code
    summary["processes_left"] = left
    # New objects of others running beside the soak are not the server's: the real Triton's
    # Python backend (differential tests, perf/bench.py) names its regions this way; Naiad
    # itself makes none (its arena is a memfd), so anything else new is counted.
    summary["dev_shm_left"] = sorted(
        name
        for name in set(os.listdir("/dev/shm")) - shm_before
        if not name.startswith(FOREIGN_SHM_PREFIXES)
    )
    summary["model_copies_left"] = sorted(
        {p.name for p in tmp.glob("naiad-model-*")} - models_before
    )
    return _verdict(summary, rows, args, out)


def _verdict(summary: dict, rows: list[dict], args, out: Path) -> dict:
    columns = sorted({key for row in rows for key in row if key.startswith(("rss_", "fds_"))})
    with open(out / "samples.csv", "w", newline="") as f:
        writer = csv.DictWriter(
            f, fieldnames=["seconds", "answered", "failed", "arena_used"] + columns
        )
        writer.writeheader()
        writer.writerows(rows)
    checks = {}
    generators = summary.get("generators", [])
    for field in ("lost", "wrong", "errors"):
        checks[f"no_{field}"] = sum(g.get(field, 1) for g in generators) == 0
    checks["every_generator_reported"] = bool(generators) and all(
        "broken" not in g for g in generators
    )
    checks["target_reached"] = summary.get("answered", 0) >= args.requests
    drift = {}
    for column in columns:
        series = [row[column] for row in rows if column in row]
        if len(series) < 10:
            continue  # a process that was not there for the whole run (none is expected)
        slack = args.rss_slack_mib * 1024 if column.startswith("rss_") else args.fd_slack
        drift[column] = _flat(series, slack, math.ceil(WARMUP_SECS / args.sample_secs))
    summary["drift"] = drift
    checks["rss_and_fds_flat"] = bool(drift) and all(d["ok"] for d in drift.values())
    checks["arena_back_to_idle"] = summary.get("arena_idle_after") == summary.get(
        "arena_idle_before"
    )
    checks["clean_exit"] = summary.get("server_exit_code") == 0
    checks["no_process_left"] = not summary.get("processes_left")
    checks["no_dev_shm_left"] = not summary.get("dev_shm_left")
    checks["no_model_copy_left"] = not summary.get("model_copies_left")
    summary["checks"] = checks
    summary["passed"] = all(checks.values())
    if args.plot:
        summary["plot"] = _plot(rows, columns, out / "soak.png")
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Naiad soak: flat memory, fds and arena")
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--out", default=str(PERF / "results" / "soak"))
    parser.add_argument("--python", default=str(ROOT / ".venv" / "bin" / "python"))
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    parser.add_argument("--sample-secs", type=float, default=1.0)
    parser.add_argument("--max-seconds", type=float, default=3600.0)
    parser.add_argument("--rss-slack-mib", type=float, default=4.0)
    parser.add_argument("--fd-slack", type=int, default=0)
    parser.add_argument("--no-plot", dest="plot", action="store_false")
    args = parser.parse_args(argv)
    summary = run(args)
    print(json.dumps({k: summary[k] for k in ("passed", "checks", "answered", "seconds", "rate")}))
    for column, d in summary["drift"].items():
        print(f"  {column}: {d['early']} -> {d['late']} ({'ok' if d['ok'] else 'GROWS'})")
    return 0 if summary["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
