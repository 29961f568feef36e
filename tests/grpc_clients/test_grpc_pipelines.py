"""Ensembles and BLS seen from tritonclient.grpc (tests/test_pipelines.py has the HTTP
side and the model set). Run apart from the main suite (conftest.py says why)."""

from __future__ import annotations

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


@pytest.fixture(scope="module")
def client(server):
    with grpcclient.InferenceServerClient(f"{server.host}:{server.grpc_port}") as client:
        yield client


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
