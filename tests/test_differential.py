"""Differential test: the infer fast lane and the general Python path, one request at a time.

Two servers serve the same repository (conftest.py `paired_servers`, with the models of
tests/differential_models): one as usual, one with `--fast-lane=false`, so every request takes the general path (httptools, the Python
parser, the same C++ validator through _core.pyx, the Python block encoder and response
encoder). Generated requests, valid and invalid (wrong datatypes, shapes and sizes,
missing, unknown and repeated inputs, unknown outputs, batches too big or mixed,
malformed BYTES, ids and parameters), go to both as the same bytes; each pair of
responses must be identical, byte for byte. The models echo what the worker received
(each input's name, datatype, shape and bytes, the requested outputs, the parameters),
so equal responses also mean equal requests queued for the worker.
"""

from __future__ import annotations

import json
import random
import struct

import numpy as np
import pytest
from test_fast_lane import RawConnection, infer_request, split

CASES = 160  # per model; a few seconds against both servers


@pytest.fixture(scope="module")
def servers(paired_servers):
    connections = [RawConnection(server.host, server.http_port) for server in paired_servers]
    yield connections
    for connection in connections:
        connection.close()


def strings(items: list[bytes]) -> bytes:
    return b"".join(struct.pack("<I", len(item)) + item for item in items)


class Tensor:
    """One binary input as the request will say it: name, datatype, shape, bytes."""

    def __init__(self, name: str, datatype: str, shape: list[int], data: bytes):
        self.name = name
        self.datatype = datatype
        self.shape = shape
        self.data = data
        self.size = len(data)  # the binary_data_size the header claims

    def json(self) -> dict:
        return {
            "name": self.name,
            "datatype": self.datatype,
            "shape": self.shape,
            "parameters": {"binary_data_size": self.size},
        }


def _valid_echo_all(rng: random.Random) -> tuple[list[Tensor], list[str]]:
    batch = rng.randint(1, 4)
    width = rng.randint(1, 5)
    a = np.array([rng.uniform(-9, 9) for _ in range(batch * width)], np.float32)
    b = np.array([rng.randint(-99, 99) for _ in range(batch * 2)], np.int32)
    tensors = [
        Tensor("A", "FP32", [batch, width], a.tobytes()),
        Tensor("B", "INT32", [batch, 2], b.tobytes()),
    ]
    if rng.random() < 0.5:
        count = rng.randint(1, 3)
        items = [bytes(rng.randrange(256) for _ in range(rng.randint(0, 6))) for _ in range(count)]
        items *= batch
        tensors.append(Tensor("S", "BYTES", [batch, count], strings(items)))
    rng.shuffle(tensors)
    return tensors, ["ECHO", "FIRST"]


def _valid_echo_nobatch(rng: random.Random) -> tuple[list[Tensor], list[str]]:
    length = rng.randint(0, 6)
    tensors = [
        Tensor("H", "FP16", [2, 2], np.arange(4, dtype=np.float16).tobytes()),
        Tensor("M", "BOOL", [length], bytes(rng.randint(0, 1) for _ in range(length))),
    ]
    if rng.random() < 0.5:
        tensors.append(Tensor("OPT", "INT64", [1], struct.pack("<q", rng.randint(-5, 5))))
    rng.shuffle(tensors)
    return tensors, ["ECHO", "FIRST"]


