"""Triton's system shared-memory extension over gRPC with tritonclient.grpc (and its
utils.shared_memory), against a real `naiad serve`: registration RPCs and their status
codes, inputs and outputs in regions, mixed with raw contents, BYTES, errors, unregister
while in use, and no mapping left after unregister (/proc)."""

from __future__ import annotations

import struct
import threading
import time

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
from server_harness import NaiadServer
from shm_support import SHM_MODELS, Region, cuda_in_out, held_by, wait_released
from tritonclient.utils import InferenceServerException

TIMEOUT = 20


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with NaiadServer(SHM_MODELS, log_dir=tmp_path_factory.mktemp("grpc_shm")) as running:
        yield running


def _in_flight(server) -> int:
    arena = requests.get(f"{server.url}/v2/naiad/arena", timeout=10).json()
    return arena["requests_in_flight"]


@pytest.fixture
def client(server):
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    yield client
    client.unregister_system_shared_memory()
    client.close()


def _error(call) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as caught:
        call()
    return caught.value


def _stats(server) -> dict:
    return requests.get(server.url + "/v2/naiad/shm", timeout=TIMEOUT).json()


def test_register_status_unregister(client):
    with Region("g_status", 4096) as a:
        client.register_system_shared_memory("a", a.key, 1024, offset=128)
        status = client.get_system_shared_memory_status(as_json=True)
        assert status == {
            "regions": {"a": {"name": "a", "key": a.key, "offset": "128", "byte_size": "1024"}}
        }
        assert client.get_system_shared_memory_status("a", as_json=True) == status
        err = _error(lambda: client.register_system_shared_memory("a", a.key, 16))
        assert err.status() == "StatusCode.ALREADY_EXISTS"
        assert err.message() == "shared memory region 'a' already in manager"
        err = _error(lambda: client.register_system_shared_memory("b", a.key, 4097))
        assert err.status() == "StatusCode.INVALID_ARGUMENT"
        assert err.message().startswith("failed to register shared memory region 'b': invalid args")
        for key in ("/naiad_missing", "/a/b", "/.."):
            err = _error(lambda k=key: client.register_system_shared_memory("b", k, 16))
            assert err.status() == "StatusCode.INTERNAL"
            assert err.message() == f"Unable to open shared memory region: '{key}'"
        err = _error(lambda: client.get_system_shared_memory_status("zz"))
        assert err.status() == "StatusCode.NOT_FOUND"
        assert err.message() == "Unable to find system shared memory region: 'zz'"
        client.unregister_system_shared_memory("zz")  # unknown: a no-op, as Triton
        client.unregister_system_shared_memory("a")
        assert client.get_system_shared_memory_status(as_json=True) == {}


def test_inputs_and_outputs_in_shm(server, client):
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    with Region("g_io", 8192) as region:
        region.write([data], offset=4096 + 16)
        client.register_system_shared_memory("io", region.key, 4096, offset=4096)
        inp = grpcclient.InferInput("INPUT0", [3, 4], "FP32")
        inp.set_shared_memory("io", data.nbytes, offset=16)
        out = grpcclient.InferRequestedOutput("OUTPUT0")
        out.set_shared_memory("io", data.nbytes, offset=1024)
        before = _stats(server)
        result = client.infer("shm_identity", [inp], outputs=[out])
        after = _stats(server)
        np.testing.assert_array_equal(region.read(np.float32, [3, 4], offset=4096 + 1024), data)
        response = result.get_response()
        assert [o.name for o in response.outputs] == ["OUTPUT0"]
        assert list(response.outputs[0].shape) == [3, 4]
        assert list(response.raw_output_contents) == [b""]  # as Triton: no data
        # Alone in its batch: read in place by the worker, no copy.
        assert after["input_copies"] - before["input_copies"] == 0
        assert after["inputs_in_place"] - before["inputs_in_place"] == 1
        assert after["gathered_bytes"] == before["gathered_bytes"]


def test_mixed_shm_and_raw(client):
    a = np.array([[1, 2, 3, 4]], dtype=np.float32)
    b = np.array([[5, 6, 7]], dtype=np.int32)
    with Region("g_mixed", 1024) as region:
        region.write([a])
        client.register_system_shared_memory("m", region.key, 1024)
        in0 = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
        in0.set_shared_memory("m", 16)
        in1 = grpcclient.InferInput("INPUT1", [1, 3], "INT32")
        in1.set_data_from_numpy(b)
        out0 = grpcclient.InferRequestedOutput("OUTPUT0")
        out0.set_shared_memory("m", 16, offset=512)
        out1 = grpcclient.InferRequestedOutput("OUTPUT1")
        result = client.infer("shm_identity", [in0, in1], outputs=[out0, out1])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), b)
        np.testing.assert_array_equal(region.read(np.float32, [1, 4], offset=512), a)
        # The raw input first, the shm one second: raw_input_contents counts raw ones only.
        in1b = grpcclient.InferInput("INPUT1", [1, 3], "INT32")
        in1b.set_data_from_numpy(b * 2)
        plain0 = grpcclient.InferRequestedOutput("OUTPUT0")
        result = client.infer("shm_identity", [in1b, in0], outputs=[out1, plain0])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), b * 2)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a)


