"""wrk as a light HTTP client for add_sub: the request bodies (KServe v2 binary tensors, or
JSON tensors in and out) and one run of `wrk` pinned to given CPUs, optionally stopping after a
fixed number of requests. Used by perf/cost.py (CPU per request) and perf/bench.py's wrk
scenarios (server capacity, side by side with Triton)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

BODIES = ("binary", "json")


def add_sub_inputs(batch: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {
        name: rng.standard_normal((batch, 16)).astype(np.float32) for name in ("INPUT0", "INPUT1")
    }


def add_sub_body(kind: str) -> tuple[bytes, dict[str, str]]:
    """(body, headers) of one add_sub request of batch 1. `binary`: what tritonclient and
    perf_analyzer send by default (binary inputs after the JSON header, binary outputs);
    `json`: a plain KServe v2 request, JSON `data` in and JSON outputs back."""
    inputs = add_sub_inputs()
    if kind == "binary":
        header = {
            "inputs": [
                {
                    "name": name,
                    "datatype": "FP32",
                    "shape": list(array.shape),
                    "parameters": {"binary_data_size": array.nbytes},
                }
                for name, array in inputs.items()
            ],
            "outputs": [
                {"name": name, "parameters": {"binary_data": True}}
                for name in ("OUTPUT0", "OUTPUT1")
            ],
        }
        head = json.dumps(header, separators=(",", ":")).encode()
        body = head + b"".join(array.tobytes() for array in inputs.values())
        return body, {
            "Content-Type": "application/octet-stream",
            "Inference-Header-Content-Length": str(len(head)),
        }
    if kind == "json":
        request = {
            "inputs": [
                {
                    "name": name,
                    "datatype": "FP32",
                    "shape": list(array.shape),
                    "data": array.ravel().tolist(),
                }
                for name, array in inputs.items()
            ]
        }
        return json.dumps(request, separators=(",", ":")).encode(), {
            "Content-Type": "application/json"
        }
    raise ValueError(f"unknown body kind {kind!r}; known: {BODIES}")


_LUA = """
local f = assert(io.open(os.getenv("NAIAD_WRK_BODY"), "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
%(headers)s
local bad = 0
response = function(status, headers, body)
  if status ~= 200 then
    bad = bad + 1
    if bad == 1 then io.stderr:write("non-200: " .. status .. " " .. body .. "\\n") end
  end
end
%(pipeline)s"""

# With a pipeline depth above 1 each connection sends that many requests back to back
# before it reads their answers (wrk counts each answer).
_LUA_PIPELINE = """
init = function(args)
  local requests = {}
  for i = 1, %d do requests[i] = wrk.format() end
  pipelined = table.concat(requests)
end
request = function() return pipelined end
"""


def wrk_path() -> str:
    found = shutil.which("wrk")
    if not found:
        raise SystemExit("wrk is not installed: run perf/setup_tools.sh (Debian package `wrk`)")
    return found


def run_wrk(
    url: str,
    kind: str,
    connections: int,
    seconds: float,
    cpus: list[int] | None = None,
    threads: int = 1,
    until=None,
    extra_headers: dict[str, str] | None = None,
    pipeline: int = 1,
    scheme: str = "http",
) -> dict:
    """One wrk run against `scheme`://`url`/v2/models/add_sub/infer with `connections`
    connections for `seconds`: {"rps", "errors", "requests", "seconds", "output"}.
    `until`: a callable polled every 0.1 s; once it returns true wrk is interrupted (it
    then reports what it did so far) and `seconds` is only a cap. `extra_headers` go
    with each request (Accept-Encoding: perf/compressed_lane.py). `pipeline`: requests
    each connection sends before reading their answers."""
    body, headers = add_sub_body(kind)
    headers = {**headers, **(extra_headers or {})}
    with tempfile.TemporaryDirectory(prefix="naiad-wrk-") as tmp:
        body_path = Path(tmp) / "body"
        body_path.write_bytes(body)
        lua = Path(tmp) / "load.lua"
        lua.write_text(
            _LUA
            % {
                "headers": "\n".join(
                    f'wrk.headers["{name}"] = "{value}"' for name, value in headers.items()
                ),
                "pipeline": _LUA_PIPELINE % pipeline if pipeline > 1 else "",
            }
        )
        env = dict(os.environ)
        env["NAIAD_WRK_BODY"] = str(body_path)
        cmd = [
            wrk_path(),
            "--latency",
            f"-t{threads}",
            f"-c{connections}",
            f"-d{max(1, round(seconds))}s",
            "-s",
            str(lua),
            f"{scheme}://{url}/v2/models/add_sub/infer",
        ]
        if cpus:
            cmd = ["taskset", "-c", ",".join(map(str, cpus)), *cmd]
        proc = subprocess.Popen(
            cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        if until is not None:
            deadline = time.monotonic() + seconds + 5
            while proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
                if until():
                    proc.send_signal(signal.SIGINT)
                    break
        try:
            stdout, stderr = proc.communicate(timeout=seconds + 60)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
    out = stdout + stderr
    if proc.returncode not in (0, -signal.SIGINT):
        raise RuntimeError(f"wrk failed ({proc.returncode}): {out.strip()[-500:]}")
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    total = re.search(r"(\d+) requests in ([\d.]+)(m?s)", out)
    errors = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    elapsed = 0.0
    if total:
        elapsed = float(total.group(2)) / (1000 if total.group(3) == "ms" else 1)
    average = re.search(r"Latency\s+([\d.]+)(us|ms|s)\b", out)
    return {
        "avg_us": _microseconds(average.group(1), average.group(2)) if average else 0.0,
        "p50_us": _percentile(out, "50"),
        "p99_us": _percentile(out, "99"),
        "rps": float(rps.group(1)) if rps else 0.0,
        "requests": int(total.group(1)) if total else 0,
        "seconds": elapsed,
        "errors": int(errors.group(1)) if errors else 0,
        "output": out,
    }


def _microseconds(value: str, unit: str) -> float:
    return float(value) * {"us": 1.0, "ms": 1e3, "s": 1e6}[unit]


def _percentile(out: str, which: str) -> float:
    """A percentile of wrk --latency's distribution, in microseconds (0 if absent)."""
    found = re.search(rf"^\s+{which}%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
    return _microseconds(found.group(1), found.group(2)) if found else 0.0
