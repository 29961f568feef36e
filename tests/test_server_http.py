"""Black-box tests of the KServe v2 HTTP API of a real `naiad serve` process.

The server (conftest.example_server) serves model_repository/: add_sub (FP32 [-1,16] x2,
max_batch_size 64, dynamic batching) and identity_bytes (BYTES [-1,-1], max_batch_size 8).
Clients: tritonclient.http (as users do) and raw HTTP through `requests`.
"""

from __future__ import annotations

import json
import struct
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient

TIMEOUT = 10  # seconds, for every request: a hang is a failure, not a stuck suite


@pytest.fixture(scope="module")
def server(example_server):
    return example_server


@pytest.fixture(scope="module")
def client(server):
    with httpclient.InferenceServerClient(
        f"{server.host}:{server.http_port}", network_timeout=TIMEOUT, connection_timeout=TIMEOUT
    ) as client:
        yield client


def _add_sub_inputs(a: np.ndarray, b: np.ndarray, binary: bool) -> list:
    inputs = [
        httpclient.InferInput("INPUT0", list(a.shape), "FP32"),
        httpclient.InferInput("INPUT1", list(b.shape), "FP32"),
    ]
    inputs[0].set_data_from_numpy(a, binary_data=binary)
    inputs[1].set_data_from_numpy(b, binary_data=binary)
    return inputs


def _rand(batch: int = 1, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((batch, 16)).astype(np.float32)
    b = rng.standard_normal((batch, 16)).astype(np.float32)
    return a, b


def _add_sub_json_body(a: np.ndarray, b: np.ndarray, **extra) -> dict:
    return {
        "inputs": [
            {
                "name": "INPUT0",
                "datatype": "FP32",
                "shape": list(a.shape),
                "data": a.ravel().tolist(),
            },
            {
                "name": "INPUT1",
                "datatype": "FP32",
                "shape": list(b.shape),
                "data": b.ravel().tolist(),
            },
        ],
        **extra,
    }


# ---------------------------------------------------------------------------------------------
# Health and metadata


def test_health_live_and_ready(server, client, http):
    assert client.is_server_live()
    assert client.is_server_ready()
    for path in ("/v2/health/live", "/v2/health/ready"):
        r = http.get(server.url + path, timeout=TIMEOUT)
        assert r.status_code == 200, (path, r.content)
        assert r.content == b""


def test_model_ready(server, client, http):
    assert client.is_model_ready("add_sub")
    assert client.is_model_ready("add_sub", "1")
    assert client.is_model_ready("identity_bytes")
    assert not client.is_model_ready("no_such_model")
    assert http.get(server.url + "/v2/models/add_sub/ready", timeout=TIMEOUT).status_code == 200
    r = http.get(server.url + "/v2/models/add_sub/versions/1/ready", timeout=TIMEOUT)
    assert r.status_code == 200


def test_server_metadata(client):
    metadata = client.get_server_metadata()
    assert metadata["name"]
    assert metadata["version"]
    # tritonclient and perf_analyzer rely on these extensions being advertised.
    assert "binary_tensor_data" in metadata["extensions"]
    assert "statistics" in metadata["extensions"]


def test_model_metadata(client):
    metadata = client.get_model_metadata("add_sub")
    assert metadata["name"] == "add_sub"
    assert metadata["versions"] == ["1"]
    assert metadata["inputs"] == [
        {"name": "INPUT0", "datatype": "FP32", "shape": [-1, 16]},
        {"name": "INPUT1", "datatype": "FP32", "shape": [-1, 16]},
    ]
    assert metadata["outputs"] == [
        {"name": "OUTPUT0", "datatype": "FP32", "shape": [-1, 16]},
        {"name": "OUTPUT1", "datatype": "FP32", "shape": [-1, 16]},
    ]
    assert client.get_model_metadata("add_sub", "1") == metadata

    bytes_metadata = client.get_model_metadata("identity_bytes")
    assert bytes_metadata["inputs"] == [{"name": "INPUT0", "datatype": "BYTES", "shape": [-1, -1]}]


def test_model_config(client):
    config = client.get_model_config("add_sub")
    assert config["name"] == "add_sub"
    assert config["max_batch_size"] == 64
    assert config["backend"] == "python"
    assert [i["name"] for i in config["input"]] == ["INPUT0", "INPUT1"]
    assert all(i["data_type"] == "TYPE_FP32" and i["dims"] == [16] for i in config["input"])
    assert [o["name"] for o in config["output"]] == ["OUTPUT0", "OUTPUT1"]
    assert "dynamic_batching" in config
    assert client.get_model_config("add_sub", "1") == config


# ---------------------------------------------------------------------------------------------
# Inference with tritonclient


@pytest.mark.parametrize(
    "binary_in,binary_out",
    [(True, True), (False, False), (False, True), (True, False)],
    ids=["binary-binary", "json-json", "json-binary", "binary-json"],
)
def test_add_sub_infer(client, binary_in, binary_out):
    a, b = _rand(batch=3, seed=1)
    outputs = [
        httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary_out),
        httpclient.InferRequestedOutput("OUTPUT1", binary_data=binary_out),
    ]
    result = client.infer("add_sub", _add_sub_inputs(a, b, binary_in), outputs=outputs)
    out0 = result.as_numpy("OUTPUT0")
    out1 = result.as_numpy("OUTPUT1")
    assert out0.dtype == np.float32 and out0.shape == (3, 16)
    np.testing.assert_allclose(out0, a + b, rtol=1e-6)
    np.testing.assert_allclose(out1, a - b, rtol=1e-6)
    response = result.get_response()
    assert response["model_name"] == "add_sub"
    assert response["model_version"] == "1"
    for output in response["outputs"]:
        assert output["datatype"] == "FP32"
        assert output["shape"] == [3, 16]
        assert ("parameters" in output and "binary_data_size" in output["parameters"]) == binary_out


