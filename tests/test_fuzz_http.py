"""Property-based fuzzing of a real server's HTTP/1.1 front end through raw sockets.

Hypothesis builds requests a client could send, right or wrong at every layer: the
request line (methods, targets, versions), headers (lengths, duplicates, encodings,
Expect, Connection, bad characters), framing (Content-Length exact or short, chunked
bodies with damaged sizes, extensions and trailers) and bodies (KServe JSON with tensor
`data`, binary tensors after an Inference-Header-Content-Length, BYTES length prefixes,
random bytes), for the fast lane's model (add_sub), a BYTES model and unknown ones. The
properties: every byte the server sends back is a sequence of complete, well-formed
HTTP/1.1 responses, each a success or a 4xx/5xx with Triton's JSON {"error": ...} body
when it has one (Triton answers a malformed JSON body with 500, so does Naiad); no
exception reaches the server's log; and the server stays up (a new connection is
answered after every request).
"""

from __future__ import annotations

import json
import socket
import struct
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from server_harness import EXAMPLE_MODELS, NaiadServer, make_repository

TARGETS = [
    "/v2/models/add_sub/infer",
    "/v2/models/add_sub/versions/1/infer",
    "/v2/models/identity_bytes/infer",
    "/v2/models/nope/infer",
    "/v2/models/add_sub/versions/7/infer",
    "/v2/models/add_sub",
    "/v2/health/ready",
    "/v2/repository/index",
    "/v2/models/add_sub/infer?x=1",
    "/v2/models/%61dd_sub/infer",
    "/v2/models/add_sub/infer/",
    "//v2/models/add_sub/infer",
    "*",
]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fuzz_http")
    repository = make_repository(
        tmp / "models", {name: EXAMPLE_MODELS / name for name in ("add_sub", "identity_bytes")}
    )
    with NaiadServer(repository, log_dir=tmp) as srv:
        yield srv
    assert "Traceback" not in srv.stderr_text()


# -- requests ------------------------------------------------------------------------------

DATATYPES = st.sampled_from(
    ["FP32", "BYTES", "INT8", "FP16", "BOOL", "UINT64", "fp32", "", "X" * 40]
)
SHAPES = st.lists(st.integers(-2, 20), max_size=3) | st.just([1, 16])
SCALARS = st.one_of(
    st.integers(-(2**65), 2**65),
    st.floats(allow_nan=False),
    st.booleans(),
    st.text(max_size=8),
    st.none(),
)


@st.composite
def tensor_json(draw, name: str | None = None, binary: bytes | None = None) -> dict:
    tensor = {
        "name": name or draw(st.sampled_from(["INPUT0", "INPUT1", "OUT", ""])),
        "datatype": draw(DATATYPES),
        "shape": draw(SHAPES),
    }
    if binary is not None:
        tensor["parameters"] = {"binary_data_size": len(binary)}
    elif draw(st.booleans()):
        tensor["data"] = draw(
            st.lists(SCALARS, max_size=20) | st.lists(st.lists(SCALARS, max_size=4), max_size=4)
        )
    if draw(st.integers(0, 9)) == 0:
        tensor["parameters"] = {
            draw(st.sampled_from(["binary_data_size", "shared_memory_region", "x"])): draw(SCALARS)
        }
    return tensor


def bytes_tensor(draw) -> bytes:
    """BYTES wire layout (u32 little-endian length, bytes), sometimes damaged."""
    items = draw(st.lists(st.binary(max_size=10), max_size=4))
    data = b"".join(struct.pack("<I", len(item)) + item for item in items)
    if data and draw(st.booleans()):
        data = data[: draw(st.integers(0, len(data)))] + draw(st.binary(max_size=5))
    return data


