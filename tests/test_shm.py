"""Triton's system (and CUDA) shared-memory extensions over HTTP, black-box against a real
`naiad serve`: registration and its checks, inputs and outputs in client regions (JSON
and binary requests, mixed with in-band tensors, BYTES), every error with Triton's status
code, copies counted, unregister while in use and under load, a killed client, and no
mapping or fd left in the server or its workers (/proc). Status codes and messages were
checked against Triton 2.51 (tests/test_shm_triton.py runs the differential check when
Triton is installed)."""

from __future__ import annotations

import base64
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
from server_harness import NaiadServer
from shm_support import SHM_MODELS, Region, held_by, new_key, wait_released
from tritonclient.utils import InferenceServerException

TIMEOUT = 20


ONNX_IDENTITY_CONFIG = """name: "shm_onnx_identity"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ 4 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 4 ] } ]
dynamic_batching { }
instance_group [ { count: 1, kind: KIND_CPU } ]
"""


def _models(tmp_path) -> Path:
    """SHM_MODELS (Python models) plus an ONNX identity: a framework backend, which takes
    each input as one batch-major tensor (the one copy into the batch)."""
    from onnx import TensorProto, helper
    from onnx_support import model, vi

    repository = tmp_path / "models"
    shutil.copytree(SHM_MODELS, repository)
    folder = repository / "shm_onnx_identity"
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(ONNX_IDENTITY_CONFIG)
    (folder / "1" / "model.onnx").write_bytes(
        model(
            [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])],
            [vi("INPUT0", TensorProto.FLOAT, ["batch", 4])],
            [vi("OUTPUT0", TensorProto.FLOAT, ["batch", 4])],
        )
    )
    return repository


@pytest.fixture(scope="module", params=["lane", "general"])
def server(request, tmp_path_factory):
    """Every test twice: with the C++ fast lane (which takes shm requests) and with
    --fast-lane=false (the Python general path only)."""
    extra = [] if request.param == "lane" else ["--fast-lane=false"]
    log_dir = tmp_path_factory.mktemp(f"shm_{request.param}")
    models = _models(log_dir)
    with NaiadServer(models, log_dir=log_dir, extra_args=extra) as running:
        running.lane = request.param == "lane"
        yield running


@pytest.fixture
def client(server):
    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    yield client
    client.unregister_system_shared_memory()
    client.close()


def post(server, path, body=None, **kwargs):
    return requests.post(server.url + path, json=body, timeout=TIMEOUT, **kwargs)


def register(server, name, key, byte_size, offset=0):
    return post(
        server,
        f"/v2/systemsharedmemory/region/{name}/register",
        {"key": key, "offset": offset, "byte_size": byte_size},
    )


def shm_input(name, region, byte_size, offset=0, shape=(1, 4), datatype="FP32"):
    params = {"shared_memory_region": region, "shared_memory_byte_size": byte_size}
    if offset:
        params["shared_memory_offset"] = offset
    return {"name": name, "shape": list(shape), "datatype": datatype, "parameters": params}


def shm_output(name, region, byte_size, offset=0):
    params = {"shared_memory_region": region, "shared_memory_byte_size": byte_size}
    if offset:
        params["shared_memory_offset"] = offset
    return {"name": name, "parameters": params}


def infer(server, model, body):
    return post(server, f"/v2/models/{model}/infer", body)


def stats(server) -> dict:
    return requests.get(server.url + "/v2/naiad/shm", timeout=TIMEOUT).json()


# -- registration ---------------------------------------------------------------------


def test_extensions_listed(server):
    extensions = requests.get(server.url + "/v2", timeout=TIMEOUT).json()["extensions"]
    assert "system_shared_memory" in extensions
    # Only what works: no CUDA here (tests/test_cuda_shm.py runs where a GPU is).
    from naiad.memory import cuda_ipc

    assert ("cuda_shared_memory" in extensions) == (cuda_ipc.unavailable_reason(0) is None)


