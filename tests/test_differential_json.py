"""Differential test for JSON tensors: the C++ lane (kserve_json.h) against the general
Python path, on generated KServe v2 JSON requests.

The same bytes go to a server with the lane and to one started with `--fast-lane=false`
(conftest.py `paired_servers`). Requests carry JSON `data` of every datatype (flat and
nested, BYTES as strings with escapes), sometimes beside a binary input, and ask for
outputs as JSON, as binary or both; about half are damaged (wrong counts, values out of
range or of the wrong kind, FP16 data, unknown names, bad shapes). Each pair of answers
must agree: the same status, the same content type, and bodies that parse to the same
JSON (the lane writes numbers in shortest round-trip form, whose spelling may differ from
the general path's) followed by the same binary bytes. The echo model (echo_types)
returns what the worker received, so equal answers mean equal requests queued.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from test_fast_lane import RawConnection, split

CASES = 200
MODEL = "echo_types"

# datatype -> (config suffix, numpy dtype or None, value maker)
TYPES = {
    "BOOL": ("BOOL", np.bool_),
    "UINT8": ("UINT8", np.uint8),
    "UINT16": ("UINT16", np.uint16),
    "UINT32": ("UINT32", np.uint32),
    "UINT64": ("UINT64", np.uint64),
    "INT8": ("INT8", np.int8),
    "INT16": ("INT16", np.int16),
    "INT32": ("INT32", np.int32),
    "INT64": ("INT64", np.int64),
    "FP16": ("FP16", np.float16),
    "FP32": ("FP32", np.float32),
    "FP64": ("FP64", np.float64),
    "BYTES": ("STRING", None),
}
STRINGS = ["", "a", "naïve", 'q"uo\\te', "tab\there", "line\nfeed", "😀", "\u0001", "/"]


@pytest.fixture(scope="module")
def servers(paired_servers):
    connections = [RawConnection(server.host, server.http_port) for server in paired_servers]
    yield connections
    for connection in connections:
        connection.close()


def json_request(path: str, text: bytes) -> bytes:
    lines = [
        f"POST {path} HTTP/1.1",
        "Host: 127.0.0.1",
        "Content-Type: application/json",
        f"Content-Length: {len(text)}",
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + text


def mixed_request(path: str, header: dict, binary: bytes) -> bytes:
    text = json.dumps(header, separators=(",", ":")).encode()
    lines = [
        f"POST {path} HTTP/1.1",
        "Host: 127.0.0.1",
        f"Inference-Header-Content-Length: {len(text)}",
        f"Content-Length: {len(text) + len(binary)}",
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + text + binary


def _values(rng: random.Random, datatype: str, count: int) -> list:
    if datatype == "BOOL":
        return [rng.random() < 0.5 for _ in range(count)]
    if datatype == "BYTES":
        return [rng.choice(STRINGS) for _ in range(count)]
    dtype = np.dtype(TYPES[datatype][1])
    if dtype.kind == "f":
        values = []
        for _ in range(count):
            pick = rng.random()
            if pick < 0.2:
                values.append(rng.randint(-1000, 1000))  # integers in a float tensor
            elif pick < 0.3:
                values.append(rng.choice([0.1, -0.0, 1e-30, 3.4e38, 123456789.0]))
            else:
                values.append(rng.uniform(-1e6, 1e6) * 10 ** rng.randint(-8, 3))
        return values
    info = np.iinfo(dtype)
    return [rng.randint(int(info.min), int(min(info.max, 2**62))) for _ in range(count)]


def _nest(values: list, shape: list[int], rng: random.Random):
    """Flat, or nested as the shape says."""
    if rng.random() < 0.5 or len(shape) < 2:
        return values
    rows, width = shape[0], shape[1]
    return [values[r * width : (r + 1) * width] for r in range(rows)]


def _damage(rng: random.Random, item: dict) -> None:
    kind = rng.choice(
        [
            "count",
            "float_in_int",
            "range",
            "bool",
            "null",
            "string",
            "fp16",
            "nest",
            "shape",
            "name",
            "datatype",
            "both",
            "neither",
        ]
    )
    data = item.get("data")
    flat = data if not data or not isinstance(data[0], list) else sum(data, [])
    if kind == "count":
        item["data"] = flat + flat[:1] if flat else [1]
    elif kind == "float_in_int":
        item["data"] = [*flat[:-1], 1.5] if flat else [1.5]
    elif kind == "range":
        item["data"] = [*flat[:-1], rng.choice([300, -1, 2**40, 2**64, 1e40])] if flat else [-1]
    elif kind == "bool":
        item["data"] = [*flat[:-1], True] if flat else [True]
    elif kind == "null":
        item["data"] = [*flat[:-1], None] if flat else [None]
    elif kind == "string":
        item["data"] = [*flat[:-1], "7"] if flat else ["7"]
    elif kind == "fp16":
        item["datatype"] = "FP16"
    elif kind == "nest":
        item["data"] = [*flat[:1], [flat[1:]]] if flat else [[]]
    elif kind == "shape":
        item["shape"] = [*item["shape"][:-1], item["shape"][-1] + 1]
    elif kind == "name":
        item["name"] = "IN_NOPE"
    elif kind == "datatype":
        item["datatype"] = rng.choice(["INT8", "FP64", "BYTES", "BOOL", "bogus"])
    elif kind == "both":
        item["parameters"] = {"binary_data_size": 0}
    else:
        item.pop("data", None)


def generate(seed: int) -> list[bytes]:
    rng = random.Random(seed)
    cases = []
    for index in range(CASES):
        batch = rng.randint(1, 3)
        chosen = rng.sample(sorted(TYPES), rng.randint(1, 3))
        inputs = []
        binary = b""
        for datatype in chosen:
            width = rng.randint(0 if rng.random() < 0.1 else 1, 4)
            shape = [batch, width]
            count = batch * width
            values = _values(rng, datatype, count)
            item = {"name": f"IN_{TYPES[datatype][0]}", "datatype": datatype, "shape": shape}
            if datatype not in ("FP16", "BYTES") and rng.random() < 0.15:
                # A binary input beside the JSON ones.
                data = np.array(values, dtype=TYPES[datatype][1]).tobytes()
                item["parameters"] = {"binary_data_size": len(data)}
                binary += data
            else:
                item["data"] = _nest(values, shape, rng)
            keys = list(item.items())
            rng.shuffle(keys)  # data before datatype and shape, at times
            inputs.append(dict(keys))
        if index % 2 and any("data" in item for item in inputs):
            _damage(rng, rng.choice([item for item in inputs if "data" in item]))
        doc: dict = {}
        if rng.random() < 0.4:
            doc["id"] = rng.choice(["", f"r{index}", "with space"])
        doc["inputs"] = inputs
        pick = rng.random()
        produced = ["ECHO", *(f"OUT_{TYPES[d][0]}" for d in chosen)]
        if pick < 0.35:
            names = rng.sample(produced, rng.randint(1, len(produced)))
            doc["outputs"] = [
                {"name": name}
                if rng.random() < 0.6
                else {"name": name, "parameters": {"binary_data": rng.random() < 0.5}}
                for name in names
            ]
        elif pick < 0.5:
            doc["parameters"] = {"binary_data_output": rng.random() < 0.5}
        version = rng.choice(["", "/versions/1"])
        path = f"/v2/models/{MODEL}{version}/infer"
        if binary:
            cases.append(mixed_request(path, doc, binary))
        else:
            cases.append(json_request(path, json.dumps(doc).encode()))
    return cases


def _content(response: bytes):
    """(status, content type, parsed JSON, binary tail) of a response."""
    status, headers, body = split(response)
    header_length = headers.get(b"inference-header-content-length")
    size = int(header_length) if header_length is not None else len(body)
    return status, headers.get(b"content-type"), json.loads(body[:size]), body[size:]


def lane_counts(connection: RawConnection) -> dict:
    request = b"GET /v2/naiad/lanes HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    return json.loads(split(connection.exchange(request))[2])


@pytest.mark.parametrize("seed", [3, 4])
def test_lane_and_general_path_answer_json_requests_alike(servers, seed):
    lane, general = servers
    before = lane_counts(lane)
    statuses: dict[bytes, int] = {}
    for request in generate(seed):
        from_lane = _content(lane.exchange(request))
        from_general = _content(general.exchange(request))
        assert from_lane == from_general, (request[:800], from_lane, from_general)
        statuses[from_lane[0]] = statuses.get(from_lane[0], 0) + 1
    after = lane_counts(lane)
    assert statuses.get(b"HTTP/1.1 200 OK", 0) > CASES // 3
    assert statuses.get(b"HTTP/1.1 400 Bad Request", 0) > CASES // 10
    # The lane took the clean JSON requests (they are most of the valid ones).
    assert after["lane_requests"] - before["lane_requests"] > CASES // 3
    assert lane_counts(general)["lane_requests"] == 0


def test_json_outputs_of_every_datatype_through_the_lane(servers):
    lane, general = servers
    before = lane_counts(lane)
    for datatype, (suffix, dtype) in TYPES.items():
        if datatype == "FP16":
            continue
        values = _values(random.Random(5), datatype, 6)
        doc = {
            "inputs": [
                {"name": f"IN_{suffix}", "datatype": datatype, "shape": [2, 3], "data": values}
            ],
            "outputs": [{"name": f"OUT_{suffix}"}],
        }
        request = json_request(f"/v2/models/{MODEL}/infer", json.dumps(doc).encode())
        status, content_type, body, tail = _content(lane.exchange(request))
        assert status == b"HTTP/1.1 200 OK" and content_type == b"application/json" and not tail
        (output,) = body["outputs"]
        assert output["datatype"] == datatype and output["shape"] == [2, 3]
        if dtype is not None and np.dtype(dtype).kind == "f":
            expected = np.array(values, dtype=dtype)
            np.testing.assert_array_equal(np.array(output["data"], dtype=dtype), expected)
        else:
            assert output["data"] == values
        assert _content(general.exchange(request)) == (status, content_type, body, tail)
    assert lane_counts(lane)["lane_requests"] - before["lane_requests"] == len(TYPES) - 1