def test_add_sub_infer_default_outputs(client):
    """No outputs named: every output comes back."""
    a, b = _rand(seed=2)
    result = client.infer("add_sub", _add_sub_inputs(a, b, True))
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b, rtol=1e-6)
    np.testing.assert_allclose(result.as_numpy("OUTPUT1"), a - b, rtol=1e-6)


def test_requested_output_subset(client):
    a, b = _rand(seed=3)
    result = client.infer(
        "add_sub",
        _add_sub_inputs(a, b, True),
        outputs=[httpclient.InferRequestedOutput("OUTPUT1", binary_data=True)],
    )
    np.testing.assert_allclose(result.as_numpy("OUTPUT1"), a - b, rtol=1e-6)
    assert result.as_numpy("OUTPUT0") is None
    assert [o["name"] for o in result.get_response()["outputs"]] == ["OUTPUT1"]


def test_request_id_echoed(client):
    a, b = _rand(seed=4)
    result = client.infer("add_sub", _add_sub_inputs(a, b, True), request_id="my-request-42")
    assert result.get_response()["id"] == "my-request-42"


def test_request_parameters_accepted(client):
    a, b = _rand(seed=5)
    result = client.infer(
        "add_sub",
        _add_sub_inputs(a, b, False),
        parameters={"my_string": "value", "my_int": 7, "my_bool": True},
    )
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b, rtol=1e-6)


def test_infer_with_explicit_version(client):
    a, b = _rand(seed=6)
    result = client.infer("add_sub", _add_sub_inputs(a, b, True), model_version="1")
    assert result.get_response()["model_version"] == "1"
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b, rtol=1e-6)


def test_max_batch_size_batch(client):
    a, b = _rand(batch=64, seed=7)
    result = client.infer("add_sub", _add_sub_inputs(a, b, True))
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b, rtol=1e-6)
    np.testing.assert_allclose(result.as_numpy("OUTPUT1"), a - b, rtol=1e-6)


