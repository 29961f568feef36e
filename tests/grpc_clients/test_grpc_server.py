"""Black-box tests of the gRPC front end of a real `naiad serve` process.

Clients: tritonclient.grpc (sync, aio, streaming) as users drive it, grpcio's channel for
raw calls (unknown methods, health, hand-built messages), and a raw socket for what no
well-behaved client sends. Messages and status codes are those Triton 2.51 answers
(checked against the real server with the same requests).
"""

from __future__ import annotations

import asyncio
import queue
import re
import shutil
import socket
import struct
import subprocess
import time
from functools import partial

import grpc
import hpack
import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from naiad.datatypes import serialize_bytes
from server_harness import NaiadServer, make_repository
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pbg
from tritonclient.utils import InferenceServerException

TIMEOUT = 20
GRPC_MODELS = __import__("pathlib").Path(__file__).resolve().parent.parent / "grpc_models"
TYPES = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
    "BYTES": np.object_,
}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("grpc")
    repository = make_repository(
        root / "models",
        {
            "add_sub": None,
            "identity_bytes": None,
            "sleeper": None,
            "raiser": None,
            "identity_all": GRPC_MODELS / "identity_all",
        },
    )
    server = NaiadServer(repository, log_dir=root, name="grpc")
    server.start(wait="ready", timeout=120)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def url(server):
    return f"{server.host}:{server.grpc_port}"


@pytest.fixture(scope="module")
def client(url):
    with grpcclient.InferenceServerClient(url) as client:
        yield client


@pytest.fixture(scope="module")
def stub(url):
    with grpc.insecure_channel(url) as channel:
        yield pbg.GRPCInferenceServiceStub(channel), channel


def _add_sub_inputs(a, b):
    inputs = [
        grpcclient.InferInput("INPUT0", list(a.shape), "FP32"),
        grpcclient.InferInput("INPUT1", list(b.shape), "FP32"),
    ]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs


def _rand(batch=1, seed=0):
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal((batch, 16)).astype(np.float32),
        rng.standard_normal((batch, 16)).astype(np.float32),
    )


def _error(call) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as info:
        call()
    return info.value


# -- control plane --------------------------------------------------------------------


def test_health_and_metadata(client):
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("add_sub")
    assert client.is_model_ready("add_sub", "1")
    assert not client.is_model_ready("nope")
    assert not client.is_model_ready("add_sub", "7")
    meta = client.get_server_metadata(as_json=True)
    assert meta["name"] == "naiad" and "statistics" in meta["extensions"]
    model = client.get_model_metadata("add_sub", as_json=True)
    assert model["name"] == "add_sub" and model["versions"] == ["1"]
    assert model["inputs"][0] == {"name": "INPUT0", "datatype": "FP32", "shape": ["-1", "16"]}


def test_model_config_and_statistics(client):
    config = client.get_model_config("add_sub", as_json=True)["config"]
    assert config["name"] == "add_sub" and config["max_batch_size"] == 64
    assert [i["name"] for i in config["input"]] == ["INPUT0", "INPUT1"]
    a, b = _rand()
    client.infer("add_sub", _add_sub_inputs(a, b))
    stats = client.get_inference_statistics("add_sub", as_json=True)["model_stats"][0]
    assert stats["name"] == "add_sub" and int(stats["inference_count"]) >= 1
    assert int(stats["inference_stats"]["success"]["count"]) >= 1


@pytest.mark.parametrize(
    "call, code, message",
    [
        (
            lambda c: c.get_model_metadata("nope"),
            "StatusCode.NOT_FOUND",
            "Request for unknown model: 'nope' is not found",
        ),
        (
            lambda c: c.get_model_metadata("add_sub", "7"),
            "StatusCode.NOT_FOUND",
            "Request for unknown model: 'add_sub' version 7 is not found",
        ),
        (
            lambda c: c.get_model_config("nope"),
            "StatusCode.NOT_FOUND",
            "Request for unknown model: 'nope' is not found",
        ),
        (
            lambda c: c.get_inference_statistics("nope"),
            "StatusCode.INVALID_ARGUMENT",
            "requested model 'nope' is not available",
        ),
        (
            lambda c: c.get_inference_statistics("add_sub", "7"),
            "StatusCode.INVALID_ARGUMENT",
            "requested model version is not available for model 'add_sub'",
        ),
        (
            lambda c: c.load_model("add_sub"),
            "StatusCode.UNAVAILABLE",
            "explicit model load / unload is not allowed if polling is enabled",
        ),
        (
            lambda c: c.unload_model("add_sub"),
            "StatusCode.UNAVAILABLE",
            "explicit model load / unload is not allowed if polling is enabled",
        ),
        (
            lambda c: c.get_system_shared_memory_status("r"),
            "StatusCode.NOT_FOUND",
            "Unable to find system shared memory region: 'r'",
        ),
    ],
)
def test_control_errors_as_triton(client, call, code, message):
    err = _error(partial(call, client))
    assert err.status() == code
    assert err.message() == message