def test_register_status_unregister(server, client):
    with Region("status", 256) as a, Region("status", 64) as b:
        client.register_system_shared_memory("a", a.key, 128, offset=64)
        client.register_system_shared_memory("b", b.key, 64)
        listed = requests.get(server.url + "/v2/systemsharedmemory/status").json()
        assert listed == [
            {"name": "a", "key": a.key, "offset": 64, "byte_size": 128},
            {"name": "b", "key": b.key, "offset": 0, "byte_size": 64},
        ]
        one = requests.get(server.url + "/v2/systemsharedmemory/region/b/status")
        assert one.status_code == 200 and one.json() == [listed[1]]
        assert client.get_system_shared_memory_status("a") == [listed[0]]
        client.unregister_system_shared_memory("a")
        assert [r["name"] for r in client.get_system_shared_memory_status()] == ["b"]
        # Unknown names are no error (Triton); unregister all.
        assert post(server, "/v2/systemsharedmemory/region/zz/unregister").status_code == 200
        assert post(server, "/v2/systemsharedmemory/unregister").status_code == 200
        assert client.get_system_shared_memory_status() == []
        missing = requests.get(server.url + "/v2/systemsharedmemory/region/a/status")
        assert missing.status_code == 404
        assert missing.json() == {"error": "Unable to find system shared memory region: 'a'"}


def test_registration_errors(server, client):
    with Region("regerr", 64) as region:
        assert register(server, "r", region.key, 64).status_code == 200
        dup = register(server, "r", region.key, 64)
        assert (dup.status_code, dup.json()) == (
            400,
            {"error": "shared memory region 'r' already in manager"},
        )
        missing = register(server, "x", "/naiad_no_such_object", 64)
        assert (missing.status_code, missing.json()) == (
            500,
            {"error": "Unable to open shared memory region: '/naiad_no_such_object'"},
        )
        # Path tricks: never opened, answered as a missing object (Triton's 500).
        for key in ("/a/b", "/..", "/.", "", "/", "/../../etc/passwd", region.key + "/x"):
            reply = register(server, "x", key, 8)
            assert reply.status_code == 500, key
            assert reply.json() == {"error": f"Unable to open shared memory region: '{key}'"}
        # Beyond the object's real size, offset counted (Triton's text, then the numbers).
        big = register(server, "x", region.key, 65)
        assert big.status_code == 400
        assert big.json()["error"] == (
            f"failed to register shared memory region 'x': invalid args (offset 0 + "
            f"byte_size 65 > size 64 of '{region.key}')"
        )
        assert register(server, "x", region.key, 60, offset=8).status_code == 400
        assert register(server, "x", region.key, 2**63, offset=2**63).status_code == 400
        zero = register(server, "x", region.key, 0)
        assert (zero.status_code, zero.json()) == (
            400,
            {
                "error": "failed to register shared memory region 'x': unable to process "
                "address spaceInvalid argument"
            },
        )
        path = "/v2/systemsharedmemory/region/x/register"
        no_key = post(server, path, {"byte_size": 8})
        assert (no_key.status_code, no_key.json()) == (
            400,
            {"error": "Shared memory register request has no 'key' field"},
        )
        no_size = post(server, path, {"key": region.key})
        assert (no_size.status_code, no_size.json()) == (
            400,
            {"error": "Shared memory register request has no 'byte_size' field"},
        )
        for bad in ({"key": region.key, "byte_size": -1}, {"key": region.key, "byte_size": "8"}):
            reply = post(server, path, bad)
            assert reply.status_code == 500
            assert reply.json() == {
                "error": "attempt to access JSON non-unsigned-integer as unsigned-integer"
            }
        assert post(server, path, data=b"{").status_code == 500
        assert requests.get(server.url + path).status_code == 405
        assert post(server, "/v2/systemsharedmemory/status").status_code == 405
        assert post(server, "/v2/systemsharedmemory/region/x/bogus").status_code == 404
        # Nothing of the refused registrations stayed.
        assert [r["name"] for r in client.get_system_shared_memory_status()] == ["r"]


