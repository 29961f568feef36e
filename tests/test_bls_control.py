"""Model management from a model: pb_utils.load_model / unload_model / is_model_ready,
black-box over HTTP. The model bls_control (tests/pipeline_models/bls_control) runs the
JSON command of each request and answers what happened, exceptions included, so the
tests check what a model sees; tests/test_bls_control_triton.py sends the same
commands to the real Triton 2.51.

One explicit-mode server loads bls_control at start; add_sub (model_repository) is in
the repository, not loaded. init_loader loads add_sub from its initialize.
"""

from __future__ import annotations

import base64
import json
import shutil
import time
from pathlib import Path

import pytest
import requests
from model_control_support import ADD_SUB_MODEL, add_sub_config
from server_harness import EXAMPLE_MODELS, NaiadServer

PIPELINE_MODELS = Path(__file__).resolve().parent / "pipeline_models"

INIT_LOADER = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        try:
            pb_utils.load_model(TARGET)
            self.loaded = "yes"
        except Exception as exc:
            self.loaded = f"{type(exc).__name__}: {exc}"

    def execute(self, requests):
        result = {"loaded": self.loaded, "ready": pb_utils.is_model_ready(TARGET)}
        out = np.array([json.dumps(result).encode()], dtype=np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("RESULT", out)]) for _ in requests]
