"""cost.py --profile: perf's shared objects fall in the right groups, and a profiled
process's samples are read back from `perf report` (skipped without a usable perf).

    .venv/bin/python -m pytest perf/tests/test_cost_profile.py -q
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

PERF = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PERF))

import cost  # noqa: E402


@pytest.mark.parametrize(
    ("dso", "group"),
    [
        ("libpython3.11.so.1.0", "python"),
        ("[kernel.kallsyms]", "kernel"),
        ("_core.cpython-311-x86_64-linux-gnu.so", "naiad core"),
        ("loop.cpython-311-x86_64-linux-gnu.so", "uvloop"),
        ("_multiarray_umath.cpython-311-x86_64-linux-gnu.so", "numpy"),
        ("libc.so.6", "libc"),
        ("libstdc++.so.6.0.30", "libc"),
        ("libtritonserver.so", "other"),
    ],
)
def test_dso_groups(dso, group):
    assert cost._dso_group(dso) == group


class _Proc:
    def __init__(self, pid):
        self.pid = pid


class _Server:
    """What _start_profiles reads of a server: its frontend and its process group."""

    def __init__(self, pid):
        self.proc = _Proc(pid)

    def group_pids(self):
        return [self.proc.pid]


def _perf_usable() -> bool:
    if shutil.which("perf") is None:
        return False
    probe = subprocess.run(
        ["perf", "record", "-q", "-e", "cpu-clock", "-o", "/dev/null", "--", "true"],
        capture_output=True,
        check=False,
    )
    return probe.returncode == 0


@pytest.mark.skipif(not _perf_usable(), reason="Linux perf is missing or not permitted here")
def test_a_python_loop_is_mostly_python(tmp_path):
    busy = subprocess.Popen(
        [sys.executable, "-c", "import time\nend = time.time() + 20\nwhile time.time() < end: pass"]
    )
    try:
        started = cost._start_profiles(_Server(busy.pid), tmp_path, 0)
        time.sleep(1.0)
        shares = cost._stop_profiles(started)
    finally:
        busy.kill()
        busy.wait()
    frontend = shares["frontend"]
    assert abs(sum(frontend.values()) - 1.0) < 1e-6
    assert frontend.get("python", 0.0) > 0.5, frontend
