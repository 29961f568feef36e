"""Black-box tests: bad requests and failing models get the right HTTP status and an
`{"error": "..."}` body that names the problem, and the server keeps serving afterwards.

Statuses and messages are Triton's (2.51): validation problems are 400 with Triton's
wording, JSON-shape problems are Triton "Internal" errors (500), unknown models/versions
404, and a model's own error keeps its TritonError code (INTERNAL 500, INVALID_ARG 400,
NOT_FOUND 404, UNAVAILABLE 503, UNSUPPORTED 501).
"""

from __future__ import annotations

import json
import struct
import time

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

TIMEOUT = 10  # seconds per request: a hang fails the test instead of stalling the suite
PREFIX = "[request id: <id_unknown>] "
SHAPE_NOTE = (
    "NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension "
    "to be prepended to each input shape. If you want to specify the full shape including "
    "the batch dim in your input dims config, try setting max_batch_size to zero. See the "
    "model configuration docs for more info on max_batch_size."
)

A = np.arange(16, dtype=np.float32).reshape(1, 16)
B = np.full((1, 16), 0.5, dtype=np.float32)


def _good_body() -> dict:
    return {
        "inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": A.ravel().tolist()},
            {"name": "INPUT1", "datatype": "FP32", "shape": [1, 16], "data": B.ravel().tolist()},
        ]
    }


def _binary(sizes=None, shape=(1, 16), data=None):
    """(header, body) of a binary add_sub request; `sizes` overrides binary_data_size."""
    a = np.zeros(shape, np.float32) if data is None else data
    raw = [a.tobytes(), a.tobytes()]
    sizes = sizes or [len(r) for r in raw]
    header = {
        "inputs": [
            {
                "name": name,
                "datatype": "FP32",
                "shape": list(shape),
                "parameters": {"binary_data_size": size},
            }
            for name, size in zip(("INPUT0", "INPUT1"), sizes)
        ]
    }
    head = json.dumps(header).encode()
    return head, head + raw[0] + raw[1]


def _post(server, model, body, headers=None, path=None):
    url = server.url + (path or f"/v2/models/{model}/infer")
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return requests.post(url, data=data, headers=headers or {}, timeout=TIMEOUT)


def _error_of(r: requests.Response) -> str:
    doc = r.json()
    assert isinstance(doc, dict) and list(doc) == ["error"], r.content
    assert isinstance(doc["error"], str) and doc["error"]
    return doc["error"]


def assert_still_serving(server) -> None:
    r = _post(server, "add_sub", _good_body())
    assert r.status_code == 200, r.content
    out = {o["name"]: o["data"] for o in r.json()["outputs"]}
    np.testing.assert_allclose(out["OUTPUT0"], (A + B).ravel())
    np.testing.assert_allclose(out["OUTPUT1"], (A - B).ravel())


@pytest.fixture(scope="module")
def server(example_server):
    return example_server


# ---------------------------------------------------------------------------------------------
# Bad requests to add_sub


class Prefix(str):
    """An expected message of which only the start is checked (the rest is the JSON
    parser's own wording)."""


def _edit(fn):
    body = _good_body()
    fn(body)
    return body


def _set(i, **fields):
    return lambda body: body["inputs"][i].update(fields)


_HEAD_TRUNC, _BODY_TRUNC = _binary()
_BODY_TRUNC = _BODY_TRUNC[:-32]  # INPUT1's last 8 floats never arrive
_HEAD_SHORT, _BODY_SHORT = _binary(sizes=[32, 96])  # INPUT0 declares 32 bytes for 16 floats