def test_cuda_registration_without_cuda(server):
    from naiad.memory import cuda_ipc

    if cuda_ipc.unavailable_reason(0) is None:
        pytest.skip("CUDA is available here: tests/test_cuda_shm.py covers it")
    body = {
        "raw_handle": {"b64": base64.b64encode(b"h" * 64).decode()},
        "device_id": 0,
        "byte_size": 64,
    }
    reply = post(server, "/v2/cudasharedmemory/region/c/register", body)
    assert reply.status_code == 400  # Triton 2.51 on a host where CUDA cannot open it
    assert reply.json()["error"].startswith("failed to register shared memory region: invalid args")
    assert requests.get(server.url + "/v2/cudasharedmemory/status").json() == []
    assert post(server, "/v2/cudasharedmemory/unregister").status_code == 200
    assert requests.get(server.url + "/v2/cudasharedmemory/region/c/status").status_code == 404
    no_handle = post(server, "/v2/cudasharedmemory/region/c/register", {"byte_size": 8})
    assert (no_handle.status_code, no_handle.json()) == (
        400,
        {"error": "Shared memory register request has no 'raw_handle' field"},
    )


# -- inference --------------------------------------------------------------------------


def test_inputs_and_outputs_in_shm(server, client):
    data = np.arange(8, dtype=np.float32).reshape(2, 4)
    with Region("io_in", 4096) as rin, Region("io_out", 4096) as rout:
        rin.write([data], offset=64)
        client.register_system_shared_memory("in", rin.key, 1024, offset=0)
        client.register_system_shared_memory("out", rout.key, 1024, offset=0)
        inp = httpclient.InferInput("INPUT0", [2, 4], "FP32")
        inp.set_shared_memory("in", data.nbytes, offset=64)
        out = httpclient.InferRequestedOutput("OUTPUT0", binary_data=False)
        out.set_shared_memory("out", data.nbytes, offset=32)
        before = stats(server)
        result = client.infer("shm_identity", [inp], outputs=[out])
        after = stats(server)
        np.testing.assert_array_equal(rout.read(np.float32, [2, 4], offset=32), data)
        output = result.get_output("OUTPUT0")
        assert output == {"name": "OUTPUT0", "datatype": "FP32", "shape": [2, 4]}
        lanes = requests.get(server.url + "/v2/naiad/lanes", timeout=TIMEOUT).json()
        assert (lanes["lane_requests"] > 0) == server.lane
        # The request ran alone: its input was read in place by the worker, no copy.
        assert after["input_copies"] - before["input_copies"] == 0
        assert after["input_bytes"] - before["input_bytes"] == 0
        assert after["inputs_in_place"] - before["inputs_in_place"] == 1
        assert after["gathered_bytes"] == before["gathered_bytes"]


def test_model_without_batching_reads_input_in_place(server, client):
    data = np.arange(4, dtype=np.float32)
    with Region("nobatch", 4096) as region:
        region.write([data], offset=128)
        client.register_system_shared_memory("nb", region.key, 4096)
        before = stats(server)
        body = {
            "inputs": [shm_input("INPUT0", "nb", 16, offset=128, shape=[4])],
            "outputs": [shm_output("OUTPUT0", "nb", 16, offset=1024)],
        }
        reply = infer(server, "shm_nobatch", body)
        assert reply.status_code == 200, reply.text
        after = stats(server)
        np.testing.assert_array_equal(region.read(np.float32, [4], offset=1024), data)
        assert after["input_copies"] == before["input_copies"]
        assert after["inputs_in_place"] - before["inputs_in_place"] == 1


