"""The infer fast lane answers exactly as the general path does.

A request with binary inputs and binary outputs (what perf_analyzer and tritonclient
send by default) is taken by the lane (csrc/http1/http_framer.h, kserve_codec.h); the same
request sent to a server started with `--fast-lane=false` (conftest.py
`paired_servers`) goes through the Python parser, the same validator and the Python
encoder. Over raw keep-alive sockets, both must get the same response, byte for byte.
tests/test_differential.py does the same for generated requests.
"""

from __future__ import annotations

import json
import socket
import struct
import time

import numpy as np
import pytest
import requests

TIMEOUT = 10


class RawConnection:
    """One keep-alive HTTP/1.1 connection; `exchange` sends a request, reads one response."""

    def __init__(self, host: str, port: int):
        self.sock = socket.create_connection((host, port), timeout=TIMEOUT)
        self.buffer = b""

    def close(self) -> None:
        self.sock.close()

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("server closed the connection")
        self.buffer += chunk

    def exchange(self, request: bytes) -> bytes:
        self.sock.sendall(request)
        while b"\r\n\r\n" not in self.buffer:
            self._fill()
        head, _, _ = self.buffer.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        total = len(head) + 4 + length
        while len(self.buffer) < total:
            self._fill()
        response, self.buffer = self.buffer[:total], self.buffer[total:]
        return response


def infer_request(path: str, header: dict, binary: bytes) -> bytes:
    header_bytes = json.dumps(header, separators=(",", ":")).encode()
    body = header_bytes + binary
    lines = [
        f"POST {path} HTTP/1.1",
        "Host: 127.0.0.1",
        f"Inference-Header-Content-Length: {len(header_bytes)}",
        "Content-Type: application/octet-stream",
        f"Content-Length: {len(body)}",
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def binary_input(name: str, datatype: str, array: np.ndarray, data: bytes) -> dict:
    return {
        "name": name,
        "datatype": datatype,
        "shape": list(array.shape),
        "parameters": {"binary_data_size": len(data)},
    }


def binary_output(name: str) -> dict:
    return {"name": name, "parameters": {"binary_data": True}}


def add_sub_case(batch: int, **extra):
    rng = np.random.default_rng(batch)
    a = rng.standard_normal((batch, 16)).astype(np.float32)
    b = rng.standard_normal((batch, 16)).astype(np.float32)
    header = {
        "inputs": [
            binary_input("INPUT0", "FP32", a, a.tobytes()),
            binary_input("INPUT1", "FP32", b, b.tobytes()),
        ],
        **extra,
    }
    return "/v2/models/add_sub/infer", header, a.tobytes() + b.tobytes(), (a, b)


def bytes_payload(items: list[bytes]) -> bytes:
    return b"".join(struct.pack("<I", len(item)) + item for item in items)


@pytest.fixture
def connection(example_server):
    conn = RawConnection(example_server.host, example_server.http_port)
    yield conn
    conn.close()


def lanes(connection: RawConnection) -> dict:
    request = b"GET /v2/naiad/lanes HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    return json.loads(split(connection.exchange(request))[2])


@pytest.fixture
def pair(paired_servers):
    """Connections to the lane server and to the general-path server."""
    connections = [RawConnection(server.host, server.http_port) for server in paired_servers]
    yield connections
    for connection in connections:
        connection.close()


def both_ways(pair, path: str, header: dict, binary: bytes):
    """The request through the lane of one server, then through the general path of the
    other; checks each took the way it should."""
    lane_connection, general_connection = pair
    before = lanes(lane_connection)
    general_before = lanes(general_connection)
    request = infer_request(path, header, binary)
    lane = lane_connection.exchange(request)
    general = general_connection.exchange(request)
    assert lanes(lane_connection)["lane_requests"] == before["lane_requests"] + 1
    after = lanes(general_connection)
    assert after["general_requests"] == general_before["general_requests"] + 1
    assert after["lane_requests"] == 0
    return lane, general


def split(response: bytes) -> tuple[bytes, dict, bytes]:
    head, _, body = response.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    return lines[0], headers, body


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(
            add_sub_case(1, id="", outputs=[binary_output("OUTPUT0"), binary_output("OUTPUT1")]),
            id="perf_analyzer",
        ),
        pytest.param(
            add_sub_case(1, id="req-42", outputs=[binary_output("OUTPUT1")]), id="one-output"
        ),
        pytest.param(
            add_sub_case(3, parameters={"binary_data_output": True}), id="all-outputs-batch-3"
        ),
    ],
)
def test_add_sub_lane_and_general_path_answer_alike(pair, case):
    path, header, binary, (a, b) = case
    lane, general = both_ways(pair, path, header, binary)
    assert lane == general
    status, headers, body = split(lane)
    assert status == b"HTTP/1.1 200 OK"
    json_length = int(headers[b"inference-header-content-length"])
    doc = json.loads(body[:json_length])
    assert doc["model_name"] == "add_sub" and doc["model_version"] == "1"
    if header.get("id"):
        assert doc["id"] == header["id"]
    # The values are the model's: OUTPUT0 = a + b, OUTPUT1 = a - b.
    offset = json_length
    for output in doc["outputs"]:
        size = output["parameters"]["binary_data_size"]
        values = np.frombuffer(body[offset : offset + size], dtype=np.float32)
        expected = a + b if output["name"] == "OUTPUT0" else a - b
        np.testing.assert_array_equal(values.reshape(output["shape"]), expected)
        offset += size
    assert offset == len(body)


