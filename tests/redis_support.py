"""A real `redis-server` (Debian's package, `make deploy-tools`) on a free port, started
and stopped by its PID, for the Redis response cache's tests and perf/redis_cache.py;
with `tls`, it serves TLS only (Debian's build has it), with tools/tls_certs.py's
certificates."""

from __future__ import annotations

import shutil
import signal
import socket
import ssl
import subprocess
import time
from pathlib import Path

from server_harness import free_port


def redis_binary() -> str | None:
    return shutil.which("redis-server")


def redis_call(
    port: int, *args: bytes, password: bytes | None = None, tls: ssl.SSLContext | None = None
) -> bytes:
    """One RESP command to 127.0.0.1:`port` (over TLS with `tls`); the raw reply (for
    readiness and checks)."""
    with socket.create_connection(("127.0.0.1", port), timeout=2) as plain:
        s = tls.wrap_socket(plain, server_hostname="localhost") if tls is not None else plain
        wire = b""
        commands = [(b"AUTH", password)] if password else []
        for command in [*commands, args]:
            wire += b"*%d\r\n" % len(command)
            for arg in command:
                wire += b"$%d\r\n%s\r\n" % (len(arg), arg)
        s.sendall(wire)
        reply = b""
        while reply.count(b"\r\n") < len(commands) + 1:
            chunk = s.recv(65536)
            if not chunk:
                break
            reply += chunk
        return reply.split(b"\r\n", len(commands))[-1].removesuffix(b"\r\n")


class RedisServer:
    """redis-server on 127.0.0.1, no persistence; `password` sets requirepass; `tls`
    (a tls_certs.Certs): TLS only, with the server certificate, and client certificates
    required (signed by the CA) when `mutual`."""

    def __init__(
        self,
        log_dir: Path,
        password: str | None = None,
        port: int | None = None,
        tls=None,
        mutual: bool = False,
    ):
        self.port = port or free_port()
        self.password = password
        self.log_dir = Path(log_dir)
        self.tls = tls
        self.mutual = mutual
        self.process: subprocess.Popen | None = None

    def client_context(self) -> ssl.SSLContext | None:
        """A client's TLS settings for redis_call (None without TLS)."""
        if self.tls is None:
            return None
        context = ssl.create_default_context(cafile=str(self.tls.ca))
        context.load_cert_chain(str(self.tls.client), str(self.tls.client_key))
        return context

    def start(self, timeout: float = 20.0) -> RedisServer:
        binary = redis_binary()
        assert binary, "redis-server is not installed (make deploy-tools)"
        if self.tls is None:
            args = [binary, "--port", str(self.port)]
        else:
            args = [binary, "--port", "0", "--tls-port", str(self.port)]
            args += ["--tls-cert-file", str(self.tls.server), "--tls-key-file"]
            args += [str(self.tls.server_key), "--tls-ca-cert-file", str(self.tls.ca)]
            args += ["--tls-auth-clients", "yes" if self.mutual else "no"]
        args += ["--bind", "127.0.0.1", "--save", ""]
        args += ["--appendonly", "no", "--dir", str(self.log_dir)]
        if self.password:
            args += ["--requirepass", self.password]
        log = open(self.log_dir / f"redis-{self.port}.log", "ab")  # noqa: SIM115
        self.process = subprocess.Popen(args, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + timeout
        password = self.password.encode() if self.password else None
        while True:
            assert self.process.poll() is None, f"redis-server exited: see {self.log_dir}"
            try:
                reply = redis_call(self.port, b"PING", password=password, tls=self.client_context())
                if reply == b"+PONG":
                    return self
            except OSError:  # ssl.SSLError too: not listening yet
                pass
            assert time.monotonic() < deadline, "redis-server did not answer PING"
            time.sleep(0.05)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def signal(self, signum: int) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signum)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.signal(signal.SIGCONT)
        self.kill()
