"""Differential: KServe JSON `data` that Triton 2.51 reads in its own way (integers cut to
the type's size, nested arrays in any mix, empty tensors whose data is not read) or
refuses (FP16/BF16, wrong counts, values of the wrong kind, data that is no array),
sent as the same bytes to Naiad and to Triton. Every answer must be Triton's: the same
status and the same JSON. Naiad's C++ lane answers all of them itself: no request reaches
the Python general path (its counter stays put). Skips, saying why, when Triton is not
installed."""

from __future__ import annotations

import http.client
import json
from pathlib import Path

import numpy as np
import pytest
from checksum_support import IDENTITY
from triton_peer import naiad_and_triton_http, needs_triton

pytestmark = [pytest.mark.timeout(600), needs_triton]

TYPES = {
    "BOOL": "TYPE_BOOL",
    "UINT8": "TYPE_UINT8",
    "UINT64": "TYPE_UINT64",
    "INT8": "TYPE_INT8",
    "INT32": "TYPE_INT32",
    "INT64": "TYPE_INT64",
    "FP16": "TYPE_FP16",
    "FP32": "TYPE_FP32",
    "BYTES": "TYPE_STRING",
}


def _repository(root: Path) -> Path:
    repo = root / "models"
    for wire, config_type in TYPES.items():
        folder = repo / f"echo_{wire}"
        (folder / "1").mkdir(parents=True)
        (folder / "1" / "model.py").write_text(IDENTITY)
        (folder / "config.pbtxt").write_text(
            f'name: "echo_{wire}"\nbackend: "python"\nmax_batch_size: 0\n'
            f'input [ {{ name: "INPUT0" data_type: {config_type} dims: [ -1 ] }} ]\n'
            f'output [ {{ name: "OUTPUT0" data_type: {config_type} dims: [ -1 ] }} ]\n'
            "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
        )
    return repo


def _input(datatype: str, shape: list, data: str, name: str = "INPUT0") -> str:
    return f'{{"name":"{name}","datatype":"{datatype}","shape":{json.dumps(shape)},"data":{data}}}'


def _body(*inputs: str, rest: str = "") -> str:
    return '{"inputs":[' + ",".join(inputs) + "]" + rest + "}"


