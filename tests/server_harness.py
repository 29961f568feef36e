"""Start and stop a real `naiad serve` process for black-box tests.

    with NaiadServer(repository, log_dir=tmp_path) as server:
        requests.get(server.url + "/v2/health/ready")

The server runs as `python -m naiad serve` on free 127.0.0.1 ports, with stdout and stderr
captured to files (`server.stderr_text()` for assertions). `stop()` sends SIGTERM to the
server's PID and waits; only if it does not exit in time is that PID (and the worker
processes it started, found through /proc) killed. Nothing else is ever signalled.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests

__all__ = [
    "NaiadServer",
    "ServerExited",
    "descendants",
    "free_port",
    "make_repository",
    "REPO_ROOT",
    "EXAMPLE_MODELS",
    "TEST_MODELS",
]

REPO_ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_MODELS = REPO_ROOT / "model_repository"
TEST_MODELS = Path(__file__).resolve().parent / "models"

HOST = "127.0.0.1"


class ServerExited(RuntimeError):
    """The server process exited while we waited for it to become live/ready."""


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def _free_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((HOST, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _die_with_test_run() -> None:
    """In the server's child, before exec: SIGTERM it when the test process dies, so a
    killed or timed-out test run leaves no server behind."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def make_repository(dest: Path, models: dict[str, Path | None] | list[str]) -> Path:
    """Build a model repository under `dest` by copying model folders.

    `models`: names of folders under tests/models or model_repository, or a mapping of
    name -> source folder (None: look the name up in those two places)."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    if not isinstance(models, dict):
        models = {name: None for name in models}
    for name, source in models.items():
        if source is None:
            source = TEST_MODELS / name
            if not source.is_dir():
                source = EXAMPLE_MODELS / name
        shutil.copytree(source, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest


def descendants(pid: int) -> list[int]:
    """PIDs of the processes `pid` started (recursively), read from /proc."""
    found: list[int] = []
    stack = [pid]
    while stack:
        parent = stack.pop()
        children: list[int] = []
        task_dir = Path(f"/proc/{parent}/task")
        try:
            tasks = list(task_dir.iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                text = (task / "children").read_text()
            except OSError:
                continue
            children.extend(int(child) for child in text.split())
        found.extend(children)
        stack.extend(children)
    return found


@contextlib.contextmanager
def server_variants(tmp_path_factory, repository: Path, variants):
    """Servers of one repository, one per (name, extra naiad serve flags) of `variants`,
    started in turn and stopped at the end: yields them as a tuple."""
    started = []
    try:
        for name, args in variants:
            server = NaiadServer(
                repository, log_dir=tmp_path_factory.mktemp(name), extra_args=args, name=name
            )
            started.append(server)
            server.start(wait="ready", timeout=120)
        yield tuple(started)
    finally:
        for server in started:
            server.stop()


class NaiadServer:
    """One `naiad serve` process on free ports."""

    # False in a subclass whose command line names ports of its own: start() then has
    # no other ports to try.
    chooses_its_ports = True
    # An HTTPS server's subclass (tests/tls_support.py): the scheme of `url`, and the
    # requests arguments (verify, cert) its health checks need.
    scheme = "http"
    requests_options: dict = {}

    def __init__(
        self,
        repository: Path | str,
        *,
        log_dir: Path | str | None = None,
        extra_args: list[str] | tuple[str, ...] = (),
        name: str = "naiad",
        env: dict[str, str | None] | None = None,
    ):
        self.repository = Path(repository)
        # Changes to this process's environment for the server: a value, or None to remove.
        self.env = dict(env or {})
        self.extra_args = list(extra_args)
        self.host = HOST
        self.name = name
        self.log_dir = Path(log_dir) if log_dir is not None else Path.cwd()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._choose_ports()
        self.process: subprocess.Popen | None = None
        self.returncode: int | None = None

    # -- starting ----------------------------------------------------------------------

    def _choose_ports(self) -> None:
        self.http_port, self.grpc_port, self.metrics_port = _free_ports(3)
        self.url = f"{self.scheme}://{self.host}:{self.http_port}"
        self.stderr_path = self.log_dir / f"{self.name}-{self.http_port}.stderr.log"
        self.stdout_path = self.log_dir / f"{self.name}-{self.http_port}.stdout.log"

    @property
    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "naiad",
            "serve",
            "--model-repository",
            str(self.repository),
            "--http-port",
            str(self.http_port),
            "--grpc-port",
            str(self.grpc_port),
            "--metrics-port",
            str(self.metrics_port),
            "--host",
            self.host,
            *self.extra_args,
        ]

    def start(self, wait: str | None = "ready", timeout: float = 120.0) -> NaiadServer:
        """Launch the process; `wait`: 'ready', 'live' or None (don't wait).

        A port picked free can be taken before the server binds it (by another test
        process, or as the local port of some connection): while waiting, a server that
        exits on "address already in use" is started again on other ports, twice at most.
        """
        for attempt in range(3):
            self._launch()
            if not wait:
                return self
            try:
                self.wait_for(wait, timeout)
                return self
            except ServerExited:
                taken = "address already in use" in self.stderr_text().lower()
                if attempt == 2 or not taken or not self.chooses_its_ports:
                    raise
            self.process = None
            self._choose_ports()
        raise AssertionError("unreachable")

    def _launch(self) -> None:
        assert self.process is None, "already started"
        env = dict(os.environ)
        for name, value in self.env.items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
        env.setdefault("PYTHONUNBUFFERED", "1")
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            # A session of its own: a Ctrl-C in the terminal that runs pytest goes to pytest,
            # which then stops the server through stop().
            self.process = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                cwd=str(REPO_ROOT),
                env=env,
                start_new_session=True,
                preexec_fn=_die_with_test_run,
            )

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def poll(self) -> int | None:
        if self.process is None:
            return None
        code = self.process.poll()
        if code is not None:
            self.returncode = code
        return code

    def running(self) -> bool:
        return self.process is not None and self.poll() is None

    def wait_for(self, what: str = "ready", timeout: float = 120.0) -> None:
        """Poll /v2/health/<what> until it answers 200; raise ServerExited if the process
        exits first, TimeoutError if it takes longer than `timeout`."""
        deadline = time.monotonic() + timeout
        path = f"{self.url}/v2/health/{what}"
        while True:
            code = self.poll()
            if code is not None:
                raise ServerExited(
                    f"naiad serve exited with {code} before it was {what}; stderr:\n"
                    + self.stderr_text()[-4000:]
                )
            try:
                if requests.get(path, timeout=2, **self.requests_options).status_code == 200:
                    return
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"naiad serve not {what} after {timeout:.0f}s; stderr:\n"
                    + self.stderr_text()[-4000:]
                )
            time.sleep(0.1)

    def wait_exit(self, timeout: float) -> int:
        """Wait for the process to exit; its return code (raises TimeoutExpired)."""
        assert self.process is not None
        self.returncode = self.process.wait(timeout)
        return self.returncode

    # -- output ------------------------------------------------------------------------

    def stderr_text(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")
        except OSError:
            return ""

    def stdout_text(self) -> str:
        try:
            return self.stdout_path.read_text(errors="replace")
        except OSError:
            return ""

    # -- stopping ----------------------------------------------------------------------

    def send_signal(self, signum: int) -> None:
        """Signal the server process (only its own PID)."""
        if self.running():
            os.kill(self.pid, signum)

    def stop(self, signum: int = signal.SIGTERM, timeout: float = 40.0) -> int | None:
        """SIGTERM (or `signum`) and wait; kill our PID and its workers if it hangs."""
        if self.process is None:
            return None
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)
            try:
                return self.wait_exit(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.poll()

    def kill(self) -> None:
        """SIGKILL the server PID and the worker processes it started (by their PIDs)."""
        if self.process is None:
            return
        workers = descendants(self.pid) if self.poll() is None else []
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        for pid in workers:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.wait_exit(10)

    def __enter__(self) -> NaiadServer:
        if self.process is None:
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"NaiadServer({self.repository}, url={self.url}, pid={getattr(self.process, 'pid', None)})"


def metric_value(text: str, series: str) -> float:
    """The value of Prometheus series `series` (name and labels, as the exposition
    writes them) in `text`, 0 when absent."""
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0
