"""Black-box tests over HTTP: decoupled models (tests/decoupled_models/repeat) and the
generate extension (`/generate`, `/generate_stream` as Server-Sent Events), for
decoupled and ordinary models, with Triton 2.51's statuses and messages (checked
against the real Triton by tests/test_decoupled_triton.py).

The bad cases (a model that never sends the final flag, raises mid-stream, sends
after the final flag, returns a list) end the client's stream with an error; the
instance keeps serving and nothing stays in the arena.
"""

from __future__ import annotations

import gzip
import json
import shutil
import socket
import struct
import threading
import time
from pathlib import Path

import pytest
import requests
from held_support import drop_a_queued_held_request
from server_harness import NaiadServer, make_repository

TIMEOUT = 10
DECOUPLED_MODELS = Path(__file__).resolve().parent / "decoupled_models"
PIPELINE_MODELS = Path(__file__).resolve().parent / "pipeline_models"
BATCHING_MODELS = Path(__file__).resolve().parent / "batching_models"
# Two instances, no batching; an execution waits while `hold-<INPUT0>` exists in the
# model's folder and marks `executing-<INPUT0>` first (echo_batch_model.py).
HELD_CONFIG = """
name: "held"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [
  { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "SEQ" data_type: TYPE_INT64 dims: [ 1 ] },
  { name: "BATCH" data_type: TYPE_INT64 dims: [ 1 ] }
]
instance_group [ { count: 2 kind: KIND_CPU } ]
"""
ONE_RESPONSE = (
    "generate expects model to produce exactly 1 response, use generate stream for model "
    "that generates various number of responses"
)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("decoupled")
    repository = make_repository(
        root / "models",
        {
            "repeat": DECOUPLED_MODELS / "repeat",
            "text_echo": DECOUPLED_MODELS / "text_echo",
            "bls_stream": DECOUPLED_MODELS / "bls_stream",
            "ens_repeat": PIPELINE_MODELS / "ens_repeat",
        },
    )
    held = repository / "held" / "1"
    held.mkdir(parents=True)
    (held.parent / "config.pbtxt").write_text(HELD_CONFIG)
    shutil.copy(BATCHING_MODELS / "echo_batch_model.py", held / "model.py")
    server = NaiadServer(repository, log_dir=root).start()
    # What the arena holds with nothing in flight (instance channels, tables).
    server.arena_baseline = requests.get(f"{server.url}/v2/naiad/arena", timeout=TIMEOUT).json()[
        "blocks_in_use"
    ]
    yield server
    server.stop()


def _stream(server, model: str, body) -> tuple[requests.Response, list]:
    """(response, events): each `data:` event of a generate_stream, decoded."""
    r = requests.post(
        f"{server.url}/v2/models/{model}/generate_stream",
        data=json.dumps(body) if not isinstance(body, (str, bytes)) else body,
        stream=True,
        timeout=TIMEOUT,
    )
    events = []
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        raw = r.raw.read().decode()
        assert raw.endswith("\n\n") or raw == ""
        for event in raw.split("\n\n"):
            if event:
                assert event.startswith("data: ")
                events.append(json.loads(event[len("data: ") :]))
    return r, events


def _generate(server, model: str, body, path: str = "") -> requests.Response:
    return requests.post(
        f"{server.url}/v2/models/{model}{path}/generate",
        data=json.dumps(body) if not isinstance(body, (str, bytes)) else body,
        timeout=TIMEOUT,
    )


def _settled(server) -> None:
    """Nothing in flight and the arena back to what it held at start (instance channels,
    tables), within a few seconds."""
    deadline = time.monotonic() + 5
    while True:
        arena = requests.get(f"{server.url}/v2/naiad/arena", timeout=TIMEOUT).json()
        if arena["requests_in_flight"] == 0 and arena["blocks_in_use"] == server.arena_baseline:
            return
        assert time.monotonic() < deadline, arena
        time.sleep(0.05)


def _outs(n: int) -> list:
    return [{"OUT": i, "model_name": "repeat", "model_version": "1"} for i in range(n)]


