"""Auto-complete and warmup for Python models, and the flags that turn auto-complete off,
black-box: a Python model's `auto_complete_config` (as in Triton's Python backend) fills a
config that has no config.pbtxt; `model_warmup` runs through any backend before READY and a
failing sample makes the model UNAVAILABLE; `--strict-model-config=true` and
`--disable-auto-complete-config` need a config.pbtxt as Triton does.
(tests/test_onnx_backend.py covers the onnxruntime side.)"""

from __future__ import annotations

import shutil
from pathlib import Path

import onnx_support
import pytest
import requests
from server_harness import NaiadServer

MODELS = Path(__file__).resolve().parent / "autocomplete_models"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("autocomplete") / "models"
    shutil.copytree(MODELS, root)
    naiad = NaiadServer(
        root,
        log_dir=tmp_path_factory.mktemp("autocomplete-logs"),
        extra_args=["--exit-on-error=false"],
    )
    naiad.start(wait="live", timeout=120)
    yield naiad
    naiad.stop()


@pytest.fixture(scope="module")
def index(server):
    entries = requests.post(server.url + "/v2/repository/index", json={}).json()
    return {entry["name"]: entry for entry in entries}


def _infer(server, model, name, values):
    body = {
        "inputs": [
            {
                "name": name,
                "datatype": "INT32",
                "shape": [len(values), len(values[0])],
                "data": values,
            }
        ]
    }
    return requests.post(f"{server.url}/v2/models/{model}/infer", json=body)


def test_python_auto_complete_config_fills_a_missing_config(server, index):
    assert index["py_auto"]["state"] == "READY", index["py_auto"]
    config = requests.get(server.url + "/v2/models/py_auto/config").json()
    assert config["backend"] == "python"
    assert config["max_batch_size"] == 8
    assert "dynamic_batching" in config
    assert [(i["name"], i["data_type"], i["dims"]) for i in config["input"]] == [
        ("IN", "TYPE_INT32", [2])
    ]
    assert [(o["name"], o["data_type"], o["dims"]) for o in config["output"]] == [
        ("OUT", "TYPE_INT32", [2])
    ]
    response = _infer(server, "py_auto", "IN", [[1, 2], [3, 4]])
    assert response.status_code == 200, response.text
    assert response.json()["outputs"][0]["data"] == [2, 4, 6, 8]


def test_python_auto_complete_config_error_makes_the_model_unavailable(index):
    entry = index["py_auto_bad"]
    assert entry["state"] == "UNAVAILABLE"
    assert (
        "input 'IN' in auto-complete-config function for model 'py_auto_bad' is missing 'dims' property"
        in entry["reason"]
    ), entry


def test_warmup_ran_every_sample_before_ready(server, index):
    assert index["py_warmup"]["state"] == "READY", index["py_warmup"]
    response = _infer(server, "py_warmup", "IN", [[5]])
    assert response.status_code == 200, response.text
    # 3 requests x count 2 + 1 request; the batch_size 0 sample is skipped (as Triton)
    assert response.json()["outputs"][0]["data"] == [8]
    stats = requests.get(server.url + "/v2/models/py_warmup/stats").json()["model_stats"][0]
    assert stats["inference_count"] == 1  # warmup does not count


def test_failing_warmup_makes_a_python_model_unavailable(server, index):
    entry = index["py_warmup_fail"]
    assert entry["state"] == "UNAVAILABLE"
    assert entry["reason"].startswith("failed to run warmup sample 'first': "), entry
    assert "cold engine" in entry["reason"]
    assert requests.get(server.url + "/v2/models/py_warmup_fail/ready").status_code == 400


@pytest.mark.parametrize(
    "flags", [["--strict-model-config=true"], ["--disable-auto-complete-config"]]
)
def test_without_auto_complete_a_config_is_needed(tmp_path, flags):
    onnx_support.write_model(tmp_path / "models", "m", onnx_support.add_sub(), None, {})
    naiad = NaiadServer(
        tmp_path / "models", log_dir=tmp_path, extra_args=["--exit-on-error=false", *flags]
    )
    naiad.start(wait="live", timeout=60)
    try:
        entries = requests.post(naiad.url + "/v2/repository/index", json={}).json()
        assert entries[0]["name"] == "m" and entries[0]["state"] == "UNAVAILABLE"
        assert "failed to open text file for read" in entries[0]["reason"], entries
    finally:
        naiad.stop()