def test_repository_index(client):
    index = client.get_model_repository_index(as_json=True)["models"]
    names = {m["name"]: m for m in index}
    assert names["add_sub"] == {"name": "add_sub", "version": "1", "state": "READY"}
    assert set(names) == {"add_sub", "identity_bytes", "sleeper", "raiser", "identity_all"}


def test_features_not_built_yet_say_so(client):
    assert client.get_system_shared_memory_status(as_json=True) == {}
    assert client.get_cuda_shared_memory_status(as_json=True) == {}
    client.unregister_system_shared_memory("r")  # nothing registered: a no-op, as Triton
    client.unregister_cuda_shared_memory("r")
    # Shared memory is served (tests/grpc_clients/test_grpc_shm.py): a missing key is
    # Triton's INTERNAL; CUDA without a GPU its INVALID_ARGUMENT.
    err = _error(lambda: client.register_system_shared_memory("r", "/naiad_no_key", 16))
    assert err.status() == "StatusCode.INTERNAL"
    assert err.message() == "Unable to open shared memory region: '/naiad_no_key'"
    from naiad.memory import cuda_ipc

    if cuda_ipc.unavailable_reason(0) is not None:
        err = _error(lambda: client.register_cuda_shared_memory("r", b"eA==", 0, 16))
        assert err.status() == "StatusCode.INVALID_ARGUMENT"
        assert err.message().startswith("failed to register shared memory region: invalid args")
    # Tracing is served (test_grpc_trace_triton.py): off by default, as Triton.
    settings = client.get_trace_settings(as_json=True)["settings"]
    assert settings["trace_level"] == {"value": ["OFF"]}
    assert settings["trace_rate"] == {"value": ["1000"]}
    # Log settings are served (tests/test_logging_extension.py, test_logmetrics_triton.py).
    assert client.get_log_settings(as_json=True)["settings"]["log_format"] == {
        "string_param": "default"
    }


def test_log_settings_through_tritonclient(client):
    try:
        answer = client.update_log_settings({"log_verbose_level": 1, "log_warning": False})
        assert answer.settings["log_verbose_level"].uint32_param == 1
        assert answer.settings["log_warning"].bool_param is False
        settings = client.get_log_settings(as_json=True)["settings"]
        assert settings["log_info"] == {"bool_param": True}
        assert settings["log_file"] == {"string_param": ""}
        err = _error(lambda: client.update_log_settings({"log_file": "/tmp/x.log"}))
        assert err.status() == "StatusCode.UNIMPLEMENTED"
        assert err.message() == "log file location can not be updated through network protocol"
        err = _error(lambda: client.update_log_settings({"log_format": "iso"}))
        assert err.status() == "StatusCode.INVALID_ARGUMENT"
        assert err.message() == "invalid argument for log_format, got: iso"
    finally:
        client.update_log_settings({"log_verbose_level": 0, "log_warning": True})


def test_unknown_service_or_method_is_unimplemented(stub):
    _, channel = stub
    for path in ("/inference.GRPCInferenceService/Nope", "/foo.Bar/Baz"):
        with pytest.raises(grpc.RpcError) as info:
            channel.unary_unary(path)(b"", timeout=TIMEOUT)
        assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_health_check(stub):
    _, channel = stub
    check = channel.unary_unary("/grpc.health.v1.Health/Check")
    assert check(b"", timeout=TIMEOUT) == b"\x08\x01"  # SERVING
    assert check(b"\x0a\x03abc", timeout=TIMEOUT) == b"\x08\x01"


def test_unparseable_request_is_internal(stub):
    _, channel = stub
    with pytest.raises(grpc.RpcError) as info:
        channel.unary_unary("/inference.GRPCInferenceService/ModelMetadata")(
            b"\xff\xff\xff", timeout=TIMEOUT
        )
    assert info.value.code() == grpc.StatusCode.INTERNAL
    assert info.value.details() == "Unable to parse request"


