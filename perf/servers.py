"""Starting and stopping the servers under test: Naiad (a source tree + a Python) and the real
Triton (unpacked by setup_tools.sh). Every server runs in its own session (process group), pinned
to its CPUs, bound to 127.0.0.1 on free ports; stop() ends exactly that group."""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

PERF = Path(__file__).resolve().parent
TOOLS = Path(os.environ.get("NAIAD_PERF_TOOLS", PERF / ".tools"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    # An https URL is the bench's own server, with a certificate of its own CA.
    context = ssl._create_unverified_context() if url.startswith("https:") else None
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def tcp_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


class Server:
    """Base: subclasses give `label`, `kind` and `command(repo)` / `env()`."""

    label = "server"
    kind = "server"
    scheme = "http"  # "https": the HTTP port serves TLS (perf/tls_load.py)

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.http_port = self.grpc_port = self.metrics_port = 0
        self.log_path: Path | None = None

    # -- to override
    def command(self, repo: Path) -> list[str]:
        raise NotImplementedError

    def env(self) -> dict[str, str]:
        return dict(os.environ)

    def backends(self) -> set[str]:
        return {"python"}

    # -- common
    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def start(self, repo: Path, cpus: list[int] | None, log_path: Path, timeout: float = 90.0):
        self.http_port, self.grpc_port, self.metrics_port = free_port(), free_port(), free_port()
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(log_path, "wb")

        def pin():
            if cpus:
                os.sched_setaffinity(0, cpus)

        self.proc = subprocess.Popen(
            self.command(repo),
            env=self.env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=pin,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.label} exited with {self.proc.returncode} while starting; "
                    f"log: {log_path}\n{self.log_tail()}"
                )
            try:
                status, _ = http_get(
                    f"{self.scheme}://{self.http_url}/v2/health/ready", timeout=1.0
                )
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"{self.label} not ready after {timeout:.0f}s; log: {log_path}")

    def log_tail(self, n: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def group_pids(self) -> list[int]:
        """The server's processes: its process group, and their descendants in groups of
        their own (Naiad's workers have sessions of their own)."""
        if self.proc is None:
            return []
        group, parents = set(), {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                pid = int(entry)
                stat = Path(f"/proc/{entry}/stat").read_text()
                parents[pid] = int(stat.rsplit(")", 1)[1].split()[1])
                if os.getpgid(pid) == self.proc.pid:
                    group.add(pid)
            except (OSError, ValueError, IndexError):
                continue
        found = set(group)
        added = True
        while added:
            added = False
            for pid, parent in parents.items():
                if parent in found and pid not in found:
                    found.add(pid)
                    added = True
        return sorted(found)

    def cpu_seconds(self) -> float:
        """utime+stime of every live process of the server's group (and their reaped children)."""
        tick = os.sysconf("SC_CLK_TCK")
        total = 0
        for pid in self.group_pids():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                total += sum(int(x) for x in fields[11:15])
            except (OSError, IndexError, ValueError):
                continue
        return total / tick

    def cpu_ns(self, pids: list[int] | None = None) -> int:
        """CPU time used so far by the server's live threads (or those of `pids`), in ns:
        the scheduler's own count (/proc/<pid>/task/<tid>/schedstat, its first field),
        not /proc's 10 ms ticks. Threads that exited are not counted: read it around a
        span in which the server starts and ends no thread."""
        total = 0
        for pid in self.group_pids() if pids is None else pids:
            try:
                tasks = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for tid in tasks:
                try:
                    with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                        total += int(f.read().split()[0])
                except (OSError, IndexError, ValueError):
                    continue
        return total

    def stop(self, timeout: float = 20.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = None
            return
        pgid = self.proc.pid  # its own session: the group id is its pid
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        # whatever of that group is still alive (workers, stubs) gets SIGKILL
        for _ in range(2):
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                break
            time.sleep(0.2)
        if self.proc.poll() is None:
            self.proc.wait(5)
        self.proc = None

    def statistics(self, model: str) -> dict | None:
        try:
            status, body = http_get(f"{self.scheme}://{self.http_url}/v2/models/{model}/stats")
        except OSError:
            return None
        if status != 200:
            return None
        stats = json.loads(body).get("model_stats") or []
        return stats[0] if stats else None

    def features(self) -> set[str]:
        """What this running server offers: protocols, system shm, backends."""
        found = {"http"} | {f"backend:{b}" for b in self.backends()}
        if tcp_open(self.grpc_port):
            found.add("grpc")
        try:
            status, _ = http_get(f"{self.scheme}://{self.http_url}/v2/systemsharedmemory/status")
            if status == 200:
                found.add("shm:system")
        except OSError:
            pass
        return found


class NaiadServer(Server):
    kind = "naiad"

    def __init__(
        self, tree: Path, python: Path, label: str = "naiad", extra_args: list[str] | None = None
    ) -> None:
        super().__init__()
        self.tree = Path(tree)
        self.python = Path(python)
        self.label = label
        self.extra_args = list(extra_args or [])  # more `naiad serve` flags

    def command(self, repo: Path) -> list[str]:
        return [
            str(self.python),
            "-m",
            "naiad",
            "serve",
            "--model-repository",
            str(repo),
            "--host",
            "127.0.0.1",
            "--http-port",
            str(self.http_port),
            "--grpc-port",
            str(self.grpc_port),
            "--metrics-port",
            str(self.metrics_port),
            *self.extra_args,
        ]

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(self.tree / "pysrc")
        return env

    def backends(self) -> set[str]:
        found = {"python"}
        for name in ("onnxruntime", "torch", "tensorrt"):
            if (self.tree / "pysrc" / "naiad" / "backends" / f"{name}.py").exists():
                found.add(name)
        return found

    def describe(self) -> str:
        return f"{self.label}: {self.tree} ({self.python})"


class TritonServer(Server):
    kind = "triton"
    label = "triton"

    def __init__(self, tools: Path = TOOLS) -> None:
        super().__init__()
        self.root = Path(tools) / "triton"

    def command(self, repo: Path) -> list[str]:
        return [
            str(self.root / "bin" / "tritonserver"),
            f"--backend-directory={self.root / 'backends'}",
            f"--model-repository={repo}",
            "--http-address=127.0.0.1",
            "--grpc-address=127.0.0.1",
            "--metrics-address=127.0.0.1",
            f"--http-port={self.http_port}",
            f"--grpc-port={self.grpc_port}",
            f"--metrics-port={self.metrics_port}",
        ]

    def env(self) -> dict[str, str]:
        # The Python backend stub takes the first python3 on PATH; it must be Debian's, with
        # numpy 1.x (python3-numpy): a numpy 2.x python silently yields empty output tensors.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
        env["PATH"] = "/usr/bin:/bin"
        env["LD_LIBRARY_PATH"] = str(self.root / "lib")
        return env

    def backends(self) -> set[str]:
        return {p.name for p in (self.root / "backends").iterdir() if p.is_dir()}

    def describe(self) -> str:
        return f"triton 2.51 (nvidia-pytriton 0.7.0 wheel): {self.root}"
