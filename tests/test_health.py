"""Health that tells the truth: --strict-readiness, readiness while a worker is down,
restarts that back off, and stopping by a signal to the whole process group."""

from __future__ import annotations

import os
import signal
import time

import pytest
import requests
from model_control_support import (
    ADD_SUB_MODEL,
    INIT_FAILS,
    INIT_ONCE,
    ConstantLoad,
    add_sub_pbtxt,
    one_input_pbtxt,
    write_model,
)
from server_harness import NaiadServer, descendants

pytestmark = pytest.mark.timeout(300)


def _status(server, path: str) -> int:
    return requests.get(server.url + path, timeout=30).status_code


@pytest.mark.parametrize("strict, expected", [("true", 400), ("false", 200)])
def test_strict_readiness(tmp_path, strict, expected):
    repo = tmp_path / "models"
    write_model(repo, "add_sub", add_sub_pbtxt(), ADD_SUB_MODEL)
    write_model(repo, "init_fails", one_input_pbtxt("init_fails"), INIT_FAILS.format(name="x"))
    args = ["--exit-on-error=false", f"--strict-readiness={strict}"]
    with NaiadServer(repo, log_dir=tmp_path, extra_args=args).start(wait="live") as server:
        assert _status(server, "/v2/health/ready") == expected
        assert _status(server, "/v2/models/add_sub/ready") == 200
        assert _status(server, "/v2/models/init_fails/ready") == 400


def _wait_status(server, path: str, status: int, timeout: float = 60.0) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if _status(server, path) == status:
            return time.monotonic() - start
        time.sleep(0.02)
    raise AssertionError(f"{path} never answered {status}")


def test_not_ready_while_a_worker_is_down_and_restarts_back_off(tmp_path):
    """A worker dies; the model and server are not ready until it is back. Its model
    then fails in initialize on every restart: the restarts slow down, never spin."""
    repo = tmp_path / "models"
    marker = tmp_path / "initialized"
    write_model(
        repo, "init_once", one_input_pbtxt("init_once"), INIT_ONCE.format(marker=str(marker))
    )
    with NaiadServer(repo, log_dir=tmp_path) as server:
        assert _status(server, "/v2/health/ready") == 200
        body = {"inputs": [{"name": "INPUT0", "shape": [1, 1], "datatype": "FP32", "data": [-1]}]}
        reply = requests.post(server.url + "/v2/models/init_once/infer", json=body, timeout=60)
        assert reply.status_code == 500  # the worker died running it
        _wait_status(server, "/v2/health/ready", 400, timeout=10)
        assert _status(server, "/v2/models/init_once/ready") == 400
        attempts = tmp_path / "initialized.attempts"

        def tries() -> list[float]:
            return [float(t) for t in attempts.read_text().split()] if attempts.exists() else []

        deadline = time.monotonic() + 60
        while len(tries()) < 4:
            assert time.monotonic() < deadline, tries()
            time.sleep(0.05)
        # Restarts after delays of 0, 0.5, 1, 2 s: each failed try waits at least its
        # delay after the one before (a tight loop would not).
        times = tries()[:4]
        gaps = [later - earlier for earlier, later in zip(times, times[1:])]
        assert all(gap >= delay for gap, delay in zip(gaps, (0.5, 1.0, 2.0))), gaps
        assert _status(server, "/v2/health/ready") == 400
        # The cause goes away: the next restart brings the instance back.
        marker.unlink()
        _wait_status(server, "/v2/health/ready", 200, timeout=30)
        assert _status(server, "/v2/models/init_once/ready") == 200


def test_ready_again_after_a_killed_worker_is_restarted(tmp_path):
    repo = tmp_path / "models"
    write_model(repo, "add_sub", add_sub_pbtxt(count=2), ADD_SUB_MODEL)
    with NaiadServer(repo, log_dir=tmp_path) as server:
        workers = descendants(server.pid)
        assert len(workers) == 2
        os.kill(workers[0], signal.SIGKILL)
        _wait_status(server, "/v2/models/add_sub/ready", 400, timeout=10)
        _wait_status(server, "/v2/models/add_sub/ready", 200, timeout=60)
        assert _status(server, "/v2/health/ready") == 200
        assert len(descendants(server.pid)) == 2


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_to_the_process_group_drains_and_exits_cleanly(tmp_path, signum):
    """What Ctrl-C in a terminal or a supervisor does: every process of the group gets the
    signal. Requests in flight are answered, models finalize once, exit 0, no restart."""
    repo = tmp_path / "models"
    finalize_log = tmp_path / "finalized"
    model = ADD_SUB_MODEL.replace(
        'pb_utils.Logger.log_info("add_sub: cleaning up")',
        f'open({str(finalize_log)!r}, "a").write("f")',
    )
    assert model != ADD_SUB_MODEL
    write_model(repo, "add_sub", add_sub_pbtxt(count=2), model)
    server = NaiadServer(repo, log_dir=tmp_path).start()
    with ConstantLoad(server.url, threads=2) as traffic:
        traffic.wait_for(20)
        os.killpg(os.getpgid(server.pid), signum)  # the harness gives the server its own group
        assert server.wait_exit(60) == 0
    stderr = server.stderr_text()
    assert "restarting" not in stderr and "exited with" not in stderr, stderr[-2000:]
    assert finalize_log.read_text() == "ff"  # each of the two instances, once
    # Requests were answered until the listener closed; none failed with a server error.
    server_errors = [f for f in traffic.failures if f[:1] == "5"]
    assert server_errors == [], server_errors[:3]


