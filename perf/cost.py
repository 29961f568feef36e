"""Where the server's CPU goes, per request: a fixed number of add_sub requests sent by wrk
(a light client; over gRPC, `--protocol grpc`, by h2load) at a given concurrency, and the server's CPU time over them read from
/proc, split into the frontend process's user and kernel time and its workers' (user +
kernel), each divided by the requests the server counted; with the average batch size the
server formed (its statistics: inferences / executions).

    .venv/bin/python perf/cost.py --requests 50000 --concurrency 8 --body binary
    .venv/bin/python perf/cost.py --requests 30000 --concurrency 8 --body json --rounds 3
    .venv/bin/python perf/cost.py --requests 60000 --concurrency 8 --pipeline 8
    .venv/bin/python perf/cost.py --requests 50000 --concurrency 64 --protocol grpc

The server (this tree, built in place by `make install`; or --naiad-tree) is pinned to
CPU 0 and wrk to the other CPUs, as in perf/bench.py. Each round starts a fresh server;
the table gives every round and the median. `--pipeline N`: each wrk connection sends N
requests back to back before reading their answers (HTTP pipelining). `--server triton` measures the real Triton
2.51 the same way (its model stub processes count as "worker").

`--profile` also samples the server's processes with Linux `perf record` (cpu-clock,
user and kernel) over the measured window and splits each process's µs per request by
the code it ran in: the Python interpreter, the kernel, Naiad's C++ core, uvloop, numpy,
libc/libstdc++, httptools, other. It says where the rest of a request's cost is (what a
C++ I/O loop would take away, what it would not); perf's own sampling adds a little to
the figures of a profiled round.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import h2load_load  # noqa: E402
from scenarios import reference  # noqa: E402
from servers import NaiadServer, TritonServer  # noqa: E402
from wrk_load import BODIES, add_sub_inputs, run_wrk  # noqa: E402

PERF = Path(__file__).resolve().parent
REPO_ROOT = PERF.parent


def _times(pid: int) -> tuple[float, float]:
    """(user, kernel) CPU seconds of one live process."""
    tick = os.sysconf("SC_CLK_TCK")
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0, 0.0
    return int(fields[11]) / tick, int(fields[12]) / tick


def _snapshot(server) -> dict:
    frontend = server.proc.pid
    user, kernel = _times(frontend)
    workers = {pid: _times(pid) for pid in server.group_pids() if pid != frontend}
    return {"frontend_user": user, "frontend_kernel": kernel, "workers": workers}


def _counts(server, model: str) -> tuple[int, int]:
    stats = server.statistics(model) or {}
    return int(stats.get("inference_count", 0)), int(stats.get("execution_count", 0))


# perf report's shared objects, grouped by what they are.
_DSO_GROUPS = (
    ("python", ("libpython", "python3")),
    ("kernel", ("[kernel",)),
    ("naiad core", ("_core.",)),
    ("uvloop", ("loop.cpython",)),
    ("numpy", ("_multiarray", "numpy")),
    ("libc", ("libc.", "libstdc++", "libm.", "[vdso]", "ld-linux")),
    ("httptools", ("httptools", "parser.cpython", "url_parser")),
)
PROFILE_GROUPS = tuple(name for name, _ in _DSO_GROUPS) + ("other",)


def _dso_group(dso: str) -> str:
    for name, prefixes in _DSO_GROUPS:
        if any(dso.startswith(prefix) for prefix in prefixes):
            return name
    return "other"


def _start_profiles(server, out: Path, index: int) -> dict:
    """`perf record` on the frontend and on each worker, until _stop_profiles."""
    if shutil.which("perf") is None:
        raise RuntimeError("--profile needs Linux perf on PATH")
    frontend = server.proc.pid
    started = {}
    for pid in server.group_pids():
        role = "frontend" if pid == frontend else "worker"
        data = out / f"perf-{index}-{role}-{pid}.data"
        cmd = ["perf", "record", "-q", "-e", "cpu-clock", "-F", "1999", "-p", str(pid)]
        proc = subprocess.Popen(
            [*cmd, "-o", str(data)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        started[pid] = (role, data, proc)
    time.sleep(0.3)  # perf attaches
    return started


def _stop_profiles(started: dict) -> dict:
    """{"frontend": {group: share}, "worker": {group: share}}: each role's samples by
    shared-object group, as fractions of that role's samples."""
    counts: dict[str, dict[str, float]] = {"frontend": {}, "worker": {}}
    for _role, _data, proc in started.values():
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    for role, data, _proc in started.values():
        report = subprocess.run(
            [
                "perf",
                "report",
                "-i",
                str(data),
                "--stdio",
                "-q",
                "--sort",
                "dso",
                "--no-children",
                "-g",
                "none",
                "-F",
                "sample,dso",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        for line in report.stdout.splitlines():
            parts = line.split(None, 1)
            if len(parts) != 2 or not parts[0].isdigit():
                continue
            group = _dso_group(parts[1].strip())
            counts[role][group] = counts[role].get(group, 0) + int(parts[0])
    shares = {}
    for role, by_group in counts.items():
        total = sum(by_group.values()) or 1
        shares[role] = {group: n / total for group, n in by_group.items()}
    return shares


def _grpc_round(server, args, client_cpus, marks: dict) -> dict:
    """h2load posting add_sub's ModelInfer until --requests were answered; the CPU
    snapshot is taken as it ends. One grpcio call first checks the answers."""
    inputs = add_sub_inputs()
    expected = reference("add_sub", inputs)
    wrong = h2load_load.check_answer(server.grpc_url, "add_sub", inputs, expected)
    if wrong:
        raise RuntimeError(f"gRPC add_sub answered wrong: {wrong}")
    request = h2load_load.infer_request("add_sub", inputs, list(expected))
    started = time.monotonic()
    result = h2load_load.run_h2load(
        server.grpc_url,
        request,
        args.concurrency,
        args.max_seconds,
        client_cpus,
        requests=args.requests,
    )
    marks["after"] = _snapshot(server)
    marks["elapsed"] = time.monotonic() - started
    marks["counts"] = _counts(server, "add_sub")
    return {"errors": result["failed"], "output": result["output"]}


def one_round(server, repo: Path, args, out: Path, index: int) -> dict:
    server.start(repo, [0] if os.cpu_count() > 1 else None, out / f"server-{index}.log")
    grpc = args.protocol == "grpc"
    try:
        client_cpus = list(range(1, os.cpu_count())) or None
        # Warm up (first batches, lazy imports), then measure.
        if grpc:
            warm = h2load_load.infer_request("add_sub", add_sub_inputs(), ["OUTPUT0", "OUTPUT1"])
            h2load_load.run_h2load(server.grpc_url, warm, args.concurrency, 1, client_cpus)
        else:
            run_wrk(
                server.http_url, args.body, args.concurrency, 1, client_cpus, pipeline=args.pipeline
            )
        count0, exec0 = _counts(server, "add_sub")
        profiles = _start_profiles(server, out, index) if args.profile else None
        before = _snapshot(server)
        started = time.monotonic()
        marks = {}

        def enough() -> bool:
            # Counted requests reached the target: take the CPU snapshot now, before wrk
            # is interrupted (its last replies and the disconnects are not counted).
            count, _ = _counts(server, "add_sub")
            if count - count0 < args.requests:
                return False
            marks["after"] = _snapshot(server)
            marks["elapsed"] = time.monotonic() - started
            marks["counts"] = _counts(server, "add_sub")
            return True

        if grpc:
            result = _grpc_round(server, args, client_cpus, marks)
        else:
            result = run_wrk(
                server.http_url,
                args.body,
                args.concurrency,
                args.max_seconds,
                client_cpus,
                until=enough,
                pipeline=args.pipeline,
            )
        shares = _stop_profiles(profiles) if profiles is not None else None
        if "after" not in marks:
            raise RuntimeError(f"{args.requests} requests not reached in {args.max_seconds}s")
        after = marks["after"]
        elapsed = marks["elapsed"]
        count1, exec1 = marks["counts"]
    finally:
        server.stop()
    requests = count1 - count0
    if requests <= 0:
        raise RuntimeError(f"the server counted no requests; the client said:\n{result['output']}")
    worker_user = worker_kernel = 0.0
    for pid, (user, kernel) in after["workers"].items():
        user0, kernel0 = before["workers"].get(pid, (0.0, 0.0))
        worker_user += user - user0
        worker_kernel += kernel - kernel0
    us = 1e6 / requests
    frontend_us = (after["frontend_user"] - before["frontend_user"]) * us + (
        after["frontend_kernel"] - before["frontend_kernel"]
    ) * us
    profile = None
    if shares is not None:
        worker_total = (worker_user + worker_kernel) * us
        profile = {
            role: {g: share * total for g, share in shares[role].items()}
            for role, total in (("frontend", frontend_us), ("worker", worker_total))
        }
    return {
        "profile": profile,
        "requests": requests,
        "errors": result["errors"],
        "rps": requests / elapsed,
        "batch": requests / max(1, exec1 - exec0),
        "frontend_user_us": (after["frontend_user"] - before["frontend_user"]) * us,
        "frontend_kernel_us": (after["frontend_kernel"] - before["frontend_kernel"]) * us,
        "worker_us": (worker_user + worker_kernel) * us,
        "worker_user_us": worker_user * us,
        "worker_kernel_us": worker_kernel * us,
    }


def render(args, rounds: list[dict], label: str) -> str:
    keys = (
        "rps",
        "batch",
        "frontend_user_us",
        "frontend_kernel_us",
        "worker_us",
        "worker_user_us",
        "worker_kernel_us",
    )
    lines = [
        f"{label}: add_sub, "
        + ("gRPC ModelInfer, h2load" if args.protocol == "grpc" else f"{args.body} body, wrk")
        + f" c={args.concurrency}"
        + (f" pipelined {args.pipeline} deep" if args.pipeline > 1 else "")
        + f", {args.requests} requests per round, server on CPU 0",
        "",
        "| round | infer/s | avg batch | frontend user µs/req | frontend kernel µs/req "
        "| worker µs/req (user + kernel) | total µs/req | errors |",
        "|---|---|---|---|---|---|---|---|",
    ]

    def row(name, r):
        total = r["frontend_user_us"] + r["frontend_kernel_us"] + r["worker_us"]
        return (
            f"| {name} | {r['rps']:,.0f} | {r['batch']:.2f} | {r['frontend_user_us']:.1f} | "
            f"{r['frontend_kernel_us']:.1f} | {r['worker_us']:.1f} ({r['worker_user_us']:.1f} + "
            f"{r['worker_kernel_us']:.1f}) | {total:.1f} | "
            f"{r.get('errors', 0)} |"
        )

    for i, r in enumerate(rounds):
        lines.append(row(str(i + 1), r))
    if len(rounds) > 1:
        median = {k: statistics.median(r[k] for r in rounds) for k in keys}
        lines.append(row("median", median))
    profiled = [r["profile"] for r in rounds if r.get("profile")]
    if profiled:
        lines += [
            "",
            "µs of CPU per request by where it ran (perf record, cpu-clock; median of rounds):",
            "",
            "| process | " + " | ".join(PROFILE_GROUPS) + " | total |",
            "|---|" + "---|" * (len(PROFILE_GROUPS) + 1),
        ]
        for role in ("frontend", "worker"):
            cells = [
                statistics.median(p[role].get(g, 0.0) for p in profiled) for g in PROFILE_GROUPS
            ]
            lines.append(
                f"| {role} | " + " | ".join(f"{c:.1f}" for c in cells) + f" | {sum(cells):.1f} |"
            )
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--requests", type=int, default=30000)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--body", choices=BODIES, default="binary", help="HTTP's request body")
    ap.add_argument(
        "--protocol", choices=("http", "grpc"), default="http", help="wrk (HTTP) or h2load (gRPC)"
    )
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument(
        "--pipeline", type=int, default=1, help="requests each connection sends before reading"
    )
    ap.add_argument("--max-seconds", type=float, default=60.0, help="cap on one round's wrk run")
    ap.add_argument("--server", choices=("naiad", "triton"), default="naiad")
    ap.add_argument("--naiad-tree", type=Path, default=REPO_ROOT)
    ap.add_argument("--naiad-python", type=Path, default=None)
    ap.add_argument("--json", action="store_true", help="print the rounds as JSON too")
    ap.add_argument(
        "--profile",
        action="store_true",
        help="split each process's CPU by code (Python, kernel, C++ core, uvloop...) with perf",
    )
    ap.add_argument(
        "--naiad-arg",
        action="append",
        default=[],
        help="one more `naiad serve` flag (repeatable), e.g. --naiad-arg=--http-io-loop=false",
    )
    args = ap.parse_args(argv)

    if args.server == "triton":
        server = TritonServer()
        label = "triton"
    else:
        tree = args.naiad_tree.resolve()
        python = args.naiad_python or tree / ".venv" / "bin" / "python"
        server = NaiadServer(tree, python, extra_args=args.naiad_arg)
        label = f"naiad ({tree}{''.join(' ' + a for a in args.naiad_arg)})"
    with tempfile.TemporaryDirectory(prefix="naiad-cost-") as tmp:
        repo = Path(tmp) / "models"
        repo.mkdir()
        source = PERF / "models" / "add_sub"
        shutil.copytree(source, repo / "add_sub")
        out = Path(tmp)
        rounds = [one_round(server, repo, args, out, i) for i in range(args.rounds)]
    print(render(args, rounds, label))
    if args.json:
        print(json.dumps(rounds, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