def test_offset_applied_once(server, client):
    # Triton 2.51 adds the registration offset twice (its registration of such a region
    # fails or reads the wrong bytes); the bytes at `offset` are the region's first.
    values = np.arange(4096, dtype=np.float32)
    with Region("offset", values.nbytes) as region:
        region.write([values])
        client.register_system_shared_memory("o", region.key, 256, offset=4100 * 4 // 4 * 1)
        body = {"inputs": [shm_input("INPUT0", "o", 16, offset=8)]}
        reply = infer(server, "shm_identity", body)
        assert reply.status_code == 200, reply.text
        first = 4100 // 4 + 2  # float index of object byte 4100 + 8
        assert reply.json()["outputs"][0]["data"] == [float(first + i) for i in range(4)]


def test_mixed_shm_and_inband_json(server, client):
    a = np.array([[1.5, 2.5, 3.5, 4.5]], dtype=np.float32)
    with Region("mixed", 1024) as region:
        region.write([a])
        client.register_system_shared_memory("m", region.key, 1024)
        body = {
            "inputs": [
                shm_input("INPUT0", "m", 16),
                {"name": "INPUT1", "shape": [1, 3], "datatype": "INT32", "data": [7, 8, 9]},
            ],
            "outputs": [shm_output("OUTPUT0", "m", 16, offset=512), {"name": "OUTPUT1"}],
        }
        reply = infer(server, "shm_identity", body)
        assert reply.status_code == 200, reply.text
        assert reply.json()["outputs"] == [
            {"name": "OUTPUT0", "datatype": "FP32", "shape": [1, 4]},
            {"name": "OUTPUT1", "datatype": "INT32", "shape": [1, 3], "data": [7, 8, 9]},
        ]
        np.testing.assert_array_equal(region.read(np.float32, [1, 4], offset=512), a)


def test_mixed_shm_and_binary_tritonclient(server, client):
    a = np.array([[9, 8, 7, 6]], dtype=np.float32)
    b = np.array([[1, 2]], dtype=np.int32)
    with Region("mixbin", 1024) as region:
        region.write([a])
        client.register_system_shared_memory("mb", region.key, 1024)
        in0 = httpclient.InferInput("INPUT0", [1, 4], "FP32")
        in0.set_shared_memory("mb", 16)
        in1 = httpclient.InferInput("INPUT1", [1, 2], "INT32")
        in1.set_data_from_numpy(b, binary_data=True)
        out0 = httpclient.InferRequestedOutput("OUTPUT0", binary_data=False)
        out0.set_shared_memory("mb", 16, offset=256)
        out1 = httpclient.InferRequestedOutput("OUTPUT1", binary_data=True)
        result = client.infer("shm_identity", [in0, in1], outputs=[out0, out1])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), b)
        np.testing.assert_array_equal(region.read(np.float32, [1, 4], offset=256), a)
        # And input in band, output in shm.
        in2 = httpclient.InferInput("INPUT0", [1, 4], "FP32")
        in2.set_data_from_numpy(a * 2, binary_data=True)
        result = client.infer("shm_identity", [in2], outputs=[out0])
        np.testing.assert_array_equal(region.read(np.float32, [1, 4], offset=256), a * 2)