def test_bytes_model_lane_and_general_path_answer_alike(pair):
    items = [b"hello", b"", "naïve".encode()]
    data = bytes_payload(items)
    array = np.array(items, dtype=object).reshape(1, 3)
    header = {
        "id": "strings",
        "inputs": [binary_input("INPUT0", "BYTES", array, data)],
        "outputs": [binary_output("OUTPUT0")],
    }
    lane, general = both_ways(pair, "/v2/models/identity_bytes/infer", header, data)
    assert lane == general
    status, headers, body = split(lane)
    assert status == b"HTTP/1.1 200 OK"
    assert body[int(headers[b"inference-header-content-length"]) :] == data


def test_versioned_path_takes_the_lane_too(pair):
    path, header, binary, _ = add_sub_case(2, outputs=[binary_output("OUTPUT0")])
    versioned = path.replace("/add_sub/", "/add_sub/versions/1/")
    lane, general = both_ways(pair, versioned, header, binary)
    assert lane == general
    assert lane.startswith(b"HTTP/1.1 200 OK")


def test_invalid_requests_get_the_validators_error(connection):
    """The lane leaves what it cannot take to the general path: same errors as ever."""
    path, header, binary, _ = add_sub_case(1, outputs=[binary_output("OUTPUT0")])
    short = connection.exchange(infer_request(path, header, binary[:-4]))
    status, _, body = split(short)
    assert status == b"HTTP/1.1 400 Bad Request"
    assert json.loads(body) == {
        "error": "unexpected size for input 'INPUT1', expecting 4 additional bytes for model "
        "'add_sub'"
    }
    header["inputs"][1]["datatype"] = "INT32"
    wrong_type = connection.exchange(infer_request(path, header, binary))
    status, _, body = split(wrong_type)
    assert status == b"HTTP/1.1 400 Bad Request"
    assert "data-type is 'INT32', but model 'add_sub' expects 'FP32'" in json.loads(body)["error"]


@pytest.mark.parametrize("code,status", [(3, b"HTTP/1.1 400 Bad Request"), (1, b"HTTP/1.1 500")])
def test_model_errors_lane_and_general_path_answer_alike(pair, code, status):
    values = np.array([[code]], dtype=np.int32)
    header = {
        "inputs": [binary_input("CODE", "INT32", values, values.tobytes())],
        "outputs": [binary_output("OUTPUT0")],
    }
    lane, general = both_ways(pair, "/v2/models/error_response/infer", header, values.tobytes())
    assert lane == general
    assert lane.startswith(status)
    _, _, body = split(lane)
    assert json.loads(body) == {"error": f"error_response: the model reports error code {code}"}


