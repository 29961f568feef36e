"""Python-based backends (Triton 24.x), black-box: `naiad serve --backend-directory=DIR`
serves every model whose config says `backend: "scale"` with DIR/scale/model.py, the one
implementation answering each model from its own config and args
(tests/python_based_backend_support.py has the backend and the models). One server;
`naiad check` and the in-process Options without one."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
from python_based_backend_support import (
    HELPER_TAG,
    infer_body,
    write_backend,
    write_repository,
)
from server_harness import NaiadServer

pytestmark = pytest.mark.timeout(300)

TIMEOUT = 30


@pytest.fixture(scope="module")
def layout(tmp_path_factory):
    root = tmp_path_factory.mktemp("python_based")
    write_backend(root / "backends")
    return root / "backends", write_repository(root / "models")


@pytest.fixture(scope="module")
def server(layout, tmp_path_factory):
    backends, repository = layout
    server = NaiadServer(
        repository,
        log_dir=tmp_path_factory.mktemp("logs"),
        extra_args=[
            "--backend-directory",
            str(backends),
            # ghost does not load: the server still starts, and is ready.
            "--exit-on-error=false",
            "--strict-readiness=false",
        ],
    )
    with server:
        yield server


def _index(server) -> dict:
    answer = requests.post(server.url + "/v2/repository/index", json={}, timeout=TIMEOUT)
    return {entry["name"]: entry for entry in answer.json()}


def test_models_naming_the_backend_load_and_an_unknown_backend_does_not(server, layout):
    backends, _ = layout
    index = _index(server)
    assert index["double"]["state"] == "READY"
    assert index["triple"]["state"] == "READY"  # its own failing model.py never ran
    assert index["ghost"]["state"] == "UNAVAILABLE"
    reason = index["ghost"]["reason"]
    assert reason.startswith("backend 'nosuch' of model 'ghost' is not supported yet (supported: ")
    assert str(backends / "nosuch" / "model.py") in reason


@pytest.mark.parametrize("model,factor", [("double", 2.0), ("triple", 3.0)])
def test_each_model_is_answered_from_its_own_config_and_args(server, layout, model, factor):
    _, repository = layout
    client = httpclient.InferenceServerClient(f"{server.host}:{server.http_port}")
    batched = model == "triple"
    x = np.array([[1.0, 2.0, 3.0]] if batched else [1.0, 2.0, 3.0], dtype=np.float32)
    tensor = httpclient.InferInput("X", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    result = client.infer(model, [tensor])
    np.testing.assert_array_equal(result.as_numpy("Y"), x * factor)
    who = result.as_numpy("WHO").reshape(-1)[:4]
    # Triton's args for the model, and get_model_dir() its version folder, though the
    # code lives in the backend's folder (whose helper module it imported).
    assert [w.decode() for w in who] == [
        model,
        str(repository / model),
        str(repository / model / "1"),
        HELPER_TAG,
    ]


def test_the_config_is_completed_by_the_backends_auto_complete(server):
    config = requests.get(server.url + "/v2/models/triple/config", timeout=TIMEOUT).json()
    assert config["backend"] == "scale"
    assert config["runtime"] == "model.py"  # as Triton writes it
    assert config["platform"] == ""
    assert config["default_model_filename"] == ""
    assert config["max_batch_size"] == 8
    # The input comes from the backend's auto_complete_config: the config names none.
    assert [(i["name"], i["data_type"], i["dims"]) for i in config["input"]] == [
        ("X", "TYPE_FP32", [-1])
    ]
    metadata = requests.get(server.url + "/v2/models/double", timeout=TIMEOUT).json()
    assert metadata["platform"] == "scale"  # Triton reports the backend name
    assert metadata["inputs"] == [{"name": "X", "datatype": "FP32", "shape": [-1]}]


def test_raw_http_infer(server):
    answer = requests.post(
        server.url + "/v2/models/double/infer", json=infer_body("double"), timeout=TIMEOUT
    )
    assert answer.status_code == 200, answer.text
    outputs = {o["name"]: o for o in answer.json()["outputs"]}
    assert outputs["Y"]["data"] == [2.0, 4.0, 6.0]
    assert outputs["WHO"]["data"][0] == "double"


def _check(repository, *args) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "naiad", "check", str(repository), "--json", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return {verdict["name"]: verdict for verdict in json.loads(done.stdout)}


def test_naiad_check_follows_the_backend_directory(layout):
    backends, repository = layout
    verdicts = _check(repository, "--backend-directory", str(backends))
    assert verdicts["double"]["status"] == "LOAD"
    assert verdicts["triple"]["status"] == "LOAD"
    assert verdicts["ghost"]["status"] == "REFUSED"
    assert "backend 'nosuch' of model 'ghost' is not supported yet" in verdicts["ghost"]["reason"]
    # Without it, Triton's default folder, which holds no `scale`: refused as unknown.
    default = _check(repository)
    assert default["double"]["status"] == "REFUSED"
    assert "/opt/tritonserver/backends/scale/model.py" in default["double"]["reason"]


def test_in_process_server_takes_backend_directory(layout, monkeypatch):
    """naiad.Server(backend_directory=...) as Triton's Options: the models are served."""
    import naiad
    from naiad.backends import python_based

    backends, repository = layout
    # The server sets it for its workers; the test's process gets it back afterwards.
    monkeypatch.delenv(python_based.ENVIRONMENT_VARIABLE, raising=False)
    server = naiad.Server(
        model_repository=str(repository),
        backend_directory=str(backends),
        exit_on_error=False,
        strict_readiness=False,
    )
    server.start(wait_until_ready=True)
    try:
        x = np.array([1.0, 2.0], dtype=np.float32)
        (response,) = list(server.model("double").infer(inputs={"X": x}))
        np.testing.assert_array_equal(response.outputs["Y"].to_numpy(), x * 2)
        assert server.models()[("ghost", 1)].state == "UNAVAILABLE"
    finally:
        server.stop()


def test_runtime_model_py_is_accepted_only_for_a_python_based_backend(layout, monkeypatch):
    from naiad.backends import python_based
    from naiad.protos import model_config_pb2
    from naiad.repository import field_support

    backends, _ = layout
    monkeypatch.setenv(python_based.ENVIRONMENT_VARIABLE, str(backends))
    ModelConfig = model_config_pb2.ModelConfig
    assert field_support.refusal(ModelConfig(name="m", backend="scale", runtime="model.py")) is None
    refused = field_support.refusal(ModelConfig(name="m", backend="pytorch", runtime="model.py"))
    assert refused is not None and "runtime" in refused


def test_the_runtime_is_named_with_auto_complete_off_too(layout, tmp_path, monkeypatch):
    # Triton's core names it as it picks the backend, whatever --strict-model-config says.
    from naiad.backends import python_based
    from naiad.repository.autocomplete import load_completed_config

    backends, _ = layout
    monkeypatch.setenv(python_based.ENVIRONMENT_VARIABLE, str(backends))
    model = tmp_path / "strict"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(
        'backend: "scale"\nmax_batch_size: 0\n'
        'input [{ name: "X" data_type: TYPE_FP32 dims: [ -1 ] }]\n'
        'output [{ name: "Y" data_type: TYPE_FP32 dims: [ -1 ] }]\n'
    )
    config = load_completed_config(model, "strict", auto_complete=False)
    assert (config.backend, config.runtime, config.default_model_filename) == (
        "scale",
        "model.py",
        "",
    )
