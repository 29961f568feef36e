"""An s3:// repository driven with tritonclient.grpc: the gRPC twin of
tests/test_cloud_repository.py's HTTP checks (infer, RepositoryModelLoad/Unload, the
repository index), against moto's S3 in server mode with signed requests."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from cloud_repository_support import S3, CloudServer, add_sub_files, files_under, wait_until
from model_control_support import add_sub_client_inputs

pytest.importorskip("boto3")
pytest.importorskip("moto")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    logs = tmp_path_factory.mktemp("logs")
    store = S3(logs)
    store.upload("repo", add_sub_files())
    cache = tmp_path_factory.mktemp("cache")
    naiad = CloudServer(
        [store.url("repo")],
        {**store.env(), "TRITON_AWS_MOUNT_DIRECTORY": str(cache)},
        log_dir=logs,
        extra_args=["--model-control-mode", "explicit", "--load-model", "add_sub"],
    )
    naiad.cache = cache
    try:
        naiad.start()
        yield naiad
    finally:
        naiad.stop()
        store.server.stop()


def test_grpc_infer_load_and_unload_of_a_model_from_s3(server):
    with grpcclient.InferenceServerClient(f"{server.host}:{server.grpc_port}") as client:
        result = client.infer("add_sub", add_sub_client_inputs(grpcclient, 3.0))
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((1, 16), 4.0, np.float32))
        client.unload_model("add_sub")
        wait_until(lambda: not client.is_model_ready("add_sub"), "the unload")
        wait_until(lambda: files_under(server.cache) == ["repository-0"], "the copy to go")
        index = client.get_model_repository_index(as_json=True)["models"]
        assert [(m["name"], m.get("state")) for m in index] == [("add_sub", "UNAVAILABLE")]

        client.load_model("add_sub")
        assert client.is_model_ready("add_sub")
        result = client.infer("add_sub", add_sub_client_inputs(grpcclient, 5.0))
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((1, 16), 6.0, np.float32))