def test_lane_requests_are_counted_in_statistics(example_server, connection):
    url = f"{example_server.url}/v2/models/add_sub/stats"
    before = requests.get(url, timeout=TIMEOUT).json()["model_stats"][0]
    path, header, binary, _ = add_sub_case(2, outputs=[binary_output("OUTPUT0")])
    for _ in range(5):
        assert connection.exchange(infer_request(path, header, binary)).startswith(
            b"HTTP/1.1 200 OK"
        )
    after = requests.get(url, timeout=TIMEOUT).json()["model_stats"][0]
    assert after["inference_count"] - before["inference_count"] == 10
    success = after["inference_stats"]["success"]
    assert success["count"] - before["inference_stats"]["success"]["count"] == 5
    assert success["ns"] > before["inference_stats"]["success"]["ns"]
    assert after["execution_count"] - before["execution_count"] >= 1


def test_lane_request_of_a_dead_worker_is_answered(models_server):
    """A lane request whose worker dies gets the 500 of the general path, and the lane
    forgets it (nothing stays in flight)."""
    conn = RawConnection(models_server.host, models_server.http_port)

    def crasher(value: float) -> bytes:
        values = np.array([[value]], dtype=np.float32)
        header = {
            "inputs": [binary_input("INPUT0", "FP32", values, values.tobytes())],
            "outputs": [binary_output("OUTPUT0")],
        }
        return conn.exchange(infer_request("/v2/models/crasher/infer", header, values.tobytes()))

    try:
        before = lanes(conn)["lane_requests"]
        status, _, body = split(crasher(-1.0))
        assert status == b"HTTP/1.1 500 Internal Server Error"
        assert "crasher" in json.loads(body)["error"]
        assert "exited" in json.loads(body)["error"]
        deadline = time.monotonic() + 20
        while not crasher(2.0).startswith(b"HTTP/1.1 200 OK"):
            assert time.monotonic() < deadline, "crasher did not serve again in time"
            time.sleep(0.2)
        report = lanes(conn)
        assert report["lane_requests"] > before
        assert report["lane_in_flight"] == 0
    finally:
        conn.close()


def test_pipelined_requests_mixing_lane_and_parser_are_answered_in_order(connection):
    path, header, binary, (a, b) = add_sub_case(1, outputs=[binary_output("OUTPUT0")])
    infer = infer_request(path, header, binary)
    health = b"GET /v2/health/ready HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    before = lanes(connection)
    connection.sock.sendall(infer + infer + health + infer)
    responses = [connection.exchange(b"") for _ in range(4)]
    for index in (0, 1, 3):
        status, headers, body = split(responses[index])
        assert status == b"HTTP/1.1 200 OK"
        json_length = int(headers[b"inference-header-content-length"])
        np.testing.assert_array_equal(np.frombuffer(body[json_length:], np.float32), (a + b)[0])
    assert split(responses[2])[0] == b"HTTP/1.1 200 OK"
    assert split(responses[2])[2] == b""
    assert lanes(connection)["lane_requests"] == before["lane_requests"] + 3