def test_request_errors(server, client):
    with Region("reqerr", 64) as region:
        region.write([np.zeros(16, np.float32)])
        client.register_system_shared_memory("r", region.key, 64)
        cases = [
            (
                {"inputs": [shm_input("INPUT0", "zz", 16)]},
                404,
                "Unable to find shared memory region: 'zz'",
            ),
            (
                {"inputs": [shm_input("INPUT0", "r", 16, offset=56)]},
                400,
                "Invalid offset + byte size for shared memory region: 'r'",
            ),
            ({"inputs": [shm_input("INPUT0", "r", 16, offset=2**64 - 8)]}, 400, None),
            (
                {"inputs": [shm_input("INPUT0", "r", 12)]},
                400,
                "[request id: <id_unknown>] input byte size mismatch for input 'INPUT0' for model "
                "'shm_identity'. Expected 16, got 12",
            ),
            (
                {"inputs": [shm_input("INPUT0", "r", 32)]},
                400,
                "[request id: <id_unknown>] input byte size mismatch for input 'INPUT0' for model "
                "'shm_identity'. Expected 16, got 32",
            ),
            (
                {"inputs": [dict(shm_input("INPUT0", "r", 16), data=[1, 2, 3, 4])]},
                400,
                "Input must set only one of the following fields: 'data', 'binary_data_size' in "
                "'parameters', 'shared_memory_region' in 'parameters'. But set 'data' "
                "'shared_memory_region'",
            ),
            (
                {
                    "inputs": [
                        {
                            "name": "INPUT0",
                            "shape": [1, 4],
                            "datatype": "FP32",
                            "parameters": {
                                "shared_memory_region": "r",
                                "shared_memory_byte_size": 16,
                                "shared_memory_offset": "0",
                            },
                        }
                    ]
                },
                500,
                "Unable to parse 'shared_memory_offset': attempt to access JSON "
                "non-unsigned-integer as unsigned-integer",
            ),
            (
                {
                    "inputs": [shm_input("INPUT0", "r", 16)],
                    "outputs": [shm_output("OUTPUT0", "r", 8)],
                },
                500,
                "shared memory size specified with the request for output 'OUTPUT0' (8 bytes) "
                "should be at least 16 bytes to hold the results",
            ),
            (
                {
                    "inputs": [shm_input("INPUT0", "r", 16)],
                    "outputs": [shm_output("OUTPUT0", "r", 16, offset=56)],
                },
                400,
                "Invalid offset + byte size for shared memory region: 'r'",
            ),
            (
                {
                    "inputs": [shm_input("INPUT0", "r", 16)],
                    "outputs": [shm_output("OUTPUT0", "zz", 16)],
                },
                404,
                "Unable to find shared memory region: 'zz'",
            ),
            (
                {
                    "inputs": [shm_input("INPUT0", "r", 16)],
                    "outputs": [
                        {
                            "name": "OUTPUT0",
                            "parameters": {
                                "binary_data": True,
                                "shared_memory_region": "r",
                                "shared_memory_byte_size": 16,
                            },
                        }
                    ],
                },
                400,
                "Output can't set both 'shared_memory_region' and 'binary_data'",
            ),
        ]
        for body, status, message in cases:
            reply = infer(server, "shm_identity", body)
            assert reply.status_code == status, (body, reply.text)
            if message is not None:
                assert reply.json() == {"error": message}
        # The region is untouched by the refused output.
        np.testing.assert_array_equal(region.read(np.float32, [16]), np.zeros(16, np.float32))
    # A failed request leaves no reference behind: everything unmaps at unregister.
    client.unregister_system_shared_memory()
    assert stats(server)["regions_mapped"] == 0


def _bytes_wire(items) -> bytes:
    return b"".join(struct.pack("<I", len(item)) + item for item in items)


def test_bytes_in_shm(server, client):
    items = [b"ab", b"", b"\xffcde"]
    wire = _bytes_wire(items)
    with Region("bytes", 256) as region:
        region.write_bytes(wire)
        client.register_system_shared_memory("b", region.key, 256)
        body = {
            "inputs": [shm_input("INPUT0", "b", len(wire), shape=[3], datatype="BYTES")],
            "outputs": [shm_output("OUTPUT0", "b", 128, offset=128)],
        }
        reply = infer(server, "shm_bytes", body)
        assert reply.status_code == 200, reply.text
        assert reply.json()["outputs"] == [{"name": "OUTPUT0", "datatype": "BYTES", "shape": [3]}]
        assert bytes(region.read(np.uint8, [len(wire)], offset=128)) == wire
        # Element by element: a length beyond the tensor, a count that does not match.
        bad = struct.pack("<I", 100) + b"abc"
        region.write_bytes(bad)
        body["inputs"] = [shm_input("INPUT0", "b", len(bad), shape=[1], datatype="BYTES")]
        reply = infer(server, "shm_bytes", body)
        assert reply.status_code == 400
        assert "expecting string of length 100 but only 3 bytes available" in reply.json()["error"]
        region.write_bytes(wire)
        body["inputs"] = [shm_input("INPUT0", "b", len(wire), shape=[4], datatype="BYTES")]
        reply = infer(server, "shm_bytes", body)
        assert reply.status_code == 400
        assert "expected 4 string elements" in reply.json()["error"]
        # The length prefix cut by the byte size.
        body["inputs"] = [shm_input("INPUT0", "b", 5, shape=[2], datatype="BYTES")]
        assert infer(server, "shm_bytes", body).status_code == 400


