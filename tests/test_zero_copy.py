"""Answers' tensor bytes sent from the response block (csrc/ipc/block_views.h), told
by the I/O loop's counters in /v2/naiad/lanes (`out_tensor_bytes_in_place`, `..._copied`):
tritonclient's binary answers with large tensors go out from the block, small ones are
copied, several outputs at once each go their way; the block returns to the arena once
sent, also to a client that reads slowly or goes away before reading. And requests'
tensor bytes received from the socket straight into the arena once their header is in
(csrc/http1/http_io.h, `in_tensor_bytes_in_place`, `..._copied`)."""

from __future__ import annotations

import json
import socket

import numpy as np
import pytest
import tritonclient.http as httpclient
from zero_copy_support import (
    LARGE,
    SMALL,
    arena,
    counts,
    echo_counted,
    in_counts,
    settled,
    start_server,
)

TIMEOUT = 10


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    naiad = start_server(tmp_path_factory)
    yield naiad
    naiad.stop()


def _infer(client, in0: np.ndarray, in1: np.ndarray, binary=(True, True)):
    inputs = [
        httpclient.InferInput("IN0", [1, in0.size], "FP32"),
        httpclient.InferInput("IN1", [1, in1.size], "FP32"),
    ]
    inputs[0].set_data_from_numpy(in0.reshape(1, -1), binary_data=True)
    inputs[1].set_data_from_numpy(in1.reshape(1, -1), binary_data=True)
    outputs = [
        httpclient.InferRequestedOutput("OUT0", binary_data=binary[0]),
        httpclient.InferRequestedOutput("OUT1", binary_data=binary[1]),
    ]
    result = client.infer("identity_pair", inputs, outputs=outputs)
    return result.as_numpy("OUT0").reshape(-1), result.as_numpy("OUT1").reshape(-1)


@pytest.mark.parametrize(
    "in0_size, in1_size",
    [(LARGE, LARGE), (LARGE, SMALL), (SMALL, SMALL), (SMALL, 2048)],
    ids=["two-large", "large-and-small", "two-small", "small-and-page"],
)
def test_binary_outputs_of_a_page_or_more_go_from_the_block_smaller_ones_are_copied(
    server, in0_size, in1_size
):
    rng = np.random.default_rng(in0_size + in1_size)
    in0 = rng.standard_normal(in0_size).astype(np.float32)
    in1 = rng.standard_normal(in1_size).astype(np.float32)
    baseline = arena(server)["blocks_in_use"]
    with httpclient.InferenceServerClient(server.url.split("://")[1]) as client:
        grown = echo_counted(server, lambda a, b: _infer(client, a, b), in0, in1)
    # Both outputs of an answer go the same way: from the block when they hold a page.
    answer = 4 * (in0_size + in1_size)
    expected = (3 * answer, 0) if answer >= 4096 else (0, 3 * answer)
    assert grown == expected
    settled(server, baseline)


def test_json_outputs_and_a_binary_output_beside_one_count_only_the_binary_bytes(server):
    in0 = np.arange(LARGE, dtype=np.float32)
    in1 = np.arange(8, dtype=np.float32)
    with httpclient.InferenceServerClient(server.url.split("://")[1]) as client:
        before = counts(server)
        out0, out1 = _infer(client, in0, in1, binary=(True, False))
        after = counts(server)
    np.testing.assert_array_equal(out0, in0)
    np.testing.assert_array_equal(out1, in1)
    # An answer with JSON outputs is written whole: its binary output is copied.
    assert (after[0] - before[0], after[1] - before[1]) == (0, 4 * LARGE)


def _raw_request(in0: np.ndarray, in1: np.ndarray) -> bytes:
    header = {
        "inputs": [
            {
                "name": "IN0",
                "datatype": "FP32",
                "shape": [1, in0.size],
                "parameters": {"binary_data_size": in0.nbytes},
            },
            {
                "name": "IN1",
                "datatype": "FP32",
                "shape": [1, in1.size],
                "parameters": {"binary_data_size": in1.nbytes},
            },
        ],
        "outputs": [
            {"name": "OUT0", "parameters": {"binary_data": True}},
            {"name": "OUT1", "parameters": {"binary_data": True}},
        ],
    }
    head = json.dumps(header, separators=(",", ":")).encode()
    body = head + in0.tobytes() + in1.tobytes()
    return (
        b"POST /v2/models/identity_pair/infer HTTP/1.1\r\nHost: x\r\n"
        b"Content-Type: application/octet-stream\r\n"
        + f"Inference-Header-Content-Length: {len(head)}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        + body
    )


class _Reader:
    """Answers read off a socket one at a time, `chunk` bytes per recv at most."""

    def __init__(self, sock: socket.socket, chunk: int):
        self.sock, self.chunk, self.data = sock, chunk, b""

    def _more(self) -> None:
        got = self.sock.recv(self.chunk)
        assert got, "the server closed the connection mid-answer"
        self.data += got

    def answer(self) -> tuple[bytes, bytes]:
        """(head, body) of the next answer."""
        while b"\r\n\r\n" not in self.data:
            self._more()
        head, rest = self.data.split(b"\r\n\r\n", 1)
        length = _header(head, b"content-length")
        while len(rest) < length:
            self._more()
            rest = self.data.split(b"\r\n\r\n", 1)[1]
        self.data = rest[length:]
        return head, rest[:length]


