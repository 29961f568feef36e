"""Limits, each answered cleanly: the request body (`--http-max-input-size`), the request
head, slow and idle clients (`--http-client-timeout-secs`, `--http-idle-timeout-secs`),
connections (`--http-max-connections`), requests in flight per HTTP/1.1 connection
(pipelining) and HTTP/2 streams per gRPC connection (SETTINGS_MAX_CONCURRENT_STREAMS)."""

from __future__ import annotations

import json
import socket
import struct
import threading
import time

import pytest
import requests
from model_control_support import ADD_SUB_MODEL, add_sub_binary_request, add_sub_pbtxt, write_model
from naiad import _core
from server_harness import TEST_MODELS, NaiadServer

pytestmark = pytest.mark.timeout(300)

SLEEPER = TEST_MODELS / "sleeper"


# One C++ I/O loop, and two (--http-thread-count): each limit holds on either loop.
# --http-max-connections runs one loop (flags/io_threads.py): not given with two.
@pytest.fixture(scope="module", params=[1, 2], ids=["1-loop", "2-loops"])
def limited(tmp_path_factory, request):
    root = tmp_path_factory.mktemp("limits")
    repo = root / "models"
    write_model(repo, "add_sub", add_sub_pbtxt(), ADD_SUB_MODEL)
    write_model(
        repo,
        "sleeper",
        (SLEEPER / "config.pbtxt").read_text(),
        (SLEEPER / "1" / "model.py").read_text(),
    )
    args = [
        "--http-max-input-size=1M",
        "--http-client-timeout-secs=2",
        "--http-idle-timeout-secs=3",
        f"--http-thread-count={request.param}",
    ]
    if request.param == 1:
        args.append("--http-max-connections=40")
    with NaiadServer(repo, log_dir=root, extra_args=args) as server:
        server.loops = request.param
        yield server


def _raw(server, data: bytes, wait: float = 10.0) -> bytes:
    """Sends `data` on a fresh connection; everything the server sends until it closes."""
    with socket.create_connection(("127.0.0.1", server.http_port)) as sock:
        sock.settimeout(wait)
        sock.sendall(data)
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except (TimeoutError, ConnectionResetError):
            pass
        return received


def _rss_kib(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _error(response: bytes) -> tuple[int, str]:
    head, _, body = response.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)["error"]


def test_a_body_past_http_max_input_size_is_refused_with_413(limited):
    # Declared too large: refused from the head, before any of the body is read.
    status, message = _error(
        _raw(
            limited,
            b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 3000000000\r\n\r\n",
        )
    )
    assert status == 413
    assert message == (
        "request body of 3000000000 bytes exceeds the maximum allowed input size of 1048576 "
        "bytes; use --http-max-input-size to increase the limit"
    )
    # Binary (the fast lane's kind) and chunked bodies alike.
    body, headers = add_sub_binary_request(1.0)
    big = body + b"\0" * (1 << 20)
    reply = requests.post(
        f"{limited.url}/v2/models/add_sub/infer", data=big, headers=headers, timeout=30
    )
    assert reply.status_code == 413 and "--http-max-input-size" in reply.json()["error"]
    reply = requests.post(
        f"{limited.url}/v2/models/add_sub/infer",
        data=iter([big[:600000], big[600000:]]),
        timeout=30,
    )
    assert reply.status_code == 413 and "--http-max-input-size" in reply.json()["error"]
    # Under the limit: served.
    reply = requests.post(
        f"{limited.url}/v2/models/add_sub/infer", data=body, headers=headers, timeout=30
    )
    assert reply.status_code == 200


