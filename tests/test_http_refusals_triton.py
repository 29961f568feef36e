"""Differential: infer requests Triton 2.51 refuses before it reads a tensor, sent as the
same bytes to Naiad and to Triton: an inference header that is no JSON document (each of
rapidjson's complaints, with its offset), a header size past the body, and infer URLs
naming a model or version it does not serve. Every answer must be Triton's: the same
status and the same JSON. Naiad's C++ lane answers each itself: none reaches the Python
general path (its counter stays put). Skips, saying why, when Triton is not installed."""

from __future__ import annotations

import pytest
import requests
from checksum_support import int32_echo_repository
from triton_peer import naiad_and_triton_http, naiad_lanes, needs_triton

pytestmark = [pytest.mark.timeout(600), needs_triton]

_GOOD = b'{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1],"data":[1]}]}'

# Headers that are no JSON document to Triton: 500 with rapidjson's words and offset.
MALFORMED = [
    b'{"inputs": [',
    b"{} x",
    b"   ",
    b"\x00",
    b'{"inputs": [1,]}',
    b'{"inputs" [1]}',
    b'{"inputs": [1] "x"}',
    b"{1:2}",
    b'{"a":"\x01"}',
    b'{"a":"abc',
    b'{"a":"x\x00y"}',
    b'{"a":"\\q"}',
    b'{"a":"\\',
    b'{"a":"\\u12G4"}',
    b'{"a":"\\ud800x"}',
    b'{"a":"\\ud800\\u0041"}',
    b'{"a":1.}',
    b'{"a":1e}',
    b'{"a":1E+}',
    b'{"a":-}',
    b'{"a":01}',
    b'{"a":1e309}',
    b'{"a":0e400}',
    b'{"a":[' + b"1" * 400 + b"]}",
    b'{"a":nul}',
    b'{"a":tru}',
    b'{"a":Infin}',
    b'{"a":Nax}',
    b'{"a":NaN.}',
    b' \xef\xbb\xbf{"a":1}',
    b'{"a":1} \xff',
    b"[1",
    b'{"a":[1 2]}',
    _GOOD + b" /",
    _GOOD[:-1] + b',"outputs":[{"name":"OUTPUT0","parameters":{"binary_data":tru}}]}',
]


def _post(port: int, path: str, body: bytes, headers: dict | None = None) -> tuple[int, object]:
    headers = {"Accept-Encoding": "identity", **(headers or {})}
    reply = requests.post(f"http://127.0.0.1:{port}{path}", data=body, headers=headers, timeout=60)
    return reply.status_code, reply.json()


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    root = tmp_path_factory.mktemp("http_refusals")
    with naiad_and_triton_http(int32_echo_repository(root), root, ["echo"]) as ports:
        yield ports


def _all_refused_by_the_lane(servers, requests) -> None:
    """Sends each (path, body, headers) to both: the same answer, a refusal, and every
    one answered by the lane."""
    naiad, triton = servers
    before = naiad_lanes(naiad)
    for path, body, headers in requests:
        ours = _post(naiad, path, body, headers)
        theirs = _post(triton, path, body, headers)
        assert ours == theirs, (path, body[:80], ours, theirs)
        assert ours[0] != 200, (path, body[:80], ours)
    after = naiad_lanes(naiad)
    assert after["general_requests"] == before["general_requests"], (before, after)
    assert after["lane_refused"] - before["lane_refused"] == len(requests), (before, after)


def test_headers_that_are_no_json_are_refused_by_the_lane_as_triton(servers):
    _all_refused_by_the_lane(servers, [("/v2/models/echo/infer", body, None) for body in MALFORMED])


def test_header_size_past_the_body_is_refused_by_the_lane_as_triton(servers):
    requests = [
        ("/v2/models/echo/infer", _GOOD, {"Inference-Header-Content-Length": str(size)})
        for size in (len(_GOOD) + 1, 1000, 5)  # 5: a header cut short is no JSON document
    ]
    _all_refused_by_the_lane(servers, requests)


def test_unknown_models_and_versions_are_refused_by_the_lane_as_triton(servers):
    paths = [
        "/v2/models/nosuch/infer",
        "/v2/models/nosuch/versions/2/infer",
        "/v2/models/echo/versions/2/infer",
        "/v2/models/echo/versions/0/infer",
        "/v2/models/ech%20o/infer",  # names are not decoded
    ]
    _all_refused_by_the_lane(
        servers, [(path, body, None) for path in paths for body in (_GOOD, b"{")]
    )