def _header(head: bytes, name: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name:
            return int(value)
    raise AssertionError(f"no {name!r} in {head!r}")


def test_pipelined_answers_to_a_slow_reader_arrive_whole_and_in_order(server):
    rng = np.random.default_rng(3)
    pairs = [
        (rng.standard_normal(LARGE).astype(np.float32), rng.standard_normal(n).astype(np.float32))
        for n in (SMALL, LARGE, 1024)
    ]
    baseline = arena(server)["blocks_in_use"]
    before = counts(server)
    with socket.create_connection((server.host, server.http_port), timeout=TIMEOUT) as sock:
        # A receive buffer far smaller than the answers keeps the server's writes partial;
        # one of a few KiB would make loopback TCP crawl too (a minute for these 2.4 MB).
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
        sock.sendall(b"".join(_raw_request(a, b) for a, b in pairs))
        reader = _Reader(sock, 8192)  # a slow reader: small reads
        for in0, in1 in pairs:
            head, body = reader.answer()
            json_size = _header(head, b"inference-header-content-length")
            assert body[json_size:] == in0.tobytes() + in1.tobytes()
    after = counts(server)
    assert after[0] - before[0] == sum(a.nbytes + b.nbytes for a, b in pairs)
    settled(server, baseline)


def test_a_client_gone_before_reading_its_large_answer_gives_the_block_back(server):
    """An answer larger than the kernel's socket buffers (16 MB) to a client that reads
    one byte and goes: the block its views hold returns to the arena with the connection."""
    baseline = arena(server)["blocks_in_use"]
    in0 = np.ones(4 << 20, dtype=np.float32)
    in1 = np.ones(SMALL, dtype=np.float32)
    for _ in range(2):
        with socket.create_connection((server.host, server.http_port), timeout=TIMEOUT) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            before = counts(server)[0]
            sock.sendall(_raw_request(in0, in1))
            assert sock.recv(1)  # its answer has begun: written from the block
            assert counts(server)[0] == before + in0.nbytes + in1.nbytes
            assert arena(server)["blocks_in_use"] > baseline  # held while unsent
    settled(server, baseline)
    # The server still answers whole.
    with httpclient.InferenceServerClient(server.url.split("://")[1]) as client:
        out0, _ = _infer(client, in0, in1)
    np.testing.assert_array_equal(out0, in0)


def test_a_large_binary_request_is_received_mostly_in_place(server):
    """tritonclient's 602 KB tensor: the bytes read with the request's head (one read of
    at most 64 KiB) are copied into the arena, the rest read from the socket there."""
    rng = np.random.default_rng(5)
    in0 = rng.standard_normal(LARGE).astype(np.float32)
    in1 = rng.standard_normal(SMALL).astype(np.float32)
    with httpclient.InferenceServerClient(server.url.split("://")[1]) as client:
        before = in_counts(server)
        out0, out1 = _infer(client, in0, in1)
        after = in_counts(server)
    np.testing.assert_array_equal(out0, in0)
    np.testing.assert_array_equal(out1, in1)
    in_place, copied = after[0] - before[0], after[1] - before[1]
    assert in_place + copied == in0.nbytes + in1.nbytes
    assert copied <= 64 * 1024 < in_place


def test_pipelined_large_requests_are_received_in_place_and_answered_in_order(server):
    """Requests sent back to back in one write: each large one received in place, the
    bytes after its end (the next request's start) read and taken as usual."""
    rng = np.random.default_rng(7)
    pairs = [
        (rng.standard_normal(LARGE).astype(np.float32), rng.standard_normal(n).astype(np.float32))
        for n in (SMALL, LARGE)
    ] + [(np.arange(SMALL, dtype=np.float32), np.arange(SMALL, dtype=np.float32))]
    baseline = arena(server)["blocks_in_use"]
    before = in_counts(server)
    with socket.create_connection((server.host, server.http_port), timeout=TIMEOUT) as sock:
        sock.sendall(b"".join(_raw_request(a, b) for a, b in pairs))
        reader = _Reader(sock, 1 << 20)
        for in0, in1 in pairs:
            head, body = reader.answer()
            assert head.startswith(b"HTTP/1.1 200 OK"), head
            json_size = _header(head, b"inference-header-content-length")
            assert body[json_size:] == in0.tobytes() + in1.tobytes()
    after = in_counts(server)
    in_place, copied = after[0] - before[0], after[1] - before[1]
    assert in_place + copied == sum(a.nbytes + b.nbytes for a, b in pairs)
    assert in_place > 3 * LARGE * 4 // 2  # most of the three large tensors
    settled(server, baseline)