BAD_REQUESTS = [
    # label, model, body, headers, path, status, exact message
    (
        "malformed json",
        "add_sub",
        b'{"inputs": [{"name": "INPUT0",',
        None,
        None,
        500,
        Prefix("failed to parse the request JSON buffer: "),
    ),
    (
        "not json at all",
        "add_sub",
        b"hello",
        None,
        None,
        500,
        Prefix("failed to parse the request JSON buffer: "),
    ),
    (
        "truncated binary body",
        "add_sub",
        _BODY_TRUNC,
        {"Inference-Header-Content-Length": str(len(_HEAD_TRUNC))},
        None,
        400,
        "unexpected size for input 'INPUT1', expecting 32 additional bytes for model 'add_sub'",
    ),
    (
        "header length beyond body",
        "add_sub",
        _BODY_TRUNC,
        {"Inference-Header-Content-Length": "999999"},
        None,
        400,
        f"inference header size should be in range (0, {len(_BODY_TRUNC)}), got: 999999",
    ),
    (
        "unknown model",
        "no_such_model",
        _good_body(),
        None,
        None,
        404,
        "Request for unknown model: 'no_such_model' is not found",
    ),
    (
        "unknown version",
        "add_sub",
        _good_body(),
        None,
        "/v2/models/add_sub/versions/7/infer",
        404,
        "Request for unknown model: 'add_sub' version 7 is not found",
    ),
    (
        "wrong input name",
        "add_sub",
        _edit(_set(1, name="INPUT9")),
        None,
        None,
        400,
        "unexpected inference input 'INPUT9' for model 'add_sub'",
    ),
    (
        "wrong datatype",
        "add_sub",
        _edit(_set(0, datatype="INT32", data=list(range(16)))),
        None,
        None,
        400,
        f"{PREFIX}inference input 'INPUT0' data-type is 'INT32', but model 'add_sub' expects 'FP32'",
    ),
    (
        "wrong shape",
        "add_sub",
        _edit(_set(0, shape=[1, 8], data=list(range(8)))),
        None,
        None,
        400,
        f"{PREFIX}unexpected shape for input 'INPUT0' for model 'add_sub'. Expected [-1,16], "
        f"got [1,8]. {SHAPE_NOTE}",
    ),
    (
        "missing input",
        "add_sub",
        _edit(lambda body: body["inputs"].pop()),
        None,
        None,
        400,
        f"{PREFIX}expected 2 inputs but got 1 inputs for model 'add_sub'. Got input(s) "
        "['INPUT0'], but missing required input(s) ['INPUT1']. Please provide all required "
        "input(s).",
    ),
    (
        "batch over max_batch_size",
        "add_sub",
        _edit(
            lambda body: [i.update(shape=[65, 16], data=[0.0] * (65 * 16)) for i in body["inputs"]]
        ),
        None,
        None,
        400,
        f"{PREFIX}inference request batch-size must be <= 64 for 'add_sub'",
    ),
    (
        "binary data size not matching shape",
        "add_sub",
        _BODY_SHORT,
        {"Inference-Header-Content-Length": str(len(_HEAD_SHORT))},
        None,
        400,
        f"{PREFIX}input byte size mismatch for input 'INPUT0' for model 'add_sub'. "
        "Expected 64, got 32",
    ),
    (
        "json data length not matching shape",
        "add_sub",
        _edit(_set(0, data=list(range(15)))),
        None,
        None,
        500,
        "Unable to parse 'data': Shape does not match true shape of 'data' field",
    ),
    (
        "unknown requested output",
        "add_sub",
        _edit(lambda body: body.update(outputs=[{"name": "OUTPUT7"}])),
        None,
        None,
        400,
        "unexpected inference output 'OUTPUT7' for model 'add_sub'",
    ),
    (
        "string elements not matching shape",
        "identity_bytes",
        {
            "id": "strings",
            "inputs": [
                {"name": "INPUT0", "datatype": "BYTES", "shape": [1, 3], "data": ["a", "b"]}
            ],
        },
        None,
        None,
        400,
        "[request id: strings] expected 3 string elements for inference input 'INPUT0' for "
        "model 'identity_bytes', got 2",
    ),
]


@pytest.mark.parametrize(
    "label,model,body,headers,path,status,message",
    BAD_REQUESTS,
    ids=[case[0] for case in BAD_REQUESTS],
)
def test_bad_request(server, label, model, body, headers, path, status, message):
    r = _post(server, model, body, headers, path)
    assert r.status_code == status, r.content
    assert r.headers["Content-Type"].startswith("application/json")
    if isinstance(message, Prefix):
        assert _error_of(r).startswith(message), r.content
    else:
        assert _error_of(r) == message
    assert_still_serving(server)