UTF8_STRINGS = ["hello", "", "héllo wörld", "日本語テキスト", "emoji \U0001f600", "a" * 1000]


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_identity_bytes_round_trip(client, binary):
    data = np.array([[s.encode("utf-8") for s in UTF8_STRINGS]], dtype=np.object_)
    inp = httpclient.InferInput("INPUT0", list(data.shape), "BYTES")
    inp.set_data_from_numpy(data, binary_data=binary)
    result = client.infer(
        "identity_bytes",
        [inp],
        outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)],
    )
    out = result.as_numpy("OUTPUT0")
    assert out.shape == data.shape
    got = [item if isinstance(item, bytes) else str(item).encode("utf-8") for item in out.ravel()]
    assert got == [s.encode("utf-8") for s in UTF8_STRINGS]
    response = result.get_response()
    assert response["outputs"][0]["datatype"] == "BYTES"
    assert response["outputs"][0]["shape"] == list(data.shape)


def test_identity_bytes_arbitrary_binary(client):
    """Bytes that are not UTF-8 (NUL, 0xff) survive the binary tensor path untouched."""
    data = np.array([[b"\x00\x01\x02", b"\xff\xfe", b"", b"plain"]], dtype=np.object_)
    inp = httpclient.InferInput("INPUT0", list(data.shape), "BYTES")
    inp.set_data_from_numpy(data, binary_data=True)
    result = client.infer(
        "identity_bytes",
        [inp],
        outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)],
    )
    assert list(result.as_numpy("OUTPUT0").ravel()) == list(data.ravel())


def test_identity_bytes_batch(client):
    data = np.array([[b"a", b"bb"], [b"", "ü".encode()]], dtype=np.object_)
    inp = httpclient.InferInput("INPUT0", [2, 2], "BYTES")
    inp.set_data_from_numpy(data, binary_data=True)
    result = client.infer("identity_bytes", [inp])
    assert result.as_numpy("OUTPUT0").tolist() == data.tolist()


# ---------------------------------------------------------------------------------------------
# Raw HTTP


def test_raw_json_infer(server, http):
    a, b = _rand(batch=2, seed=8)
    body = _add_sub_json_body(a, b, id="raw-json")
    r = http.post(server.url + "/v2/models/add_sub/infer", json=body, timeout=TIMEOUT)
    assert r.status_code == 200, r.content
    assert r.headers["Content-Type"].startswith("application/json")
    doc = r.json()
    assert doc["id"] == "raw-json"
    assert doc["model_name"] == "add_sub"
    outputs = {o["name"]: o for o in doc["outputs"]}
    assert set(outputs) == {"OUTPUT0", "OUTPUT1"}
    for name, expected in (("OUTPUT0", a + b), ("OUTPUT1", a - b)):
        assert outputs[name]["datatype"] == "FP32"
        assert outputs[name]["shape"] == [2, 16]
        got = np.array(outputs[name]["data"], dtype=np.float32).reshape(2, 16)
        np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_raw_json_infer_nested_data(server, http):
    """KServe allows `data` as a nested (row-major) list too."""
    a, b = _rand(batch=2, seed=9)
    body = _add_sub_json_body(a, b)
    body["inputs"][0]["data"] = a.tolist()
    body["inputs"][1]["data"] = b.tolist()
    r = http.post(server.url + "/v2/models/add_sub/infer", json=body, timeout=TIMEOUT)
    assert r.status_code == 200, r.content
    out = {o["name"]: o["data"] for o in r.json()["outputs"]}
    np.testing.assert_allclose(
        np.array(out["OUTPUT0"], np.float32).reshape(2, 16), a + b, rtol=1e-6
    )


def _binary_request(a: np.ndarray, b: np.ndarray, binary_outputs: bool = True):
    header = {
        "id": "raw-binary",
        "inputs": [
            {
                "name": "INPUT0",
                "datatype": "FP32",
                "shape": list(a.shape),
                "parameters": {"binary_data_size": a.nbytes},
            },
            {
                "name": "INPUT1",
                "datatype": "FP32",
                "shape": list(b.shape),
                "parameters": {"binary_data_size": b.nbytes},
            },
        ],
        "outputs": [
            {"name": "OUTPUT0", "parameters": {"binary_data": binary_outputs}},
            {"name": "OUTPUT1", "parameters": {"binary_data": binary_outputs}},
        ],
    }
    head = json.dumps(header).encode()
    return head, head + a.tobytes() + b.tobytes()


