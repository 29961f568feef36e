#!/usr/bin/env python3
"""Triton's Model Analyzer (`triton-model-analyzer` on PyPI) profiling Naiad, in both of
its launch modes that need no container (issue 41: Triton's tools work with their options):

- remote: Naiad started here with Triton's flags (REMOTE_FLAGS); Model Analyzer loads the
  model itself (explicit model control) and collects the CPU metrics too;
- local: Model Analyzer starts `naiad serve` as its tritonserver (`--triton-server-path`)
  with the `triton_server_flags` a user adds in its config (LOCAL_FLAGS).

    .venv/bin/python perf/model_analyzer.py

Model Analyzer goes into perf/.tools/model-analyzer, a venv of its own (it leaves
perf/.tools/venv as perf/setup_tools.sh made it), and runs that venv's perf_analyzer.
Prints, per mode, the command line Naiad got and Model Analyzer's results table; the run's
files go to perf/results/model-analyzer-<time>/. Exits 1 when a mode fails or measures
nothing.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import (  # noqa: E402
    ensure_tools,
    naiad_here,
    perf_analyzer_env,
    perf_analyzer_path,
    results_dir,
)
from servers import TOOLS, free_port  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MODEL = "add_sub"
MODEL_ANALYZER = "triton-model-analyzer==1.58.0"
REMOTE_FLAGS = ["--model-control-mode=explicit", "--id=triton", "--allow-gpu-metrics=false"]
# Model Analyzer's config keys: the flags without their dashes, '_' for '-'.
LOCAL_FLAGS = {
    "http_address": "127.0.0.1",
    "grpc_address": "127.0.0.1",
    "metrics_address": "127.0.0.1",
    "id": "triton",
    "allow_gpu_metrics": "false",
    "strict_readiness": "true",
    "exit_timeout_secs": "5",
    "log_verbose": "1",
}


def model_analyzer() -> Path:
    venv = TOOLS / "model-analyzer"
    binary = venv / "bin" / "model-analyzer"
    if not binary.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", MODEL_ANALYZER], check=True)
    return binary


def profile(binary: Path, out: Path, endpoints: tuple[int, int, int], extra: list[str]) -> str:
    """Runs `model-analyzer profile` on MODEL at concurrency 1 and 2; returns its results
    table (CSV), raising with the log's tail when there is none."""
    http, grpc, metrics = endpoints
    command = [
        str(binary),
        "profile",
        f"--model-repository={out / 'models'}",
        f"--profile-models={MODEL}",
        "--run-config-search-disable",
        "--concurrency=1,2",
        "--batch-sizes=1",
        f"--perf-analyzer-path={perf_analyzer_path()}",
        f"--triton-http-endpoint=127.0.0.1:{http}",
        f"--triton-grpc-endpoint=127.0.0.1:{grpc}",
        f"--triton-metrics-url=http://127.0.0.1:{metrics}/metrics",
        f"--output-model-repository-path={out / 'output_models'}",
        "--override-output-model-repository",
        f"--export-path={out / 'export'}",
        f"--checkpoint-directory={out / 'checkpoints'}",
        *extra,
    ]
    with open(out / "model-analyzer.log", "wb") as log:
        subprocess.run(command, env=perf_analyzer_env(), stdout=log, stderr=subprocess.STDOUT)
    table = out / "export" / "results" / "metrics-model-inference.csv"
    rows = table.read_text().strip().splitlines() if table.exists() else []
    if len(rows) < 2:
        tail = (out / "model-analyzer.log").read_text(errors="replace")[-3000:]
        raise RuntimeError(f"model-analyzer measured nothing ({out}):\n{tail}")
    return "\n".join(rows)


def run_remote(binary: Path, out: Path) -> str:
    server = naiad_here(extra_args=REMOTE_FLAGS)
    server.start(out / "models", None, out / "naiad.log")
    try:
        command = shlex.join(server.command(out / "models"))
        table = profile(
            binary,
            out,
            (server.http_port, server.grpc_port, server.metrics_port),
            ["--triton-launch-mode=remote", "--collect-cpu-metrics"],
        )
    finally:
        server.stop()
    return f"naiad: {command}\n{table}"


def run_local(binary: Path, out: Path) -> str:
    # Model Analyzer runs this as tritonserver; it writes down the command line it got.
    wrapper = out / "tritonserver"
    args = out / "tritonserver.args"
    wrapper.write_text(
        f'#!/bin/sh\necho "$*" >> {shlex.quote(str(args))}\n'
        f'exec {shlex.quote(sys.executable)} -m naiad serve "$@"\n'
    )
    wrapper.chmod(0o755)
    config = out / "config.yaml"
    config.write_text(
        "triton_server_flags:\n" + "".join(f"  {k}: {v}\n" for k, v in LOCAL_FLAGS.items())
    )
    table = profile(
        binary,
        out,
        (free_port(), free_port(), free_port()),
        [
            f"--config-file={config}",
            "--triton-launch-mode=local",
            f"--triton-server-path={wrapper}",
            f"--triton-output-path={out / 'naiad.log'}",
        ],
    )
    lines = args.read_text().splitlines()
    return f"naiad (started {len(lines)}x by model-analyzer): naiad serve {lines[-1]}\n{table}"


def main() -> int:
    ensure_tools(need_triton=False)
    binary = model_analyzer()
    results = results_dir("model-analyzer")
    failed = False
    for mode, run in (("remote", run_remote), ("local", run_local)):
        out = results / mode
        out.mkdir()
        shutil.copytree(ROOT / "model_repository" / MODEL, out / "models" / MODEL)
        try:
            print(f"## {mode}\n{run(binary, out)}\n", flush=True)
        except (RuntimeError, OSError) as error:
            print(f"## {mode}: FAILED\n{error}\n", flush=True)
            failed = True
    print(f"files: {results}")
    return 1 if failed else 0


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(main())
