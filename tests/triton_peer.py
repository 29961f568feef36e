"""The real Triton 2.51 as a peer for differential tests.

Looked for where perf/setup_triton.sh puts it (perf/.tools/triton; `make test` runs it) and
where the shared peers set-up does ($PEERS, default /tmp/peers). Where neither has it, tests
marked `needs_triton` skip with the reason, except where CI is set: there they fail, so that
a CI host that could not install Triton does not pass without comparing anything.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import requests
from server_harness import REPO_ROOT, NaiadServer, _free_ports

__all__ = ["MISSING", "find_triton", "needs_triton", "skip_without_triton", "TritonPeer"]

MISSING = (
    "the real Triton 2.51 is not installed: `make triton-peer` installs it from the package "
    "registries (perf/setup_triton.sh)"
)


def find_triton() -> tuple[list[str], dict] | None:
    """(command prefix, environment) to run tritonserver, or None."""
    # The Python backend stub runs the first python3 on PATH: Debian's, with numpy 1.x.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["PATH"] = "/usr/bin:/bin"
    tools = Path(os.environ.get("NAIAD_PERF_TOOLS", REPO_ROOT / "perf" / ".tools")) / "triton"
    if (tools / "bin" / "tritonserver").exists():
        env["LD_LIBRARY_PATH"] = str(tools / "lib")
        return [
            str(tools / "bin" / "tritonserver"),
            f"--backend-directory={tools / 'backends'}",
        ], env
    peers = Path(os.environ.get("PEERS", "/tmp/peers"))
    binary = peers / "pyt" / "pytriton" / "tritonserver" / "bin" / "tritonserver"
    if binary.exists() and (peers / "tri" / "backends").is_dir():
        env["LD_LIBRARY_PATH"] = str(peers / "pyt" / "nvidia_pytriton.libs")
        return [str(binary), f"--backend-directory={peers / 'tri' / 'backends'}"], env
    return None


def _ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


_SKIP = find_triton() is None and not _ci()

# A test or module that compares with Triton carries this mark.
needs_triton = pytest.mark.skipif(_SKIP, reason=MISSING)


def skip_without_triton() -> None:
    """For a fixture whose Triton side alone needs it (the Naiad side runs anyway)."""
    if _SKIP:
        pytest.skip(MISSING)


class TritonPeer:
    def __init__(self, repository: Path, log_dir: Path, extra_args: list[str]):
        found = find_triton()
        if found is None:
            # Reached without Triton where CI is set (needs_triton does not skip there).
            raise RuntimeError(f"{MISSING}; CI is set, where the differential tests need it")
        self.prefix, self.env = found
        self.repository = repository
        self.http_port, self.grpc_port, self.metrics_port = _free_ports(3)
        self.url = f"http://127.0.0.1:{self.http_port}"
        self.log_path = Path(log_dir) / f"triton-{self.http_port}.log"
        self.extra_args = extra_args
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> TritonPeer:
        command = [
            *self.prefix,
            f"--model-repository={self.repository}",
            "--http-address=127.0.0.1",
            "--grpc-address=127.0.0.1",
            "--metrics-address=127.0.0.1",
            f"--http-port={self.http_port}",
            f"--grpc-port={self.grpc_port}",
            f"--metrics-port={self.metrics_port}",
            # Its default 30 s wait at stop for models still busy is a test's idle time;
            # a test's own --exit-timeout-secs comes later and wins.
            "--exit-timeout-secs=5",
            *self.extra_args,
        ]
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True
            )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"tritonserver exited: {self.log_path.read_text()[-3000:]}")
            with contextlib.suppress(requests.RequestException):
                if requests.get(self.url + "/v2/health/live", timeout=2).status_code == 200:
                    return self
            time.sleep(0.2)
        # `with` runs no __exit__ when __enter__ raises: stop what was started here.
        self.__exit__(None, None, None)
        raise TimeoutError(f"tritonserver did not become live: {self.log_path.read_text()[-3000:]}")

    def wait_ready(self, models, timeout: float = 60) -> None:
        """Returns once every model in `models` is ready (Triton loads them after it is
        live); raises with the log's tail when one is not within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        pending = list(models)
        while pending:
            with contextlib.suppress(requests.RequestException):
                ready = requests.get(f"{self.url}/v2/models/{pending[0]}/ready", timeout=2)
                if ready.status_code == 200:
                    pending.pop(0)
                    continue
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"model '{pending[0]}' not ready in tritonserver: "
                    f"{self.log_path.read_text()[-3000:]}"
                )
            time.sleep(0.1)

    def __exit__(self, *exc) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        # Its own session: the group is tritonserver and the backend stubs it started.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)


@contextlib.contextmanager
def naiad_and_triton_http(repository: Path, root: Path, ready: list[str]):
    """Naiad and Triton 2.51 serving one repository (logs under `root`): yields their
    HTTP ports once Triton has `ready` ready too."""
    naiad = NaiadServer(repository, log_dir=root).start()
    try:
        with TritonPeer(repository, root, []) as triton:
            triton.wait_ready(ready)
            yield naiad.http_port, triton.http_port
    finally:
        naiad.stop()


def naiad_lanes(port: int) -> dict:
    """Naiad's lane counters (GET /v2/naiad/lanes) on `port`: which path answered."""
    return requests.get(f"http://127.0.0.1:{port}/v2/naiad/lanes", timeout=60).json()