def test_a_request_head_past_the_limit_is_refused_with_431(limited):
    limit = _core.HTTP_MAX_HEAD
    assert limit == 64 << 10
    many = b"".join(b"X-%05d: %s\r\n" % (i, b"v" * 20) for i in range(limit // 30 + 10))
    for head in (b"X-Big: " + b"a" * limit + b"\r\n", many):
        status, message = _error(
            _raw(limited, b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n" + head + b"\r\n")
        )
        assert (status, message) == (431, f"the request head exceeds {limit} bytes")
    # A head that never ends is answered 431 once past the limit (and a read's slack);
    # what follows is read and dropped, never held.
    rss_before = _rss_kib(limited.pid)
    with socket.create_connection(("127.0.0.1", limited.http_port)) as sock:
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nX-Endless: ")
        try:
            for _ in range(256):  # 16 MiB
                sock.sendall(b"a" * 65536)
        except (BrokenPipeError, ConnectionResetError):
            pass
        sock.settimeout(10)
        assert sock.recv(100).startswith(b"HTTP/1.1 431 ")
    assert _rss_kib(limited.pid) - rss_before < 8 << 10
    # Within the limit (Triton takes 1,000 headers too): served.
    fine = b"".join(b"X-%d: 1\r\n" % i for i in range(1000))
    assert _raw(
        limited,
        b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + fine + b"\r\n",
    ).startswith(b"HTTP/1.1 200")


def test_slowloris_clients_are_dropped_and_others_served(limited):
    """20 clients each sending a request head a byte every half second: each is answered
    408 and closed after --http-client-timeout-secs (2), holding only its socket, while
    another client is served throughout."""
    clients = [socket.create_connection(("127.0.0.1", limited.http_port)) for _ in range(20)]
    head = b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\nX-Slow: "
    dropped: dict[int, float] = {}
    start = time.monotonic()
    for sock in clients:
        sock.sendall(head[:10])
        sock.setblocking(False)
    served = []
    body, headers = add_sub_binary_request(2.0)
    with requests.Session() as session:
        while len(dropped) < len(clients) and time.monotonic() - start < 15:
            for index, sock in enumerate(clients):
                if index in dropped:
                    continue
                try:
                    sock.sendall(b"a")
                except (BrokenPipeError, ConnectionResetError, BlockingIOError):
                    pass
                try:
                    data = sock.recv(4096)
                    if data:
                        assert data.startswith(b"HTTP/1.1 408 "), data
                        assert b"--http-client-timeout-secs" in data
                    dropped[index] = time.monotonic() - start
                except BlockingIOError:
                    pass
                except ConnectionResetError:
                    dropped[index] = time.monotonic() - start
            begin = time.monotonic()
            reply = session.post(
                f"{limited.url}/v2/models/add_sub/infer", data=body, headers=headers, timeout=10
            )
            assert reply.status_code == 200
            served.append(time.monotonic() - begin)
            time.sleep(0.5)
    for sock in clients:
        sock.close()
    print(
        f"slowloris: 20 dropped after {min(dropped.values()):.1f}-{max(dropped.values()):.1f}s; "
        f"{len(served)} requests served meanwhile, slowest {max(served) * 1000:.0f} ms"
    )
    assert len(dropped) == len(clients)
    assert 2 <= min(dropped.values()) and max(dropped.values()) < 8, dropped
    assert max(served) < 2.0, served


def test_an_idle_connection_is_closed_but_not_one_waiting_for_an_answer(limited):
    idle = socket.create_connection(("127.0.0.1", limited.http_port))
    # One request first: a connection that never sends a byte is closed sooner, at the
    # client timeout (test_hardening.py).
    idle.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
    idle.settimeout(10)
    assert idle.recv(100).startswith(b"HTTP/1.1 200")
    busy = socket.create_connection(("127.0.0.1", limited.http_port))
    body = json.dumps(
        {"inputs": [{"name": "SECONDS", "shape": [1, 1], "datatype": "FP32", "data": [5.0]}]}
    )
    busy.sendall(
        b"POST /v2/models/sleeper/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
        % (len(body), body.encode())
    )
    start = time.monotonic()
    idle.settimeout(10)
    assert idle.recv(100) == b""  # closed by the server, without a word
    closed_after = time.monotonic() - start
    busy.settimeout(20)
    answer = busy.recv(100)
    assert answer.startswith(b"HTTP/1.1 200"), answer  # 5 s of work outlived the idle timeout
    idle.close()
    busy.close()
    assert 3 <= closed_after < 8, closed_after


def test_connections_past_http_max_connections_get_503(limited):
    if limited.loops != 1:
        pytest.skip("--http-max-connections runs one I/O loop")
    held = [socket.create_connection(("127.0.0.1", limited.http_port)) for _ in range(40)]
    try:
        time.sleep(0.2)
        status, message = _error(_raw(limited, b""))
        assert status == 503
        assert (
            message
            == "the server has reached its maximum of 40 connections (--http-max-connections)"
        )
    finally:
        for sock in held:
            sock.close()
    time.sleep(0.2)
    assert requests.get(f"{limited.url}/v2/health/live", timeout=10).status_code == 200


def test_pipelined_requests_in_flight_per_connection_are_bounded(limited):
    """200 requests sent at once on one connection: the server reads at most 64 ahead
    (it stops reading until answers go out) and answers all 200 in order."""
    count = 200
    one = json.dumps(
        {"inputs": [{"name": "SECONDS", "shape": [1, 1], "datatype": "FP32", "data": [0.02]}]}
    ).encode()
    request = (
        b"POST /v2/models/sleeper/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
        % (len(one), one)
    )
    peaks = []
    done = threading.Event()

    def watch():
        while not done.is_set():
            peaks.append(
                requests.get(f"{limited.url}/v2/naiad/arena", timeout=10).json()[
                    "requests_in_flight"
                ]
            )
            time.sleep(0.01)

    watcher = threading.Thread(target=watch)
    with socket.create_connection(("127.0.0.1", limited.http_port)) as sock:
        watcher.start()
        sock.sendall(request * count)
        sock.settimeout(60)
        received = b""
        while received.count(b"HTTP/1.1 200") < count:
            chunk = sock.recv(65536)
            assert chunk, f"closed after {received.count(b'HTTP/1.1 ')} answers"
            received += chunk
        done.set()
        watcher.join()
    print(f"pipelining: {count} sent at once, at most {max(peaks)} in flight")
    assert 1 < max(peaks) <= 64, max(peaks)


# --- HTTP/2: the gRPC port -------------------------------------------------------------


def _frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return (
        struct.pack(">I", len(payload))[1:]
        + bytes([kind, flags])
        + struct.pack(">I", stream)
        + payload
    )


def _literal(name: bytes, value: bytes) -> bytes:
    # HPACK literal header field without indexing, new name, no Huffman (RFC 7541 6.2.2).
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def _read_frames(sock, until) -> list[tuple[int, int, int, bytes]]:
    frames, buffer = [], b""
    sock.settimeout(10)
    while not until(frames):
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection"
        buffer += chunk
        while len(buffer) >= 9:
            length = int.from_bytes(buffer[:3], "big")
            if len(buffer) < 9 + length:
                break
            kind, flags = buffer[3], buffer[4]
            stream = int.from_bytes(buffer[5:9], "big") & 0x7FFFFFFF
            frames.append((kind, flags, stream, buffer[9 : 9 + length]))
            buffer = buffer[9 + length :]
    return frames


def test_http2_streams_past_max_concurrent_streams_are_refused(limited):
    """The gRPC port advertises SETTINGS_MAX_CONCURRENT_STREAMS 128 and refuses a 129th
    open stream with RST_STREAM REFUSED_STREAM; the connection and its streams go on."""
    block = b"".join(
        _literal(name, value)
        for name, value in (
            (b":method", b"POST"),
            (b":scheme", b"http"),
            (b":path", b"/inference.GRPCInferenceService/ServerLive"),
            (b":authority", b"x"),
            (b"content-type", b"application/grpc"),
            (b"te", b"trailers"),
        )
    )
    with socket.create_connection(("127.0.0.1", limited.grpc_port)) as sock:
        sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + _frame(0x4, 0, 0))
        frames = _read_frames(sock, lambda f: any(k == 0x4 and not fl & 1 for k, fl, _s, _p in f))
        settings = next(p for k, fl, _s, p in frames if k == 0x4 and not fl & 1)
        advertised = {
            int.from_bytes(settings[i : i + 2], "big"): int.from_bytes(
                settings[i + 2 : i + 6], "big"
            )
            for i in range(0, len(settings), 6)
        }
        assert advertised.get(0x3) == 128, advertised  # SETTINGS_MAX_CONCURRENT_STREAMS
        # 129 streams opened (HEADERS without END_STREAM: each stays open).
        sock.sendall(
            _frame(0x4, 1, 0) + b"".join(_frame(0x1, 0x4, 1 + 2 * i, block) for i in range(129))
        )
        refused = 1 + 2 * 128
        frames = _read_frames(sock, lambda f: any(k == 0x3 for k, _fl, _s, _p in f))
        resets = [(s, int.from_bytes(p, "big")) for k, _fl, s, p in frames if k == 0x3]
        assert resets == [(refused, 0x7)], resets  # REFUSED_STREAM, that stream only
        # Ending stream 1 answers it; then a new stream fits again and is answered.
        grpc_message = b"\x00\x00\x00\x00\x00"
        fresh = refused + 2

        def trailers_of(stream):
            return lambda f: any(k == 0x1 and s == stream and fl & 1 for k, fl, s, _p in f)

        sock.sendall(_frame(0x0, 0x1, 1, grpc_message))
        frames = _read_frames(sock, trailers_of(1))
        sock.sendall(_frame(0x1, 0x4, fresh, block) + _frame(0x0, 0x1, fresh, grpc_message))
        frames += _read_frames(sock, trailers_of(fresh))
        assert not any(k == 0x3 for k, _fl, _s, _p in frames), frames  # no more resets
        assert not any(k == 0x7 for k, _fl, _s, _p in frames)  # no GOAWAY
