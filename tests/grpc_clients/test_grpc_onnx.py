"""The onnxruntime backend seen from tritonclient.grpc: the example, dynamic batching,
every datatype, a run-time error, and an auto-completed config. Run apart from the main
suite (tests/grpc_clients/conftest.py says why); tests/test_onnx_backend.py has the rest."""

from __future__ import annotations

import threading

import numpy as np
import onnx_support
import pytest
import requests
import tritonclient.grpc as grpcclient
from server_harness import EXAMPLE_MODELS, NaiadServer
from tritonclient.utils import InferenceServerException

MODELS = ("onnx_add_sub_full", "onnx_identity_all", "onnx_auto", "onnx_variable")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = onnx_support.build_repository(
        tmp_path_factory.mktemp("onnx-grpc") / "models", bad=False, names=MODELS
    )
    naiad = NaiadServer(root, log_dir=tmp_path_factory.mktemp("onnx-grpc-logs"), name="onnx")
    naiad.start(wait="ready", timeout=180)
    yield naiad
    naiad.stop()


def _inputs(arrays: dict) -> list:
    inputs = []
    for name, array in arrays.items():
        datatype = "BYTES" if array.dtype == object else grpcclient.np_to_triton_dtype(array.dtype)
        tensor = grpcclient.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


def test_example_over_grpc_matches_onnxruntime(client):
    import onnxruntime

    x = np.random.default_rng(5).standard_normal((3, 16)).astype(np.float32)
    result = client.infer("mlp_onnx", _inputs({"INPUT": x}))
    session = onnxruntime.InferenceSession(str(EXAMPLE_MODELS / "mlp_onnx/1/model.onnx"))
    np.testing.assert_allclose(
        result.as_numpy("OUTPUT"), session.run(["OUTPUT"], {"INPUT": x})[0], rtol=1e-5, atol=1e-6
    )


def _burst(client, cases):
    results = [None] * len(cases)
    done = threading.Semaphore(0)

    def callback(index):
        def store(result, error):
            results[index] = error or result
            done.release()

        return store

    for index, (a, b) in enumerate(cases):
        client.async_infer(
            "onnx_add_sub_full", _inputs({"INPUT0": a, "INPUT1": b}), callback(index)
        )
    for _ in cases:
        assert done.acquire(timeout=30)
    return results


def test_concurrent_grpc_requests_are_batched_and_each_gets_its_rows(server, client):
    rng = np.random.default_rng(6)
    cases = [
        (
            rng.standard_normal((rows, 16)).astype(np.float32),
            rng.standard_normal((rows, 16)).astype(np.float32),
        )
        for rows in (1, 2, 1, 1, 3, 1, 2, 1) * 2
    ]
    stats = f"{server.url}/v2/models/onnx_add_sub_full/stats"
    _burst(client, cases)  # the connection has had 16 calls in flight: held batches wait
    before = requests.get(stats).json()["model_stats"][0]
    results = _burst(client, cases)
    after = requests.get(stats).json()["model_stats"][0]
    for (a, b), result in zip(cases, results):
        assert not isinstance(result, Exception), result
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    assert after["execution_count"] - before["execution_count"] < len(cases)


def test_every_datatype_over_grpc(client):
    rng = np.random.default_rng(7)
    arrays = {}
    for wire in onnx_support.ONNX_TYPES:
        if wire == "BYTES":
            arrays[f"IN_{wire}"] = np.array(
                [[b"a", b"", b"\xff\x00"], [b"xyz", b"0", b"  "]], dtype=object
            )
        elif wire == "BOOL":
            arrays[f"IN_{wire}"] = rng.integers(0, 2, (2, 3)).astype(bool)
        else:
            dtype = grpcclient.triton_to_np_dtype(wire)
            if np.issubdtype(dtype, np.integer):
                info = np.iinfo(dtype)
                arrays[f"IN_{wire}"] = rng.integers(
                    info.min, info.max, (2, 3), dtype=dtype, endpoint=True
                )
            else:
                arrays[f"IN_{wire}"] = rng.standard_normal((2, 3)).astype(dtype)
    result = client.infer("onnx_identity_all", _inputs(arrays))
    for wire in onnx_support.ONNX_TYPES:
        got, sent = result.as_numpy(f"OUT_{wire}"), arrays[f"IN_{wire}"]
        if wire == "BYTES":
            # ONNX strings are UTF-8 text: bytes that are not come back replaced.
            assert got.tolist()[1] == sent.tolist()[1]
            assert got.tolist()[0][:2] == sent.tolist()[0][:2]
        else:
            assert got.dtype == sent.dtype, wire
            np.testing.assert_array_equal(got, sent)


def test_a_run_time_error_is_internal_and_the_model_keeps_serving(client):
    bad = {"INPUT0": np.ones((1, 3), np.float32), "INPUT1": np.ones((1, 5), np.float32)}
    with pytest.raises(InferenceServerException) as info:
        client.infer("onnx_variable", _inputs(bad))
    assert info.value.status() == "StatusCode.INTERNAL"
    assert info.value.message().startswith("onnx runtime error ")
    good = np.ones((2, 4), np.float32)
    result = client.infer("onnx_variable", _inputs({"INPUT0": good, "INPUT1": good}))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), good + good)


def test_auto_completed_config_over_grpc(client):
    config = client.get_model_config("onnx_auto", as_json=True)["config"]
    assert config["max_batch_size"] == 4
    assert "dynamic_batching" in config
    assert [(i["name"], i["data_type"], [int(d) for d in i["dims"]]) for i in config["input"]] == [
        ("INPUT0", "TYPE_FP32", [16]),
        ("INPUT1", "TYPE_FP32", [16]),
    ]
    metadata = client.get_model_metadata("onnx_auto", as_json=True)
    assert metadata["platform"] == "onnxruntime_onnx"
