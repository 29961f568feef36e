"""The HTTP surface on Naiad alone (tests/grpc_clients/test_http_surface_triton.py compares it with
Triton where Triton is installed): every extension the server lists has its routes
answering; compressed answers, restricted inference and forwarded headers hold on
requests the C++ lane would take; classification where Triton 2.51 crashes."""

from __future__ import annotations

import contextlib
import gzip
import json
import time
import zlib

import pytest
from server_harness import NaiadServer
from surface_support import CLASSIFICATION_CASES, SURFACE_MODELS, exchange, infer_request, tensor

FP32 = {"inputs": [tensor("IN_FP32", "FP32", [1, 3], [1, 2, 3])], "outputs": [{"name": "OUT_FP32"}]}


def _get(url: str, path: str, headers: str = "") -> tuple:
    return exchange(url, f"GET {path} HTTP/1.1\r\nHost: x\r\n{headers}\r\n".encode())


def _post(url: str, path: str, doc: dict | None = None) -> tuple:
    body = json.dumps(doc).encode() if doc is not None else b""
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n"
    return exchange(url, head.encode() + body)


def _outputs(reply: tuple) -> dict:
    status, _, body = reply
    assert status == 200, body
    return {o["name"]: o for o in json.loads(body)["outputs"]}


# One probe per extension: what a client of that extension does first, and what it
# checks in the answer. An extension listed without a probe here fails the test.
def _probe_binary_tensor_data(url):
    doc = {**FP32, "outputs": [{"name": "OUT_FP32", "parameters": {"binary_data": True}}]}
    status, headers, body = _post(url, "/v2/models/classes/infer", doc)
    length = int(headers["inference-header-content-length"])
    assert status == 200 and body[length:] == b"\x00\x00\x80?\x00\x00\x00@\x00\x00@@"


def _probe_classification(url):
    doc = {**FP32, "outputs": [{"name": "OUT_FP32", "parameters": {"classification": 1}}]}
    out = _outputs(_post(url, "/v2/models/classes/infer", doc))["OUT_FP32"]
    assert out["datatype"] == "BYTES" and out["data"] == ["3.000000:2"]


def _probe_model_configuration(url):
    status, _, body = _get(url, "/v2/models/classes/config")
    assert status == 200 and json.loads(body)["max_batch_size"] == 4


def _probe_parameters(url):
    doc = {**FP32, "outputs": [{"name": "ECHO"}], "parameters": {"p": "v"}}
    echo = _outputs(_post(url, "/v2/models/classes/infer", doc))["ECHO"]["data"][0]
    assert json.loads(echo) == {"p": "v"}


def _probe_statistics(url):
    status, _, body = _get(url, "/v2/models/classes/stats")
    assert status == 200 and json.loads(body)["model_stats"][0]["name"] == "classes"


def _probe_sequence(url):
    doc = {
        "inputs": [tensor("IN_INT32", "INT32", [1], [7])],
        "outputs": [{"name": "OUT_START"}],
        "parameters": {"sequence_id": 11, "sequence_start": True, "sequence_end": True},
    }
    out = _outputs(_post(url, "/v2/models/sequence/infer", doc))["OUT_START"]
    assert out["data"] == [1]


def _probe_model_repository(url):
    status, _, body = _post(url, "/v2/repository/index")
    assert status == 200 and {"name": "classes", "version": "1", "state": "READY"} in json.loads(
        body
    )


def _probe_unload_dependents(url):
    # This server polls nothing but takes no load or unload either (mode "none"): the
    # route reads the parameter and answers Triton's refusal.
    doc = {"parameters": {"unload_dependents": True}}
    status, _, body = _post(url, "/v2/repository/models/classes/unload", doc)
    assert (status, json.loads(body)) == (
        503,
        {"error": "explicit model load / unload is not allowed if polling is enabled"},
    )


def _probe_schedule_policy(url):
    # A per-request queue timeout (the queue policy's override) is taken.
    doc = {**FP32, "parameters": {"timeout": 10_000_000, "priority": 0}}
    assert _outputs(_post(url, "/v2/models/classes/infer", doc))["OUT_FP32"]["data"] == [1, 2, 3]


def _probe_system_shared_memory(url):
    status, _, body = _get(url, "/v2/systemsharedmemory/status")
    assert status == 200 and json.loads(body) == []


