"""A Python model's tensors in GPU memory that go through the arena: a BLS request's
inputs and the model's outputs are copied to the host (cuda_ipc.to_host).

Without a GPU, "device memory" is host memory a fake runtime copies from (the one seam
every CUDA call goes through, tests/cuda_recorder.py): the tests check which copies are
asked for, after which synchronization, and that the bytes arrive. With PyTorch on a
CUDA device, the last test copies a real device tensor."""

from __future__ import annotations

import ctypes
import json
import textwrap

import cuda_recorder
import numpy as np
import pytest
from naiad import triton_python_backend_utils as pb_utils
from naiad.backends.base import RequestError, Response
from naiad.backends.python import PythonModelBackend
from naiad.memory import cuda_ipc


class _CopyingCudart(cuda_recorder.FakeCudart):
    """Records every call and copies for real: "device" pointers are host addresses."""

    def cudaMemcpy(self, target, source, size, kind):  # noqa: N802
        super().cudaMemcpy(target, source, size, kind)
        ctypes.memmove(target, source, size)
        return (0,)


class _DeviceTensor:
    """What torch or CuPy give for a tensor on the device: `__cuda_array_interface__`."""

    def __init__(self, array: np.ndarray, strides=None, stream=None):
        self.array = array  # the memory the "device" pointer points into
        self.shape = array.shape
        self.interface = {
            "shape": array.shape,
            "typestr": array.dtype.str,
            "data": (array.ctypes.data, False),
            "version": 3,
            "strides": strides,
            "stream": stream,
        }

    @property
    def __cuda_array_interface__(self):
        return self.interface

    def __dlpack__(self, stream=None):
        raise AssertionError("the copy reads __cuda_array_interface__")


@pytest.fixture
def cudart(monkeypatch):
    fake = _CopyingCudart()
    cuda_recorder.install(monkeypatch)
    monkeypatch.setattr(cuda_ipc, "_cudart", lambda: fake)
    return fake


def _on_device(name: str, array: np.ndarray, **interface) -> pb_utils.Tensor:
    triton_dtype = pb_utils.numpy_to_triton_type(array.dtype)
    return pb_utils.Tensor._from_device(name, _DeviceTensor(array, **interface), 1, triton_dtype)


def test_a_bls_input_in_gpu_memory_is_copied_to_the_host(cudart):
    source = np.arange(16, dtype=np.float32).reshape(1, 16)
    host = pb_utils.Tensor("INPUT1", np.ones((1, 16), np.float32))
    request = pb_utils.InferenceRequest(
        model_name="add_sub",
        requested_output_names=["OUTPUT0"],
        inputs=[_on_device("INPUT0", source), host],
    )
    inputs = request._wire_inputs()
    assert [(t.name, t.datatype, list(t.shape)) for t in inputs] == [
        ("INPUT0", "FP32", [1, 16]),
        ("INPUT1", "FP32", [1, 16]),
    ]
    assert bytes(inputs[0].data) == source.tobytes()
    assert bytes(inputs[1].data) == host.as_numpy().tobytes()
    # One device-to-host copy of the whole tensor on the tensor's device, none for the
    # host input.
    memcpys = cuda_recorder.memcpys(cudart)
    assert [(kind, source_ptr, size) for _, kind, _, source_ptr, size in memcpys] == [
        ("D2H", source.ctypes.data, source.nbytes)
    ]
    assert ("set_device", 1) in cudart.calls
    assert cuda_ipc.COUNTS["device_to_host"] == 1


def test_the_copy_waits_for_the_stream_the_tensor_was_written_on(cudart):
    source = np.arange(4, dtype=np.int64)
    copied = _on_device("X", source, stream=7)._host_array("output")
    assert copied.tolist() == [0, 1, 2, 3] and copied.dtype == np.int64
    kinds = [call[0] for call in cudart.calls]
    assert kinds.index("stream_synchronize") < kinds.index("memcpy")
    assert ("stream_synchronize", 7) in cudart.calls


