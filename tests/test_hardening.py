"""An attacker with access to the HTTP port: compression bombs, request bodies abandoned
half sent, and connections that never send a byte. Each is answered, and the server
keeps its memory and its connection slots."""

from __future__ import annotations

import gzip
import json
import socket
import time

import numpy as np
import pytest
import requests
from hardening_support import gzip_bomb, memory_kib, zlib_bomb
from server_harness import NaiadServer, make_repository

pytestmark = pytest.mark.timeout(300)

# --http-max-input-size: above what the parser collects in one buffer (64 MiB), so a
# large body goes through its chunks as the did.
LIMIT = 128 << 20
CLIENT_TIMEOUT = 2  # --http-client-timeout-secs
MAX_CONNECTIONS = 8  # --http-max-connections


def _args(io_loop: bool) -> list[str]:
    return [
        f"--http-max-input-size={LIMIT}",
        f"--http-client-timeout-secs={CLIENT_TIMEOUT}",
        f"--http-max-connections={MAX_CONNECTIONS}",
        f"--http-io-loop={str(io_loop).lower()}",
    ]


@pytest.fixture(scope="module", params=[True, False], ids=["io-loop", "uvloop"])
def server(request, tmp_path_factory):
    root = tmp_path_factory.mktemp("hardening")
    repository = make_repository(root / "models", ["add_sub"])
    with NaiadServer(repository, log_dir=root, extra_args=_args(request.param)) as server:
        yield server


def _add_sub_json(a: np.ndarray, b: np.ndarray) -> bytes:
    return json.dumps(
        {
            "inputs": [
                {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": a.tolist()},
                {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": b.tolist()},
            ]
        }
    ).encode()


def _infer(server, body: bytes, encoding: str | None = None) -> requests.Response:
    headers = {"Content-Encoding": encoding} if encoding else {}
    return requests.post(
        f"{server.url}/v2/models/add_sub/infer", data=body, headers=headers, timeout=60
    )


@pytest.mark.parametrize(
    "encoding, bomb",
    [
        ("gzip", lambda: gzip_bomb(LIMIT + (1 << 20))),  # just past the limit
        ("gzip", lambda: gzip_bomb(4 << 30, trailer=False)),  # 4 MB inflating to 4 GiB
        ("deflate", lambda: zlib_bomb(1 << 30)),
    ],
    ids=["gzip-past-limit", "gzip-4GiB", "deflate-1GiB"],
)
def test_a_compressed_body_past_the_limit_once_inflated_gets_413(server, encoding, bomb):
    peak_before = memory_kib(server.pid, "VmHWM")
    reply = _infer(server, bomb(), encoding)
    assert reply.status_code == 413
    assert reply.json() == {
        "error": f"inflated request body of more than {LIMIT} bytes exceeds the maximum "
        f"allowed input size of {LIMIT} bytes; use --http-max-input-size to increase the limit"
    }
    # Inflated no further than the limit: the server's peak memory grew by less than
    # the limit and some slack, never by the gigabytes the bomb holds.
    assert memory_kib(server.pid, "VmHWM") - peak_before < (LIMIT + (64 << 20)) >> 10
    assert requests.get(f"{server.url}/v2/health/ready", timeout=10).status_code == 200


def test_a_compressed_body_within_the_limit_is_served(server):
    rng = np.random.default_rng(46)
    a, b = rng.random((1, 16), np.float32), rng.random((1, 16), np.float32)
    for encoding, packed in (
        ("gzip", gzip.compress(_add_sub_json(a, b))),
        ("deflate", __import__("zlib").compress(_add_sub_json(a, b))),
    ):
        reply = _infer(server, packed, encoding)
        assert reply.status_code == 200, reply.text
        outputs = {o["name"]: o["data"] for o in reply.json()["outputs"]}
        np.testing.assert_allclose(outputs["OUTPUT0"], (a + b).ravel(), rtol=1e-6)
    # Damaged data is the client's error, named.
    reply = _infer(server, gzip.compress(_add_sub_json(a, b))[:-20], "gzip")
    assert reply.status_code == 400
    assert reply.json()["error"].startswith("failed to decompress the request body: ")


def test_bodies_abandoned_half_sent_are_let_go(server):
    """Ten clients announce 100 MB, send 16 MiB each and go away: the server lets go of
    what they sent when they close (it used to wait for a garbage collection)."""
    rss_before = memory_kib(server.pid)
    head = b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n"
    chunk = b"\0" * (1 << 20)
    for _ in range(10):
        with socket.create_connection(("127.0.0.1", server.http_port)) as sock:
            sock.sendall(head)
            for _ in range(16):
                sock.sendall(chunk)
    # The server has read them all once a request behind them on a new connection is
    # answered (its loop serves connections in turn) ...
    assert requests.get(f"{server.url}/v2/health/live", timeout=10).status_code == 200
    # ... and gives the memory back as each close is handled; 160 MiB were sent.
    deadline = time.monotonic() + 30
    while memory_kib(server.pid) - rss_before > 48 << 10 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert memory_kib(server.pid) - rss_before <= 48 << 10


def _closed_by_server(sock: socket.socket, deadline: float) -> bool:
    sock.settimeout(max(deadline - time.monotonic(), 0.01))
    try:
        return sock.recv(1) == b""
    except (TimeoutError, ConnectionResetError):
        return False


def _live_on(sock: socket.socket) -> bytes:
    """GET /v2/health/live on an open keep-alive connection: the answer's status line."""
    sock.settimeout(10)
    sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = sock.recv(4096)
        if not chunk:
            return answer
        answer += chunk
    return answer.split(b"\r\n", 1)[0]


def test_connections_that_never_send_are_closed_and_free_their_slots(server):
    # A client that made a request keeps its connection (there is no idle timeout)...
    kept = socket.create_connection(("127.0.0.1", server.http_port))
    assert _live_on(kept) == b"HTTP/1.1 200 OK"
    silent = [
        socket.create_connection(("127.0.0.1", server.http_port))
        for _ in range(MAX_CONNECTIONS - 1)
    ]
    try:
        # ... and the silent ones fill every slot: the next client is refused ...
        refused = requests.get(f"{server.url}/v2/health/live", timeout=10)
        assert refused.status_code == 503
        assert refused.json()["error"] == (
            f"the server has reached its maximum of {MAX_CONNECTIONS} connections "
            "(--http-max-connections)"
        )
        # ... until the client timeout closes each silent one, without a word.
        deadline = time.monotonic() + 30
        assert all(_closed_by_server(sock, deadline) for sock in silent)
        assert requests.get(f"{server.url}/v2/health/live", timeout=10).status_code == 200
        # The connection that spoke is still open, and served.
        assert _live_on(kept) == b"HTTP/1.1 200 OK"
    finally:
        kept.close()
        for sock in silent:
            sock.close()