# -- inference ------------------------------------------------------------------------


def test_infer_add_sub(client):
    a, b = _rand(3, seed=1)
    result = client.infer("add_sub", _add_sub_inputs(a, b), request_id="r-1")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    response = result.get_response()
    assert response.id == "r-1" and response.model_name == "add_sub"
    assert response.model_version == "1"


def test_infer_requested_output_and_classification(client):
    a, b = _rand(1, seed=2)
    outputs = [grpcclient.InferRequestedOutput("OUTPUT1", class_count=3)]
    result = client.infer("add_sub", _add_sub_inputs(a, b), outputs=outputs)
    response = result.get_response()
    assert [o.name for o in response.outputs] == ["OUTPUT1"]
    top = result.as_numpy("OUTPUT1")
    assert top.shape == (1, 3)
    diff = (a - b)[0]
    best = int(np.argmax(diff))
    assert top[0][0].decode().endswith(f":{best}")


def test_infer_parameters_priority_and_timeout(client):
    a, b = _rand(1, seed=3)
    result = client.infer("add_sub", _add_sub_inputs(a, b), priority=1, timeout=10_000_000)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_infer_compressed(server, client, algorithm):
    """A compressed message is inflated and served by the C++ lane (csrc/http2/
    grpc_inflate.h), not the general path."""

    def lanes():
        return requests.get(f"http://{server.host}:{server.http_port}/v2/naiad/lanes").json()

    a, b = _rand(2, seed=4)
    before = lanes()
    result = client.infer("add_sub", _add_sub_inputs(a, b), compression_algorithm=algorithm)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    after = lanes()
    assert after["lane_requests"] == before["lane_requests"] + 1
    assert after["general_requests"] == before["general_requests"]


def _all_types(n=4, seed=5):
    rng = np.random.default_rng(seed)
    arrays = {}
    for name, dtype in TYPES.items():
        if name == "BOOL":
            arrays[name] = rng.integers(0, 2, n).astype(bool)
        elif name == "BYTES":
            arrays[name] = np.array([b"", b"x", b"\x00\xffz", "é".encode()][:n], dtype=object)
        elif np.issubdtype(dtype, np.integer):
            info = np.iinfo(dtype)
            arrays[name] = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
        else:
            arrays[name] = rng.standard_normal(n).astype(dtype)
    return arrays


def _check_all_types(result, arrays):
    for name, array in arrays.items():
        got = result(f"OUT_{'STRING' if name == 'BYTES' else name}")
        if name == "BYTES":
            assert list(got) == list(array)
        else:
            assert got.dtype == array.dtype, name
            np.testing.assert_array_equal(got, array)


def test_every_datatype_raw(client):
    arrays = _all_types()
    inputs = []
    for name, array in arrays.items():
        tensor = grpcclient.InferInput(
            f"IN_{'STRING' if name == 'BYTES' else name}", list(array.shape), name
        )
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    result = client.infer("identity_all", inputs)
    _check_all_types(result.as_numpy, arrays)


def _typed_request(arrays):
    request = pb.ModelInferRequest(model_name="identity_all", id="typed")
    fields = {
        "BOOL": "bool_contents",
        "UINT8": "uint_contents",
        "UINT16": "uint_contents",
        "UINT32": "uint_contents",
        "UINT64": "uint64_contents",
        "INT8": "int_contents",
        "INT16": "int_contents",
        "INT32": "int_contents",
        "INT64": "int64_contents",
        "FP32": "fp32_contents",
        "FP64": "fp64_contents",
        "BYTES": "bytes_contents",
    }
    for name, array in arrays.items():
        tensor = request.inputs.add(
            name=f"IN_{'STRING' if name == 'BYTES' else name}", datatype=name, shape=[len(array)]
        )
        getattr(tensor.contents, fields[name]).extend(array.tolist())
    return request


def _raw_outputs(response):
    by_name = {}
    for output, raw in zip(response.outputs, response.raw_output_contents):
        name = output.datatype
        if name == "BYTES":
            items, pos = [], 0
            while pos < len(raw):
                (n,) = struct.unpack_from("<I", raw, pos)
                items.append(raw[pos + 4 : pos + 4 + n])
                pos += 4 + n
            by_name[output.name] = np.array(items, dtype=object)
        else:
            by_name[output.name] = np.frombuffer(raw, dtype=TYPES[name])
    return by_name