def test_bytes_in_shm(client):
    items = [b"x", b"yz", b""]
    wire = b"".join(struct.pack("<I", len(i)) + i for i in items)
    with Region("g_bytes", 256) as region:
        region.write_bytes(wire)
        client.register_system_shared_memory("b", region.key, 256)
        inp = grpcclient.InferInput("INPUT0", [3], "BYTES")
        inp.set_shared_memory("b", len(wire))
        out = grpcclient.InferRequestedOutput("OUTPUT0")
        out.set_shared_memory("b", 64, offset=128)
        client.infer("shm_bytes", [inp], outputs=[out])
        assert bytes(region.read(np.uint8, [len(wire)], offset=128)) == wire
        bad = grpcclient.InferInput("INPUT0", [4], "BYTES")
        bad.set_shared_memory("b", len(wire))
        err = _error(lambda: client.infer("shm_bytes", [bad]))
        assert err.status() == "StatusCode.INVALID_ARGUMENT"
        assert "expected 4 string elements" in err.message()


def test_infer_errors(client):
    with Region("g_err", 64) as region:
        client.register_system_shared_memory("r", region.key, 64)
        cases = []
        inp = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
        inp.set_shared_memory("zz", 16)
        cases.append(
            ([inp], None, "StatusCode.NOT_FOUND", "Unable to find shared memory region: 'zz'")
        )
        inp = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
        inp.set_shared_memory("r", 16, offset=56)
        cases.append(
            (
                [inp],
                None,
                "StatusCode.INVALID_ARGUMENT",
                "Invalid offset + byte size for shared memory region: 'r'",
            )
        )
        ok = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
        ok.set_shared_memory("r", 16)
        small = grpcclient.InferRequestedOutput("OUTPUT0")
        small.set_shared_memory("r", 8, offset=32)
        cases.append(
            (
                [ok],
                [small],
                "StatusCode.INTERNAL",
                "shared memory size specified with the request for output 'OUTPUT0' "
                "(8 bytes) should be at least 16 bytes to hold the results",
            )
        )
        for inputs, outputs, code, message in cases:
            err = _error(lambda i=inputs, o=outputs: client.infer("shm_identity", i, outputs=o))
            assert (err.status(), err.message()) == (code, message)


def test_unregister_while_in_use_and_no_leak(server, client):
    data = np.full((1, 4), 7, np.float32)
    with Region("g_inuse", 4096) as region:
        region.write([data])
        client.register_system_shared_memory("u", region.key, 4096)
        inp = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
        inp.set_shared_memory("u", 16)
        out = grpcclient.InferRequestedOutput("OUTPUT0")
        out.set_shared_memory("u", 16, offset=2048)
        result = {}

        def slow():
            result["r"] = client.infer(
                "shm_identity", [inp], outputs=[out], parameters={"delay_ms": 800}
            )

        thread = threading.Thread(target=slow)
        thread.start()
        # Unregistered once the slow request is in flight, its region resolved (or, on a
        # machine slow enough, after it was answered: then nothing is in use).
        deadline = time.monotonic() + 10
        while thread.is_alive() and _in_flight(server) == 0:
            assert time.monotonic() < deadline, "the slow request never arrived"
            time.sleep(0.01)
        other = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        other.unregister_system_shared_memory("u")
        assert other.get_system_shared_memory_status(as_json=True) == {}
        err = _error(lambda: other.infer("shm_identity", [inp]))
        assert err.status() == "StatusCode.NOT_FOUND"
        thread.join()
        assert "r" in result
        np.testing.assert_array_equal(region.read(np.float32, [1, 4], offset=2048), data)
        assert wait_released(server.pid, region.key) == []
        assert held_by(server.pid, region.key) == []
        other.close()


def test_cuda_regions_over_grpc(server, client):
    """Triton's CUDA shared-memory RPCs with tritonclient.grpc's cuda_shared_memory: a
    device buffer registered by its IPC handle, an input read from it and an output
    written into another, the status as Triton lists it, and unregister."""
    from naiad.memory import cuda_ipc

    reason = cuda_ipc.unavailable_reason(0)
    if reason is not None:
        pytest.skip(f"CUDA shared memory: {reason}")
    import tritonclient.utils.cuda_shared_memory as cudashm

    data = np.arange(16, dtype=np.float32).reshape(2, 8)
    with cuda_in_out(client, data) as (handle_in, handle_out):
        status = client.get_cuda_shared_memory_status(as_json=True)["regions"]
        assert status["cin"] == {"name": "cin", "byte_size": str(data.nbytes)}
        err = _error(
            lambda: client.register_cuda_shared_memory(
                "cin", cudashm.get_raw_handle(handle_in), 0, data.nbytes
            )
        )
        assert err.status() == "StatusCode.ALREADY_EXISTS"
        inp = grpcclient.InferInput("INPUT0", [2, 8], "FP32")
        inp.set_shared_memory("cin", data.nbytes)
        out = grpcclient.InferRequestedOutput("OUTPUT0")
        out.set_shared_memory("cout", data.nbytes)
        result = client.infer("shm_identity", [inp], outputs=[out])
        assert list(result.get_response().raw_output_contents) == [b""]
        got = cudashm.get_contents_as_numpy(handle_out, np.float32, [2, 8])
        np.testing.assert_array_equal(got, data)
        client.unregister_cuda_shared_memory("cin")
        assert list(client.get_cuda_shared_memory_status(as_json=True)["regions"]) == ["cout"]
        client.unregister_cuda_shared_memory()
        assert client.get_cuda_shared_memory_status(as_json=True) == {}
