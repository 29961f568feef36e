"""Python-based backends over gRPC (tritonclient.grpc): two models naming the backend
`scale` of `naiad serve --backend-directory`, each answered by the backend's model.py from
its own config and args (tests/python_based_backend_support.py)."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from python_based_backend_support import HELPER_TAG, write_backend, write_repository
from server_harness import NaiadServer

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def layout(tmp_path_factory):
    root = tmp_path_factory.mktemp("python_based_grpc")
    write_backend(root / "backends")
    return root / "backends", write_repository(root / "models")


@pytest.fixture(scope="module")
def server(layout, tmp_path_factory):
    backends, repository = layout
    naiad = NaiadServer(
        repository,
        log_dir=tmp_path_factory.mktemp("logs"),
        extra_args=[
            f"--backend-directory={backends}",
            "--exit-on-error=false",  # ghost names a backend no folder provides
            "--strict-readiness=false",
        ],
    )
    with naiad:
        yield naiad


@pytest.mark.parametrize("model,factor", [("double", 2.0), ("triple", 3.0)])
def test_grpc_infer(client, layout, model, factor):
    _, repository = layout
    x = np.array([[4.0, 5.0]] if model == "triple" else [4.0, 5.0], dtype=np.float32)
    tensor = grpcclient.InferInput("X", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    result = client.infer(model, [tensor])
    np.testing.assert_array_equal(result.as_numpy("Y"), x * factor)
    who = [w.decode() for w in result.as_numpy("WHO").reshape(-1)[:4]]
    assert who == [model, str(repository / model), str(repository / model / "1"), HELPER_TAG]


def test_grpc_config_and_unknown_backend(client):
    config = client.get_model_config("double", as_json=True)["config"]
    # (`runtime` is not in the model_config.proto of tritonclient 2.41, so not shown.)
    assert config["backend"] == "scale"
    assert [i["name"] for i in config["input"]] == ["X"]  # the backend's auto-complete
    assert client.is_model_ready("double") and client.is_model_ready("triple")
    assert not client.is_model_ready("ghost")
    index = {m["name"]: m for m in client.get_model_repository_index(as_json=True)["models"]}
    assert index["ghost"]["state"] == "UNAVAILABLE"
    assert "backend 'nosuch' of model 'ghost' is not supported yet" in index["ghost"]["reason"]
