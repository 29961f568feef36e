"""CUDA shared memory in the GPU backends, without a GPU: onnxruntime on the CUDA
provider (IOBinding) and TensorRT (tensor addresses) bind a client's CUDA-region input at
its device pointer and write an output straight into the client's region, and the worker
then copies nothing; a batch of several requests joins its inputs on the device and its
outputs go device to device. cuda-python's runtime is the recorder of cuda_recorder.py
(the one seam, naiad.memory.cuda_ipc._cudart); onnxruntime-gpu's IOBinding and OrtValues and
TensorRT's execution context are fakes that record what is bound — the GPU libraries'
objects only. BYTES inputs from CUDA regions are copied to the host and checked there by
the validator's own check (csrc/codec/request_validator.h check_bytes_input).

Where a GPU exists, tests/test_cuda_shm.py runs the same paths for real."""

from __future__ import annotations

import base64
import json
import struct

import cuda_recorder
import numpy as np
import onnx_support
import orjson
import pytest
from naiad import _core
from naiad.backends import onnxruntime as ort_backend
from naiad.backends import tensorrt as trt_backend
from naiad.backends.base import Batch, RequestHeader
from naiad.memory import cuda_ipc
from naiad.repository import autocomplete
from naiad.repository.config import config_to_json
from naiad.worker import main as worker_main
from naiad.worker import results as worker_results
from naiad.worker import shm_outputs

HANDLE = b"h" * 64
ROW = 16 * 4  # one FP32 [16] row


@pytest.fixture
def cudart(monkeypatch):
    return cuda_recorder.install(monkeypatch)


def _header(rows: int, outputs=("OUTPUT0", "OUTPUT1")) -> RequestHeader:
    inputs = (("INPUT0", "FP32", (rows, 16)), ("INPUT1", "FP32", (rows, 16)))
    return RequestHeader("r", inputs, list(outputs), {})


def _cuda_region_output(region_id: int, offset: int, size: int) -> list:
    """A request block's `regions` entry of an output in a CUDA region on device 0."""
    return [region_id, _core.SHM_CUDA, base64.b64encode(HANDLE).decode(), 0, 1 << 20, offset, size]


def _two_requests(first_rows: int):
    """A batch of two requests with OUTPUT0 in CUDA regions 5 and 6 (on device 0): the
    first's INPUT0 (`first_rows` rows) in a client's CUDA region at 0x9000_0000, the
    second's (one row) in the host arena. (blocks, regions_of, batch, that host row)."""
    regions = {
        b"a": {"outputs": {"OUTPUT0": _cuda_region_output(5, 0, first_rows * ROW)}},
        b"b": {"outputs": {"OUTPUT0": _cuda_region_output(6, 0, ROW)}},
    }
    blocks = [(b"a", []), (b"b", [])]
    host_row = np.arange(16, dtype=np.float32).reshape(1, 16)
    first = np.zeros((first_rows, 16), np.float32)
    batch = Batch(
        [_header(first_rows, ["OUTPUT0"]), _header(1, ["OUTPUT0"])],
        [[first, first.copy()], [host_row, np.zeros((1, 16), np.float32)]],
    )
    client = cuda_ipc.DeviceArray(0x9000_0000, np.float32, (first_rows, 16), 0)
    batch.device_inputs = {(0, 0): client}
    batch.output_targets = shm_outputs.output_targets(blocks, regions.get, 0)
    batch.device_outputs = frozenset(batch.output_targets)
    return blocks, regions.get, batch, host_row


# -- onnxruntime, CUDA execution provider ---------------------------------------------------


class _FakeOrtValue:
    """An OrtValue in device memory as onnxruntime-gpu returns one."""

    def __init__(self, pointer, shape, host=None):
        self.pointer, self._shape, self.host = pointer, list(shape), host

    def data_ptr(self):
        return self.pointer

    def shape(self):
        return self._shape

    def data_type(self):
        return "tensor(float)"

    def numpy(self):
        return self.host