def test_a_contiguous_tensor_given_with_strides_is_copied_and_a_strided_one_refused(cudart):
    rows = np.arange(12, dtype=np.float32).reshape(3, 4)
    # Row-major strides spelled out, and any stride on a dimension of one element.
    assert _on_device("A", rows, strides=(16, 4))._host_array("output").tolist() == rows.tolist()
    column = rows[:1]
    assert _on_device("B", column, strides=(999, 4))._host_array("output").tolist() == [
        [0, 1, 2, 3]
    ]
    request = pb_utils.InferenceRequest(
        model_name="add_sub",
        requested_output_names=[],
        inputs=[_on_device("INPUT0", rows, strides=(4, 12))],  # column-major
    )
    with pytest.raises(pb_utils.TritonModelException) as caught:
        request._wire_inputs()
    assert str(caught.value) == (
        "input 'INPUT0' in GPU memory could not be copied to the host: the tensor is not "
        "contiguous (strides [4, 12])"
    )


# A Python model that answers with OUTPUT0 = INPUT0 * 2 left "in GPU memory" (the fake
# device: host memory it keeps alive, described by __cuda_array_interface__).
_DEVICE_OUTPUT_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class _OnDevice:
    def __init__(self, array):
        self.array = array
        self.shape = array.shape
        self.__cuda_array_interface__ = {
            "shape": array.shape, "typestr": array.dtype.str,
            "data": (array.ctypes.data, False), "version": 3, "strides": None,
            "stream": None,
        }


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            doubled = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy() * 2
            out = pb_utils.Tensor._from_device(
                "OUTPUT0", _OnDevice(doubled), 0, pb_utils.TRITONSERVER_TYPE_FP32
            )
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
"""


def _run_doubler(tmp_path, model_text: str, rows: np.ndarray):
    """The backend's result for one request of `rows` to the doubler model `model_text`."""
    model_dir = tmp_path / "doubler"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "1" / "model.py").write_text(textwrap.dedent(model_text))
    config = {
        "name": "doubler",
        "backend": "python",
        "max_batch_size": 8,
        "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
    }
    args = {
        "model_config": json.dumps(config),
        "model_instance_kind": "CPU",
        "model_instance_name": "doubler_0_0",
        "model_instance_device_id": "0",
        "model_repository": str(model_dir),
        "model_version": "1",
        "model_name": "doubler",
    }
    backend = PythonModelBackend(args)
    try:
        request = pb_utils.InferenceRequest(
            model_name="doubler",
            requested_output_names=["OUTPUT0"],
            inputs=[pb_utils.Tensor("INPUT0", rows)],
        )
        [result] = backend.execute_requests([request])
    finally:
        backend.finalize()
    return result


def test_an_output_a_python_model_leaves_in_gpu_memory_is_answered_from_a_host_copy(
    cudart, tmp_path
):
    rows = np.array([[1, 2, 3, 4]], np.float32)
    result = _run_doubler(tmp_path, _DEVICE_OUTPUT_MODEL, rows)
    assert isinstance(result, Response)
    [(name, array)] = result.outputs
    assert name == "OUTPUT0" and isinstance(array, np.ndarray)
    assert array.tolist() == [[2, 4, 6, 8]]
    assert [call[1] for call in cuda_recorder.memcpys(cudart)] == ["D2H"]


def test_an_output_in_gpu_memory_that_cannot_be_copied_fails_its_request(cudart, tmp_path):
    # Two rows described with column-major strides: not contiguous, so not copied.
    strided = _DEVICE_OUTPUT_MODEL.replace('"strides": None', '"strides": (4, 8)')
    result = _run_doubler(tmp_path, strided, np.arange(8, dtype=np.float32).reshape(2, 4))
    assert isinstance(result, RequestError)
    assert result.message == (
        "Failed to process the request(s) for model 'doubler_0_0', message: output 'OUTPUT0' "
        "in GPU memory could not be copied to the host: the tensor is not contiguous "
        "(strides [4, 8])"
    )
    assert cuda_recorder.memcpys(cudart) == []


def _torch_cuda():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


@pytest.mark.skipif(
    _torch_cuda() is None,
    reason="needs PyTorch with CUDA and a CUDA device (the tests install torch's CPU build)",
)
def test_a_torch_tensor_on_the_gpu_is_copied_to_the_host():
    torch = _torch_cuda()
    device_tensor = torch.arange(6, dtype=torch.float32, device="cuda").reshape(2, 3) * 2
    tensor = pb_utils.Tensor.from_dlpack("OUT", device_tensor)
    assert not tensor.is_cpu()
    host = tensor._host_array("output")
    assert host.dtype == np.float32 and host.tolist() == [[0, 2, 4], [6, 8, 10]]