def _split_binary_response(r: requests.Response) -> tuple[dict, dict]:
    """(header JSON, {output name: raw bytes}) of a binary-tensor response."""
    length = int(r.headers["Inference-Header-Content-Length"])
    doc = json.loads(r.content[:length])
    raw = {}
    offset = length
    for output in doc["outputs"]:
        size = output["parameters"]["binary_data_size"]
        raw[output["name"]] = r.content[offset : offset + size]
        offset += size
    assert offset == len(r.content), "response body longer than its tensors"
    return doc, raw


def test_raw_binary_infer(server, http):
    a, b = _rand(batch=4, seed=10)
    head, body = _binary_request(a, b)
    r = http.post(
        server.url + "/v2/models/add_sub/infer",
        data=body,
        headers={
            "Inference-Header-Content-Length": str(len(head)),
            "Content-Type": "application/octet-stream",
        },
        timeout=TIMEOUT,
    )
    assert r.status_code == 200, r.content
    doc, raw = _split_binary_response(r)
    assert doc["id"] == "raw-binary"
    assert [o["shape"] for o in doc["outputs"]] == [[4, 16], [4, 16]]
    np.testing.assert_allclose(
        np.frombuffer(raw["OUTPUT0"], "<f4").reshape(4, 16), a + b, rtol=1e-6
    )
    np.testing.assert_allclose(
        np.frombuffer(raw["OUTPUT1"], "<f4").reshape(4, 16), a - b, rtol=1e-6
    )


def test_raw_binary_in_json_out(server, http):
    a, b = _rand(batch=1, seed=11)
    head, body = _binary_request(a, b, binary_outputs=False)
    r = http.post(
        server.url + "/v2/models/add_sub/infer",
        data=body,
        headers={"Inference-Header-Content-Length": str(len(head))},
        timeout=TIMEOUT,
    )
    assert r.status_code == 200, r.content
    assert "Inference-Header-Content-Length" not in r.headers
    out = {o["name"]: o["data"] for o in r.json()["outputs"]}
    np.testing.assert_allclose(np.array(out["OUTPUT1"], np.float32), (a - b).ravel(), rtol=1e-6)


def test_raw_bytes_binary_infer(server, http):
    strings = [b"", "naïve café".encode(), b"\x00\xff"]
    raw = b"".join(struct.pack("<I", len(s)) + s for s in strings)
    header = {
        "inputs": [
            {
                "name": "INPUT0",
                "datatype": "BYTES",
                "shape": [1, 3],
                "parameters": {"binary_data_size": len(raw)},
            }
        ],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
    }
    head = json.dumps(header).encode()
    r = http.post(
        server.url + "/v2/models/identity_bytes/infer",
        data=head + raw,
        headers={"Inference-Header-Content-Length": str(len(head))},
        timeout=TIMEOUT,
    )
    assert r.status_code == 200, r.content
    doc, outputs = _split_binary_response(r)
    assert doc["outputs"][0]["datatype"] == "BYTES"
    assert doc["outputs"][0]["shape"] == [1, 3]
    assert outputs["OUTPUT0"] == raw


def test_versions_path_infer(server, http):
    a, b = _rand(seed=12)
    r = http.post(
        server.url + "/v2/models/add_sub/versions/1/infer",
        json=_add_sub_json_body(a, b),
        timeout=TIMEOUT,
    )
    assert r.status_code == 200, r.content
    doc = r.json()
    assert doc["model_version"] == "1"
    out = {o["name"]: o["data"] for o in doc["outputs"]}
    np.testing.assert_allclose(np.array(out["OUTPUT0"], np.float32), (a + b).ravel(), rtol=1e-6)