def _probe_cuda_shared_memory(url):
    status, _, body = _get(url, "/v2/cudasharedmemory/status")
    assert status == 200 and json.loads(body) == []


def _probe_trace(url):
    status, _, body = _get(url, "/v2/trace/setting")
    assert status == 200 and "trace_level" in json.loads(body)


def _probe_logging(url):
    status, _, body = _get(url, "/v2/logging")
    assert status == 200 and "log_verbose_level" in json.loads(body)


PROBES = {
    "binary_tensor_data": _probe_binary_tensor_data,
    "classification": _probe_classification,
    "model_configuration": _probe_model_configuration,
    "parameters": _probe_parameters,
    "statistics": _probe_statistics,
    "sequence": _probe_sequence,
    "model_repository": _probe_model_repository,
    "model_repository(unload_dependents)": _probe_unload_dependents,
    "schedule_policy": _probe_schedule_policy,
    "system_shared_memory": _probe_system_shared_memory,
    "cuda_shared_memory": _probe_cuda_shared_memory,
    "trace": _probe_trace,
    "logging": _probe_logging,
}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("surface")
    flags = ["--http-header-forward-pattern=^x-fwd"]
    with NaiadServer(SURFACE_MODELS, log_dir=log_dir, extra_args=flags) as naiad:
        yield naiad


def test_each_listed_extension_answers(server):
    status, _, body = _get(server.url, "/v2")
    listed = json.loads(body)["extensions"]
    assert status == 200 and len(listed) == len(set(listed))
    for name in listed:
        assert name in PROBES, f"extension '{name}' is listed but has no probe here"
        PROBES[name](server.url)


def test_compressed_answers_on_requests_the_lane_takes(server):
    # Pipelined plain requests (the C++ lane's), each asking for another encoding.
    requests_ = [
        infer_request("classes", FP32, "Accept-Encoding: gzip\r\n"),
        infer_request("classes", FP32),
        infer_request("classes", FP32, "Accept-Encoding: deflate\r\n"),
    ]
    status, headers, body = exchange(server.url, requests_[0])
    assert status == 200 and headers["content-encoding"] == "gzip"
    plain = json.loads(gzip.decompress(body))
    assert plain["outputs"][0]["data"] == [1, 2, 3]
    status, headers, body = exchange(server.url, requests_[1])
    assert "content-encoding" not in headers and json.loads(body) == plain
    status, headers, body = exchange(server.url, requests_[2])
    assert headers["content-encoding"] == "deflate" and json.loads(zlib.decompress(body)) == plain


def test_forwarded_headers_reach_the_model(server):
    doc = {**FP32, "outputs": [{"name": "ECHO"}]}
    reply = exchange(server.url, infer_request("classes", doc, "X-Fwd-Id: 42\r\nY-X-Fwd: no\r\n"))
    assert json.loads(_outputs(reply)["ECHO"]["data"][0]) == {"X-Fwd-Id": "42"}
    # Without a matching header the request is as before.
    reply = exchange(server.url, infer_request("classes", doc, "Other: 1\r\n"))
    assert json.loads(_outputs(reply)["ECHO"]["data"][0]) == {}


def test_classification_where_triton_crashes(server):
    # Triton 2.51 dies on these (README, Differences): Naiad answers them.
    doc = {
        "inputs": [tensor("IN_STRING", "BYTES", [1, 2], ["a", "b"])],
        "outputs": [{"name": "OUT_STRING", "parameters": {"classification": 1}}],
    }
    status, headers, body = _post(server.url, "/v2/models/classes/infer", doc)
    assert status == 400 and headers["content-type"] == "text/plain"
    assert json.loads(body) == {
        "error": "class result not available for output due to unsupported type 'BYTES'"
    }
    doc = {
        "inputs": [tensor("IN_FP32", "FP32", [1, 0], [])],
        "outputs": [{"name": "OUT_FP32", "parameters": {"classification": 2}}],
    }
    out = _outputs(_post(server.url, "/v2/models/classes/infer", doc))["OUT_FP32"]
    assert out["shape"] == [1, 0] and out["data"] == []


def _lanes(url: str) -> dict:
    return json.loads(_get(url, "/v2/naiad/lanes")[2])


