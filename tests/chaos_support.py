"""Load from real clients (tritonclient HTTP and gRPC) for the chaos and overload tests.

Each thread sends add_sub requests without pause over one client and tallies every
request it sent: answered right, answered with an error (kept, with its message), or
lost (no answer within the client's timeout, or the connection dropped under it). A
promise these tests hold the server to: `lost` stays 0 whatever is done to it.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from model_control_support import add_sub_client_inputs
from tritonclient.utils import InferenceServerException

# How long a client waits for an answer before the request counts as lost (hung).
ANSWER_TIMEOUT_S = 30.0


class ClientLoad:
    """`threads` closed-loop clients per protocol in `protocols` sending to `model`
    (add_sub's interface: INPUT0 + INPUT1 -> OUTPUT0, INPUT0 - INPUT1 -> OUTPUT1)."""

    def __init__(
        self, server, model: str = "add_sub", protocols=("http", "grpc"), threads: int = 2
    ):
        self.server = server
        self.model = model
        self.sent = 0
        self.ok = 0
        self.errors: Counter[str] = Counter()  # message -> count
        self.lost: list[str] = []
        self.latencies: list[float] = []  # of the requests answered right, in seconds
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(protocol, i), daemon=True)
            for protocol in protocols
            for i in range(threads)
        ]

    def __enter__(self) -> ClientLoad:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(ANSWER_TIMEOUT_S + 10)
        assert not any(t.is_alive() for t in self._threads), "a client thread never returned"

    @property
    def answered(self) -> int:
        return self.ok + sum(self.errors.values())

    def wait_for_ok(self, count: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        start = self.ok
        while self.ok - start < count:
            assert time.monotonic() < deadline, f"only {self.ok - start} of {count} answered"
            time.sleep(0.01)

    def summary(self) -> str:
        return (
            f"sent {self.sent}, answered {self.answered} ({self.ok} ok, "
            f"{sum(self.errors.values())} errors), lost {len(self.lost)}"
        )

    def _run(self, protocol: str, index: int) -> None:
        if protocol == "http":
            module = httpclient
            client = httpclient.InferenceServerClient(
                self.server.url.removeprefix("http://"),
                connection_timeout=ANSWER_TIMEOUT_S,
                network_timeout=ANSWER_TIMEOUT_S,
            )
        else:
            module = grpcclient
            client = grpcclient.InferenceServerClient(f"127.0.0.1:{self.server.grpc_port}")
        value = float(index * 1_000_000)
        try:
            while not self._stop.is_set():
                value += 1.0
                self._one(module, client, protocol, value)
        finally:
            client.close()

    def _one(self, module, client, protocol: str, value: float) -> None:
        inputs = add_sub_client_inputs(module, value)
        extra = {"client_timeout": ANSWER_TIMEOUT_S} if protocol == "grpc" else {}
        with self._lock:
            self.sent += 1
        start = time.monotonic()
        try:
            result = client.infer(self.model, inputs, **extra)
        except InferenceServerException as exc:
            self._tally_error(protocol, exc)
            return
        except Exception as exc:  # the connection dropped or timed out: not answered
            with self._lock:
                self.lost.append(f"{protocol}: {exc!r}")
            return
        elapsed = time.monotonic() - start
        expected = np.full((1, 16), value, dtype=np.float32) + np.ones((1, 16), np.float32)
        right = np.array_equal(result.as_numpy("OUTPUT0"), expected)
        with self._lock:
            if right:
                self.ok += 1
                self.latencies.append(elapsed)
            else:
                self.errors[f"{protocol}: wrong output"] += 1

    def _tally_error(self, protocol: str, exc: InferenceServerException) -> None:
        status = str(exc.status() or "")
        message = exc.message() or ""
        # The gRPC client reports its own deadline and a dropped connection the same way
        # it reports the server's errors: those were not answered.
        lost = status in ("StatusCode.DEADLINE_EXCEEDED",) or (
            status == "StatusCode.UNAVAILABLE" and "Socket closed" in message
        )
        with self._lock:
            if lost:
                self.lost.append(f"{protocol}: {status} {message}")
            else:
                self.errors[f"{protocol}: {status} {message}"] += 1


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
