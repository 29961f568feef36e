"""Compressed answers on the infer fast lane (issue 14's Accept-Encoding, issue 15's
"every request at C++ speed"): requests that ask for gzip or deflate, as `requests`,
`curl --compressed` and browsers do by default, take the lane, and its answers are the
general path's, byte for byte.

The same bytes go to a server with the lane and to one with `--fast-lane=false`
(conftest.py `paired_servers`); the lane's counters say which way each request went.
Both paths compress with the one compressor (csrc/codec/http_compress.h, the general path
through _core.compress_body); test_http_codec.py checks it against Python's zlib, whose
bytes were checked against Triton 2.51's (tests/grpc_clients/test_http_surface_triton.py).
"""

from __future__ import annotations

import gzip
import json
import time
import zlib

import numpy as np
import pytest
import requests
from surface_support import tensor
from test_fast_lane import (
    RawConnection,
    add_sub_case,
    binary_output,
    infer_request,
    lanes,
    split,
)

ACCEPT = [
    None,
    "identity",
    "gzip",
    "deflate",
    "gzip, deflate",  # requests' and curl --compressed's
    "gzip, deflate, br",  # a browser's
    "gzip;q=0.2, deflate;q=0.7",
    "identity;q=1, gzip;q=1",
    "deflate;q=0, gzip;q=0",
    "br",
]


@pytest.fixture(scope="module")
def pair(paired_servers):
    connections = [RawConnection(server.host, server.http_port) for server in paired_servers]
    yield connections
    for connection in connections:
        connection.close()


def with_accept(request: bytes, accept: str | None) -> bytes:
    if accept is None:
        return request
    return request.replace(b"\r\n", b"\r\nAccept-Encoding: %s\r\n" % accept.encode(), 1)


def json_infer(path: str, document: dict) -> bytes:
    text = json.dumps(document).encode()
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(text)}\r\n\r\n"
    ).encode() + text


def requests_by_kind():
    """(name, request bytes, queued by the lane, answered 200) for every kind of answer."""
    path, header, binary, _ = add_sub_case(
        2, outputs=[binary_output("OUTPUT0"), binary_output("OUTPUT1")]
    )
    binary_in_out = infer_request(path, header, binary)
    path, header, binary, _ = add_sub_case(1)  # binary inputs, JSON outputs
    binary_in_json_out = infer_request(path, header, binary)
    # JSON tensors in and out; integral values, which both paths spell alike.
    values = [float(i) for i in range(16)]
    json_in_out = json_infer(
        "/v2/models/add_sub/infer",
        {
            "id": "z1",
            "inputs": [
                tensor("INPUT0", "FP32", [1, 16], values),
                tensor("INPUT1", "FP32", [1, 16], values[::-1]),
            ],
        },
    )
    # An output of no elements (identity_bytes echoes a BYTES[1,0] input): its body
    # still holds the JSON header, so it is compressed.
    empty = infer_request(
        "/v2/models/identity_bytes/infer",
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "datatype": "BYTES",
                    "shape": [1, 0],
                    "parameters": {"binary_data_size": 0},
                }
            ],
            "outputs": [binary_output("OUTPUT0")],
        },
        b"",
    )
    # The validator refuses it: Triton's 400, never compressed.
    refused = json_infer(
        "/v2/models/add_sub/infer",
        {
            "inputs": [
                tensor("INPUT0", "FP32", [1, 3], [1, 2, 3]),
                tensor("INPUT1", "FP32", [1, 3], [1, 2, 3]),
            ]
        },
    )
    return [
        ("binary in and out", binary_in_out, True, True),
        ("binary in, JSON out", binary_in_json_out, True, True),
        ("JSON in and out", json_in_out, True, True),
        ("empty output", empty, True, True),
        ("refused", refused, False, False),
    ]


KINDS = requests_by_kind()


@pytest.mark.parametrize("accept", ACCEPT, ids=lambda a: a or "none")
@pytest.mark.parametrize("name,request_bytes,queued,ok", KINDS, ids=[k[0] for k in KINDS])
def test_lane_answers_compressed_requests_as_the_general_path(
    pair, accept, name, request_bytes, queued, ok
):
    lane_connection, general_connection = pair
    request = with_accept(request_bytes, accept)
    before = lanes(lane_connection)
    from_lane = lane_connection.exchange(request)
    from_general = general_connection.exchange(request)
    after = lanes(lane_connection)
    # Byte for byte: status line, every header in order, the compressed body.
    assert from_lane == from_general, (from_lane[:400], from_general[:400])
    status, headers, body = split(from_lane)
    if queued is True:
        assert after["lane_requests"] == before["lane_requests"] + 1
    elif queued is False:  # refused by the lane itself, as the general path would
        assert after["lane_refused"] == before["lane_refused"] + 1
    if not ok:
        assert status == b"HTTP/1.1 400 Bad Request"
        assert b"content-encoding" not in headers
        return
    assert status == b"HTTP/1.1 200 OK"
    coding = headers.get(b"content-encoding")
    expected = {
        None: None,
        "identity": None,
        "gzip": b"gzip",
        "deflate": b"deflate",
        "gzip, deflate": b"gzip",
        "gzip, deflate, br": b"gzip",
        "gzip;q=0.2, deflate;q=0.7": b"deflate",
        "identity;q=1, gzip;q=1": None,
        "deflate;q=0, gzip;q=0": None,
        "br": None,
    }[accept]
    assert coding == expected
    plain = {b"gzip": gzip.decompress, b"deflate": zlib.decompress, None: bytes}[coding](body)
    assert int(headers[b"content-length"]) == len(body)
    length = headers.get(b"inference-header-content-length")
    document = json.loads(plain[: int(length)] if length else plain)
    assert "outputs" in document