def test_keep_alive_many_requests_one_connection(server, http):
    a, b = _rand(seed=13)
    body = _add_sub_json_body(a, b)
    for _ in range(20):
        r = http.post(server.url + "/v2/models/add_sub/infer", json=body, timeout=TIMEOUT)
        assert r.status_code == 200, r.content


# ---------------------------------------------------------------------------------------------
# Concurrency


def test_concurrent_async_infer(server):
    """64 requests in flight at once through tritonclient's async API, each answered with
    its own result (responses are not mixed up when the batcher groups requests)."""
    count = 64
    with httpclient.InferenceServerClient(
        f"{server.host}:{server.http_port}", concurrency=16, network_timeout=TIMEOUT
    ) as client:
        pairs = [_rand(batch=1 + i % 4, seed=100 + i) for i in range(count)]
        handles = [
            client.async_infer("add_sub", _add_sub_inputs(a, b, True), request_id=str(i))
            for i, (a, b) in enumerate(pairs)
        ]
        for i, (handle, (a, b)) in enumerate(zip(handles, pairs)):
            result = handle.get_result(timeout=TIMEOUT)
            assert result.get_response()["id"] == str(i)
            np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b, rtol=1e-6)
            np.testing.assert_allclose(result.as_numpy("OUTPUT1"), a - b, rtol=1e-6)


def test_concurrent_threads_many_connections(server):
    """64 requests from 16 threads, each thread on its own connection."""

    def one(i: int):
        a, b = _rand(batch=1, seed=1000 + i)
        with requests.Session() as session:
            r = session.post(
                server.url + "/v2/models/add_sub/infer",
                json=_add_sub_json_body(a, b, id=f"t{i}"),
                timeout=TIMEOUT,
            )
        assert r.status_code == 200, r.content
        doc = r.json()
        assert doc["id"] == f"t{i}"
        out = {o["name"]: o["data"] for o in doc["outputs"]}
        np.testing.assert_allclose(np.array(out["OUTPUT0"], np.float32), (a + b).ravel(), rtol=1e-6)
        np.testing.assert_allclose(np.array(out["OUTPUT1"], np.float32), (a - b).ravel(), rtol=1e-6)
        return i

    with ThreadPoolExecutor(16) as pool:
        assert sorted(pool.map(one, range(64))) == list(range(64))


# ---------------------------------------------------------------------------------------------
# Statistics


def _stats(client, model="add_sub") -> dict:
    stats = client.get_inference_statistics(model)
    assert len(stats["model_stats"]) == 1
    entry = stats["model_stats"][0]
    assert entry["name"] == model
    assert entry["version"] == "1"
    return entry


def _assert_counts_agree(entry: dict) -> None:
    s = entry["inference_stats"]
    # perf_analyzer divides compute times by these counts and requires that they agree.
    assert (
        s["success"]["count"]
        == s["queue"]["count"]
        == s["compute_input"]["count"]
        == s["compute_infer"]["count"]
        == s["compute_output"]["count"]
    ), s
    for key in ("success", "queue", "compute_input", "compute_infer", "compute_output"):
        # Each of these takes some time for every request (nanosecond clocks).
        assert (s[key]["ns"] > 0) == (s[key]["count"] > 0), (key, s[key])
    for batch in entry["batch_stats"]:
        assert (
            batch["compute_input"]["count"]
            == batch["compute_infer"]["count"]
            == batch["compute_output"]["count"]
        ), batch