def test_requests_repeating_one_header_are_answered_from_their_own_data(connection):
    """A client sending one kind of request (the same JSON header each time, as
    perf_analyzer and tritonclient in a loop do) gets every answer from that request's own
    inputs and id: the lane reads a repeated header from its memo (csrc/http1/header_memo.h),
    pipelined or one by one, with other headers in between."""
    path, header, _, _ = add_sub_case(
        1, outputs=[binary_output("OUTPUT0"), binary_output("OUTPUT1")]
    )
    rng = np.random.default_rng(11)
    before = lanes(connection)
    sent = []
    for index in range(16):
        a = rng.standard_normal((1, 16)).astype(np.float32)
        b = rng.standard_normal((1, 16)).astype(np.float32)
        this = header if index % 5 else {**header, "id": f"other-{index}"}
        sent.append(
            (this.get("id", ""), a, b, infer_request(path, this, a.tobytes() + b.tobytes()))
        )
    connection.sock.sendall(b"".join(request for *_, request in sent[:8]))
    answers = [connection.exchange(b"") for _ in range(8)]
    answers += [connection.exchange(request) for *_, request in sent[8:]]
    for (request_id, a, b, _), answer in zip(sent, answers):
        status, headers, body = split(answer)
        assert status == b"HTTP/1.1 200 OK"
        json_length = int(headers[b"inference-header-content-length"])
        assert json.loads(body[:json_length]).get("id", "") == request_id
        outputs = np.frombuffer(body[json_length:], np.float32)
        np.testing.assert_array_equal(outputs[:16], (a + b)[0])
        np.testing.assert_array_equal(outputs[16:], (a - b)[0])
    assert lanes(connection)["lane_requests"] == before["lane_requests"] + 16


def test_request_arriving_in_pieces_is_answered(connection):
    path, header, binary, (a, b) = add_sub_case(2, outputs=[binary_output("OUTPUT1")])
    request = infer_request(path, header, binary)
    before = lanes(connection)["lane_requests"]
    for cut in (10, len(request) - len(binary) - 3, len(request) - 5):
        connection.sock.sendall(request[:cut])
        time.sleep(0.05)
        response = connection.exchange(request[cut:])
        status, headers, body = split(response)
        assert status == b"HTTP/1.1 200 OK"
        json_length = int(headers[b"inference-header-content-length"])
        values = np.frombuffer(body[json_length:], np.float32).reshape(2, 16)
        np.testing.assert_array_equal(values, a - b)
    # Collected whole once its head is in (or put together by httptools when the head
    # came in pieces): the lane took each.
    assert lanes(connection)["lane_requests"] == before + 3


def test_pieces_between_pipelined_requests_are_answered_in_order(connection):
    path, header, binary, (a, b) = add_sub_case(1, outputs=[binary_output("OUTPUT0")])
    request = infer_request(path, header, binary)
    before = lanes(connection)["lane_requests"]
    cut = len(request) - 20
    connection.sock.sendall(request + request[:cut])
    time.sleep(0.05)
    connection.sock.sendall(request[cut:] + request)
    for _ in range(3):
        status, headers, body = split(connection.exchange(b""))
        assert status == b"HTTP/1.1 200 OK"
        json_length = int(headers[b"inference-header-content-length"])
        np.testing.assert_array_equal(np.frombuffer(body[json_length:], np.float32), (a + b)[0])
    assert lanes(connection)["lane_requests"] == before + 3


def test_large_outputs_arrive_whole_from_both_paths(pair):
    item = bytes(range(256)) * 400  # 100 KiB: written without joining the reply
    data = bytes_payload([item])
    header = {
        "inputs": [
            {
                "name": "INPUT0",
                "datatype": "BYTES",
                "shape": [1, 1],
                "parameters": {"binary_data_size": len(data)},
            }
        ],
        "outputs": [binary_output("OUTPUT0")],
    }
    lane, general = both_ways(pair, "/v2/models/identity_bytes/infer", header, data)
    assert lane == general
    status, headers, body = split(lane)
    assert status == b"HTTP/1.1 200 OK"
    assert body[int(headers[b"inference-header-content-length"]) :] == data


def test_connection_close_request_is_answered_then_closed(example_server):
    conn = RawConnection(example_server.host, example_server.http_port)
    try:
        path, header, binary, _ = add_sub_case(1, outputs=[binary_output("OUTPUT0")])
        request = infer_request(path, header, binary)
        request = request.replace(
            b"Host: 127.0.0.1\r\n", b"Host: 127.0.0.1\r\nConnection: close\r\n"
        )
        response = conn.exchange(request)
        assert response.startswith(b"HTTP/1.1 200 OK")
        assert b"\r\nConnection: close\r\n" in response
        assert conn.sock.recv(1) == b""
    finally:
        conn.close()