class _FakeBinding:
    """onnxruntime's IOBinding: records each bind, gives back `outputs` after the run."""

    def __init__(self):
        self.calls = []
        self.outputs = []

    def clear_binding_inputs(self):
        self.calls.append(("clear_inputs",))

    def clear_binding_outputs(self):
        self.calls.append(("clear_outputs",))

    def bind_input(self, name, device_type, device_id, element_type, shape, buffer_ptr):
        self.calls.append(("input", name, device_type, device_id, element_type, shape, buffer_ptr))

    def bind_cpu_input(self, name, array):
        self.calls.append(("cpu_input", name, array.shape))

    def bind_output(
        self, name, device_type="cpu", device_id=0, element_type=None, shape=None, buffer_ptr=None
    ):
        self.calls.append(("output", name, device_type, device_id, element_type, shape, buffer_ptr))

    def synchronize_outputs(self):
        self.calls.append(("synchronize_outputs",))

    def get_outputs(self):
        return self.outputs


class _FakeSession:
    def __init__(self):
        self.runs = 0

    def run_with_iobinding(self, binding, run_options=None):
        self.runs += 1


@pytest.fixture
def ort_gpu(tmp_path, monkeypatch):
    """The add_sub ONNX model (FP32 [-1, 16] in and out, max_batch_size 4) loaded by the
    real backend, then set up as a KIND_GPU instance on device 0 whose session and
    IOBinding are fakes (onnxruntime-gpu's objects), and OrtValues allocated on the
    device recorded."""
    folder = onnx_support.write_model(tmp_path, "m", onnx_support.add_sub(), None, {})
    config = config_to_json(autocomplete.load_completed_config(folder, "m"))
    backend = ort_backend.OnnxRuntimeBackend(
        {
            "model_config": json.dumps(config),
            "model_name": "m",
            "model_version": "1",
            "model_repository": str(folder),
            "model_instance_kind": "CPU",
            "model_instance_name": "m_0",
        }
    )
    backend.device, backend.device_id, backend.device_inputs = "cuda", 0, True
    backend.placed_outputs = None  # as on a GPU instance
    backend.binding, backend.session = _FakeBinding(), _FakeSession()
    allocated = []

    def on_device(shape, element_type, device_type="cpu", device_id=0):
        allocated.append((list(shape), element_type, device_type, device_id))
        return _FakeOrtValue(0xB000_0000, shape)

    import onnxruntime

    monkeypatch.setattr(onnxruntime.OrtValue, "ortvalue_from_shape_and_type", on_device)
    backend.allocated = allocated
    return backend


def test_onnxruntime_binds_a_cuda_input_in_place_and_writes_the_output_into_the_region(
    cudart, ort_gpu
):
    regions = {"outputs": {"OUTPUT0": _cuda_region_output(5, 256, 2 * ROW)}}
    blocks = [(b"m", [])]
    client_input = cuda_ipc.DeviceArray(0x9000_0000, np.float32, (2, 16), 0)
    batch = Batch([_header(2)], [[np.zeros((2, 16), np.float32), np.ones((2, 16), np.float32)]])
    batch.device_inputs = {(0, 0): client_input}
    batch.output_targets = shm_outputs.output_targets(blocks, lambda _m: regions, 0)
    batch.device_outputs = frozenset(batch.output_targets)
    region = cuda_recorder.IPC_BASE + 256  # where the client's region is opened, + offset
    ort_gpu.binding.outputs = [
        _FakeOrtValue(region, (2, 16)),
        _FakeOrtValue(0, (2, 16), host=np.full((2, 16), 7, np.float32)),
    ]
    (result,) = ort_gpu.execute(batch)
    binds = [c for c in ort_gpu.binding.calls if c[0] in ("input", "cpu_input", "output")]
    assert binds == [
        ("input", "INPUT0", "cuda", 0, np.float32, [2, 16], 0x9000_0000),  # the client's
        ("cpu_input", "INPUT1", (2, 16)),
        ("output", "OUTPUT0", "cuda", 0, np.float32, [2, 16], region),  # into its region
        ("output", "OUTPUT1", "cpu", 0, None, None, None),
    ]
    assert ort_gpu.binding.calls[-1] == ("synchronize_outputs",)
    names = [name for name, _array in result.outputs]
    assert names == ["OUTPUT0", "OUTPUT1"]
    written = result.outputs[0][1]
    assert isinstance(written, cuda_ipc.DeviceArray) and written.pointer == region
    np.testing.assert_array_equal(result.outputs[1][1], np.full((2, 16), 7, np.float32))
    # The worker then writes nothing for OUTPUT0: it is in the region already.
    response = worker_results.wire_results([result])
    placed = shm_outputs.place_outputs(None, blocks, response, lambda _m: regions)
    assert placed[0][4][0] == b""
    assert cuda_recorder.memcpys(cudart) == []
    assert ort_gpu.allocated == []
    assert cuda_ipc.COUNTS["written_in_place"] == 1
    assert cuda_ipc.COUNTS["device_to_device"] == 0