# (model's datatype, body): each as its JSON text, so numbers keep their spelling.
CASES = [
    # Refused while reading: FP16/BF16, unknown datatypes, data that is no array.
    ("FP16", _body(_input("FP16", [2], "[1,2]"))),
    ("FP16", _body(_input("FP16", [3], "[1,2]"))),
    ("FP16", _body(_input("FP16", [1], "5"))),
    ("INT32", _body(_input("FOO", [1], "[1]"))),
    ("INT32", _body(_input("FOO", [1], "5"))),
    ("INT32", _body(_input("INT32", [1], '{"a":1}'))),
    ("BYTES", _body(_input("BYTES", [1], '"a"'))),
    # Counts, and the first element of the wrong kind before a wrong count.
    ("INT32", _body(_input("INT32", [3], "[1,2]"))),
    ("INT32", _body(_input("INT32", [2, 2], "[[1,2],[3]]"))),
    ("INT32", _body(_input("INT32", [2], "[]"))),
    ("INT32", _body(_input("INT32", [3], '[1,"x"]'))),
    ("INT32", _body(_input("INT32", [1], '[1,2,"x"]'))),
    ("BOOL", _body(_input("BOOL", [1], "[true,false,1]"))),
    ("INT32", _body(_input("INT32", [2], "[1,2.5]"))),
    ("INT32", _body(_input("INT32", [2], "[1,2.0]"))),
    ("INT32", _body(_input("INT32", [1], "[1e2]"))),
    ("INT32", _body(_input("INT32", [2], "[1,true]"))),
    ("INT32", _body(_input("INT32", [4], '[[1,2],[3,"a"]]'))),
    ("INT32", _body(_input("INT32", [1], "[9223372036854775808]"))),
    ("INT64", _body(_input("INT64", [1], "[9223372036854775808]"))),
    ("INT64", _body(_input("INT64", [1], "[-9223372036854775809]"))),
    ("UINT8", _body(_input("UINT8", [2], "[-1,1]"))),
    ("UINT8", _body(_input("UINT8", [1], "[-1.5]"))),
    ("UINT64", _body(_input("UINT64", [1], "[1.0]"))),
    ("UINT64", _body(_input("UINT64", [1], "[18446744073709551616]"))),
    ("FP32", _body(_input("FP32", [2], "[true,1]"))),
    ("FP32", _body(_input("FP32", [2], '["1",1]'))),
    ("FP32", _body(_input("FP32", [2], "[null,1]"))),
    ("BOOL", _body(_input("BOOL", [2], "[true,1]"))),
    ("BOOL", _body(_input("BOOL", [1], '["true"]'))),
    ("BYTES", _body(_input("BYTES", [2], '["a",1]'))),
    ("BYTES", _body(_input("BYTES", [3], '["a",1]'))),
    # The first input refused wins, whatever follows it in the request.
    ("FP32", _body(_input("FP16", [1], "[1]", "A"), _input("FP32", [3], "[1]", "B"))),
    ("INT32", _body(_input("INT32", [1], "[1]"), _input("INT32", [2], "[1]", "B"))),
    (
        "INT32",
        _body(
            _input("FP16", [1], "[1]"),
            rest=',"outputs":[{"name":"OUTPUT0","parameters":{"binary_data":true}}]',
        ),
    ),
    # Taken as Triton takes them: cut to the type's size, any nesting, empty tensors.
    ("UINT8", _body(_input("UINT8", [2], "[300,1]"))),
    ("INT8", _body(_input("INT8", [2], "[-200,200]"))),
    ("INT32", _body(_input("INT32", [1], "[2147483648]"))),
    ("UINT64", _body(_input("UINT64", [1], "[9223372036854775808]"))),
    ("UINT64", _body(_input("UINT64", [1], "[18446744073709551615]"))),
    ("INT64", _body(_input("INT64", [1], "[-9223372036854775808]"))),
    ("UINT8", _body(_input("UINT8", [1], "[-0]"))),
    ("FP32", _body(_input("FP32", [1], "[18446744073709551616]"))),
    ("FP32", _body(_input("FP32", [1], "[16777217]"))),
    ("INT32", _body(_input("INT32", [2], "[[1],2]"))),
    ("INT32", _body(_input("INT32", [2], "[1,[2]]"))),
    ("INT32", _body(_input("INT32", [3], "[[[1]],[2,[3]]]"))),
    ("INT32", _body(_input("INT32", [1], "[[],[1]]"))),
    ("BYTES", _body(_input("BYTES", [2], '["a",["b"]]'))),
    ("INT32", _body(_input("INT32", [0], "[]"))),
    ("INT32", _body(_input("INT32", [0], '["x"]'))),
    ("INT32", _body(_input("INT32", [0], "5"))),
    # The validator's, after reading: BYTES counts, a datatype the model does not have.
    ("BYTES", _body(_input("BYTES", [3], '["a","b"]'))),
    ("INT32", _body(_input("INT64", [1], "[1]"))),
]


def _post(port: int, model: str, body: str) -> tuple[int, object]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request(
            "POST",
            f"/v2/models/{model}/infer",
            body=body.encode(),
            headers={"Content-Type": "application/json"},
        )
        response = connection.getresponse()
        return response.status, _as_float32(json.loads(response.read()))
    finally:
        connection.close()


def _as_float32(answer: dict) -> dict:
    """FP32 output values as float32: Triton writes each as the shortest text of the
    double it widens to, Naiad as the shortest text of the float32 (the same value)."""
    for output in answer.get("outputs", ()):
        if output["datatype"] == "FP32":
            output["data"] = np.array(output["data"], dtype=np.float32).tolist()
    return answer


def _lanes(port: int) -> dict:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request("GET", "/v2/naiad/lanes")
        return json.loads(connection.getresponse().read())
    finally:
        connection.close()


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    root = tmp_path_factory.mktemp("json_data")
    with naiad_and_triton_http(_repository(root), root, [f"echo_{w}" for w in TYPES]) as ports:
        yield ports


def test_json_data_is_answered_as_triton_answers_it_and_by_the_lane(servers):
    naiad, triton = servers
    before = _lanes(naiad)
    refused = 0
    for datatype, body in CASES:
        model = f"echo_{datatype}"
        ours, theirs = _post(naiad, model, body), _post(triton, model, body)
        assert ours == theirs, (body, ours, theirs)
        refused += ours[0] != 200
    after = _lanes(naiad)
    assert after["general_requests"] == before["general_requests"], (before, after)
    assert after["lane_refused"] - before["lane_refused"] == refused
    assert after["lane_requests"] - before["lane_requests"] == len(CASES) - refused