def test_batched_requests_each_in_its_region(server, client):
    # A first request holds the only instance; the others queue meanwhile and run as
    # one batch. A Python model reads each request's inputs apart: every input is read
    # in place, batched or not, no copy (a framework model's batch: the test below).
    count = 4
    with Region("batch", 64 * (count + 1)) as region:
        for i in range(count + 1):
            region.write([np.full(4, i, np.float32)], offset=64 * i)
        client.register_system_shared_memory("bt", region.key, 64 * (count + 1))
        before = stats(server)
        executed_before = _executions(client, "shm_identity")
        replies = [None] * (count + 1)

        def send(i, parameters=None):
            body = {
                "inputs": [shm_input("INPUT0", "bt", 16, offset=64 * i)],
                "outputs": [shm_output("OUTPUT0", "bt", 16, offset=64 * i + 32)],
            }
            if parameters:
                body["parameters"] = parameters
            replies[i] = infer(server, "shm_identity", body)

        first = threading.Thread(target=send, args=(0, {"delay_ms": 800}))
        first.start()
        time.sleep(0.3)  # in the worker
        threads = [threading.Thread(target=send, args=(i,)) for i in range(1, count + 1)]
        for thread in threads:
            thread.start()
        for thread in [first, *threads]:
            thread.join()
        assert all(r.status_code == 200 for r in replies), [r.text for r in replies]
        for i in range(count + 1):
            np.testing.assert_array_equal(
                region.read(np.float32, [4], offset=64 * i + 32), np.full(4, i, np.float32)
            )
        after = stats(server)
        executed = _executions(client, "shm_identity") - executed_before
        assert executed == 2  # the first alone, then the queued ones in one batch
        assert after["inputs_in_place"] - before["inputs_in_place"] == count + 1
        assert after["input_copies"] == before["input_copies"]
        assert after["gathered_bytes"] == before["gathered_bytes"]


def _executions(client, model: str) -> int:
    return int(client.get_inference_statistics(model)["model_stats"][0]["execution_count"])


def _pipelined(server, model: str, bodies: list) -> list:
    """POSTs `bodies` to `model` in one write on one connection (the server reads them in
    one turn and queues them together: they share a batch); returns (status, body)s."""
    import json as jsonlib

    request = b""
    for body in bodies:
        payload = jsonlib.dumps(body).encode()
        request += (
            f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
        ).encode() + payload
    answers = []
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=TIMEOUT) as sock:
        sock.sendall(request)
        data = b""
        while len(answers) < len(bodies):
            head_end = data.find(b"\r\n\r\n")
            if head_end >= 0:
                head = data[:head_end].decode("latin-1")
                length = 0
                for line in head.split("\r\n")[1:]:
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                if len(data) >= head_end + 4 + length:
                    status = int(head.split(" ")[1])
                    answers.append((status, data[head_end + 4 : head_end + 4 + length]))
                    data = data[head_end + 4 + length :]
                    continue
            chunk = sock.recv(65536)
            assert chunk, "the server closed the connection"
            data += chunk
    return answers


def test_framework_model_batch_copies_each_input_once(server, client):
    # A framework backend takes each input as one [N, ...] tensor: requests that share a
    # batch are copied once each, region -> batch tensor; none gathered.
    count = 4
    with Region("onnx_batch", 64 * count) as region:
        for i in range(count):
            region.write([np.full(4, i + 1, np.float32)], offset=64 * i)
        client.register_system_shared_memory("ob", region.key, 64 * count)
        bodies = [
            {
                "inputs": [shm_input("INPUT0", "ob", 16, offset=64 * i)],
                "outputs": [shm_output("OUTPUT0", "ob", 16, offset=64 * i + 32)],
            }
            for i in range(count)
        ]
        before = stats(server)
        executed_before = _executions(client, "shm_onnx_identity")
        answers = _pipelined(server, "shm_onnx_identity", bodies)
        after = stats(server)
        assert [status for status, _ in answers] == [200] * count, answers
        assert _executions(client, "shm_onnx_identity") - executed_before == 1  # one batch
        for i in range(count):
            np.testing.assert_array_equal(
                region.read(np.float32, [4], offset=64 * i + 32), np.full(4, i + 1, np.float32)
            )
        assert after["input_copies"] - before["input_copies"] == count  # one copy each
        assert after["input_bytes"] - before["input_bytes"] == 16 * count
        assert after["inputs_in_place"] == before["inputs_in_place"]
        assert after["gathered_bytes"] == before["gathered_bytes"]