def test_onnxruntime_batch_joins_inputs_on_the_device_and_copies_outputs_device_to_device(
    cudart, ort_gpu
):
    blocks, regions_of, batch, host_rows = _two_requests(2)
    ort_gpu.binding.outputs = [
        _FakeOrtValue(0xC000_0000, (3, 16)),  # where onnxruntime put OUTPUT0, on the device
        _FakeOrtValue(0, (3, 16), host=np.zeros((3, 16), np.float32)),
    ]
    first, second = ort_gpu.execute(batch)
    # INPUT0: one device buffer of the batch's 3 rows, the client's 2 rows copied device
    # to device, the other request's row host to device, done before the run.
    assert ort_gpu.allocated == [([3, 16], np.float32, "cuda", 0)]
    assert cuda_recorder.memcpys(cudart) == [
        ("memcpy", "D2D", 0xB000_0000, 0x9000_0000, 2 * ROW),
        ("memcpy", "H2D", 0xB000_0000 + 2 * ROW, host_rows.ctypes.data, ROW),
    ]
    assert ("synchronize",) in cudart.calls
    binds = [c for c in ort_gpu.binding.calls if c[0] in ("input", "output")]
    assert binds == [
        ("input", "INPUT0", "cuda", 0, np.float32, [3, 16], 0xB000_0000),
        ("output", "OUTPUT0", "cuda", 0, None, None, None),  # two regions: ORT allocates
        ("output", "OUTPUT1", "cpu", 0, None, None, None),
    ]
    # Each request's rows of OUTPUT0 go device to device into its own region.
    rows = [first.outputs[0][1], second.outputs[0][1]]
    assert [(r.pointer, r.shape) for r in rows] == [
        (0xC000_0000, (2, 16)),
        (0xC000_0000 + 2 * ROW, (1, 16)),
    ]
    del cudart.calls[:]
    responses = worker_results.wire_results([first, second])
    shm_outputs.place_outputs(None, blocks, responses, regions_of)
    assert cuda_recorder.memcpys(cudart) == [
        ("memcpy", "D2D", cuda_recorder.IPC_BASE, 0xC000_0000, 2 * ROW),
        ("memcpy", "D2D", cuda_recorder.IPC_BASE + 0x1000, 0xC000_0000 + 2 * ROW, ROW),
    ]
    assert cuda_ipc.COUNTS["written_in_place"] == 0