def _damage(rng: random.Random, tensors: list[Tensor], outputs: list[str], batching: bool):
    """One way to make the request invalid; returns (tensors, outputs)."""
    kind = rng.choice(
        [
            "datatype",
            "shape",
            "size",
            "missing",
            "unknown_input",
            "duplicate",
            "unknown_output",
            "rank",
            "bytes",
            "body_short",
            "body_long",
        ]
        + (["batch_big", "batch_mixed", "batch_zero", "no_shape"] if batching else [])
    )
    victim = rng.choice(tensors)
    if kind == "datatype":
        victim.datatype = rng.choice(["INT8", "FP64", "UINT32", "BYTES", "FP32", "BF16", "bogus"])
    elif kind == "shape":
        victim.shape = [*victim.shape[:-1], victim.shape[-1] + 1] if victim.shape else [3]
    elif kind == "size":
        victim.data = victim.data + b"\0" * rng.choice([1, 2, 4, 8])
        victim.size = len(victim.data)
    elif kind == "missing":
        tensors = [t for t in tensors if t is not victim]
    elif kind == "unknown_input":
        tensors = [*tensors, Tensor("NOPE", "INT32", [1, 1], b"\0" * 4)]
    elif kind == "duplicate":
        tensors = [*tensors, Tensor(victim.name, victim.datatype, victim.shape, victim.data)]
    elif kind == "unknown_output":
        outputs = [*outputs, "NOT_AN_OUTPUT"]
    elif kind == "rank":
        victim.shape = [*victim.shape, 1]
    elif kind == "bytes":
        # A BYTES tensor whose last length prefix is cut or runs past the data, or a
        # count that disagrees with the shape.
        cut = rng.choice([b"\1\0", b"\x09\0\0\0ab", b"\0\0\0\0"])
        victim.datatype = "BYTES"
        victim.data = victim.data + cut
        victim.size = len(victim.data)
    elif kind == "body_short":
        victim.size += rng.choice([1, 4, 64])
    elif kind == "body_long":
        victim.size = max(victim.size - rng.choice([1, 4]), 0)
    elif kind == "batch_big":
        for tensor in tensors:
            if tensor.shape:
                tensor.shape = [5, *tensor.shape[1:]]
    elif kind == "batch_mixed":
        victim.shape = [victim.shape[0] + 1, *victim.shape[1:]]
    elif kind == "batch_zero":
        for tensor in tensors:
            tensor.shape = [0, *tensor.shape[1:]]
    elif kind == "no_shape":
        victim.shape = []
    return tensors, outputs


def generate(model: str, seed: int) -> list[tuple[str, dict, bytes]]:
    """(path, header, binary) for `CASES` requests to `model`, about half invalid."""
    rng = random.Random(seed)
    batching = model == "echo_all"
    cases = []
    for index in range(CASES):
        tensors, outputs = (_valid_echo_all if batching else _valid_echo_nobatch)(rng)
        if index % 2:
            tensors, outputs = _damage(rng, tensors, outputs, batching)
        header: dict = {}
        if rng.random() < 0.6:
            header["id"] = rng.choice(["", f"r-{index}", "id with spaces", "naïve", 'q"uo\\te'])
        header["inputs"] = [t.json() for t in tensors]
        parameters = {}
        if rng.random() < 0.4:
            requested = rng.sample(outputs, rng.randint(1, len(outputs)))
            header["outputs"] = [
                {"name": name, "parameters": {"binary_data": True}} for name in requested
            ]
        else:
            parameters["binary_data_output"] = True
        if rng.random() < 0.3:
            parameters["priority"] = rng.choice([0, 1, 2])
        if rng.random() < 0.3:
            parameters["timeout"] = rng.choice([0, 5_000_000])
        if rng.random() < 0.25:
            parameters["custom"] = rng.choice(["x", 7, True, -2.5, 'a"b', None, {"n": 1}])
        if parameters:
            header["parameters"] = parameters
        binary = b"".join(t.data for t in tensors)
        version = rng.choice(["", "/versions/1"])
        cases.append((f"/v2/models/{model}{version}/infer", header, binary))
    return cases


def lane_counts(connection: RawConnection) -> dict:
    request = b"GET /v2/naiad/lanes HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    return json.loads(split(connection.exchange(request))[2])


@pytest.mark.parametrize("model,seed", [("echo_all", 1), ("echo_nobatch", 2)])
def test_lane_and_general_path_answer_generated_requests_alike(servers, model, seed):
    lane, general = servers
    before = lane_counts(lane)
    statuses: dict[bytes, int] = {}
    for path, header, binary in generate(model, seed):
        request = infer_request(path, header, binary)
        from_lane = lane.exchange(request)
        from_general = general.exchange(request)
        assert from_lane == from_general, (header, from_lane[:600], from_general[:600])
        status = split(from_lane)[0]
        statuses[status] = statuses.get(status, 0) + 1
    after = lane_counts(lane)
    # Both accepted and rejected requests were generated, and the lane queued the valid
    # ones (binary, scalar parameters) while the other server took none ...
    assert statuses.get(b"HTTP/1.1 200 OK", 0) > CASES // 3
    assert statuses.get(b"HTTP/1.1 400 Bad Request", 0) > CASES // 4
    assert after["lane_requests"] - before["lane_requests"] > CASES // 4
    # ... and answered invalid ones itself, with the validator's message, as the general
    # path did for the same bytes.
    assert after["lane_refused"] - before["lane_refused"] > CASES // 10
    assert lane_counts(general)["lane_requests"] == 0