# -- /infer on a decoupled model ---------------------------------------------------------


def test_infer_on_a_decoupled_model_is_501(server):
    body = {"inputs": [{"name": "N", "datatype": "INT32", "shape": [1], "data": [3]}]}
    r = requests.post(f"{server.url}/v2/models/repeat/infer", json=body, timeout=TIMEOUT)
    assert r.status_code == 501
    assert r.json() == {
        "error": "HTTP end point doesn't support models with decoupled transaction policy"
    }
    _settled(server)


# -- streaming ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["thread", "inline"])
def test_generate_stream_sends_every_response_in_order(server, mode):
    r, events = _stream(server, "repeat", {"N": 25, "mode": mode})
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert r.headers["transfer-encoding"] == "chunked"
    assert events == _outs(25)
    _settled(server)


def test_generate_stream_with_no_response_is_an_empty_stream(server):
    r, events = _stream(server, "repeat", {"N": 0, "mode": "inline"})
    assert r.status_code == 200 and events == []


def test_generate_stream_id_and_parameters(server):
    r, events = _stream(server, "repeat", {"N": 2, "mode": "inline", "id": "abc"})
    assert r.status_code == 200
    assert events == [dict(e, id="abc") for e in _outs(2)]


def test_concurrent_streams_each_in_order(server):
    results = {}

    def run(k):
        results[k] = _stream(server, "repeat", {"N": 40, "id": f"s{k}"})[1]

    threads = [threading.Thread(target=run, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(6):
        assert results[k] == [dict(e, id=f"s{k}") for e in _outs(40)]
    _settled(server)


def test_generate_stream_on_a_model_that_is_not_decoupled(server):
    r, events = _stream(server, "text_echo", {"text_input": ["a", "b"], "VALUES": 3})
    assert r.status_code == 200
    assert events == [
        {
            "DOUBLED": 6.0,
            "PARAMS": "{}",
            "model_name": "text_echo",
            "model_version": "1",
            "text_output": ["a", "b"],
        }
    ]


# -- generate (one response) --------------------------------------------------------------


def test_generate_one_response(server):
    r = _generate(server, "repeat", {"N": 1})  # one response, then the final flag alone
    assert r.status_code == 200
    assert r.json() == _outs(1)[0]
    r = _generate(server, "repeat", {"N": 1, "mode": "inline"}, "/versions/1")
    assert r.status_code == 200 and r.json() == _outs(1)[0]


@pytest.mark.parametrize("n", [0, 3])
def test_generate_wants_exactly_one_response(server, n):
    r = _generate(server, "repeat", {"N": n, "mode": "inline"})
    assert r.status_code == 200
    assert r.json() == {"error": ONE_RESPONSE}
    _settled(server)


def test_generate_inputs_by_name_and_the_rest_as_parameters(server):
    body = {"text_input": "hello", "VALUES": [1.5, 2], "temp": 0.5, "n": 3, "flag": True}
    body["id"] = "q1"
    r = _generate(server, "text_echo", body)
    assert r.status_code == 200
    assert r.text == (
        '{"DOUBLED":[3.0,4.0],"PARAMS":"{\\"temp\\":0.5,\\"n\\":3,\\"flag\\":true,\\"id\\":'
        '\\"q1\\"}","id":"q1","model_name":"text_echo","model_version":"1",'
        '"text_output":"hello"}'
    )


@pytest.mark.parametrize(
    "body, status, message",
    [
        ("bad", 500, "failed to parse the request JSON buffer: Invalid value. at 0"),
        ("[1]", 500, "attempt to get members for non-object"),
        (
            {"text_input": "a", "o": {"x": 1}},
            400,
            "parameter 'o' has invalid type. It should be either 'int', 'bool', or 'string'.",
        ),
        (
            {"text_input": "a", "VALUES": ["x"]},
            500,
            "Unable to parse 'data': attempt to access JSON non-number as double",
        ),
        (
            {"text_input": "a", "VALUES": [[1, 2], [3, 4]]},
            500,
            "Unable to parse 'data': Shape does not match true shape of 'data' field",
        ),
        (
            {"text_input": 5},
            500,
            "Unable to parse JSON bytes array: attempt to access JSON non-string as string",
        ),
    ],
)
def test_generate_bad_bodies(server, body, status, message):
    for path in ("generate", "generate_stream"):
        r = requests.post(
            f"{server.url}/v2/models/text_echo/{path}",
            data=body if isinstance(body, str) else json.dumps(body),
            timeout=TIMEOUT,
        )
        assert (r.status_code, r.json()) == (status, {"error": message}), path


def test_generate_routes(server):
    r = requests.get(f"{server.url}/v2/models/repeat/generate", timeout=TIMEOUT)
    assert (r.status_code, r.json()) == (405, {"error": "Method Not Allowed"})
    r = _generate(server, "nosuch", {})
    assert (r.status_code, r.json()) == (
        404,
        {"error": "Request for unknown model: 'nosuch' is not found"},
    )
    r = _generate(server, "repeat", {"N": 1}, "/versions/7")
    assert (r.status_code, r.json()) == (
        404,
        {"error": "Request for unknown model: 'repeat' version 7 is not found"},
    )
    r = _generate(server, "repeat", {"X": 1})
    assert r.status_code == 400
    assert "missing required input(s) ['N']" in r.json()["error"]


# -- bad models: the client gets an error, the stream ends, the instance keeps serving -------


def test_a_model_error_as_the_first_response_is_a_400(server):
    r, events = _stream(server, "repeat", {"N": 0, "mode": "error_last"})
    assert r.status_code == 400
    assert events == [{"error": "bad things"}]
    r = _generate(server, "repeat", {"N": 0, "mode": "error_last"})
    assert (r.status_code, r.json()) == (400, {"error": "bad things"})


@pytest.mark.parametrize(
    "mode, error",
    [
        ("error_last", "bad things"),
        ("raise", "RuntimeError: the model failed mid-stream"),
        (
            "no_final",
            "the model released the request without sending a response flagged "
            "TRITONSERVER_RESPONSE_COMPLETE_FINAL",
        ),
    ],
)
def test_a_stream_that_goes_wrong_ends_with_an_error(server, mode, error):
    r, events = _stream(server, "repeat", {"N": 3, "mode": mode})
    assert r.status_code == 200
    assert events[:3] == _outs(3)
    assert len(events) == 4 and error in events[3]["error"]
    # The instance serves on, and nothing is left behind.
    assert _stream(server, "repeat", {"N": 2})[1] == _outs(2)
    _settled(server)


def test_a_send_after_the_final_flag_reaches_nobody(server):
    r, events = _stream(server, "repeat", {"N": 0, "mode": "after_final"})
    assert (r.status_code, events) == (200, _outs(1))
    assert _stream(server, "repeat", {"N": 2})[1] == _outs(2)
    _settled(server)
    assert "Response sender has been closed" in server.stderr_text()


def test_a_decoupled_execute_must_return_none(server):
    r, events = _stream(server, "repeat", {"N": 0, "mode": "return_list"})
    assert r.status_code == 400
    assert events == [
        {
            "error": "Failed to process the request(s) for model 'repeat_0_0', message: "
            "Python model 'repeat_0_0' is using the decoupled mode and the execute function must "
            "return None."
        }
    ]
    _settled(server)


# -- cancellation -----------------------------------------------------------------------


def _cancelled_count(server) -> int:
    return _generate(server, "repeat", {"N": 0, "mode": "cancelled"}).json()["OUT"]


def test_closing_the_connection_cancels_a_running_stream(server):
    before = _cancelled_count(server)
    body = json.dumps({"N": 0, "mode": "until_cancelled"}).encode()
    with socket.create_connection((server.host, server.http_port), timeout=TIMEOUT) as sock:
        sock.sendall(
            b"POST /v2/models/repeat/generate_stream HTTP/1.1\r\nHost: x\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        received = b""
        while b"data: " not in received:
            received += sock.recv(4096)
    # The model sees request.is_cancelled() and ends the request.
    deadline = time.monotonic() + 5
    while _cancelled_count(server) == before:
        assert time.monotonic() < deadline, "the model never saw the cancellation"
        time.sleep(0.05)
    _settled(server)


def test_statistics_count_streamed_requests(server):
    stats = lambda: requests.get(  # noqa: E731
        f"{server.url}/v2/models/repeat/stats", timeout=TIMEOUT
    ).json()["model_stats"][0]
    before = stats()
    assert _stream(server, "repeat", {"N": 3, "mode": "inline"})[1] == _outs(3)
    assert _stream(server, "repeat", {"N": 3, "mode": "raise"})[1][:3] == _outs(3)
    after = stats()
    assert after["inference_stats"]["success"]["count"] == (
        before["inference_stats"]["success"]["count"] + 1
    )
    assert (
        after["inference_stats"]["fail"]["count"] == before["inference_stats"]["fail"]["count"] + 1
    )
    assert after["execution_count"] >= before["execution_count"] + 1
    queue = after["inference_stats"]["queue"]
    assert queue["count"] == before["inference_stats"]["queue"]["count"] + 1
    assert queue["ns"] > before["inference_stats"]["queue"]["ns"]


def test_bls_reads_a_decoupled_models_stream(server):
    """A Python model calls `repeat` with exec(decoupled=True): every response, sent
    from the decoupled model's thread after its execute returned, reaches the caller."""
    r = _generate(server, "bls_stream", {"N": 7})
    assert r.status_code == 200
    assert r.json() == {"VALUES": list(range(7)), "model_name": "bls_stream", "model_version": "1"}
    _settled(server)


def test_bls_reads_a_decoupled_ensembles_stream(server):
    """exec(decoupled=True) on ens_repeat (a decoupled ensemble of repeat): each of the
    ensemble's responses reaches the caller on its ring, then the final flag."""
    r = _generate(server, "bls_stream", {"N": 5, "target": "ens_repeat"})
    assert r.status_code == 200
    assert r.json() == {"VALUES": list(range(5)), "model_name": "bls_stream", "model_version": "1"}
    r = _generate(server, "bls_stream", {"N": 0, "target": "ens_repeat"})
    assert r.status_code == 200 and r.json()["VALUES"] == []
    _settled(server)


def _held_body(value: int) -> bytes:
    return json.dumps(
        {"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 1], "data": [value]}]}
    ).encode()


def _gzipped_held_request(value: int) -> bytes:
    """A gzip-compressed infer request for held: the lane inflates it."""
    packed = gzip.compress(_held_body(value))
    return (
        b"POST /v2/models/held/infer HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(packed), packed)
    )


def _lane_held_request(value: int) -> bytes:
    """A plain JSON infer request for held: the C++ fast lane takes it."""
    body = _held_body(value)
    return b"POST /v2/models/held/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (
        len(body),
        body,
    )


def _drop_a_queued_request(server, request) -> None:
    """held_support's scenario over raw HTTP connections: a connection per request,
    the queued one reset (a FIN alone is a half-close, after which the server still
    answers)."""
    sockets = []

    def send(value):
        sock = socket.create_connection((server.host, server.http_port))
        sockets.append(sock)
        sock.sendall(request(value))
        return sock

    def cancel(sock):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()

    def assert_answered(sock):
        sock.settimeout(TIMEOUT)
        assert sock.recv(4096).startswith(b"HTTP/1.1 200 OK")

    try:
        drop_a_queued_held_request(server, send, cancel, assert_answered, _settled)
    finally:
        for sock in sockets:
            sock.close()


def test_closing_the_connection_drops_a_queued_compressed_request(server):
    _drop_a_queued_request(server, _gzipped_held_request)


def test_closing_the_connection_drops_a_queued_fast_lane_request(server):
    lanes_before = requests.get(f"{server.url}/v2/naiad/lanes", timeout=TIMEOUT).json()
    _drop_a_queued_request(server, _lane_held_request)
    lanes_after = requests.get(f"{server.url}/v2/naiad/lanes", timeout=TIMEOUT).json()
    assert lanes_after["lane_requests"] - lanes_before["lane_requests"] == 3, lanes_after