def test_onnxruntime_output_region_too_small_stays_on_the_device_and_fails_the_request(
    cudart, ort_gpu
):
    """Not bound into a region it does not fit: onnxruntime allocates it, and the worker
    answers Triton's output-too-small error without writing the region."""
    regions = {"outputs": {"OUTPUT0": _cuda_region_output(5, 0, ROW)}}
    blocks = [(b"m", [])]
    batch = Batch([_header(2, ["OUTPUT0"])], [[np.zeros((2, 16), np.float32)] * 2])
    batch.output_targets = shm_outputs.output_targets(blocks, lambda _m: regions, 0)
    batch.device_outputs = frozenset(batch.output_targets)
    ort_gpu.binding.outputs = [
        _FakeOrtValue(0xC000_0000, (2, 16)),
        _FakeOrtValue(0, (2, 16), host=np.zeros((2, 16), np.float32)),
    ]
    (result,) = ort_gpu.execute(batch)
    binds = [c for c in ort_gpu.binding.calls if c[0] in ("cpu_input", "output")]
    assert ("output", "OUTPUT0", "cuda", 0, None, None, None) in binds
    placed = shm_outputs.place_outputs(
        None, blocks, worker_results.wire_results([result]), lambda _m: regions
    )
    assert placed[0][2] == 1 and b"should be at least 128 bytes" in placed[0][3]
    assert cuda_recorder.memcpys(cudart) == []


# -- TensorRT ---------------------------------------------------------------------------------


class _FakeContext:
    """TensorRT's IExecutionContext (TRT 10 tensor API): records shapes and addresses."""

    def __init__(self):
        self.calls = []
        self.shapes = {}

    def set_input_shape(self, name, shape):
        self.calls.append(("shape", name, tuple(shape)))
        self.shapes[name] = tuple(shape)
        return True

    def get_tensor_shape(self, name):
        return self.shapes["INPUT0"]  # the outputs are the inputs' shape (add_sub)

    def set_tensor_address(self, name, pointer):
        self.calls.append(("address", name, pointer))
        return True

    def execute_async_v3(self, stream):
        self.calls.append(("execute", stream))
        return True


@pytest.fixture
def trt_gpu(cudart):
    """A TensorRTBackend instance as __init__ leaves it after loading an add_sub engine
    (FP32 [-1, 16] in and out, max_batch_size 4, one profile), with the recorder as its
    cuda-python and a fake execution context."""
    backend = object.__new__(trt_backend.TensorRTBackend)
    backend.name = backend.instance = "m"
    backend.cudart = cudart
    backend.device = backend.device_id = 0
    backend.device_inputs = True
    backend.pinned = True
    backend.stream = 17
    backend.max_batch_size = 4
    tensors = [
        trt_backend.TensorDescription(name, is_input, "TYPE_FP32", (-1, 16))
        for name, is_input in (
            ("INPUT0", True),
            ("INPUT1", True),
            ("OUTPUT0", False),
            ("OUTPUT1", False),
        )
    ]
    backend.description = trt_backend.EngineDescription(tensors, 1)
    backend.profiles = [0]
    backend.contexts = {0: _FakeContext()}
    backend.buffers = {}
    backend.output_names = ["OUTPUT0", "OUTPUT1"]
    backend.output_dtypes = {"OUTPUT0": np.dtype(np.float32), "OUTPUT1": np.dtype(np.float32)}
    return backend


