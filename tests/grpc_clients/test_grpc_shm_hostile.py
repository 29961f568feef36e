"""Hostile system shared-memory objects over gRPC (tritonclient.grpc), against a real
`naiad serve` (the HTTP cases: tests/test_shm_hostile.py): a FIFO as a key is refused at
once with INTERNAL, and a region truncated after registration fails the requests that
use it with INVALID_ARGUMENT, the region named, while the server and its workers keep
serving."""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from server_harness import NaiadServer
from shm_support import SHM_MODELS, Region, new_key
from tritonclient.utils import InferenceServerException

# Short enough that a server blocked on a FIFO fails the test instead of hanging it.
TIMEOUT = 10
REGION_BYTES = 64 * 1024


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("grpc_shm_hostile")
    with NaiadServer(SHM_MODELS, log_dir=log_dir) as running:
        yield running


@pytest.fixture
def client(server):
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    yield client
    client.unregister_system_shared_memory(client_timeout=TIMEOUT)
    client.close()


def _error(call) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as caught:
        call()
    return caught.value


def _assert_serving(client) -> None:
    assert client.is_server_ready(client_timeout=TIMEOUT)
    tensor = grpcclient.InferInput("INPUT0", [1, 2], "FP32")
    tensor.set_data_from_numpy(np.array([[1, 2]], np.float32))
    result = client.infer("shm_identity", [tensor], client_timeout=TIMEOUT)
    assert result.as_numpy("OUTPUT0").tolist() == [[1.0, 2.0]]
    text = grpcclient.InferInput("INPUT0", [1], "BYTES")
    text.set_data_from_numpy(np.array([b"ok"], object))
    result = client.infer("shm_bytes", [text], client_timeout=TIMEOUT)
    assert result.as_numpy("OUTPUT0").tolist() == [b"ok"]


def test_fifo_key_is_refused_without_blocking(client):
    key = new_key("gfifo")
    path = "/dev/shm" + key
    os.mkfifo(path, 0o600)
    try:
        err = _error(
            lambda: client.register_system_shared_memory("f", key, 64, client_timeout=TIMEOUT)
        )
        assert (err.status(), err.message()) == (
            "StatusCode.INTERNAL",
            f"Unable to open shared memory region: '{key}' (not a shared memory object)",
        )
        assert client.get_system_shared_memory_status(as_json=True, client_timeout=TIMEOUT) == {}
        _assert_serving(client)
    finally:
        os.unlink(path)


@pytest.mark.parametrize("datatype", ["FP32", "BYTES"])
def test_truncated_region_fails_that_request_only(client, datatype):
    if datatype == "FP32":
        model, shape, payload = "shm_identity", [1, 4], np.arange(4, dtype=np.float32).tobytes()
    else:
        model, shape = "shm_bytes", [1]
        payload = struct.pack("<I", 7) + b"hostile"
    with Region("gtrunc", REGION_BYTES) as region:
        region.write_bytes(payload)
        client.register_system_shared_memory("t", region.key, REGION_BYTES, client_timeout=TIMEOUT)
        tensor = grpcclient.InferInput("INPUT0", shape, datatype)
        tensor.set_shared_memory("t", len(payload))
        client.infer(model, [tensor], client_timeout=TIMEOUT)
        os.truncate("/dev/shm" + region.key, 0)
        err = _error(lambda: client.infer(model, [tensor], client_timeout=TIMEOUT))
        assert (err.status(), err.message()) == (
            "StatusCode.INVALID_ARGUMENT",
            f"shared memory region 't' was truncated after registration (its object "
            f"'{region.key}' has 0 bytes, the region needs offset 0 + byte_size {REGION_BYTES})",
        )
        _assert_serving(client)


def _truncated_in_use(name):
    return (
        f"shared memory region '{name}' was truncated while in use; unregister it and "
        "register it again"
    )


def test_input_truncated_while_the_model_reads_it_fails_that_request(client):
    """shm_identity truncates the object (request parameter `truncate`) after the
    request was admitted and before it reads its input in place: the race made certain.
    The request fails with the region named instead of answering the guard's zeros."""
    data = np.arange(1, 5, dtype=np.float32)
    with Region("grace_in", REGION_BYTES) as region:
        region.write([data])
        client.register_system_shared_memory("gi", region.key, REGION_BYTES, client_timeout=TIMEOUT)
        tensor = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
        tensor.set_shared_memory("gi", 16)
        result = client.infer("shm_identity", [tensor], client_timeout=TIMEOUT)
        assert result.as_numpy("OUTPUT0").tolist() == [[1.0, 2.0, 3.0, 4.0]]
        err = _error(
            lambda: client.infer(
                "shm_identity",
                [tensor],
                parameters={"truncate": region.key},
                client_timeout=TIMEOUT,
            )
        )
        assert (err.status(), err.message()) == (
            "StatusCode.INVALID_ARGUMENT",
            _truncated_in_use("gi"),
        )
        _assert_serving(client)


@pytest.mark.parametrize("model", ["shm_identity", "shm_ensemble"])
def test_output_truncated_before_it_is_written_fails_that_request(client, model):
    """The worker writes shm_identity's output, the frontend an ensemble's: either copy
    faults once the step truncated the object, and the request fails, the region named."""
    with Region("grace_out", REGION_BYTES) as region:
        client.register_system_shared_memory("go", region.key, REGION_BYTES, client_timeout=TIMEOUT)
        tensor = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
        tensor.set_data_from_numpy(np.array([[5, 6, 7, 8]], np.float32))
        output = grpcclient.InferRequestedOutput("OUTPUT0")
        output.set_shared_memory("go", 16)
        client.infer(model, [tensor], outputs=[output], client_timeout=TIMEOUT)
        assert region.read(np.float32, [4]).tolist() == [5.0, 6.0, 7.0, 8.0]
        err = _error(
            lambda: client.infer(
                model,
                [tensor],
                outputs=[output],
                parameters={"truncate": region.key},
                client_timeout=TIMEOUT,
            )
        )
        assert (err.status(), err.message()) == (
            "StatusCode.INVALID_ARGUMENT",
            _truncated_in_use("go"),
        )
        _assert_serving(client)
