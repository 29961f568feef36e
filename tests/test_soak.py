"""A short run of perf/soak.py (issue 16): mixed HTTP binary, HTTP JSON, gRPC and system-shm
traffic from real clients, every answer checked; the server's RSS and fds stay flat, the arena
returns to idle, and shutdown leaves no process, /dev/shm object or model copy behind.

The full soak (>= 1M requests, with a plot) is `perf/soak.py`'s default; this is the same
code on fewer requests, so a leak of about 200 bytes per request or more fails it."""

from __future__ import annotations

import json
import subprocess
import sys

from server_harness import REPO_ROOT


def test_short_soak_is_flat_and_leaves_nothing(tmp_path):
    out = tmp_path / "soak"
    run = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "perf" / "soak.py"),
            "--requests",
            "20000",
            "--sample-secs",
            "0.25",
            "--no-plot",
            "--max-seconds",
            "240",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=400,
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["checks"] and all(summary["checks"].values()), (
        summary["checks"],
        run.stdout[-3000:],
        run.stderr[-3000:],
    )
    assert run.returncode == 0
    # Every kind of traffic really ran and was answered right.
    kinds = {g["kind"]: g for g in summary["generators"]}
    assert set(kinds) == {"http_binary", "http_json", "grpc", "http_shm", "grpc_shm"}
    assert all(g["ok"] > 0 and g["ok"] == g["sent"] for g in kinds.values()), kinds
    # The frontend and the worker were both sampled.
    assert any(c.startswith("rss_frontend") for c in summary["drift"])
    assert any(c.startswith("rss_worker") for c in summary["drift"])