def test_tensorrt_binds_a_cuda_input_at_its_pointer_and_the_output_into_the_region(cudart, trt_gpu):
    regions = {"outputs": {"OUTPUT0": _cuda_region_output(5, 512, 2 * ROW)}}
    blocks = [(b"m", [])]
    host_input = np.ones((2, 16), np.float32)
    batch = Batch([_header(2)], [[np.zeros((2, 16), np.float32), host_input]])
    batch.device_inputs = {(0, 0): cuda_ipc.DeviceArray(0x9000_0000, np.float32, (2, 16), 0)}
    batch.output_targets = shm_outputs.output_targets(blocks, lambda _m: regions, 0)
    batch.device_outputs = frozenset(batch.output_targets)
    (result,) = trt_gpu.execute(batch)
    context = trt_gpu.contexts[0]
    addresses = {c[1]: c[2] for c in context.calls if c[0] == "address"}
    region = cuda_recorder.IPC_BASE + 512
    assert addresses["INPUT0"] == 0x9000_0000  # the client's memory, no copy
    assert addresses["OUTPUT0"] == region  # the engine writes into the client's region
    # INPUT1 from the host and OUTPUT1 back to it: the only copies.
    input1, output1 = addresses["INPUT1"], addresses["OUTPUT1"]
    host_output = result.outputs[1][1]
    assert cuda_recorder.memcpys(cudart) == [
        ("memcpy", "H2D", input1, np.ascontiguousarray(host_input).ctypes.data, 2 * ROW),
        ("memcpy", "D2H", host_output.ctypes.data, output1, 2 * ROW),
    ]
    assert cudart.calls[-1] == ("stream_synchronize", 17)
    written = result.outputs[0][1]
    assert isinstance(written, cuda_ipc.DeviceArray) and written.pointer == region
    del cudart.calls[:]
    placed = shm_outputs.place_outputs(
        None, blocks, worker_results.wire_results([result]), lambda _m: regions
    )
    assert placed[0][4][0] == b""
    assert cuda_recorder.memcpys(cudart) == []
    assert cuda_ipc.COUNTS["written_in_place"] == 1


def test_tensorrt_batch_joins_inputs_on_its_stream_and_copies_outputs_device_to_device(
    cudart, trt_gpu
):
    blocks, regions_of, batch, host_row = _two_requests(1)
    first, second = trt_gpu.execute(batch)
    context = trt_gpu.contexts[0]
    addresses = {c[1]: c[2] for c in context.calls if c[0] == "address"}
    joined = addresses["INPUT0"]
    copies = cuda_recorder.memcpys(cudart)
    assert copies[:2] == [
        ("memcpy", "D2D", joined, 0x9000_0000, ROW),  # the client's row, device to device
        ("memcpy", "H2D", joined + ROW, host_row.ctypes.data, ROW),  # the other's
    ]
    assert all(copy[1] != "D2H" or copy[3] != addresses["OUTPUT0"] for copy in copies)
    rows = [first.outputs[0][1], second.outputs[0][1]]
    assert [(r.pointer, r.shape) for r in rows] == [
        (addresses["OUTPUT0"], (1, 16)),
        (addresses["OUTPUT0"] + ROW, (1, 16)),
    ]
    del cudart.calls[:]
    shm_outputs.place_outputs(
        None, blocks, worker_results.wire_results([first, second]), regions_of
    )
    assert cuda_recorder.memcpys(cudart) == [
        ("memcpy", "D2D", cuda_recorder.IPC_BASE, addresses["OUTPUT0"], ROW),
        ("memcpy", "D2D", cuda_recorder.IPC_BASE + 0x1000, addresses["OUTPUT0"] + ROW, ROW),
    ]


# -- BYTES in CUDA regions ------------------------------------------------------------------


def _strings(*items: bytes) -> bytes:
    return b"".join(struct.pack("<I", len(item)) + item for item in items)


def _bytes_spec() -> _core.ModelSpec:
    return _core.ModelSpec("strings", "1", 4, [("TEXT", "BYTES", [-1], 0, False, False, False)], [])


@pytest.mark.parametrize(
    "data",
    [
        _strings(b"ab", b"cde"),  # well formed
        _strings(b"ab"),  # too few
        _strings(b"a", b"b", b"c"),  # too many
        _strings(b"ab") + b"\x01\x00",  # a length cut short
        _strings(b"ab") + b"\x09\x00\x00\x00xy",  # an element past the end
    ],
)
def test_bytes_check_after_the_copy_is_the_validators(data):
    """The worker's check of BYTES copied from a CUDA region gives the message the
    frontend's validator gives for the same bytes in the request body: one checker."""
    from naiad.types import InputTensor

    frontend = _bytes_spec().validate("q", [InputTensor("TEXT", "BYTES", [1, 2], data)], None)
    expected = None if isinstance(frontend, tuple) else frontend
    buffer = bytearray(8) + bytearray(data) + bytearray(8)
    got = _core.check_bytes_input("strings", "q", "TEXT", (1, 2), True, buffer, 8, len(data))
    assert got == expected
    if data != _strings(b"ab", b"cde"):
        assert got is not None and "TEXT" in got


