"""Ensembles and BLS seen from tritonclient.grpc (tests/test_pipelines.py has the HTTP
side and the model set). Run apart from the main suite (conftest.py says why)."""

from __future__ import annotations

import queue
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from server_harness import NaiadServer
from test_pipelines import A, B, build_repository
from tritonclient.utils import InferenceServerException


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repository = build_repository(tmp_path_factory.mktemp("pipelines-repository"), bad=False)
    server = NaiadServer(
        repository, log_dir=tmp_path_factory.mktemp("pipelines"), name="grpc-pipelines"
    )
    server.start(wait="ready", timeout=120)
    yield server
    server.stop()


def _inputs():
    inputs = [
        grpcclient.InferInput("INPUT0", [1, 16], "FP32"),
        grpcclient.InferInput("INPUT1", [1, 16], "FP32"),
    ]
    inputs[0].set_data_from_numpy(A)
    inputs[1].set_data_from_numpy(B)
    return inputs


def test_ensemble_over_grpc(client):
    result = client.infer("ensemble_add_sub", _inputs(), client_timeout=30)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * A)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), 2 * B)


@pytest.mark.parametrize("mode", ["sync", "async", "self", "nested", "ensemble"])
def test_bls_over_grpc(client, mode):
    result = client.infer("bls", _inputs(), parameters={"mode": mode}, client_timeout=30)
    if mode == "ensemble":
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * A)
    else:
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)


def test_bls_error_over_grpc(client):
    with pytest.raises(InferenceServerException) as info:
        client.infer(
            "bls", _inputs(), parameters={"mode": "target", "target": "nope"}, client_timeout=30
        )
    assert info.value.status() == "StatusCode.INTERNAL"
    assert info.value.message() == (
        "Model nope - Error when running inference: Failed for execute the inference request. "
        "Model 'nope' is not ready."
    )


def test_ensemble_and_bls_under_concurrent_grpc_load(client):
    def one(k: int):
        model = "ensemble_add_sub" if k % 2 else "bls"
        return model, client.infer(model, _inputs(), client_timeout=30)

    with ThreadPoolExecutor(8) as pool:
        for model, result in pool.map(one, range(64)):
            expected = 2 * A if model == "ensemble_add_sub" else A + B
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), expected)


@pytest.mark.parametrize("model", ["ens_nested", "ens_nested_deep"])
def test_an_ensemble_of_ensembles_over_grpc(client, model):
    result = client.infer(model, _inputs(), client_timeout=30)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * A + 2 * B)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), 2 * A - 2 * B)


def _n(value: int):
    n = grpcclient.InferInput("N", [1], "INT32")
    n.set_data_from_numpy(np.array([value], dtype=np.int32))
    return [n]


def test_an_ensemble_with_a_decoupled_step_streams_over_grpc(client):
    # As Triton 2.51: the stream ends with the last response of the decoupled step run
    # through int_double (Y = 2 * 2), flagged final (Triton streams the earlier ones too:
    # README "Not yet"); ModelInfer refuses the decoupled ensemble.
    answers: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        client.async_stream_infer(
            "ens_decoupled", _n(3), request_id="r1", enable_empty_final_response=True
        )
        got = []
        while True:
            result, error = answers.get(timeout=30)
            assert error is None, error
            response = result.get_response()
            assert response.id == "r1"
            if response.outputs:
                got.append(int(result.as_numpy("Y")[0]))
            if response.parameters["triton_final_response"].bool_param:
                break
    finally:
        client.stop_stream()
    assert got[-1] == 4
    with pytest.raises(InferenceServerException) as info:
        client.infer("ens_decoupled", _n(3), client_timeout=30)
    assert info.value.status() == "StatusCode.UNIMPLEMENTED"
    assert info.value.message() == (
        "ModelInfer RPC doesn't support models with decoupled transaction policy"
    )


def _bls_sequence(client, value: int, parameters: dict):
    data = grpcclient.InferInput("INPUT", [1, 1], "INT32")
    data.set_data_from_numpy(np.array([[value]], dtype=np.int32))
    result = client.infer("bls_sequence", [data], parameters=parameters, client_timeout=30)
    return int(result.as_numpy("TOTAL")[0][0]), result.as_numpy("CORRID_OUT")[0][0].decode()


def test_bls_calls_drive_a_sequence_model_over_grpc(client):
    assert _bls_sequence(client, 4, {"corrid": 31, "start": True}) == (4, "31")
    assert _bls_sequence(
        client, 5, {"corrid": "grpc-id", "start": True, "target": "seq_echo_string"}
    ) == (5, "grpc-id")
    assert _bls_sequence(client, 2, {"corrid": 31, "end": True}) == (6, "31")
    assert _bls_sequence(
        client, 1, {"corrid": "grpc-id", "end": True, "target": "seq_echo_string"}
    ) == (6, "grpc-id")
    with pytest.raises(InferenceServerException) as info:
        _bls_sequence(client, 1, {"corrid": 31})
    assert info.value.status() == "StatusCode.INTERNAL"
    assert info.value.message() == (
        "Model seq_echo - Error when running inference: inference request for sequence 31 to "
        "model 'seq_echo' must specify the START flag on the first request of the sequence"
    )


def test_cancelling_a_bls_stream_over_grpc(client):
    start = time.monotonic()
    result = client.infer("bls_cancel", _n(2), client_timeout=30)
    assert time.monotonic() - start < 5  # repeat would stream for 10 s uncancelled
    assert 2 <= int(result.as_numpy("RECEIVED")[0]) < 100
    assert result.as_numpy("ERROR")[0] == b""