def test_a_config_override_in_a_load_request_is_auto_completed(tmp_path):
    import json

    onnx_support.write_model(tmp_path / "models", "m", onnx_support.add_sub(), None, {})
    naiad = NaiadServer(
        tmp_path / "models", log_dir=tmp_path, extra_args=["--model-control-mode=explicit"]
    )
    naiad.start(wait="ready", timeout=60)
    try:
        override = json.dumps({"max_batch_size": 2, "backend": "onnxruntime"})
        response = requests.post(
            naiad.url + "/v2/repository/models/m/load", json={"parameters": {"config": override}}
        )
        assert response.status_code == 200, response.text
        config = requests.get(naiad.url + "/v2/models/m/config").json()
        assert config["max_batch_size"] == 2
        assert [i["name"] for i in config["input"]] == ["INPUT0", "INPUT1"]
        assert "dynamic_batching" in config
        bad = json.dumps(
            {
                "max_batch_size": 2,
                "backend": "onnxruntime",
                "input": [],
                "default_model_filename": "nope.onnx",
            }
        )
        response = requests.post(
            naiad.url + "/v2/repository/models/m/load", json={"parameters": {"config": bad}}
        )
        assert response.status_code == 500, response.text
        assert "nope.onnx" in response.json()["error"]
    finally:
        naiad.stop()


_SEQ_ECHO = Path(__file__).resolve().parent / "pipeline_models" / "seq_echo"


def _seq_warmup_sample(controls: bool) -> str:
    inputs = [("INPUT", "TYPE_INT32")]
    if controls:
        inputs += [("START", "TYPE_INT32"), ("END", "TYPE_INT32"), ("CORRID", "TYPE_UINT64")]
    samples = " ".join(
        f'inputs {{ key: "{name}" value: {{ data_type: {dtype} dims: [ 1 ] zero_data: true }} }}'
        for name, dtype in inputs
    )
    return f'model_warmup [ {{ name: "w" batch_size: 1 {samples} }} ]\n'


def test_a_sequence_models_warmup_goes_to_the_model_as_triton_sends_it(tmp_path):
    # As Triton 2.51: a warmup sample reaches the model as it is written, without the
    # sequence batcher's control inputs (correlation id 0, no flags), so a sample that
    # gives them warms the model up and one that does not fails in the model.
    repository = tmp_path / "models"
    for name, controls in (("seq_warm", True), ("seq_warm_bare", False)):
        shutil.copytree(_SEQ_ECHO, repository / name)
        config = repository / name / "config.pbtxt"
        text = config.read_text().replace('name: "seq_echo"', f'name: "{name}"')
        config.write_text(text + _seq_warmup_sample(controls))
    naiad = NaiadServer(repository, log_dir=tmp_path, extra_args=["--exit-on-error=false"])
    naiad.start(wait="live", timeout=120)
    try:
        index = requests.post(naiad.url + "/v2/repository/index", json={}).json()
        states = {entry["name"]: entry for entry in index}
        assert states["seq_warm"]["state"] == "READY", states["seq_warm"]
        bare = states["seq_warm_bare"]
        assert bare["state"] == "UNAVAILABLE"
        assert bare["reason"].startswith(
            "failed to run warmup sample 'w': Failed to process the request(s) for model "
            "'seq_warm_bare_0_0', message: AttributeError: 'NoneType' object has no attribute "
            "'as_numpy'"
        ), bare
        body = {
            "inputs": [{"name": "INPUT", "shape": [1, 1], "datatype": "INT32", "data": [3]}],
            "parameters": {"sequence_id": 5, "sequence_start": True},
        }
        r = requests.post(f"{naiad.url}/v2/models/seq_warm/infer", json=body)
        assert r.status_code == 200, r.text
        outputs = {o["name"]: o["data"] for o in r.json()["outputs"]}
        assert outputs == {"TOTAL": [3], "CTRL": [1, 0], "CORRID_OUT": ["5"]}
    finally:
        naiad.stop()