def _bytes_metadata(request_id: str, cuda_input: list) -> bytes:
    """A request block's metadata: one BYTES input [1, 2] from a CUDA region."""
    regions = {"outputs": {}, "cuda_inputs": [cuda_input]}
    inputs = [["TEXT", "BYTES", [1, 2]]]
    header = {"id": request_id, "inputs": inputs, "outputs": None, "parameters": {}}
    return orjson.dumps({**header, "regions": regions})


def test_bytes_in_a_cuda_region_pass_the_frontend_and_are_checked_by_the_worker(cudart):
    """The frontend's validator leaves a CUDA-region BYTES input's elements (its bytes
    are on the device), as Triton 2.51 does; the worker copies them to the host, even
    for a GPU backend on that device, and answers a malformed one with the message."""
    from naiad.types import InputTensor

    core = _core.Core(1 << 22)
    registry = _core.ShmRegistry(core)
    assert registry.register_cuda("c", HANDLE, 0, 64) is None
    ref = registry.resolve("c", 0, 10)
    spec = _bytes_spec()
    assert isinstance(spec.validate("q", [InputTensor("TEXT", "BYTES", [1, 2], ref)], None), tuple)

    good, bad = _strings(b"ab", b"c"), _strings(b"ab") + b"\x09\x00"
    arena = bytearray(4096)
    arena[1024 : 1024 + len(good)] = good  # as the device-to-host copy leaves them
    arena[2048 : 2048 + len(bad)] = bad
    handle = base64.b64encode(HANDLE).decode()
    metadata = {
        "a": _bytes_metadata("ok", [0, 3, handle, 0, 0, len(good)]),
        "b": _bytes_metadata("bad", [0, 3, handle, 0, 16, len(bad)]),
    }
    blocks = [(metadata["a"], [(1024, len(good))]), (metadata["b"], [(2048, len(bad))])]
    worker = object.__new__(worker_main.Worker)
    worker.model_name, worker.batching = "strings", True
    errors = {}
    found = shm_outputs.fill_cuda_inputs(
        arena,
        blocks,
        worker_main._regions_of,
        0,  # a GPU backend on the region's device: BYTES are still copied to the host
        worker_main._inputs_of,
        worker._bytes_error,
        errors,
    )
    assert found == {}
    assert [c[1] for c in cuda_recorder.memcpys(cudart)] == ["D2H", "D2H"]
    assert list(errors) == [1]
    assert errors[1] == (
        "[request id: bad] incomplete string length indicator for inference input 'TEXT' for "
        "model 'strings', expecting 4 bytes but only 2 bytes available. Please make sure the "
        "string length indicator is in one buffer."
    )


class _Endpoint:
    """The worker's endpoint as _run_batch posts through it: responses recorded."""

    reserve_response = None
    trace_contexts = None  # as WorkerEndpoint's for a batch with no request traced

    def __init__(self, arena):
        self.arena = arena
        self.responded = []

    def respond(self, batch_id, responses, timings, done):
        self.responded.append((batch_id, responses, done))
        return True


class _Echo:
    """A host model (the Backend interface): each request's TEXT back as OUT."""

    batch_tensors = False
    out_of_memory = False

    def __init__(self):
        self.batches = []

    def execute(self, batch):
        from naiad.backends.base import Response

        self.batches.append([header.id for header in batch.headers])
        return [Response([("OUT", arrays[0])]) for arrays in batch.arrays]