def test_a_request_put_together_by_the_parser_is_compressed_on_the_lane(pair):
    # A head arriving in pieces goes through httptools, then to the lane (submit_fast).
    path, header, binary, (a, b) = add_sub_case(1, outputs=[binary_output("OUTPUT0")])
    request = with_accept(infer_request(path, header, binary), "deflate")
    lane_connection, general_connection = pair
    before = lanes(lane_connection)["lane_requests"]
    answers = []
    for connection in pair:
        connection.sock.sendall(request[:10])
        time.sleep(0.05)
        answers.append(connection.exchange(request[10:]))
    assert lanes(lane_connection)["lane_requests"] == before + 1
    assert answers[0] == answers[1]
    _, headers, body = split(answers[0])
    assert headers[b"content-encoding"] == b"deflate"
    plain = zlib.decompress(body)
    json_length = int(headers[b"inference-header-content-length"])
    np.testing.assert_array_equal(np.frombuffer(plain[json_length:], np.float32), (a + b)[0])


def test_requests_default_headers_take_the_lane(paired_servers, pair):
    # requests sends Accept-Encoding: gzip, deflate (and decompresses the answer).
    lane_server = paired_servers[0]
    lane_connection = pair[0]
    before = lanes(lane_connection)["lane_requests"]
    values = [float(i) for i in range(16)]
    document = {
        "inputs": [
            tensor("INPUT0", "FP32", [1, 16], values),
            tensor("INPUT1", "FP32", [1, 16], [1.0] * 16),
        ]
    }
    url = f"http://{lane_server.host}:{lane_server.http_port}/v2/models/add_sub/infer"
    response = requests.post(url, json=document, timeout=30)
    assert response.status_code == 200
    assert "gzip" in response.request.headers["Accept-Encoding"]
    assert response.headers["Content-Encoding"] == "gzip"
    outputs = {o["name"]: o["data"] for o in response.json()["outputs"]}
    assert outputs["OUTPUT0"] == [v + 1 for v in values]
    assert outputs["OUTPUT1"] == [v - 1 for v in values]
    assert lanes(lane_connection)["lane_requests"] == before + 1


def with_content_encoding(request: bytes, coding: str, pack) -> bytes:
    """`request` with its body packed by `pack` and sent with Content-Encoding `coding`."""
    head, _, body = request.partition(b"\r\n\r\n")
    packed = pack(body)
    lines = [
        line for line in head.split(b"\r\n") if not line.lower().startswith(b"content-length:")
    ]
    lines.append(b"Content-Encoding: %s" % coding.encode())
    lines.append(b"Content-Length: %d" % len(packed))
    return b"\r\n".join(lines) + b"\r\n\r\n" + packed


def _raw_deflate(data: bytes) -> bytes:
    compressor = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush()


# (name, Content-Encoding, how the body is packed, answered 200)
CONTENT_ENCODINGS = [
    ("gzip", "gzip", gzip.compress, True),
    ("deflate", "deflate", zlib.compress, True),
    ("raw deflate", "deflate", _raw_deflate, True),
    ("identity", "identity", bytes, True),
    ("damaged gzip", "gzip", lambda body: gzip.compress(body)[:-12], False),
    ("not deflate", "deflate", lambda body: b"\xff" * 8, False),
    ("empty gzip", "gzip", lambda body: b"", False),
    ("unsupported", "br", bytes, False),
]


@pytest.mark.parametrize(
    "label,coding,pack,ok", CONTENT_ENCODINGS, ids=[c[0] for c in CONTENT_ENCODINGS]
)
@pytest.mark.parametrize("name,request_bytes,queued,_ok", KINDS, ids=[k[0] for k in KINDS])
def test_lane_takes_compressed_request_bodies_as_the_general_path(
    pair, label, coding, pack, ok, name, request_bytes, queued, _ok
):
    """Content-Encoding gzip/deflate bodies are inflated on the lane (C++), and what it
    refuses (damaged data, an unknown encoding) it answers itself: the same bytes as the
    general path in every case."""
    lane_connection, general_connection = pair
    request = with_content_encoding(with_accept(request_bytes, "gzip"), coding, pack)
    before = lanes(lane_connection)
    from_lane = lane_connection.exchange(request)
    from_general = general_connection.exchange(request)
    after = lanes(lane_connection)
    assert from_lane == from_general, (from_lane[:400], from_general[:400])
    status = split(from_lane)[0]
    if ok and queued:
        assert status == b"HTTP/1.1 200 OK"
        assert after["lane_requests"] == before["lane_requests"] + 1
    else:
        assert status in (b"HTTP/1.1 400 Bad Request", b"HTTP/1.1 501 Not Implemented")
        assert after["lane_refused"] == before["lane_refused"] + 1
        assert after["lane_requests"] == before["lane_requests"]