"""


def build_repository(dest: Path) -> Path:
    shutil.copytree(EXAMPLE_MODELS / "add_sub", dest / "add_sub")
    shutil.copytree(PIPELINE_MODELS / "bls_control", dest / "bls_control")
    (dest / "init_loader" / "1").mkdir(parents=True)
    config = (dest / "bls_control" / "config.pbtxt").read_text()
    (dest / "init_loader" / "config.pbtxt").write_text(config.replace("bls_control", "init_loader"))
    (dest / "init_loader" / "1" / "model.py").write_text(INIT_LOADER.replace("TARGET", '"add_sub"'))
    # Load from their initialize what waits for that initialize: themselves, each other.
    for name, target in (("init_self", "init_self"), ("cyc_a", "cyc_b"), ("cyc_b", "cyc_a")):
        (dest / name / "1").mkdir(parents=True)
        (dest / name / "config.pbtxt").write_text(config.replace("bls_control", name))
        (dest / name / "1" / "model.py").write_text(INIT_LOADER.replace("TARGET", f'"{target}"'))
    return dest


def run(url: str, command: dict, model: str = "bls_control") -> dict:
    """What the model saw running `command`."""
    body = {
        "inputs": [
            {"name": "COMMAND", "datatype": "BYTES", "shape": [1], "data": [json.dumps(command)]}
        ]
    }
    reply = requests.post(f"{url}/v2/models/{model}/infer", json=body, timeout=120)
    assert reply.status_code == 200, reply.text
    return json.loads(reply.json()["outputs"][0]["data"][0])


def override(name: str = "add_sub", max_batch_size: int = 4) -> str:
    config = add_sub_config(name, max_batch_size=max_batch_size)
    del config["name"]
    return json.dumps(config)


def sent_files() -> dict:
    return {"file:1/model.py": base64.b64encode(ADD_SUB_MODEL.encode()).decode()}


def index(url: str) -> dict:
    entries = requests.post(url + "/v2/repository/index", timeout=30).json()
    return {(e["name"], e.get("version")): e.get("state") for e in entries}


# What an instance's errors start with (python_backend's words, checked against
# Triton 2.51 by test_bls_control_triton.py).
LOAD_FAILED = "Failed to load model: Failed to process the request for model 'bls_control_0_0', "
UNLOAD_FAILED = (
    "Failed to unload model: Failed to process the request for model 'bls_control_0_0', "
)
NOT_EXPLICIT = "message: explicit model load / unload is not allowed if polling is enabled"


DRAIN_OUTLASTS_RUN_S = 300


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repository = build_repository(tmp_path_factory.mktemp("bls-control-repository"))
    # A drain that outlasts run()'s 120 s: a load or unload from execute that waited for
    # its own request to drain (it never would) fails run() instead of returning late.
    args = [
        "--model-control-mode=explicit",
        "--load-model=bls_control",
        f"--exit-timeout-secs={DRAIN_OUTLASTS_RUN_S}",
    ]
    with NaiadServer(
        repository, log_dir=tmp_path_factory.mktemp("bls-control"), extra_args=args
    ) as server:
        yield server


def test_load_then_infer_unload_and_readiness(server):
    url = server.url
    assert run(url, {"op": "ready", "name": "add_sub"}) == {"ok": True, "ready": False}
    result = run(url, {"op": "load_and_infer", "name": "add_sub", "value": 2.0})
    assert result == {"ok": True, "output0": [4.0] * 16}
    assert run(url, {"op": "ready", "name": "add_sub"}) == {"ok": True, "ready": True}
    assert run(url, {"op": "ready", "name": "add_sub", "version": "1"})["ready"] is True
    assert run(url, {"op": "ready", "name": "add_sub", "version": "2"})["ready"] is False
    # A client sees it too.
    assert requests.get(url + "/v2/models/add_sub/ready", timeout=10).status_code == 200
    assert run(url, {"op": "unload", "name": "add_sub"}) == {"ok": True}
    assert run(url, {"op": "ready", "name": "add_sub"})["ready"] is False
    result = run(url, {"op": "infer", "name": "add_sub", "value": 1.0})
    assert result["ok"] is False
    assert "Model 'add_sub' is not ready" in result["error"]
    # Unloading a model that is not loaded succeeds, as in Triton.
    assert run(url, {"op": "unload", "name": "nope"}) == {"ok": True}


def test_load_with_a_config_override(server):
    url = server.url
    command = {"op": "load", "name": "add_sub", "config": override(max_batch_size=4)}
    assert run(url, command) == {"ok": True}
    config = requests.get(url + "/v2/models/add_sub/config", timeout=10).json()
    assert config["max_batch_size"] == 4
    assert run(url, {"op": "infer", "name": "add_sub", "value": 0.5})["output0"] == [1.0] * 16
    assert run(url, {"op": "unload", "name": "add_sub"}) == {"ok": True}


def test_load_with_files_of_a_model_not_in_the_repository(server):
    url = server.url
    command = {"op": "load", "name": "sent", "config": override(), "files": sent_files()}
    assert run(url, command) == {"ok": True}
    assert run(url, {"op": "infer", "name": "sent", "value": 1.5})["output0"] == [3.0] * 16
    assert run(url, {"op": "ready", "name": "sent"})["ready"] is True
    assert run(url, {"op": "unload", "name": "sent"}) == {"ok": True}
    assert run(url, {"op": "ready", "name": "sent"})["ready"] is False


@pytest.mark.parametrize(
    "command, reason",
    [
        ({"op": "load", "name": "nope"}, "failed to load 'nope', failed to poll from model"),
        (
            {"op": "load", "name": "add_sub", "config": "{bad"},
            "failed to load 'add_sub', failed to poll from model repository: Invalid config",
        ),
        (
            {"op": "load", "name": "add_sub", "config": json.dumps(add_sub_config("other"))},
            "failed to load 'add_sub', failed to poll from model repository",
        ),
        (
            {"op": "load", "name": "x", "files": sent_files()},
            "failed to load 'x', failed to poll from model repository: 'file:' parameters",
        ),
    ],
)
def test_load_errors_raise_with_the_servers_reason(server, command, reason):
    result = run(server.url, command)
    assert result["ok"] is False
    assert result["type"] == "TritonModelException"
    assert result["error"].startswith(LOAD_FAILED + "message: " + reason), result["error"]
    # The model keeps serving.
    assert run(server.url, {"op": "ready", "name": "bls_control"})["ready"] is True


def test_files_not_a_dict_and_bad_versions_raise(server):
    result = run(server.url, {"op": "load_bad_files", "name": "add_sub", "config": "{}"})
    assert result == {
        "ok": False,
        "type": "TritonModelException",
        "error": "failed to load model 'add_sub', files should be a dictionary of file paths "
        "and file contents",
    }
    result = run(server.url, {"op": "ready", "name": "add_sub", "version": "abc"})
    assert result["type"] == "TritonModelException"
    assert result["error"] == (
        "Failed to check model readiness: Failed to process the request for model "
        "'bls_control_0_0', message: failed to get model version from specified version "
        "string 'abc' (details: stol), version should be an integral value > 0"
    )
    result = run(server.url, {"op": "ready", "name": "add_sub", "version": "-3"})
    assert result["error"].endswith(
        "message: failed to get model version from specified version string '-3', "
        "version should be an integral value > 0"
    )
    assert run(server.url, {"op": "ready", "name": "nope"}) == {"ok": True, "ready": False}


def test_a_model_initialize_loads_another_at_start_and_at_runtime(tmp_path):
    """Triton 2.51 answers "Server not ready" to a load made while it starts (README:
    differences); Naiad loads it. A later load of the caller works on both."""
    repository = build_repository(tmp_path / "models")
    args = [
        "--model-control-mode=explicit",
        "--load-model=init_loader",
        "--model-load-thread-count=1",
    ]
    with NaiadServer(repository, log_dir=tmp_path, extra_args=args) as server:
        result = run(server.url, {}, model="init_loader")
        assert result == {"loaded": "yes", "ready": True}
        assert index(server.url)[("add_sub", "1")] == "READY"


def test_a_model_reloading_a_composing_model_from_initialize_reloads_its_ensemble(tmp_path):
    """init_loader's initialize loads add_sub again (its file changed) with one load
    slot: the model is answered, and ensemble_add_sub is loaded again after add_sub
    and serves."""
    repository = build_repository(tmp_path / "models")
    shutil.copytree(PIPELINE_MODELS / "ensemble_add_sub", repository / "ensemble_add_sub")
    args = [
        "--model-control-mode=explicit",
        "--load-model=add_sub",
        "--load-model=ensemble_add_sub",
        "--model-load-thread-count=1",
    ]
    data = [
        {"name": n, "shape": [1, 16], "datatype": "FP32", "data": [1.0] * 16}
        for n in ("INPUT0", "INPUT1")
    ]

    def served_by_the_ensemble(url: str) -> int:
        answer = requests.post(
            f"{url}/v2/models/ensemble_add_sub/infer", json={"inputs": data}, timeout=30
        )
        assert answer.status_code == 200, answer.text
        stats = requests.get(f"{url}/v2/models/ensemble_add_sub/stats", timeout=30).json()
        return stats["model_stats"][0]["inference_count"]

    with NaiadServer(repository, log_dir=tmp_path, extra_args=args) as server:
        assert served_by_the_ensemble(server.url) == 1
        model_file = repository / "add_sub" / "1" / "model.py"
        model_file.write_text(model_file.read_text() + "\n# changed\n")
        reply = requests.post(
            f"{server.url}/v2/repository/models/init_loader/load", json={}, timeout=60
        )
        assert reply.status_code == 200, reply.text
        assert run(server.url, {}, model="init_loader") == {"loaded": "yes", "ready": True}
        # The ensemble is loaded again once add_sub's load is done (the model's call
        # has its answer by then): its statistics start again.
        deadline = time.monotonic() + 30
        while server.stderr_text().count("successfully loaded 'ensemble_add_sub'") < 2:
            assert time.monotonic() < deadline, server.stderr_text()[-3000:]
            time.sleep(0.05)
        assert index(server.url)[("ensemble_add_sub", "1")] == "READY"
        assert served_by_the_ensemble(server.url) == 1


def test_loads_from_initialize_that_wait_for_it_are_refused_not_hung(tmp_path):
    """init_self loads itself; cyc_a loads cyc_b, whose initialize loads cyc_a: each
    waits on a load that waits for it (its model's lock), so the server refuses it."""
    repository = build_repository(tmp_path / "models")
    args = ["--model-control-mode=explicit", "--load-model=init_self", "--load-model=cyc_a"]
    with NaiadServer(repository, log_dir=tmp_path, extra_args=args) as server:
        result = run(server.url, {}, model="init_self")
        assert result == {
            "loaded": "TritonModelException: Failed to load model: Failed to process the "
            "request for model 'init_self_0_0', message: failed to load 'init_self' from the "
            "initialize of 'init_self': it waits for that initialize (init_self -> init_self)",
            "ready": True,
        }
        assert run(server.url, {}, model="cyc_a") == {"loaded": "yes", "ready": True}
        assert run(server.url, {}, model="cyc_b") == {
            "loaded": "TritonModelException: Failed to load model: Failed to process the "
            "request for model 'cyc_b_0_0', message: failed to load 'cyc_a' from the "
            "initialize of 'cyc_b': it waits for that initialize (cyc_b -> cyc_a -> cyc_b)",
            "ready": True,
        }


def test_a_model_reloading_itself_from_execute_is_answered_and_serves_on(server):
    url = server.url
    config = json.loads(requests.get(url + "/v2/models/bls_control/config", timeout=10).text)
    assert config["instance_group"][0]["count"] == 1
    config["instance_group"][0]["count"] = 2
    command = {"op": "load", "name": "bls_control", "config": json.dumps(config)}
    # Answered at all: the old version, which runs this request, could only drain after.
    assert run(url, command) == {"ok": True}
    reloaded = requests.get(url + "/v2/models/bls_control/config", timeout=10).json()
    assert reloaded["instance_group"][0]["count"] == 2
    assert run(url, {"op": "ready", "name": "bls_control"}) == {"ok": True, "ready": True}


def test_a_model_unloading_itself_returns_and_goes(server):
    url = server.url
    second = server  # the module's server: bls_control is loaded again afterwards
    # Answered at all: the unload did not wait for this request (its own) to drain.
    assert run(url, {"op": "unload_self"}) == {"ok": True}
    deadline = time.monotonic() + 30
    while requests.get(url + "/v2/models/bls_control/ready", timeout=10).status_code == 200:
        assert time.monotonic() < deadline, "bls_control is still ready"
        time.sleep(0.1)
    load = requests.post(url + "/v2/repository/models/bls_control/load", timeout=120)
    assert load.status_code == 200, load.text
    assert run(second.url, {"op": "ready", "name": "bls_control"})["ready"] is True


def test_non_explicit_mode_refuses_loads_and_unloads(tmp_path):
    repository = build_repository(tmp_path / "models")
    with NaiadServer(repository, log_dir=tmp_path, extra_args=[]) as server:
        for command, prefix in (
            ({"op": "load", "name": "add_sub"}, LOAD_FAILED),
            ({"op": "unload", "name": "add_sub"}, UNLOAD_FAILED),
        ):
            result = run(server.url, command)
            assert result == {
                "ok": False,
                "type": "TritonModelException",
                "error": prefix + NOT_EXPLICIT,
            }
        assert run(server.url, {"op": "ready", "name": "add_sub"})["ready"] is True