def test_framework_model_request_alone_reads_its_input_in_place(server, client):
    data = np.arange(8, dtype=np.float32).reshape(2, 4)
    with Region("onnx_alone", 4096) as region:
        region.write([data])
        client.register_system_shared_memory("oa", region.key, 4096)
        before = stats(server)
        body = {
            "inputs": [shm_input("INPUT0", "oa", 32, shape=[2, 4])],
            "outputs": [shm_output("OUTPUT0", "oa", 32, offset=1024)],
        }
        reply = infer(server, "shm_onnx_identity", body)
        assert reply.status_code == 200, reply.text
        after = stats(server)
        np.testing.assert_array_equal(region.read(np.float32, [2, 4], offset=1024), data)
        assert after["input_copies"] == before["input_copies"]
        assert after["inputs_in_place"] - before["inputs_in_place"] == 1


# -- safety -----------------------------------------------------------------------------


def test_unregister_while_in_use(server, client):
    data = np.arange(4, dtype=np.float32).reshape(1, 4)
    with Region("inuse", 4096) as region:
        region.write([data])
        client.register_system_shared_memory("u", region.key, 4096)
        body = {
            "inputs": [shm_input("INPUT0", "u", 16)],
            "outputs": [shm_output("OUTPUT0", "u", 16, offset=1024)],
            "parameters": {"delay_ms": 1000},
        }
        result = {}
        thread = threading.Thread(
            target=lambda: result.update(r=infer(server, "shm_identity", body))
        )
        thread.start()
        time.sleep(0.4)  # the request is in the worker
        assert stats(server)["regions_mapped"] == 1
        assert post(server, "/v2/systemsharedmemory/region/u/unregister").status_code == 200
        assert client.get_system_shared_memory_status() == []
        late = infer(server, "shm_identity", {"inputs": [shm_input("INPUT0", "u", 16)]})
        assert late.status_code == 404
        # Still mapped for the request in flight, which completes into the region.
        assert held_by(server.pid, region.key)
        thread.join()
        assert result["r"].status_code == 200, result["r"].text
        np.testing.assert_array_equal(region.read(np.float32, [1, 4], offset=1024), data)
        assert stats(server)["regions_mapped"] == 0
        assert wait_released(server.pid, region.key) == []


def test_no_mapping_or_fd_left(server, client):
    regions = [Region("leak", 8192) for _ in range(4)]
    try:
        for i, region in enumerate(regions):
            region.write([np.ones(4, np.float32)])
            client.register_system_shared_memory(f"l{i}", region.key, 8192, offset=0)
            body = {
                "inputs": [shm_input("INPUT0", f"l{i}", 16)],
                "outputs": [shm_output("OUTPUT0", f"l{i}", 16, offset=4096)],
            }
            assert infer(server, "shm_identity", body).status_code == 200
        # The frontend maps each once; the worker that wrote outputs too.
        assert all(held_by(server.pid, r.key) for r in regions)
        client.unregister_system_shared_memory("l0")
        assert wait_released(server.pid, regions[0].key) == []
        client.unregister_system_shared_memory()
        for region in regions:
            assert wait_released(server.pid, region.key) == [], region.key
    finally:
        for region in regions:
            region.destroy()


_KILLED_CLIENT = r"""
import os, sys, numpy as np, requests
import tritonclient.utils.shared_memory as shm
url, key = sys.argv[1], sys.argv[2]
handle = shm.create_shared_memory_region("k", key, 64)
shm.set_shared_memory_region(handle, [np.arange(16, dtype=np.float32)])
r = requests.post(url + "/v2/systemsharedmemory/region/killed/register",
                  json={"key": key, "byte_size": 64})
assert r.status_code == 200, r.text
print("registered", flush=True)
os.kill(os.getpid(), 9)
"""


def test_client_killed_with_regions_registered(server, client):
    key = new_key("killed")
    process = subprocess.run(
        [sys.executable, "-c", _KILLED_CLIENT, server.url, key],
        capture_output=True,
        text=True,
        timeout=60,
    )
    try:
        assert process.returncode == -signal.SIGKILL and "registered" in process.stdout
        # The server is fine; the region stays usable until unregistered.
        reply = infer(server, "shm_identity", {"inputs": [shm_input("INPUT0", "killed", 16)]})
        assert reply.status_code == 200
        assert reply.json()["outputs"][0]["data"] == [0.0, 1.0, 2.0, 3.0]
        assert requests.get(server.url + "/v2/health/ready").status_code == 200
        client.unregister_system_shared_memory("killed")
        assert wait_released(server.pid, key) == []
    finally:
        import _posixshmem

        _posixshmem.shm_unlink(key)