def test_bad_requests_on_one_keep_alive_connection(server, http):
    """Errors don't poison a keep-alive connection: the next request on it is answered."""
    for _ in range(3):
        r = http.post(
            server.url + "/v2/models/add_sub/infer",
            data=json.dumps(_edit(_set(0, name="BOGUS"))),
            timeout=TIMEOUT,
        )
        assert r.status_code == 400
        r = http.post(server.url + "/v2/models/add_sub/infer", json=_good_body(), timeout=TIMEOUT)
        assert r.status_code == 200, r.content


def test_error_through_tritonclient(server):
    """What a tritonclient user sees: InferenceServerException with status and message."""
    with httpclient.InferenceServerClient(
        f"{server.host}:{server.http_port}", network_timeout=TIMEOUT
    ) as client:
        inp = httpclient.InferInput("INPUT0", [1, 8], "FP32")
        inp.set_data_from_numpy(np.zeros((1, 8), np.float32))
        other = httpclient.InferInput("INPUT1", [1, 16], "FP32")
        other.set_data_from_numpy(B)
        with pytest.raises(InferenceServerException) as info:
            client.infer("add_sub", [inp, other])
        assert info.value.status() == "400"
        text = info.value.message()
        assert "unexpected shape for input 'INPUT0' for model 'add_sub'" in text
        assert "Expected [-1,16], got [1,8]" in text

        with pytest.raises(InferenceServerException) as info:
            client.get_model_metadata("no_such_model")
        assert info.value.status() == "404"
        assert "no_such_model" in info.value.message()
    assert_still_serving(server)


def test_unknown_model_metadata_config_and_ready(server):
    r = requests.get(server.url + "/v2/models/no_such_model", timeout=TIMEOUT)
    assert r.status_code == 404
    assert _error_of(r) == "Request for unknown model: 'no_such_model' is not found"
    r = requests.get(server.url + "/v2/models/no_such_model/config", timeout=TIMEOUT)
    assert r.status_code == 404
    r = requests.get(server.url + "/v2/models/add_sub/versions/7", timeout=TIMEOUT)
    assert r.status_code == 404
    assert _error_of(r) == "Request for unknown model: 'add_sub' version 7 is not found"
    # Triton: a model (version) that is not ready answers 400 on its ready endpoint.
    r = requests.get(server.url + "/v2/models/no_such_model/ready", timeout=TIMEOUT)
    assert r.status_code == 400
    r = requests.get(server.url + "/v2/models/add_sub/versions/7/ready", timeout=TIMEOUT)
    assert r.status_code == 400


def test_wrong_method(server):
    r = requests.get(server.url + "/v2/models/add_sub/infer", timeout=TIMEOUT)
    assert r.status_code == 405
    assert_still_serving(server)


def test_garbage_http_gets_400_and_server_survives(server):
    import socket

    with socket.create_connection((server.host, server.http_port), timeout=TIMEOUT) as sock:
        sock.sendall(b"THIS IS NOT HTTP\r\n\r\n")
        reply = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 400"), reply[:200]
    assert_still_serving(server)


# ---------------------------------------------------------------------------------------------
# Models that fail


@pytest.fixture(scope="module")
def models(models_server):
    return models_server


def _code_request(code: int) -> dict:
    return {"inputs": [{"name": "CODE", "datatype": "INT32", "shape": [1, 1], "data": [code]}]}


def test_model_raising_in_execute(models):
    body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 1], "data": [1.0]}]}
    for _ in range(2):
        r = _post(models, "raiser", body)
        assert r.status_code == 500, r.content
        message = _error_of(r)
        assert "ValueError" in message
        assert "raiser refuses to run: deliberate failure number" in message
        assert "raiser" in message
    # Other models of that server are unaffected.
    r = _post(models, "error_response", _code_request(3))
    assert r.status_code == 400


def test_model_raising_through_tritonclient(models):
    with httpclient.InferenceServerClient(
        f"{models.host}:{models.http_port}", network_timeout=TIMEOUT
    ) as client:
        inp = httpclient.InferInput("INPUT0", [1, 1], "FP32")
        inp.set_data_from_numpy(np.ones((1, 1), np.float32))
        with pytest.raises(InferenceServerException) as info:
            client.infer("raiser", [inp])
        assert "raiser refuses to run" in info.value.message()