def test_compressed_and_plain_answers_take_the_lane(server):
    before = _lanes(server.url)
    _, plain_headers, plain = exchange(server.url, infer_request("classes", FP32))
    _, headers, body = exchange(
        server.url, infer_request("classes", FP32, "Accept-Encoding: gzip\r\n")
    )
    after = _lanes(server.url)
    # Both took the lane even with a forward pattern set (no header matched: they went
    # through the parser, which hands the lane the Accept-Encoding); the lane compressed
    # the second.
    assert after["lane_requests"] == before["lane_requests"] + 2
    assert after["general_requests"] == before["general_requests"]
    assert "content-encoding" not in plain_headers
    assert headers["content-encoding"] == "gzip"
    assert gzip.decompress(body) == plain


def _wait_ready_with(url: str, headers: str) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if _get(url, "/v2/health/ready", headers)[0] == 200:
                return
        time.sleep(0.2)
    raise TimeoutError("the server did not become ready")


def test_restricted_inference_is_not_bypassed_by_the_lane(tmp_path):
    flags = ["--http-restricted-api=inference,health:infer-key=secret"]
    naiad = NaiadServer(SURFACE_MODELS, log_dir=tmp_path, extra_args=flags).start(wait=None)
    try:
        _wait_ready_with(naiad.url, "infer-key: secret\r\n")
        status, headers, body = _get(naiad.url, "/v2/health/live")
        assert (status, headers["content-type"]) == (403, "text/plain")
        assert _get(naiad.url, "/v2/models/classes/ready", "Infer-Key: secret\r\n")[0] == 200
        # Two pipelined in one write, as the lane would take them from the bytes.
        both = infer_request("classes", FP32) + infer_request("classes", FP32)
        denied = exchange(naiad.url, both)
        assert denied[0] == 403 and denied[1]["content-type"] == "text/plain"
        assert json.loads(denied[2]) == {
            "error": "This API is restricted, expecting header 'infer-key'"
        }
        before = _lanes(naiad.url)
        allowed = exchange(naiad.url, infer_request("classes", FP32, "INFER-KEY: secret\r\n"))
        assert _outputs(allowed)["OUT_FP32"]["data"] == [1, 2, 3]
        assert _get(naiad.url, "/v2/models/classes/config")[0] == 200  # not restricted
        # The request with the key still took the lane, once the parser had its head.
        assert _lanes(naiad.url)["lane_requests"] == before["lane_requests"] + 1
    finally:
        naiad.stop()


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        (
            "inference",
            "--http-restricted-api option format is '<config name>:<setting>=<value>'. Got inference",
        ),
        (
            "inference:k=",
            "--http-restricted-api option format is '<config name>:<setting>=<value>'. Got inference:k=",
        ),
        ("bogus:k=v", "unknown restricted api 'bogus' "),
        (
            "health,health:k=v",
            "restricted api 'health' can not be specified in multiple config groups",
        ),
    ],
)
def test_restricted_api_flags_are_read_as_tritonserver_reads_them(flag, message):
    from naiad.flags.restrictions import parse_restrictions

    with pytest.raises(ValueError) as error:
        parse_restrictions([flag], "http-restricted-api")
    assert str(error.value) == message
    rules = parse_restrictions(["health,metadata:k=v=w", "inference:x=y"], "http-restricted-api")
    assert rules.rules == {
        "health": ("k", "v=w"),
        "metadata": ("k", "v=w"),
        "inference": ("x", "y"),
    }
    grpc = parse_restrictions(
        ["inference:key=v"], "grpc-restricted-protocol", "triton-grpc-protocol-"
    )
    assert grpc.rule("inference") == ("triton-grpc-protocol-key", "v")


def _lane_requests(url: str) -> int:
    return json.loads(_get(url, "/v2/naiad/lanes")[2])["lane_requests"]


def test_classification_is_answered_by_the_lane(server):
    # Every case Triton reads (its answers: tests/grpc_clients/test_http_surface_triton.py)
    # is the C++ lane's, a refused one (BOOL) too; counts that are no unsigned integer
    # are still the general path's.
    general = {"negative", "not a number"}
    for name, model, doc in CLASSIFICATION_CASES:
        before = _lane_requests(server.url)
        status, _, body = exchange(server.url, infer_request(model, doc))
        taken = _lane_requests(server.url) - before
        assert taken == (0 if name in general else 1), (name, status, body)