def test_client_unlinks_after_registering(server, client):
    region = Region("unlinked", 4096)
    region.write([np.full(4, 5, np.float32)])
    client.register_system_shared_memory("gone", region.key, 4096)
    # The client drops its key (and its mapping) but the server keeps the object.
    key = region.key
    handle = region.handle
    import tritonclient.utils.shared_memory as tshm

    tshm.destroy_shared_memory_region(handle)
    region.handle = None
    body = {
        "inputs": [shm_input("INPUT0", "gone", 16)],
        "outputs": [shm_output("OUTPUT0", "gone", 16, offset=64)],
    }
    reply = infer(server, "shm_identity", body)
    assert reply.status_code == 200, reply.text
    client.unregister_system_shared_memory("gone")
    assert wait_released(server.pid, key) == []


def test_unregister_under_load(server, client):
    with Region("load", 4096) as region:
        region.write([np.full(4, 3, np.float32)])
        stop = threading.Event()
        statuses = []
        wrong = []
        failures = []

        def hammer(i):
            session = requests.Session()
            body = {
                "inputs": [shm_input("INPUT0", "ld", 16)],
                "outputs": [shm_output("OUTPUT0", "ld", 16, offset=1024 + 64 * i)],
            }
            while not stop.is_set():
                try:
                    reply = session.post(
                        server.url + "/v2/models/shm_identity/infer", json=body, timeout=TIMEOUT
                    )
                except requests.RequestException as exc:  # e.g. a request never answered
                    failures.append(exc)
                    return
                statuses.append(reply.status_code)
                if reply.status_code == 200:
                    got = region.read(np.float32, [4], offset=1024 + 64 * i)
                    if not (got == 3).all():
                        wrong.append(got)

        threads = [threading.Thread(target=hammer, args=(i,)) for i in range(3)]
        for thread in threads:
            thread.start()
        try:
            for _ in range(30):
                client.register_system_shared_memory("ld", region.key, 4096)
                time.sleep(0.02)
                client.unregister_system_shared_memory("ld")
        finally:
            stop.set()
            for thread in threads:
                thread.join()
        assert not failures, failures
        assert set(statuses) <= {200, 404}, set(statuses)
        assert 200 in statuses and 404 in statuses
        assert not wrong
        assert requests.get(server.url + "/v2/health/ready").status_code == 200
        assert stats(server)["regions_mapped"] == 0
        assert wait_released(server.pid, region.key) == []


def test_tritonclient_errors(server, client):
    with Region("tcerr", 64) as region:
        client.register_system_shared_memory("t", region.key, 64)
        with pytest.raises(InferenceServerException) as error:
            client.register_system_shared_memory("t", region.key, 64)
        assert "already in manager" in str(error.value)
        inp = httpclient.InferInput("INPUT0", [1, 4], "FP32")
        inp.set_shared_memory("nope", 16)
        with pytest.raises(InferenceServerException) as error:
            client.infer("shm_identity", [inp])
        assert "Unable to find shared memory region: 'nope'" in str(error.value)


def test_server_exit_releases_regions(tmp_path):
    region = Region("exit", 4096)
    try:
        with NaiadServer(SHM_MODELS, log_dir=tmp_path) as own:
            assert register(own, "e", region.key, 4096).status_code == 200
            body = {
                "inputs": [shm_input("INPUT0", "e", 16)],
                "outputs": [shm_output("OUTPUT0", "e", 16, offset=64)],
            }
            assert infer(own, "shm_identity", body).status_code == 200
            pids = [own.pid]
            assert held_by(own.pid, region.key)
        for pid in pids:
            assert not os.path.exists(f"/proc/{pid}/maps") or held_by(pid, region.key) == []
    finally:
        region.destroy()