def test_a_frozen_worker_makes_its_model_not_ready_until_it_answers(tmp_path):
    """A worker that stops answering (here: SIGSTOP) misses its heartbeats: its model
    and the server are not ready until it answers again."""
    repo = tmp_path / "models"
    write_model(repo, "add_sub", add_sub_pbtxt(), ADD_SUB_MODEL)
    with NaiadServer(repo, log_dir=tmp_path) as server:
        (worker,) = descendants(server.pid)
        os.kill(worker, signal.SIGSTOP)
        try:
            waited = _wait_status(server, "/v2/models/add_sub/ready", 400, timeout=20)
            assert waited > 3  # not before the heartbeats were missed
            assert _status(server, "/v2/health/ready") == 400
            assert "has not answered for" in server.stderr_text()
        finally:
            os.kill(worker, signal.SIGCONT)
        _wait_status(server, "/v2/models/add_sub/ready", 200, timeout=20)
        assert _status(server, "/v2/health/ready") == 200
        assert descendants(server.pid) == [worker]  # not killed: it was only frozen


def test_a_signal_while_models_load_stops_cleanly(tmp_path):
    repo = tmp_path / "models"
    finalized = tmp_path / "finalized"
    slow = f"""
import time

class TritonPythonModel:
    def initialize(self, args):
        time.sleep(3)

    def execute(self, requests):
        return []

    def finalize(self):
        open({str(finalized)!r}, "a").write("f")
"""
    write_model(repo, "slow", one_input_pbtxt("slow"), slow)
    server = NaiadServer(repo, log_dir=tmp_path).start(wait=None)
    deadline = time.monotonic() + 60
    while "loading: slow" not in server.stderr_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)  # the worker is in its 3 s initialize; nothing is served yet
    with pytest.raises(requests.ConnectionError):
        requests.get(server.url + "/v2/health/live", timeout=5)
    os.killpg(os.getpgid(server.pid), signal.SIGTERM)
    assert server.wait_exit(60) == 0
    assert "a signal arrived while the models loaded" in server.stderr_text()
    assert finalized.read_text() == "f"


def test_a_signal_to_the_group_while_a_worker_starts_does_not_kill_it(tmp_path, monkeypatch):
    # The window this guards: a worker's interpreter is starting and has not yet reached the
    # worker's main(), where it ignores SIGINT/SIGTERM. A sitecustomize that only the worker
    # runs holds it there, so the signal lands inside that window every time.
    site = tmp_path / "site"
    site.mkdir()
    starting = tmp_path / "worker-starting"
    (site / "sitecustomize.py").write_text(
        "import sys, time\n"
        "if any(arg.startswith('--channel-offset=') for arg in sys.argv):\n"
        f"    open({str(starting)!r}, 'w').close()\n"
        "    time.sleep(2)\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(site))
    repo = tmp_path / "models"
    finalized = tmp_path / "finalized"
    model = f"""
class TritonPythonModel:
    def execute(self, requests):
        return []

    def finalize(self):
        open({str(finalized)!r}, "a").write("f")
"""
    write_model(repo, "plain", one_input_pbtxt("plain"), model)
    server = NaiadServer(repo, log_dir=tmp_path).start(wait=None)
    deadline = time.monotonic() + 60
    while not starting.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert starting.exists(), server.stderr_text()
    os.killpg(os.getpgid(server.pid), signal.SIGTERM)
    assert server.wait_exit(60) == 0, server.stderr_text()
    # The worker lived through the signal, loaded its model and was shut down in order.
    assert finalized.read_text() == "f", server.stderr_text()