def test_every_datatype_typed_contents(stub):
    service, _ = stub
    arrays = _all_types(seed=6)
    del arrays["FP16"]  # no typed field for FP16: the optional IN_FP16 stays out
    response = service.ModelInfer(_typed_request(arrays), timeout=TIMEOUT)
    assert response.id == "typed"
    out = _raw_outputs(response)
    for name, array in arrays.items():
        got = out[f"OUT_{'STRING' if name == 'BYTES' else name}"]
        if name == "BYTES":
            assert list(got) == list(array)
        else:
            np.testing.assert_array_equal(got, array)
    assert len(out["OUT_FP16"]) == 0


def test_fp16_has_no_typed_contents(stub):
    service, _ = stub
    request = pb.ModelInferRequest(model_name="identity_all")
    tensor = request.inputs.add(name="IN_FP16", datatype="FP16", shape=[2])
    tensor.contents.fp32_contents.extend([1.0, 2.0])
    with pytest.raises(grpc.RpcError) as info:
        service.ModelInfer(request, timeout=TIMEOUT)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details() == (
        "unexpected explicit tensor data for input tensor 'IN_FP16' for model 'identity_all' "
        "of type 'FP32', expected datatype 'FP16'"
    )


def test_typed_fp32_and_bytes_on_example_models(stub):
    service, _ = stub
    a, b = _rand(1, seed=7)
    request = pb.ModelInferRequest(model_name="add_sub", id="t")
    for name, array in (("INPUT0", a), ("INPUT1", b)):
        tensor = request.inputs.add(name=name, datatype="FP32", shape=[1, 16])
        tensor.contents.fp32_contents.extend(array[0].tolist())
    out = _raw_outputs(service.ModelInfer(request, timeout=TIMEOUT))
    np.testing.assert_array_equal(out["OUTPUT0"], (a + b)[0])
    words = [b"alpha", b"", b"\x00\x01"]
    request = pb.ModelInferRequest(model_name="identity_bytes")
    tensor = request.inputs.add(name="INPUT0", datatype="BYTES", shape=[1, 3])
    tensor.contents.bytes_contents.extend(words)
    response = service.ModelInfer(request, timeout=TIMEOUT)
    assert list(_raw_outputs(response)["OUTPUT0"]) == words
    assert response.raw_output_contents[0] == serialize_bytes(np.array(words, dtype=object))


@pytest.mark.parametrize(
    "mutate, message",
    [
        (
            lambda r: r.inputs[0].contents.fp32_contents.append(1.0),
            "contents field must not be specified when using raw_input_contents for 'INPUT0' "
            "for model 'add_sub'",
        ),
        (
            lambda r: r.raw_input_contents.pop(),
            "unable to find data for input tensor 'INPUT1' for model 'add_sub' in request.",
        ),
        (
            lambda r: r.raw_input_contents.__setitem__(1, b"\0" * 60),
            "[request id: <id_unknown>] input byte size mismatch for input 'INPUT1' for model "
            "'add_sub'. Expected 64, got 60",
        ),
        (
            lambda r: r.outputs.add(name="NOPE"),
            "unexpected inference output 'NOPE' for model 'add_sub'",
        ),
    ],
)
def test_infer_errors_as_triton(stub, mutate, message):
    service, _ = stub
    request = pb.ModelInferRequest(model_name="add_sub")
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="FP32", shape=[1, 16])
        request.raw_input_contents.append(b"\0" * 64)
    mutate(request)
    with pytest.raises(grpc.RpcError) as info:
        service.ModelInfer(request, timeout=TIMEOUT)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details() == message


def test_infer_unknown_model_and_model_error(client):
    err = _error(lambda: client.infer("nope", _add_sub_inputs(*_rand())))
    assert err.status() == "StatusCode.NOT_FOUND"
    assert err.message() == "Request for unknown model: 'nope' is not found"
    tensor = grpcclient.InferInput("INPUT0", [1, 1], "FP32")
    tensor.set_data_from_numpy(np.ones((1, 1), np.float32))
    err = _error(lambda: client.infer("raiser", [tensor]))
    assert "raiser refuses to run" in err.message()


