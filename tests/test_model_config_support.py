"""A real `naiad serve` with configs that set fields Naiad refuses or only warns about, and
the checksum repository agent: at start-up and through explicit model control, with
tritonclient.http and raw HTTP (the gRPC twins: grpc_clients/test_grpc_model_config_support.py)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
from checksum_support import GOOD_MD5, IDENTITY, WRONG_MD5, write_model
from checksum_support import checksum as _checksum
from server_harness import NaiadServer
from tritonclient.utils import InferenceServerException


def _repository(root: Path) -> Path:
    repo = root / "models"
    write_model(repo, "good")
    write_model(repo, "checksum_good", _checksum("1/model.py", GOOD_MD5))
    write_model(repo, "checksum_bad", _checksum("1/model.py", WRONG_MD5))
    write_model(repo, "checksum_missing", _checksum("1/weights.bin", GOOD_MD5))
    write_model(
        repo, "other_agent", 'model_repository_agents { agents [ { name: "relocation" } ] }'
    )
    write_model(repo, "passive", "instance_group [ { count: 1 kind: KIND_CPU passive: true } ]")
    write_model(repo, "cuda_graphs", "optimization { cuda { graphs: true } }")
    return repo


def _index(url: str) -> dict[str, dict]:
    answer = requests.post(url + "/v2/repository/index", json={}, timeout=10)
    assert answer.status_code == 200, answer.text
    return {entry["name"]: entry for entry in answer.json()}


def _infer(client_module, url: str, model: str) -> np.ndarray:
    value = np.array([[2.5]], dtype=np.float32)
    with client_module.InferenceServerClient(url) as client:
        tensor = client_module.InferInput("INPUT0", [1, 1], "FP32")
        tensor.set_data_from_numpy(value)
        return client.infer(model, [tensor]).as_numpy("OUTPUT0")


@pytest.fixture(scope="module")
def started(tmp_path_factory):
    root = tmp_path_factory.mktemp("field_support")
    server = NaiadServer(_repository(root), log_dir=root, extra_args=["--exit-on-error=false"])
    # The models load before the ports open: once live, every load has ended.
    with server.start(wait="live"):
        yield server


def test_startup_index_shows_who_loaded_and_why_not(started):
    index = _index(started.url)
    for name in ("good", "checksum_good"):
        assert index[name]["state"] == "READY"
        assert "reason" not in index[name]
    assert index["checksum_bad"]["state"] == "UNAVAILABLE"
    assert index["checksum_bad"]["reason"] == (
        f"Mismatched MD5 hash for file 1/model.py, expect: {WRONG_MD5}, got: {GOOD_MD5}"
    )
    assert index["checksum_missing"]["reason"] == (
        "failed to open text file for read 1/weights.bin: No such file or directory"
    )
    assert "repo agent 'relocation'" in index["other_agent"]["reason"]
    assert index["passive"]["state"] == "UNAVAILABLE"
    assert (
        "field 'instance_group.passive' of model 'passive' is not supported"
        in (index["passive"]["reason"])
    )


def test_a_hint_loads_and_the_index_and_log_say_it_is_ignored(started):
    entry = _index(started.url)["cuda_graphs"]
    assert entry["state"] == "READY"
    assert "field 'optimization.cuda' of model 'cuda_graphs' is ignored" in entry["reason"]
    assert "field 'optimization.cuda' of model 'cuda_graphs' is ignored" in started.stderr_text()
    assert _infer(httpclient, f"127.0.0.1:{started.http_port}", "cuda_graphs").tolist() == [[2.5]]


def test_startup_log_names_the_refusals(started):
    log = started.stderr_text()
    assert f"Mismatched MD5 hash for file 1/model.py, expect: {WRONG_MD5}" in log
    assert "field 'instance_group.passive'" in log


def test_a_model_whose_checksum_matches_serves(started):
    assert _infer(httpclient, f"127.0.0.1:{started.http_port}", "checksum_good").tolist() == [[2.5]]


def test_a_refused_model_is_not_served(started):
    with httpclient.InferenceServerClient(f"127.0.0.1:{started.http_port}") as client:
        assert not client.is_model_ready("checksum_bad")
        assert client.is_model_ready("checksum_good")


def test_startup_with_a_bad_checksum_fails_by_default(tmp_path):
    repo = tmp_path / "models"
    write_model(repo, "good")
    write_model(repo, "checksum_bad", _checksum("1/model.py", WRONG_MD5))
    server = NaiadServer(repo, log_dir=tmp_path)
    server.start(wait=None)
    try:
        assert server.wait_exit(120) != 0
    finally:
        server.stop()
    assert "Mismatched MD5 hash for file 1/model.py" in server.stderr_text()
    assert "failed to load all models" in server.stderr_text()


@pytest.fixture
def explicit(tmp_path):
    repo = tmp_path / "models"
    write_model(repo, "guarded", _checksum("1/model.py", GOOD_MD5))
    write_model(repo, "missing", _checksum("1/weights.bin", GOOD_MD5))
    write_model(repo, "stranger", 'model_repository_agents { agents [ { name: "encrypt" } ] }')
    server = NaiadServer(repo, log_dir=tmp_path, extra_args=["--model-control-mode=explicit"])
    with server.start(wait="live"):
        yield server, repo


def test_explicit_load_checks_the_files_each_time(explicit):
    server, repo = explicit
    http_url = f"127.0.0.1:{server.http_port}"
    with httpclient.InferenceServerClient(http_url) as client:
        client.load_model("guarded")
    assert _infer(httpclient, http_url, "guarded").tolist() == [[2.5]]

    # The file changes on disk: the next load refuses it, and the version that was
    # verified keeps serving (a failed load leaves the serving model as it was).
    tampered = IDENTITY + "\n# changed\n"
    (repo / "guarded" / "1" / "model.py").write_text(tampered)
    got = hashlib.md5(tampered.encode()).hexdigest()
    with httpclient.InferenceServerClient(http_url) as client:
        with pytest.raises(InferenceServerException) as caught:
            client.load_model("guarded")
    assert (
        f"Mismatched MD5 hash for file 1/model.py, expect: {GOOD_MD5}, got: {got}"
        in caught.value.message()
    )
    assert caught.value.status() == "500"
    assert _infer(httpclient, http_url, "guarded").tolist() == [[2.5]]
    assert f"Mismatched MD5 hash for file 1/model.py, expect: {GOOD_MD5}" in server.stderr_text()


def test_explicit_load_of_a_missing_file_or_another_agent_fails(explicit):
    server, _repo = explicit
    answer = requests.post(f"{server.url}/v2/repository/models/missing/load", json={}, timeout=60)
    # Triton's status for a load that fails before the model is tried (a poll failure:
    # checked against Triton 2.51 with an agent it cannot find).
    assert answer.status_code == 500
    assert (
        "failed to open text file for read 1/weights.bin: No such file or directory"
        in (answer.json()["error"])
    )
    index = _index(server.url)
    assert index["missing"]["state"] == "UNAVAILABLE"
    assert "1/weights.bin" in index["missing"]["reason"]
    with httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}") as client:
        with pytest.raises(InferenceServerException) as caught:
            client.load_model("stranger")
    assert "repo agent 'encrypt'" in caught.value.message()


def test_a_load_override_is_checked_by_its_own_agents(explicit):
    # The config of a load request names the agent: the files are checked against it.
    server, _repo = explicit
    config_json = {
        "name": "guarded",
        "backend": "python",
        "max_batch_size": 8,
        "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [1]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [1]}],
        "model_repository_agents": {
            "agents": [{"name": "checksum", "parameters": {"MD5:1/model.py": WRONG_MD5}}]
        },
    }
    with httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}") as client:
        with pytest.raises(InferenceServerException) as caught:
            client.load_model("guarded", config=json.dumps(config_json))
    assert f"Mismatched MD5 hash for file 1/model.py, expect: {WRONG_MD5}" in caught.value.message()
