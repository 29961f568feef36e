"""Differential: infer request forms the C++ lane answers itself, sent as the same bytes
to Naiad and to Triton 2.51. Requests that say how the connection goes on (HTTP/1.0, with
and without `Connection: keep-alive`, and HTTP/1.1 `Connection: close`): each answer must
be Triton's, its status line (an HTTP/1.0 one for HTTP/1.0), the headers a client reads
(Connection among them), the body, and whether the connection is closed after it. Output
parameters Triton does not read: the same answer. None reaches the Python general path.
Skips, saying why, when Triton is not installed."""

from __future__ import annotations

import json
import socket

import pytest
import requests
from checksum_support import write_model
from surface_support import read_answer
from triton_peer import naiad_and_triton_http, needs_triton

pytestmark = [pytest.mark.timeout(600), needs_triton]

_READ = ("content-type", "content-length", "connection", "inference-header-content-length")
_GOOD = json.dumps(
    {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 1], "data": [1.5]}]}
).encode()
_REFUSED = _GOOD.replace(b'"FP32"', b'"FP64"')  # the validator's 400
_NO_JSON = b'{"inputs": ['  # rapidjson's 500

# (name, HTTP version, extra header lines, body: None for binary data in and out)
CASES = [
    ("1.1 close", "HTTP/1.1", "Connection: close\r\n", _GOOD),
    ("1.1 Close", "HTTP/1.1", "Connection: Close\r\n", _GOOD),
    ("1.0", "HTTP/1.0", "", _GOOD),
    ("1.0 close", "HTTP/1.0", "Connection: close\r\n", _GOOD),
    ("1.0 keep-alive", "HTTP/1.0", "Connection: keep-alive\r\n", _GOOD),
    ("1.1 close refused", "HTTP/1.1", "Connection: close\r\n", _REFUSED),
    ("1.0 refused", "HTTP/1.0", "", _REFUSED),
    ("1.0 keep-alive no JSON", "HTTP/1.0", "Connection: keep-alive\r\n", _NO_JSON),
    ("1.1 close no JSON", "HTTP/1.1", "Connection: close\r\n", _NO_JSON),
    ("1.1 close, binary output", "HTTP/1.1", "Connection: close\r\n", None),
]


def _binary_request() -> tuple[bytes, bytes]:
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "datatype": "FP32",
                    "shape": [1, 1],
                    "parameters": {"binary_data_size": 4},
                }
            ],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
        }
    ).encode()
    return header + b"\x00\x00\xc0?", f"Inference-Header-Content-Length: {len(header)}\r\n".encode()


def _request(version: str, headers: str, body: bytes | None) -> bytes:
    extra = b""
    if body is None:
        body, extra = _binary_request()
    head = f"POST /v2/models/echo/infer {version}\r\nHost: x\r\n{headers}".encode() + extra
    return head + f"Content-Length: {len(body)}\r\n\r\n".encode() + body


def _read_answer(sock: socket.socket, data: bytes) -> tuple[tuple, bytes]:
    """One answer: (status line, the headers read, body), and what came after it."""
    status_line, headers, body, rest = read_answer(sock, data)
    assert status_line, data
    return (status_line, {h: headers.get(h) for h in _READ}, body), rest


def _exchange(port: int, request: bytes) -> tuple:
    """The answer to `request`, and whether the server then closed the connection: it
    closed when the socket ends; it kept it when a second (keep-alive) request on it is
    answered."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(request)
        answer, rest = _read_answer(sock, b"")
        assert rest == b"", rest
        try:
            sock.sendall(_request("HTTP/1.1", "", _GOOD))
        except OSError:
            return answer, "closed"
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return answer, "closed"
        if not chunk:
            return answer, "closed"
        second, _ = _read_answer(sock, chunk)
        assert second[0] == "HTTP/1.1 200 OK", second
        return answer, "kept"


def _lanes(port: int) -> dict:
    return requests.get(f"http://127.0.0.1:{port}/v2/naiad/lanes", timeout=60).json()


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    root = tmp_path_factory.mktemp("http_connection")
    repo = root / "models"
    write_model(repo, "echo")
    with naiad_and_triton_http(repo, root, ["echo"]) as ports:
        yield ports


@pytest.mark.parametrize("name,version,headers,body", CASES, ids=[c[0] for c in CASES])
def test_answered_and_closed_by_the_lane_as_triton(servers, name, version, headers, body):
    naiad, triton = servers
    request = _request(version, headers, body)
    theirs = _exchange(triton, request)
    before = _lanes(naiad)
    ours = _exchange(naiad, request)
    after = _lanes(naiad)
    assert ours == theirs, name
    assert after["general_requests"] == before["general_requests"], (before, after)
    # The request and, on a kept connection, the second one.
    taken = after["lane_requests"] + after["lane_refused"]
    taken -= before["lane_requests"] + before["lane_refused"]
    assert taken == (2 if ours[1] == "kept" else 1), (before, after)


# Output parameters Triton reads no key of but these: ignored, whatever their values.
OUTPUT_PARAMETERS = [
    {"x": 1},
    {"x": None, "binary_data": True},
    {"nested": {"a": [1, None]}, "binary_data": False},
    {"classification": 1, "y": "z"},
]


def test_output_parameters_triton_does_not_read_are_ignored_by_the_lane(servers):
    naiad, triton = servers
    before = _lanes(naiad)
    for parameters in OUTPUT_PARAMETERS:
        doc = json.loads(_GOOD)
        doc["outputs"] = [{"name": "OUTPUT0", "parameters": parameters}]
        request = _request("HTTP/1.1", "", json.dumps(doc).encode())
        ours, theirs = _exchange(naiad, request), _exchange(triton, request)
        assert ours == theirs, parameters
        assert ours[0][0] == "HTTP/1.1 200 OK", ours
    after = _lanes(naiad)
    assert after["general_requests"] == before["general_requests"], (before, after)
    # Each request and the second one on its connection.
    assert after["lane_requests"] - before["lane_requests"] == 2 * len(OUTPUT_PARAMETERS)