def test_deadline_exceeded(client):
    """A call whose deadline passes while the model still runs ends with DEADLINE_EXCEEDED,
    without waiting for the answer that comes later."""

    def executions() -> int:
        stats = client.get_inference_statistics("sleeper", as_json=True)["model_stats"][0]
        return int(stats.get("execution_count", 0))

    before = executions()
    tensor = grpcclient.InferInput("SECONDS", [1, 1], "FP32")
    tensor.set_data_from_numpy(np.full((1, 1), 2.0, np.float32))
    err = _error(lambda: client.infer("sleeper", [tensor], client_timeout=0.2))
    assert err.status() == "StatusCode.DEADLINE_EXCEEDED"
    # Ended before the model's 2 s execution did: that is not counted yet.
    assert executions() == before
    assert client.is_server_live()
    deadline = time.monotonic() + TIMEOUT
    while executions() == before:  # the later tests find both instances free
        assert time.monotonic() < deadline, "the sleeper's execution never ended"
        time.sleep(0.05)


def test_64_mib_tensor(client):
    data = np.frombuffer(np.random.default_rng(9).bytes(64 << 20), dtype=np.uint8)
    arrays = {name: np.zeros(1, dtype=t) for name, t in TYPES.items() if name != "BYTES"}
    arrays["UINT8"] = data
    inputs = []
    for name, array in arrays.items():
        tensor = grpcclient.InferInput(f"IN_{name}", list(array.shape), name)
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    text = grpcclient.InferInput("IN_STRING", [1], "BYTES")
    text.set_data_from_numpy(np.array([b"s"], dtype=object))
    inputs.append(text)
    outputs = [grpcclient.InferRequestedOutput("OUT_UINT8")]
    result = client.infer("identity_all", inputs, outputs=outputs, client_timeout=120)
    assert np.array_equal(result.as_numpy("OUT_UINT8"), data)


def test_aio_client(url):
    async def main():
        async with aioclient.InferenceServerClient(url) as client:
            assert await client.is_server_ready()
            a, b = _rand(2, seed=10)
            inputs = [
                aioclient.InferInput("INPUT0", [2, 16], "FP32"),
                aioclient.InferInput("INPUT1", [2, 16], "FP32"),
            ]
            inputs[0].set_data_from_numpy(a)
            inputs[1].set_data_from_numpy(b)
            results = await asyncio.gather(*(client.infer("add_sub", inputs) for _ in range(16)))
            for result in results:
                np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)

    asyncio.run(main())


def test_stream_many_in_flight_with_ids_and_errors(url):
    answers: queue.Queue = queue.Queue()
    with grpcclient.InferenceServerClient(url) as client:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        expected = {}
        for i in range(20):
            a, b = _rand(1, seed=100 + i)
            expected[f"req-{i}"] = a + b
            client.async_stream_infer("add_sub", _add_sub_inputs(a, b), request_id=f"req-{i}")
        client.async_stream_infer("nope", _add_sub_inputs(*_rand()), request_id="bad-model")
        bad = _add_sub_inputs(*_rand())[:1]
        client.async_stream_infer("add_sub", bad, request_id="bad-inputs")
        a, b = _rand(1, seed=999)
        client.async_stream_infer("add_sub", _add_sub_inputs(a, b), request_id="after")
        expected["after"] = a + b
        got, errors = {}, []
        for _ in range(len(expected) + 2):
            result, error = answers.get(timeout=TIMEOUT)
            if error is not None:
                errors.append(str(error))
            else:
                got[result.get_response().id] = result.as_numpy("OUTPUT0")
        client.stop_stream()
    assert set(got) == set(expected)
    for key, value in expected.items():
        np.testing.assert_array_equal(got[key], value)
    assert any("unknown model: 'nope'" in e for e in errors)
    assert any("expected 2 inputs but got 1" in e for e in errors)


# -- hostile and broken clients: raw HTTP/2 on a socket --------------------------------


def _frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return (
        struct.pack(">I", len(payload))[1:]
        + bytes([kind, flags])
        + struct.pack(">I", stream)
        + payload
    )


def _literal(name: str, value: bytes | str) -> bytes:
    # HPACK literal without indexing, new name, no Huffman (RFC 7541 §6.2.2).
    value = value.encode() if isinstance(value, str) else value
    assert len(name) < 127 and len(value) < 127
    return b"\x00" + bytes([len(name)]) + name.encode() + bytes([len(value)]) + value