def test_statistics_move(client, http, server):
    before = _stats(client)
    _assert_counts_agree(before)
    batches = [1, 2, 3, 5]
    for i, batch in enumerate(batches):
        a, b = _rand(batch=batch, seed=200 + i)
        client.infer("add_sub", _add_sub_inputs(a, b, True))
    after = _stats(client)
    _assert_counts_agree(after)

    assert after["inference_count"] - before["inference_count"] == sum(batches)
    assert after["execution_count"] - before["execution_count"] >= 1
    assert after["execution_count"] - before["execution_count"] <= len(batches)
    s0, s1 = before["inference_stats"], after["inference_stats"]
    for key in ("success", "queue", "compute_input", "compute_infer", "compute_output"):
        assert s1[key]["count"] - s0[key]["count"] == len(batches), key
        assert s1[key]["ns"] > s0[key]["ns"], key
    assert s1["fail"] == s0["fail"]
    assert after["last_inference"] >= before["last_inference"]
    assert after["last_inference"] > 0

    # The same numbers on the raw endpoints: all models, and one version.
    r = http.get(server.url + "/v2/models/stats", timeout=TIMEOUT)
    assert r.status_code == 200
    names = {m["name"] for m in r.json()["model_stats"]}
    assert {"add_sub", "identity_bytes"} <= names
    r = http.get(server.url + "/v2/models/add_sub/versions/1/stats", timeout=TIMEOUT)
    assert r.status_code == 200
    assert r.json()["model_stats"][0]["inference_count"] == after["inference_count"]


def test_inputs_reach_execute_as_views_over_shared_memory(models_server):
    """The one copy of an input is into the arena: the model sees a view, not a copy."""
    inp = httpclient.InferInput("INPUT0", [1, 4], "FP32")
    inp.set_data_from_numpy(np.arange(4, dtype=np.float32).reshape(1, 4), binary_data=True)
    with httpclient.InferenceServerClient(
        f"{models_server.host}:{models_server.http_port}", network_timeout=TIMEOUT
    ) as client:
        result = client.infer("view_probe", [inp])
    assert result.as_numpy("OWNS_DATA").tolist() == [[0]]
    assert result.as_numpy("OVER_SHARED_MEMORY").tolist() == [[1]]


def _request_echo(models_server, http, parameters: dict) -> dict:
    body = {
        "id": "echo-1",
        "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 1], "data": [2.5]}],
        "parameters": parameters,
    }
    r = http.post(f"{models_server.url}/v2/models/request_echo/infer", json=body, timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    return r.json()


def test_request_properties_and_response_parameters(models_server, http):
    """The model sees Triton's request properties (timeout, correlation id, flags, the
    parameters the server does not consume), and the parameters of its InferenceResponse
    reach the client in the response's `parameters` object."""
    doc = _request_echo(
        models_server,
        http,
        {"sequence_id": 12, "sequence_start": True, "timeout": 5_000_000, "custom": "x"},
    )
    assert doc == {
        "id": "echo-1",
        "model_name": "request_echo",
        "model_version": "1",
        "parameters": {
            "request_id": "echo-1",
            "correlation_id": 12,
            "timeout": 5_000_000,
            "flags": 1,
            "request_parameters": '{"custom":"x"}',
        },
        "outputs": [{"name": "OUTPUT0", "datatype": "FP32", "shape": [1, 1], "data": [2.5]}],
    }
    # A string sequence id is the correlation id as it is; absent ones are 0.
    parameters = _request_echo(models_server, http, {"sequence_id": "session-a"})["parameters"]
    assert parameters["correlation_id"] == "session-a"
    assert (parameters["timeout"], parameters["flags"]) == (0, 0)
    assert parameters["request_parameters"] == "{}"


def test_response_parameters_do_not_break_the_fast_lane(models_server, http):
    """A binary request takes the fast lane, whose replies do not carry response parameters
    yet: the result block's 'parameters' must not make it fail the request."""
    lanes = models_server.url + "/v2/naiad/lanes"
    before = http.get(lanes, timeout=TIMEOUT).json()["lane_requests"]
    inp = httpclient.InferInput("INPUT0", [1, 1], "FP32")
    inp.set_data_from_numpy(np.array([[4.5]], dtype=np.float32), binary_data=True)
    output = httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)
    with httpclient.InferenceServerClient(
        f"{models_server.host}:{models_server.http_port}", network_timeout=TIMEOUT
    ) as client:
        result = client.infer("request_echo", [inp], outputs=[output])
    assert result.as_numpy("OUTPUT0").tolist() == [[4.5]]
    assert http.get(lanes, timeout=TIMEOUT).json()["lane_requests"] == before + 1