@st.composite
def infer_body(draw) -> tuple[bytes, int | None]:
    """An infer body and its Inference-Header-Content-Length (None: JSON only)."""
    kind = draw(st.sampled_from(["valid", "json", "binary", "bytes", "random"]))
    if kind == "random":
        return draw(st.binary(max_size=300)), draw(st.none() | st.integers(-5, 400))
    if kind == "valid":
        values = np.arange(16, dtype=np.float32).tolist()
        header = {
            "inputs": [
                {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": values},
                {"name": "INPUT1", "datatype": "FP32", "shape": [1, 16], "data": values},
            ]
        }
        binaries: list[bytes] = []
    elif kind == "json":
        header = {"inputs": draw(st.lists(tensor_json(), max_size=3))}
        binaries = []
    else:
        binaries = [
            bytes_tensor(draw) if kind == "bytes" else draw(st.binary(min_size=0, max_size=80))
            for _ in range(draw(st.integers(1, 2)))
        ]
        names = ["INPUT0", "INPUT1"]
        header = {
            "inputs": [draw(tensor_json(name=names[i], binary=b)) for i, b in enumerate(binaries)]
        }
    if draw(st.booleans()):
        header["outputs"] = [
            {
                "name": draw(st.sampled_from(["OUTPUT0", "OUTPUT1", "NOPE"])),
                "parameters": {"binary_data": draw(st.booleans())},
            }
            for _ in range(draw(st.integers(0, 2)))
        ]
    if draw(st.booleans()):
        header["id"] = draw(st.text(max_size=10))
    if draw(st.integers(0, 4)) == 0:
        header["parameters"] = {
            draw(
                st.sampled_from(["priority", "timeout", "binary_data_output", "sequence_id"])
            ): draw(SCALARS)
        }
    text = json.dumps(header).encode()
    if draw(st.integers(0, 5)) == 0:  # damaged JSON
        at = draw(st.integers(0, len(text)))
        text = (
            text[:at]
            + draw(st.sampled_from([b"", b"{", b'"', b"\\", b"\xff", b",]"]))
            + text[at + 1 :]
        )
    return text + b"".join(binaries), (len(text) if binaries else None)


def chunked(draw, body: bytes) -> bytes:
    out = b""
    pos = 0
    while pos < len(body):
        n = draw(st.integers(1, max(1, len(body) - pos)))
        size = b"%x" % n
        if draw(st.integers(0, 9)) == 0:
            size = draw(
                st.sampled_from([b"zz", b"-1", b"ffffffffffffffffff", b"", b"%x" % (n + 3)])
            )
        ext = draw(st.sampled_from([b"", b"", b";a=b"]))
        out += size + ext + b"\r\n" + body[pos : pos + n] + b"\r\n"
        pos += n
    trailer = draw(st.sampled_from([b"", b"", b"X-T: 1\r\n"]))
    return out + b"0\r\n" + trailer + b"\r\n"


HEADER_NAME = st.sampled_from(
    [
        "X-A",
        "Accept",
        "Content-Type",
        "Expect",
        "Connection",
        "Host",
        "Transfer-Encoding",
        "Content-Encoding",
        "Inference-Header-Content-Length",
    ]
) | st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=12)
HEADER_VALUE = st.sampled_from(
    [
        "application/json",
        "application/octet-stream",
        "100-continue",
        "close",
        "keep-alive",
        "Upgrade",
        "gzip",
        "deflate",
        "identity",
        "chunked",
    ]
) | st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=20)