def _request_block(path: str) -> bytes:
    return b"".join(
        _literal(n, v)
        for n, v in (
            (":method", "POST"),
            (":scheme", "http"),
            (":path", path),
            (":authority", "x"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        )
    )


PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + _frame(0x4, 0, 0)


class RawConnection:
    def __init__(self, server):
        self.sock = socket.create_connection((server.host, server.grpc_port), timeout=TIMEOUT)
        self.buffer = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def frames(self, until, limit=10.0):
        """Frames read until until(frame) is true or the peer closes: [(type, flags,
        stream, payload)], closed."""
        out = []
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            while len(self.buffer) >= 9:
                n = int.from_bytes(self.buffer[:3], "big")
                if len(self.buffer) < 9 + n:
                    break
                frame = (
                    self.buffer[3],
                    self.buffer[4],
                    int.from_bytes(self.buffer[5:9], "big") & 0x7FFFFFFF,
                    self.buffer[9 : 9 + n],
                )
                self.buffer = self.buffer[9 + n :]
                out.append(frame)
                if until(frame):
                    return out, False
            try:
                chunk = self.sock.recv(65536)
            except (ConnectionResetError, TimeoutError):
                return out, True
            if not chunk:
                return out, True
            self.buffer += chunk
        return out, False

    def close(self):
        self.sock.close()


def _goaway_code(frames):
    for kind, _, _, payload in frames:
        if kind == 0x7:
            return int.from_bytes(payload[4:8], "big")
    return None


def _still_serving(client):
    a, b = _rand(1, seed=11)
    np.testing.assert_array_equal(
        client.infer("add_sub", _add_sub_inputs(a, b)).as_numpy("OUTPUT0"), a + b
    )


def test_garbage_preface_closes_that_connection_only(server, client):
    raw = RawConnection(server)
    raw.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    frames, closed = raw.frames(lambda f: f[0] == 0x7)
    raw.close()
    assert _goaway_code(frames) == 0x1  # PROTOCOL_ERROR
    _still_serving(client)


@pytest.mark.parametrize(
    "attack, code",
    [
        # A HEADERS block whose HPACK table size update exceeds what we advertised.
        (_frame(0x1, 0x4, 1, b"\x3f\xe1\xff\xff\x03" + _request_block("/a/b")), 0x9),
        # Headers that never end: CONTINUATION after CONTINUATION.
        (
            _frame(0x1, 0x0, 1, _request_block("/a/b"))
            + b"".join(_frame(0x9, 0, 1, _literal("x-pad", "y" * 100)) for _ in range(200)),
            0xB,
        ),
        # Rapid reset: open a call and cancel it, over and over.
        (
            b"".join(
                _frame(0x1, 0x4, i, _request_block("/inference.GRPCInferenceService/ServerLive"))
                + _frame(0x3, 0, i, b"\0\0\0\x08")
                for i in range(1, 1001, 2)
            ),
            0xB,
        ),
        # A frame bigger than SETTINGS_MAX_FRAME_SIZE.
        (_frame(0x0, 0, 1, b"x" * 20000), 0x6),
        # DATA on a stream never opened.
        (_frame(0x0, 0, 5, b"x"), 0x1),
    ],
    ids=["hpack-table-bomb", "continuation-flood", "rapid-reset", "frame-size", "idle-data"],
)
def test_hostile_frames_get_goaway(server, client, attack, code):
    raw = RawConnection(server)
    raw.send(PREFACE + attack)
    frames, _ = raw.frames(lambda f: f[0] == 0x7)
    raw.close()
    assert _goaway_code(frames) == code
    _still_serving(client)


def _grpc(payload: bytes) -> bytes:
    return b"\0" + struct.pack(">I", len(payload)) + payload


def _trailers(raw, stream):
    frames, _ = raw.frames(lambda f: f[0] == 0x1 and f[2] == stream and f[1] & 0x1)
    block = frames[-1][3]
    return block


@pytest.mark.parametrize(
    "body, status, text",
    [
        # A truncated protobuf (a length-delimited field cut short).
        (_grpc(b"\x0a\x10add"), b"13", b"Unable to parse request"),
        # A gRPC length prefix beyond the data the stream carries.
        (_grpc(b"\x0a\x07add_sub")[:-3], b"13", b"incomplete gRPC message"),
    ],
    ids=["truncated-protobuf", "prefix-beyond-data"],
)
def test_broken_messages_get_grpc_errors(server, client, body, status, text):
    raw = RawConnection(server)
    raw.send(
        PREFACE
        + _frame(0x1, 0x4, 1, _request_block("/inference.GRPCInferenceService/ModelMetadata"))
        + _frame(0x0, 0x1, 1, body)
    )
    block = _trailers(raw, 1)
    raw.close()
    headers = dict(hpack.Decoder().decode(block, raw=True))  # an independent HPACK decoder
    assert headers[b"grpc-status"] == status
    assert text in headers[b"grpc-message"]
    _still_serving(client)


def test_rst_stream_cancels_only_that_call(server, client):
    raw = RawConnection(server)
    request = pb.ModelInferRequest(model_name="sleeper")
    request.inputs.add(name="SECONDS", datatype="FP32", shape=[1, 1])
    request.raw_input_contents.append(struct.pack("<f", 0.3))
    body = _grpc(request.SerializeToString())
    path = "/inference.GRPCInferenceService/ModelInfer"
    raw.send(
        PREFACE
        + _frame(0x1, 0x4, 1, _request_block(path))
        + _frame(0x0, 0x1, 1, body)
        + _frame(0x1, 0x4, 3, _request_block(path))
        + _frame(0x0, 0x1, 3, body)
        + _frame(0x3, 0, 1, b"\0\0\0\x08")
    )
    frames, closed = raw.frames(lambda f: f[0] == 0x1 and f[2] == 3 and f[1] & 0x1)
    raw.close()
    assert not closed
    assert not [f for f in frames if f[2] == 1 and f[0] in (0x0, 0x1)]  # nothing for 1
    assert any(f[0] == 0x0 and f[2] == 3 for f in frames)  # 3 got its answer
    _still_serving(client)


def _in_flight(server) -> int:
    arena = requests.get(f"{server.url}/v2/naiad/arena", timeout=TIMEOUT).json()
    return arena["requests_in_flight"]


def test_goaway_on_shutdown_answers_calls_in_flight(tmp_path):
    repository = make_repository(tmp_path / "models", ["sleeper"])
    with NaiadServer(repository, log_dir=tmp_path, name="grpc-stop") as server:
        url = f"{server.host}:{server.grpc_port}"
        answers: queue.Queue = queue.Queue()
        with grpcclient.InferenceServerClient(url) as client:
            tensor = grpcclient.InferInput("SECONDS", [1, 1], "FP32")
            tensor.set_data_from_numpy(np.full((1, 1), 1.0, np.float32))
            client.async_infer(
                "sleeper", [tensor], lambda result, error: answers.put((result, error))
            )
            # SIGTERM once the call is in flight (or, on a machine slow enough, answered).
            deadline = time.monotonic() + TIMEOUT
            while answers.empty() and _in_flight(server) == 0:
                assert time.monotonic() < deadline, "the call never arrived"
                time.sleep(0.01)
            server.send_signal(__import__("signal").SIGTERM)
            result, error = answers.get(timeout=TIMEOUT)
        assert error is None
        assert result.as_numpy("OUTPUT0")[0][0] == 1.0
        assert server.wait_exit(TIMEOUT) == 0


# -- h2load (nghttp2) as an independent HTTP/2 client ------------------------------------


def _h2load(server, tmp_path, path: str, body: bytes, *args: str) -> str:
    h2load = shutil.which("h2load")
    if h2load is None:
        pytest.skip("h2load not installed (make grpc-tools installs nghttp2-client)")
    data = tmp_path / "body.bin"
    data.write_bytes(body)
    command = [
        h2load,
        *args,
        "-d",
        str(data),
        "-H",
        "content-type: application/grpc",
        "-H",
        "te: trailers",
        f"http://{server.host}:{server.grpc_port}{path}",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_h2load_many_streams(server, client, tmp_path):
    a, b = _rand(1, seed=12)
    request = pb.ModelInferRequest(model_name="add_sub")
    for name, array in (("INPUT0", a), ("INPUT1", b)):
        request.inputs.add(name=name, datatype="FP32", shape=[1, 16])
        request.raw_input_contents.append(array.tobytes())
    out = _h2load(
        server,
        tmp_path,
        "/inference.GRPCInferenceService/ModelInfer",
        _grpc(request.SerializeToString()),
        "-n",
        "400",
        "-c",
        "4",
        "-m",
        "32",
    )
    assert "400 succeeded, 0 failed, 0 errored" in out, out
    _still_serving(client)


def test_h2load_small_windows_large_answers(server, tmp_path):
    # 2^10-byte stream windows: 64 kB answers go out only as h2load grants window.
    request = pb.ModelInferRequest(model_name="identity_bytes")
    tensor = request.inputs.add(name="INPUT0", datatype="BYTES", shape=[1, 1])
    tensor.contents.bytes_contents.append(b"w" * 65536)
    out = _h2load(
        server,
        tmp_path,
        "/inference.GRPCInferenceService/ModelInfer",
        _grpc(request.SerializeToString()),
        "-n",
        "40",
        "-c",
        "2",
        "-m",
        "4",
        "-w",
        "10",
        "-W",
        "16",
    )
    assert "40 succeeded, 0 failed, 0 errored" in out, out
    # Every answer came whole: 40 x (64 kB + framing) of DATA at least.
    traffic = re.search(r"traffic: \S+ \((\d+)\) total", out)
    assert traffic and int(traffic.group(1)) > 40 * 65536, out


def test_raw_and_typed_contents_take_the_lane(server, client, stub):
    def lanes():
        return requests.get(f"http://{server.host}:{server.http_port}/v2/naiad/lanes").json()

    before = lanes()
    a, b = _rand(1, seed=13)
    result = client.infer("add_sub", _add_sub_inputs(a, b), request_id="fast")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    assert result.get_response().id == "fast"
    middle = lanes()
    assert middle["lane_requests"] == before["lane_requests"] + 1
    service, _ = stub
    request = pb.ModelInferRequest(model_name="add_sub")
    for name, array in (("INPUT0", a), ("INPUT1", b)):
        tensor = request.inputs.add(name=name, datatype="FP32", shape=[1, 16])
        tensor.contents.fp32_contents.extend(array[0].tolist())
    response = service.ModelInfer(request, timeout=TIMEOUT)
    np.testing.assert_array_equal(_raw_outputs(response)["OUTPUT1"], (a - b)[0])
    after = lanes()
    assert after["lane_requests"] == middle["lane_requests"] + 1
    assert after["general_requests"] == middle["general_requests"]


def test_requests_with_tensor_parameters_take_the_lane(server, stub):
    """Input and output parameters other than shm's are ignored (as Triton 2.51 ignores
    them) by the C++ lane, not handed to the general path."""

    def lanes():
        return requests.get(f"http://{server.host}:{server.http_port}/v2/naiad/lanes").json()

    a, b = _rand(1, seed=17)
    request = pb.ModelInferRequest(model_name="add_sub")
    for name, array in (("INPUT0", a), ("INPUT1", b)):
        tensor = request.inputs.add(name=name, datatype="FP32", shape=[1, 16])
        tensor.parameters["binary_data_size"].int64_param = 64
        request.raw_input_contents.append(array.tobytes())
    request.outputs.add(name="OUTPUT1").parameters["binary_data"].bool_param = True
    service, _ = stub
    before = lanes()
    response = service.ModelInfer(request, timeout=TIMEOUT)
    assert [o.name for o in response.outputs] == ["OUTPUT1"]
    np.testing.assert_array_equal(_raw_outputs(response)["OUTPUT1"], (a - b)[0])
    after = lanes()
    assert after["lane_requests"] == before["lane_requests"] + 1
    assert after["general_requests"] == before["general_requests"]


def test_model_control_over_grpc(tmp_path):
    """With --model-control-mode=explicit, RepositoryModelLoad/Unload load and unload
    through the manager as the HTTP extension does, and the gRPC fast path's routes
    follow: served once loaded, gone once unloaded."""
    repository = make_repository(tmp_path / "models", ["add_sub"])
    with NaiadServer(
        repository,
        log_dir=tmp_path,
        name="grpc-control",
        extra_args=["--model-control-mode=explicit"],
    ) as server:
        with grpcclient.InferenceServerClient(f"{server.host}:{server.grpc_port}") as client:
            assert not client.is_model_ready("add_sub")
            client.load_model("add_sub")
            assert client.is_model_ready("add_sub")
            index = client.get_model_repository_index(as_json=True)["models"]
            assert {"name": "add_sub", "version": "1", "state": "READY"} in index
            a, b = _rand(1, seed=14)
            result = client.infer("add_sub", _add_sub_inputs(a, b))
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
            client.unload_model("add_sub")
            assert not client.is_model_ready("add_sub")
            err = _error(lambda: client.infer("add_sub", _add_sub_inputs(a, b)))
            assert err.status() in ("StatusCode.NOT_FOUND", "StatusCode.UNAVAILABLE")
            assert "add_sub" in err.message()
            err = _error(lambda: client.load_model("nope"))
            assert "nope" in err.message()
