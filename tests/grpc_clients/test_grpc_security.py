"""tests/test_security.py's error-message check over gRPC: what a tritonclient.grpc user
sees of failed loads, the repository index and bad requests names no host path and no
secret of the server's environment."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from security_support import leaks_in, server_with_broken_models
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pbg
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.timeout(300)


def test_grpc_errors_name_no_host_path_or_secret(tmp_path, monkeypatch):
    host_dir = tmp_path / "host-private-91c2"
    server = server_with_broken_models(host_dir, tmp_path, monkeypatch)
    messages: dict[str, str] = {}
    with (
        server.start(),
        grpcclient.InferenceServerClient(f"{server.host}:{server.grpc_port}") as client,
    ):
        for model in ("bad_config", "no_model_file", "bad_onnx", "init_fails", "not_in_repo"):
            with pytest.raises(InferenceServerException) as info:
                client.load_model(model)
            messages[f"load {model}"] = str(info.value)
        bad = grpcclient.InferInput("INPUT0", [1, 3], "FP32")
        bad.set_data_from_numpy(np.zeros((1, 3), np.float32))
        with pytest.raises(InferenceServerException) as info:
            client.infer("add_sub", [bad])
        messages["wrong shape"] = str(info.value)
        with pytest.raises(InferenceServerException) as info:
            client.register_system_shared_memory("r", "/naiad_no_such_object", 64)
        messages["unknown region"] = str(info.value)
        with grpc.insecure_channel(f"{server.host}:{server.grpc_port}") as channel:
            index = pbg.GRPCInferenceServiceStub(channel).RepositoryIndex(
                pb.RepositoryIndexRequest()
            )
        messages["index"] = str(index)
    found = {what: leaks_in(text, host_dir) for what, text in messages.items()}
    assert {what: leak for what, leak in found.items() if leak} == {}
    assert "bad_config/config.pbtxt" in messages["load bad_config"]
    assert "bad_config/config.pbtxt" in messages["index"]