@st.composite
def http_request(draw) -> bytes:
    method = draw(st.sampled_from(["POST"] * 6 + ["GET", "PUT", "OPTIONS", "DELETE", "P0ST", ""]))
    target = draw(st.sampled_from(TARGETS) | st.text(alphabet="/%abv2_?#0123456789", max_size=30))
    version = draw(
        st.sampled_from(
            ["HTTP/1.1"] * 8 + ["HTTP/1.0", "HTTP/2.0", "HTTP/9.9", "HTTP/1.1 extra", ""]
        )
    )
    body, header_length = draw(infer_body())
    headers = [("Host", "127.0.0.1")]
    if header_length is not None or draw(st.integers(0, 5)) == 0:
        value = header_length if header_length is not None else draw(st.integers(-3, 500))
        headers.append(("Inference-Header-Content-Length", str(value)))
        headers.append(("Content-Type", "application/octet-stream"))
    headers += [(draw(HEADER_NAME), draw(HEADER_VALUE)) for _ in range(draw(st.integers(0, 3)))]
    framing = draw(st.sampled_from(["length"] * 4 + ["chunked", "short", "twice", "none"]))
    if framing == "chunked":
        headers.append(("Transfer-Encoding", "chunked"))
        body = chunked(draw, body)
    elif framing == "short":  # the rest of the body reads as the next request
        headers.append(("Content-Length", str(draw(st.integers(0, len(body))))))
    elif framing == "twice":
        headers += [("Content-Length", str(len(body))), ("Content-Length", str(len(body) + 1))]
    elif framing == "length":
        headers.append(("Content-Length", str(len(body))))
    else:
        body = b""  # no framing: a request without a body
    head = f"{method} {target} {version}\r\n" + "".join(f"{n}: {v}\r\n" for n, v in headers)
    return head.encode() + b"\r\n" + body


# -- replies -------------------------------------------------------------------------------


# Last on every connection: answered, it ends the exchange (the server closes), so a
# run waits only where the fuzzed bytes left the server waiting for more.
LIVE_AND_CLOSE = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"


def exchange(port: int, data: bytes, timeout: float = 10.0) -> bytes:
    """Sends `data`; returns what the server sent until it closed, or went quiet for
    half a second after answering, or `timeout` passed."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(data + LIVE_AND_CLOSE)
        sock.settimeout(0.5)
        out = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                if out:
                    break  # answered, and nothing more is coming
                continue
            except ConnectionResetError:
                break
            if not chunk:
                break
            out += chunk
        return out


def parse_responses(out: bytes) -> list[tuple[int, dict[str, str], bytes]]:
    """Splits the bytes into complete HTTP/1.1 responses; fails on anything else."""
    replies = []
    rest = out
    while rest:
        head, sep, rest = rest.partition(b"\r\n\r\n")
        assert sep, f"a response head cut short: {head[:200]!r}"
        status_line, *lines = head.decode("latin-1").split("\r\n")
        version, code, *_ = status_line.split(" ") + [""]
        assert version == "HTTP/1.1" and code.isdigit() and len(code) == 3, status_line
        headers: dict[str, str] = {}
        for line in lines:
            name, colon, value = line.partition(":")
            assert colon and name and name == name.strip(), f"bad header line {line!r}"
            assert name.lower() not in headers or name.lower() != "content-length", (
                "two Content-Lengths"
            )
            headers[name.lower()] = value.strip()
        if code == "100":
            continue  # an interim answer to Expect: 100-continue, no body
        assert "content-length" in headers, f"no Content-Length in {status_line}"
        length = int(headers["content-length"])
        assert len(rest) >= length, f"body cut short: {len(rest)} of {length} bytes"
        replies.append((int(code), headers, rest[:length]))
        rest = rest[length:]
    return replies


def check_reply(status: int, headers: dict[str, str], body: bytes) -> None:
    assert status in (200, 400, 404, 405, 411, 413, 415, 417, 431, 500, 501, 503, 505), (
        status,
        body[:300],
    )
    if status >= 400 and body:
        # Triton's body, JSON even where Triton labels it text/plain (unknown routes).
        assert headers.get("content-type", "").startswith(("application/json", "text/plain")), (
            headers
        )
        error = json.loads(body)
        assert isinstance(error.get("error"), str) and error["error"], body
    if status == 200 and "inference-header-content-length" in headers:
        size = int(headers["inference-header-content-length"])
        assert "outputs" in json.loads(body[:size])


FUZZ = settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@FUZZ
@given(st.lists(http_request(), min_size=1, max_size=3))
def test_every_reply_is_a_well_formed_response_and_the_server_stays_up(server, requests):
    out = exchange(server.http_port, b"".join(requests))
    replies = parse_responses(out)
    assert replies, "a complete request got no answer"
    for status, headers, body in replies:
        check_reply(status, headers, body)
    live = parse_responses(exchange(server.http_port, b""))
    assert [status for status, _, _ in live] == [200]
