"""The checksum repository agent and a warned config field over gRPC (tritonclient.grpc):
the twins of tests/test_model_config_support.py's HTTP tests. Where HTTP answers 500, gRPC
answers INTERNAL, with the same message."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from checksum_support import GOOD_MD5, IDENTITY, WRONG_MD5, checksum, write_model
from server_harness import NaiadServer
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.timeout(300)


def _infer(client, model: str) -> list:
    tensor = grpcclient.InferInput("INPUT0", [1, 1], "FP32")
    tensor.set_data_from_numpy(np.array([[2.5]], dtype=np.float32))
    return client.infer(model, [tensor]).as_numpy("OUTPUT0").tolist()


@pytest.fixture
def explicit(tmp_path):
    repo = tmp_path / "models"
    write_model(repo, "guarded", checksum("1/model.py", GOOD_MD5))
    write_model(repo, "wrong", checksum("1/model.py", WRONG_MD5))
    write_model(repo, "hinted", "optimization { cuda { graphs: true } }")
    server = NaiadServer(repo, log_dir=tmp_path, extra_args=["--model-control-mode=explicit"])
    with server.start(wait="live"):
        with grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}") as client:
            yield client, repo


def test_grpc_load_checks_the_files_each_time(explicit):
    client, repo = explicit
    client.load_model("guarded")
    assert _infer(client, "guarded") == [[2.5]]
    tampered = IDENTITY + "\n# changed\n"
    (repo / "guarded" / "1" / "model.py").write_text(tampered)
    with pytest.raises(InferenceServerException) as caught:
        client.load_model("guarded")
    assert caught.value.status() == "StatusCode.INTERNAL"
    got = hashlib.md5(tampered.encode()).hexdigest()
    assert (
        f"Mismatched MD5 hash for file 1/model.py, expect: {GOOD_MD5}, got: {got}"
        in caught.value.message()
    )
    assert _infer(client, "guarded") == [[2.5]]  # the verified version still serves


def test_grpc_load_of_a_mismatch_fails_and_the_index_says_why(explicit):
    client, _repo = explicit
    with pytest.raises(InferenceServerException) as caught:
        client.load_model("wrong")
    assert caught.value.status() == "StatusCode.INTERNAL"
    assert f"Mismatched MD5 hash for file 1/model.py, expect: {WRONG_MD5}, got: {GOOD_MD5}" in (
        caught.value.message()
    )
    models = {m.name: m for m in client.get_model_repository_index().models}
    assert models["wrong"].state == "UNAVAILABLE"
    assert models["wrong"].reason.startswith("Mismatched MD5 hash for file 1/model.py")


def test_grpc_index_gives_the_reason_a_hint_is_ignored(explicit):
    client, _repo = explicit
    client.load_model("hinted")
    models = {m.name: m for m in client.get_model_repository_index().models}
    assert models["hinted"].state == "READY"
    assert "field 'optimization.cuda' of model 'hinted' is ignored" in models["hinted"].reason
    assert _infer(client, "hinted") == [[2.5]]
