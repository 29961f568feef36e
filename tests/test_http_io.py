"""The HTTP front end's C++ I/O loop (csrc/http1/http_io.h, http/io_server.py), black-box.

A real server, raw sockets and tritonclient: lane requests and the general path's on one
connection answered in request order, a connection going back to the lane after the
general path served it, a request split across two sends, a client that goes away with
requests in flight, statistics of the loop's answers, and `--http-io-loop=false`
serving the same answers through uvloop's transports.
"""

from __future__ import annotations

import json
import socket
import time

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
from server_harness import EXAMPLE_MODELS, make_repository, server_variants
from test_fast_lane import binary_input, binary_output, infer_request

TIMEOUT = 10
HEALTH = b"GET /v2/health/ready HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """(the I/O loop's server, uvloop's: --http-io-loop=false), serving add_sub."""
    repository = make_repository(
        tmp_path_factory.mktemp("io") / "models", {"add_sub": EXAMPLE_MODELS / "add_sub"}
    )
    variants = (("io", []), ("uvloop", ["--http-io-loop=false"]))
    with server_variants(tmp_path_factory, repository, variants) as servers:
        yield servers


def add_sub_request(value: float) -> bytes:
    values = np.full((1, 16), value, dtype=np.float32)
    data = values.tobytes()
    header = {
        "inputs": [
            binary_input("INPUT0", "FP32", values, data),
            binary_input("INPUT1", "FP32", values, data),
        ],
        "outputs": [binary_output("OUTPUT0")],
    }
    return infer_request("/v2/models/add_sub/infer", header, data + data)


def read_responses(sock: socket.socket, count: int) -> list[tuple[int, bytes]]:
    """`count` whole HTTP responses from `sock`: (status, body) each."""
    buffer = b""
    out = []
    while len(out) < count:
        while b"\r\n\r\n" not in buffer:
            chunk = sock.recv(65536)
            assert chunk, f"closed after {len(out)} responses"
            buffer += chunk
        head, _, rest = buffer.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(rest) < length:
            chunk = sock.recv(65536)
            assert chunk
            rest += chunk
        out.append((int(head.split(b" ")[1]), rest[:length]))
        buffer = rest[length:]
    return out


def output0(body: bytes) -> float:
    """OUTPUT0[0] of a binary add_sub answer (INPUT0 + INPUT1)."""
    header_size = body.index(b"}]}") + 3
    header = json.loads(body[:header_size])
    assert header["outputs"][0]["name"] == "OUTPUT0"
    return float(np.frombuffer(body[header_size : header_size + 4], dtype=np.float32)[0])


def lanes(server) -> dict:
    return requests.get(f"{server.url}/v2/naiad/lanes", timeout=TIMEOUT).json()


def in_flight(server) -> int:
    return requests.get(f"{server.url}/v2/naiad/arena", timeout=TIMEOUT).json()[
        "requests_in_flight"
    ]


@pytest.mark.parametrize("which", [0, 1], ids=["io-loop", "uvloop"])
def test_lane_and_general_requests_on_one_connection_are_answered_in_order(servers, which):
    server = servers[which]
    before = lanes(server)["lane_requests"]
    with socket.create_connection((server.host, server.http_port), timeout=TIMEOUT) as sock:
        # Pipelined in one write: lane, lane, general (GET), lane, general, lane.
        sock.sendall(
            add_sub_request(1)
            + add_sub_request(2)
            + HEALTH
            + add_sub_request(3)
            + HEALTH
            + add_sub_request(4)
        )
        answers = read_responses(sock, 6)
        assert [status for status, _ in answers] == [200] * 6
        assert [output0(answers[i][1]) for i in (0, 1, 3, 5)] == [2.0, 4.0, 6.0, 8.0]
        assert answers[2][1] == answers[4][1] == b""
        # One at a time after that: general, then lane again on the same connection.
        sock.sendall(HEALTH)
        assert read_responses(sock, 1)[0][0] == 200
        sock.sendall(add_sub_request(5))
        status, body = read_responses(sock, 1)[0]
        assert status == 200 and output0(body) == 10.0
    # Every infer request took the lane (the connection came back to it after each GET).
    assert lanes(server)["lane_requests"] - before == 5


@pytest.mark.parametrize("which", [0, 1], ids=["io-loop", "uvloop"])
def test_a_request_split_across_sends_is_answered(servers, which):
    server = servers[which]
    request = add_sub_request(7)
    with socket.create_connection((server.host, server.http_port), timeout=TIMEOUT) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for cut in (20, 150, len(request) - 3):  # in the head, in the body, at the end
            sock.sendall(request[:cut])
            time.sleep(0.05)
            sock.sendall(request[cut:])
            status, body = read_responses(sock, 1)[0]
            assert status == 200 and output0(body) == 14.0


def test_the_io_loops_answers_are_counted_in_the_statistics(servers):
    server = servers[0]
    client = httpclient.InferenceServerClient(f"{server.host}:{server.http_port}")
    before = client.get_inference_statistics("add_sub")["model_stats"][0]
    values = np.arange(16, dtype=np.float32).reshape(1, 16)
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = httpclient.InferInput(name, [1, 16], "FP32")
        tensor.set_data_from_numpy(values)
        inputs.append(tensor)
    for _ in range(5):
        result = client.infer("add_sub", inputs)
        assert np.array_equal(result.as_numpy("OUTPUT0"), values * 2)
    after = client.get_inference_statistics("add_sub")["model_stats"][0]
    client.close()
    stats, was = after["inference_stats"], before["inference_stats"]
    assert stats["success"]["count"] - was["success"]["count"] == 5
    assert stats["queue"]["count"] - was["queue"]["count"] == 5
    assert stats["compute_infer"]["count"] - was["compute_infer"]["count"] == 5
    assert stats["success"]["ns"] > was["success"]["ns"]
    assert after["inference_count"] - before["inference_count"] == 5
    assert after["execution_count"] - before["execution_count"] == 5  # one at a time


def test_a_client_gone_with_requests_in_flight_leaves_nothing_behind(servers):
    server = servers[0]
    for _ in range(20):
        sock = socket.create_connection((server.host, server.http_port), timeout=TIMEOUT)
        sock.sendall(add_sub_request(1) * 8)
        sock.close()  # before any answer is read
    deadline = time.monotonic() + 10
    while in_flight(server) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert in_flight(server) == 0
    # And the server serves on.
    with socket.create_connection((server.host, server.http_port), timeout=TIMEOUT) as sock:
        sock.sendall(add_sub_request(2))
        status, body = read_responses(sock, 1)[0]
        assert status == 200 and output0(body) == 4.0


def test_malformed_bytes_after_lane_requests_get_the_parsers_400_after_their_answers(servers):
    server = servers[0]
    with socket.create_connection((server.host, server.http_port), timeout=TIMEOUT) as sock:
        sock.sendall(add_sub_request(1) + b"NOT HTTP AT ALL\r\n\r\n")
        answers = read_responses(sock, 2)
        assert answers[0][0] == 200 and output0(answers[0][1]) == 2.0
        assert answers[1][0] == 400
        assert json.loads(answers[1][1]) == {"error": "Invalid HTTP request received."}