@pytest.mark.parametrize(
    "code,status",
    [(1, 500), (3, 400), (2, 404), (4, 503), (5, 501)],
    ids=["INTERNAL", "INVALID_ARG", "NOT_FOUND", "UNAVAILABLE", "UNSUPPORTED"],
)
def test_model_returning_triton_error(models, code, status):
    r = _post(models, "error_response", _code_request(code))
    assert r.status_code == status, r.content
    assert _error_of(r) == f"error_response: the model reports error code {code}"


def test_model_errors_count_as_failures_in_stats(models):
    def stats():
        r = requests.get(models.url + "/v2/models/raiser/stats", timeout=TIMEOUT)
        assert r.status_code == 200
        return r.json()["model_stats"][0]

    before = stats()
    body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 1], "data": [1.0]}]}
    assert _post(models, "raiser", body).status_code == 500
    after = stats()
    s0, s1 = before["inference_stats"], after["inference_stats"]
    assert s1["fail"]["count"] == s0["fail"]["count"] + 1
    assert s1["success"]["count"] == s0["success"]["count"]
    assert after["inference_count"] == before["inference_count"]


# ---------------------------------------------------------------------------------------------
# Leak check: the shared-memory arena returns to its baseline


ARENA_PATH = "/v2/naiad/arena"


def _arena(server) -> dict:
    r = requests.get(server.url + ARENA_PATH, timeout=TIMEOUT)
    assert r.status_code == 200, r.content
    doc = r.json()
    # Every worker channel is a block of its own, so a serving server never has none.
    assert doc["blocks_in_use"] > 0 and doc["bytes_in_use"] > 0, doc
    return doc


def _settle(server, baseline: dict, timeout: float = 10.0) -> dict:
    """Poll until blocks_in_use is back to the baseline (results are freed just after the
    reply is written) or the timeout passes; the last reading."""
    deadline = time.monotonic() + timeout
    while True:
        now = _arena(server)
        if now["blocks_in_use"] <= baseline["blocks_in_use"] or time.monotonic() > deadline:
            return now
        time.sleep(0.05)


def test_arena_returns_to_baseline(server, models):
    base_example = _settle(server, _arena(server), timeout=2)
    base_models = _settle(models, _arena(models), timeout=2)

    head_short, body_short = _binary(sizes=[32, 96])
    head_ok, body_ok = _binary(shape=(8, 16))
    for _ in range(5):
        # Rejected before submission ...
        assert _post(server, "add_sub", _edit(_set(0, name="BOGUS"))).status_code == 400
        assert _post(server, "add_sub", b'{"inputs": [').status_code == 500
        r = _post(
            server,
            "add_sub",
            body_short,
            {"Inference-Header-Content-Length": str(len(head_short))},
        )
        assert r.status_code == 400
        # ... answered ...
        r = _post(
            server, "add_sub", body_ok, {"Inference-Header-Content-Length": str(len(head_ok))}
        )
        assert r.status_code == 200
        assert_still_serving(server)
        raw = struct.pack("<I", 3) + b"abc"
        head = json.dumps(
            {
                "inputs": [
                    {
                        "name": "INPUT0",
                        "datatype": "BYTES",
                        "shape": [1, 1],
                        "parameters": {"binary_data_size": len(raw)},
                    }
                ]
            }
        ).encode()
        r = _post(
            server,
            "identity_bytes",
            head + raw,
            {"Inference-Header-Content-Length": str(len(head))},
        )
        assert r.status_code == 200
        # ... and failed inside the model.
        body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 1], "data": [1.0]}]}
        assert _post(models, "raiser", body).status_code == 500
        assert _post(models, "error_response", _code_request(3)).status_code == 400

    after_example = _settle(server, base_example)
    after_models = _settle(models, base_models)
    assert after_example["blocks_in_use"] == base_example["blocks_in_use"], (
        base_example,
        after_example,
    )
    assert after_example["bytes_in_use"] == base_example["bytes_in_use"]
    assert after_models["blocks_in_use"] == base_models["blocks_in_use"], (
        base_models,
        after_models,
    )
    assert after_models["bytes_in_use"] == base_models["bytes_in_use"]