def test_damaged_requests_leave_the_server_serving(example_server):
    """Randomly damaged infer requests: each gets an answer or a closed connection, and
    afterwards the server serves as before with nothing left in flight."""
    path, header, binary, (a, b) = add_sub_case(1, outputs=[binary_output("OUTPUT0")])
    request = infer_request(path, header, binary)
    rng = np.random.default_rng(7)
    for _ in range(300):
        damaged = bytearray(request)
        for _ in range(int(rng.integers(1, 4))):
            at = int(rng.integers(0, len(damaged)))
            choice = int(rng.integers(0, 3))
            if choice == 0:
                damaged[at] = int(rng.integers(0, 256))
            elif choice == 1:
                del damaged[at : at + int(rng.integers(1, 8))]
            else:
                damaged.insert(at, int(rng.integers(0, 256)))
        with socket.create_connection(
            (example_server.host, example_server.http_port), timeout=TIMEOUT
        ) as sock:
            sock.sendall(bytes(damaged))
            sock.shutdown(socket.SHUT_WR)
            while sock.recv(65536):
                pass
    conn = RawConnection(example_server.host, example_server.http_port)
    try:
        status, headers, body = split(conn.exchange(request))
        assert status == b"HTTP/1.1 200 OK"
        json_length = int(headers[b"inference-header-content-length"])
        np.testing.assert_array_equal(np.frombuffer(body[json_length:], np.float32), (a + b)[0])
        deadline = time.monotonic() + 10
        while lanes(conn)["lane_in_flight"]:
            assert time.monotonic() < deadline, "lane requests stayed in flight"
            time.sleep(0.05)
    finally:
        conn.close()


@pytest.mark.parametrize("general", [False, True], ids=["lane", "general"])
def test_requests_sent_before_a_half_close_are_answered(paired_servers, general):
    server = paired_servers[1 if general else 0]
    path, header, binary, (a, b) = add_sub_case(1, outputs=[binary_output("OUTPUT1")])
    request = infer_request(path, header, binary)
    with socket.create_connection((server.host, server.http_port), timeout=TIMEOUT) as sock:
        sock.sendall(request + request)
        sock.shutdown(socket.SHUT_WR)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    responses = received.split(b"HTTP/1.1 ")[1:]
    assert len(responses) == 2
    for response in responses:
        status, headers, body = split(b"HTTP/1.1 " + response)
        assert status == b"HTTP/1.1 200 OK"
        json_length = int(headers[b"inference-header-content-length"])
        np.testing.assert_array_equal(np.frombuffer(body[json_length:], np.float32), (a - b)[0])


def test_large_request_in_pieces_is_answered(connection):
    """Past 1 MiB a request is collected only once a quarter of it is in; either way the
    lane takes it and answers it whole."""
    data = bytes_payload([bytes(range(256)) * 8192])  # 2 MiB
    header = {
        "inputs": [
            {
                "name": "INPUT0",
                "datatype": "BYTES",
                "shape": [1, 1],
                "parameters": {"binary_data_size": len(data)},
            }
        ],
        "outputs": [binary_output("OUTPUT0")],
    }
    request = infer_request("/v2/models/identity_bytes/infer", header, data)
    before = lanes(connection)["lane_requests"]
    for cuts in ((300, len(request) // 2), (len(request) // 3, len(request) - 7)):
        start = 0
        for cut in cuts:
            connection.sock.sendall(request[start:cut])
            start = cut
            time.sleep(0.05)
        status, headers, body = split(connection.exchange(request[start:]))
        assert status == b"HTTP/1.1 200 OK"
        assert body[int(headers[b"inference-header-content-length"]) :] == data
    assert lanes(connection)["lane_requests"] == before + 2