def test_a_malformed_cuda_bytes_input_fails_its_request_and_the_batch_runs_on(cudart, monkeypatch):
    # A fresh worker: no request with regions seen yet, so this batch's own layouts must
    # turn the CUDA path on (on a GPU, the first such request once read zeros).
    monkeypatch.setattr(shm_outputs, "active", False)
    monkeypatch.setattr(worker_main, "_LAYOUTS", {})
    bad, good = _strings(b"ab") + b"\x09\x00", _strings(b"xy", b"z")
    arena = bytearray(1 << 16)
    arena[1024 : 1024 + len(bad)] = bad  # as the device-to-host copy leaves them
    arena[2048 : 2048 + len(good)] = good
    handle = base64.b64encode(HANDLE).decode()
    blocks = [
        (_bytes_metadata("bad", [0, 3, handle, 0, 0, len(bad)]), [(1024, len(bad))]),
        (_bytes_metadata("ok", [0, 3, handle, 0, 16, len(good)]), [(2048, len(good))]),
    ]
    endpoint, backend = _Endpoint(arena), _Echo()
    worker_main.Worker(endpoint, backend, "strings", True)._run_batch(7, blocks, [])
    assert [c[1] for c in cuda_recorder.memcpys(cudart)] == ["D2H", "D2H"]
    assert backend.batches == [["ok"]]  # the malformed request never reaches the model
    ((batch_id, responses, done),) = endpoint.responded
    assert batch_id == 7 and done
    (index, flags, code, json_text, _buffers), answered = responses
    assert index == 0 and flags & _core.RESPONSE_ERROR and code == 3  # INVALID_ARG: 400
    assert orjson.loads(json_text)["error"].startswith(
        "[request id: bad] incomplete string length indicator for inference input 'TEXT'"
    )
    assert answered[0] == 1 and not answered[1] & _core.RESPONSE_ERROR
    assert orjson.loads(answered[3])["outputs"] == [["OUT", "BYTES", [1, 2]]]
    assert bytes(answered[4][0]) == good


class _DecoupledEndpoint(_Endpoint):
    """The endpoint as a decoupled batch posts through it (respond_open)."""

    batch_desc = 0

    def request_blocks(self, desc):
        return [100, 200]

    def respond_open(self, batch_id, responses, timings, batch_done, keep_open):
        self.responded.extend(responses)
        return True

    def yield_to_frontend(self):
        return False  # the frontend is not running: nothing to give the CPU to

    def request_cancelled(self, block):
        return False


class _DecoupledEcho(_Echo):
    decoupled = True

    def execute_decoupled(self, batch, stream):
        for index, result in enumerate(self.execute(batch)[: len(batch)]):
            stream.send(index, result, True)


def test_a_decoupled_model_answers_the_malformed_request_and_streams_the_other(cudart, monkeypatch):
    monkeypatch.setattr(shm_outputs, "active", True)
    good, bad = _strings(b"xy", b"z"), _strings(b"ab") + b"\x09\x00"
    arena = bytearray(1 << 16)
    arena[1024 : 1024 + len(good)] = good
    arena[2048 : 2048 + len(bad)] = bad
    handle = base64.b64encode(HANDLE).decode()
    blocks = [
        (_bytes_metadata("bad", [0, 3, handle, 0, 16, len(bad)]), [(2048, len(bad))]),
        (_bytes_metadata("ok", [0, 3, handle, 0, 0, len(good)]), [(1024, len(good))]),
    ]
    endpoint, backend = _DecoupledEndpoint(arena), _DecoupledEcho()
    worker_main.Worker(endpoint, backend, "strings", True)._run_batch(7, blocks, [])
    assert backend.batches == [["ok"]]
    # The model's response 0 of its batch of one is the batch's request 1.
    by_index = {response[0]: response for response in endpoint.responded}
    assert sorted(by_index) == [0, 1]
    assert by_index[0][2] == 3 and b"[request id: bad]" in by_index[0][3]
    assert not by_index[1][1] & _core.RESPONSE_ERROR and bytes(by_index[1][4][0]) == good
