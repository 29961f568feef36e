"""Differential: inference headers the C++ reader once handed to the Python general path,
sent as the same bytes to Naiad and to Triton 2.51: strings with JSON escapes and UTF-8
(ids, member names, input and output names, datatypes, parameter keys), inputs that set
both or neither of `data` and `binary_data_size` (or `data` beside a shm region),
custom parameters that are null, objects or arrays, shm regions nobody registered, and
an infer URL that spells a version otherwise ("01"). Every answer must be Triton's (the
status and the JSON), and the lane answers each itself: the general path's counter
stays put. Skips, saying why, when Triton is not installed."""

from __future__ import annotations

import json

import pytest
import requests
from checksum_support import int32_echo_repository
from triton_peer import naiad_and_triton_http, naiad_lanes, needs_triton

pytestmark = [pytest.mark.timeout(600), needs_triton]

_INPUT = b'{"name":"INPUT0","datatype":"INT32","shape":[2],"data":[1,2]}'

# Taken: the same answer as Triton's (200), read by the C++ reader.
TAKEN = [
    b'{"id":"a\\"b\\\\c\\/\\n\\t\\u00e9\\ud83d\\ude00","inputs":[' + _INPUT + b"]}",
    b'{"id":"caf\xc3\xa9 \xe2\x82\xac","inputs":[' + _INPUT + b"]}",
    b'{"i\\u0064":"x","\\u0069nputs":[{"na\\u006de":"INPUT\\u0030","datatype":"INT\\u00332",'
    b'"sh\\u0061pe":[2],"data":[1,2]}]}',
    b'{"inputs":[' + _INPUT + b'],"outputs":[{"name":"OUTPUT\\u0030"}]}',
    b'{"inputs":[' + _INPUT + b'],"parameters":{"k\\u00e9y":"v\\"al\\u00e9","n":1}}',
]

_BOTH = (
    b'{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1],"data":[1],'
    b'"parameters":{"binary_data_size":4}}]}'
)
_NEITHER = b'{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1]}]}'
_DATA_AND_SHM = (
    b'{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1],"data":[1],'
    b'"parameters":{"shared_memory_region":"r","shared_memory_byte_size":4}}]}'
)
_SHAPE_MISMATCH = b'{"name":"INPUT0","datatype":"INT32","shape":[1],"data":[1,2]}'

# Refused: (body, binary bytes after it) with Triton's status and message.
REFUSED = [
    (_BOTH, b"\x01\x00\x00\x00"),
    (_BOTH, b""),
    (_NEITHER, b""),
    (_NEITHER, b"\x01\x00\x00\x00"),
    (_DATA_AND_SHM, b""),
    (b'{"inputs":[{"data":[1],"parameters":{"binary_data_size":4}}]}', b"abcd"),
    # The first input refused, in order.
    (b'{"inputs":[' + _SHAPE_MISMATCH + b"," + _NEITHER[11:-2] + b"]}", b""),
    (b'{"inputs":[' + _NEITHER[11:-2] + b"," + _SHAPE_MISMATCH + b"]}", b""),
    # Custom parameters of no scalar type: before any input's refusal.
    (b'{"inputs":[' + _INPUT + b'],"parameters":{"x":null}}', b""),
    (b'{"inputs":[' + _INPUT + b'],"parameters":{"s":"a","x":{"y":1},"z":null}}', b""),
    (b'{"inputs":[' + _INPUT + b'],"parameters":{"x":[1]}}', b""),
    (b'{"inputs":[' + _SHAPE_MISMATCH + b'],"parameters":{"\\u00e9":null}}', b""),
    # A shm region nobody registered, for an input or an output.
    (
        b'{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1],"parameters":'
        b'{"shared_memory_region":"zz","shared_memory_byte_size":4}}]}',
        b"",
    ),
    (
        b'{"inputs":[' + _INPUT + b'],"outputs":[{"name":"OUTPUT0","parameters":'
        b'{"shared_memory_region":"z\\u007a","shared_memory_byte_size":8}}]}',
        b"",
    ),
]


def _post(
    port: int, header: bytes, binary: bytes, path: str = "/v2/models/echo/infer"
) -> tuple[int, object]:
    headers = {"Accept-Encoding": "identity"}
    if binary:
        headers["Inference-Header-Content-Length"] = str(len(header))
    reply = requests.post(
        f"http://127.0.0.1:{port}{path}",
        data=header + binary,
        headers=headers,
        timeout=60,
    )
    return reply.status_code, json.loads(reply.content)


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    root = tmp_path_factory.mktemp("http_json_forms")
    with naiad_and_triton_http(int32_echo_repository(root), root, ["echo"]) as ports:
        yield ports


def test_escaped_and_utf8_strings_are_read_by_the_lane_as_triton(servers):
    naiad, triton = servers
    before = naiad_lanes(naiad)
    for body in TAKEN:
        ours, theirs = _post(naiad, body, b""), _post(triton, body, b"")
        assert ours == theirs, (body, ours, theirs)
        assert ours[0] == 200, (body, ours)
    after = naiad_lanes(naiad)
    assert after["general_requests"] == before["general_requests"], (before, after)
    assert after["lane_requests"] - before["lane_requests"] == len(TAKEN), (before, after)


def test_input_forms_and_parameters_triton_refuses_are_refused_by_the_lane(servers):
    naiad, triton = servers
    before = naiad_lanes(naiad)
    for body, binary in REFUSED:
        ours, theirs = _post(naiad, body, binary), _post(triton, body, binary)
        assert ours == theirs, (body, ours, theirs)
        assert ours[0] != 200, (body, ours)
    after = naiad_lanes(naiad)
    assert after["general_requests"] == before["general_requests"], (before, after)
    assert after["lane_refused"] - before["lane_refused"] == len(REFUSED), (before, after)


def test_a_version_spelled_otherwise_is_served_by_the_lane_as_triton(servers):
    naiad, triton = servers
    body = b'{"inputs":[' + _INPUT + b"]}"
    before = naiad_lanes(naiad)
    for path in ("/v2/models/echo/versions/01/infer", "/v2/models/echo/versions/001/infer"):
        ours, theirs = _post(naiad, body, b"", path), _post(triton, body, b"", path)
        assert ours == theirs, (path, ours, theirs)
        assert ours[0] == 200 and ours[1]["model_version"] == "1", ours
    after = naiad_lanes(naiad)
    assert after["general_requests"] == before["general_requests"], (before, after)
    assert after["lane_requests"] - before["lane_requests"] == 2, (before, after)
