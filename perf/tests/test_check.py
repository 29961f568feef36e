"""The regression gate's own test: perf/check must fail on a deliberately slowed build and pass
on an unchanged one. Slow (about two minutes per case) and outside `make test`:

    perf/.tools/venv/bin/python -m pytest perf/tests -v

It copies a Naiad tree (this working copy, or NAIAD_PERF_GATE_REV=<rev> of this repository) into
a scratch git repository, commits it as the base, and runs perf/check there against that commit:
once unchanged, once with a 1 ms sleep injected into every pb_utils.get_input_tensor_by_name call
(the Triton Python-model API every example model uses, so the slow-down is in Naiad's server code,
not in the benchmark's models).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

PERF = Path(__file__).resolve().parents[1]
REPO = PERF.parent
sys.path.insert(0, str(PERF))

import check  # noqa: E402

PYTHON = REPO / ".venv" / "bin" / "python"
SLEEP_PATCH = """

# --- injected by perf/tests/test_check.py: a deliberately slowed build ---
import time as _perf_gate_time

_perf_gate_original = get_input_tensor_by_name


def get_input_tensor_by_name(inference_request, name):
    _perf_gate_time.sleep(0.001)
    return _perf_gate_original(inference_request, name)
"""


@pytest.fixture(scope="module")
def scratch_repo(tmp_path_factory) -> Path:
    if not PYTHON.exists():
        pytest.skip("no .venv: run `make install` first")
    root = tmp_path_factory.mktemp("gate") / "repo"
    root.mkdir()
    rev = os.environ.get("NAIAD_PERF_GATE_REV")
    if rev:
        check.snapshot_revision(REPO, rev, root)
    else:
        check.snapshot_worktree(REPO, root)
    env = dict(os.environ, GIT_AUTHOR_NAME="gate", GIT_AUTHOR_EMAIL="gate@example.invalid")
    env.update(GIT_COMMITTER_NAME="gate", GIT_COMMITTER_EMAIL="gate@example.invalid")
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "base"]):
        subprocess.run(["git", "-C", str(root), *cmd], check=True, env=env)
    return root


def run_gate(repo: Path) -> subprocess.CompletedProcess:
    cmd = [
        str(PERF / "check"),
        "--repo",
        str(repo),
        "--base",
        "HEAD",
        "--python",
        str(PYTHON),
        "--scenario",
        "add_sub_http",
        "--pairs",
        "4",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    print(done.stdout[-6000:])
    print(done.stderr[-3000:], file=sys.stderr)
    return done


def test_gate_passes_on_unchanged_build(scratch_repo):
    done = run_gate(scratch_repo)
    assert done.returncode == 0, "perf/check failed on an unchanged build"
    assert "perf/check: PASS" in done.stdout


def test_gate_fails_on_slowed_build(scratch_repo):
    utils = scratch_repo / "pysrc" / "naiad" / "triton_python_backend_utils.py"
    original = utils.read_text()
    # A module-level name (the core's function since 2026-12-04): the patch rebinds it.
    assert "\nget_input_tensor_by_name = " in original
    utils.write_text(original + SLEEP_PATCH)
    try:
        done = run_gate(scratch_repo)
    finally:
        utils.write_text(original)
    assert done.returncode == 1, "perf/check did not fail on a slowed build"
    assert "perf/check: FAIL" in done.stdout
