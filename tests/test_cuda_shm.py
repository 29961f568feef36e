"""Triton's CUDA shared-memory extension (naiad/memory/cuda_ipc.py): a client's device buffer
registered by its cudaIpcMemHandle_t, an input read from it and an output written into
it by the worker, over HTTP. Needs a GPU and cuda-python (the `gpu` extra); elsewhere the
tests skip and say why (tests/test_shm.py checks the answer without CUDA)."""

from __future__ import annotations

import numpy as np
import pytest
import requests
from naiad.memory import cuda_ipc
from server_harness import NaiadServer
from shm_support import SHM_MODELS, cuda_in_out

_REASON = cuda_ipc.unavailable_reason(0)
pytestmark = pytest.mark.skipif(_REASON is not None, reason=f"CUDA shared memory: {_REASON}")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with NaiadServer(SHM_MODELS, log_dir=tmp_path_factory.mktemp("cuda_shm")) as running:
        yield running


def _infer_in_regions(client, model: str, input_name: str, output_name: str, data) -> None:
    """`model` on an FP32 input read from region "cin", its output written to "cout"."""
    import tritonclient.http as httpclient

    inp = httpclient.InferInput(input_name, list(data.shape), "FP32")
    inp.set_shared_memory("cin", data.nbytes)
    out = httpclient.InferRequestedOutput(output_name, binary_data=False)
    out.set_shared_memory("cout", data.nbytes)
    client.infer(model, [inp], outputs=[out])


def test_cuda_region_input_and_output(server):
    import tritonclient.http as httpclient
    import tritonclient.utils.cuda_shared_memory as cudashm

    extensions = requests.get(server.url + "/v2", timeout=20).json()["extensions"]
    assert "cuda_shared_memory" in extensions
    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    data = np.arange(16, dtype=np.float32).reshape(2, 8)
    try:
        with cuda_in_out(client, data) as (_handle_in, handle_out):
            status = client.get_cuda_shared_memory_status()
            assert {r["name"] for r in status} == {"cin", "cout"}
            _infer_in_regions(client, "shm_identity", "INPUT0", "OUTPUT0", data)
            got = cudashm.get_contents_as_numpy(handle_out, np.float32, [2, 8])
            np.testing.assert_array_equal(got, data)
            # Out of bounds and too small: Triton's codes.
            bad = httpclient.InferInput("INPUT0", [2, 8], "FP32")
            bad.set_shared_memory("cin", data.nbytes, offset=8)
            with pytest.raises(Exception, match="Invalid offset"):
                client.infer("shm_identity", [bad])
            client.unregister_cuda_shared_memory()
            assert client.get_cuda_shared_memory_status() == []
    finally:
        client.close()


def test_gpu_model_reads_and_writes_cuda_regions_device_to_device(tmp_path):
    """A KIND_GPU TorchScript model (x * 2): its input is read in place from the client's
    CUDA region and its output copied device to device into another (worker side:
    tests/test_shm_worker.py checks which copies are made without a GPU)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("this PyTorch has no CUDA")
    import tritonclient.http as httpclient
    import tritonclient.utils.cuda_shared_memory as cudashm
    from torch_models import _io, build_model

    class Twice(torch.nn.Module):
        def forward(self, x):
            return x * 2

    config = (
        'platform: "pytorch_libtorch"\nmax_batch_size: 4\n'
        + _io("input", [("INPUT__0", "FP32", [8])])
        + _io("output", [("OUTPUT__0", "FP32", [8])])
        + "instance_group [ { count: 1, kind: KIND_GPU, gpus: [ 0 ] } ]\n"
    )
    build_model(tmp_path / "models", "pt_twice_gpu", config, Twice)
    data = np.arange(16, dtype=np.float32).reshape(2, 8)
    with NaiadServer(tmp_path / "models", log_dir=tmp_path, name="cuda-shm-gpu") as server:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
        try:
            with cuda_in_out(client, data) as (_handle_in, handle_out):
                _infer_in_regions(client, "pt_twice_gpu", "INPUT__0", "OUTPUT__0", data)
                got = cudashm.get_contents_as_numpy(handle_out, np.float32, [2, 8])
                np.testing.assert_array_equal(got, data * 2)
                client.unregister_cuda_shared_memory()
        finally:
            client.close()


def _serialized(items: list) -> bytes:
    import struct

    return b"".join(struct.pack("<I", len(item)) + item for item in items)


def test_bytes_input_in_a_cuda_region_is_copied_and_checked(server):
    """BYTES in CUDA shared memory (as Triton 2.51 takes them): the Python model gets
    them on the host; malformed ones are Triton's 400 with the validator's message."""
    import tritonclient.http as httpclient
    import tritonclient.utils.cuda_shared_memory as cudashm
    from tritonclient.utils import InferenceServerException

    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    good = _serialized([b"ab", b"cde"])
    bad = _serialized([b"ab"]) + b"\x09\x00\x00\x00x"
    handle = cudashm.create_shared_memory_region("cbytes", 64, 0)
    try:
        cudashm.set_shared_memory_region(
            handle, [np.frombuffer(good + bytes(32 - len(good)) + bad, np.uint8)]
        )
        client.register_cuda_shared_memory("cbytes", cudashm.get_raw_handle(handle), 0, 64)
        inp = httpclient.InferInput("INPUT0", [2], "BYTES")
        inp.set_shared_memory("cbytes", len(good))
        result = client.infer("shm_bytes", [inp])
        assert result.as_numpy("OUTPUT0").tolist() == [b"ab", b"cde"]
        broken = httpclient.InferInput("INPUT0", [2], "BYTES")
        broken.set_shared_memory("cbytes", len(bad), offset=32)
        with pytest.raises(InferenceServerException) as info:
            client.infer("shm_bytes", [broken])
        assert info.value.status() == "400"
        assert "incomplete string data for inference input 'INPUT0'" in info.value.message()
        client.unregister_cuda_shared_memory()
    finally:
        cudashm.destroy_shared_memory_region(handle)
        client.close()


def _add_sub_gpu(tmp_path, platform: str, filename: str, data: bytes):
    """An add_sub model (FP32 [-1, 16] in and out) on GPU 0 in a repository of its own."""
    folder = tmp_path / "models" / "gpu_add_sub"
    (folder / "1").mkdir(parents=True)
    (folder / "1" / filename).write_bytes(data)
    io = "".join(
        f'{kind} {{ name: "{name}", data_type: TYPE_FP32, dims: [ 16 ] }}\n'
        for kind, name in (
            ("input", "INPUT0"),
            ("input", "INPUT1"),
            ("output", "OUTPUT0"),
            ("output", "OUTPUT1"),
        )
    )
    (folder / "config.pbtxt").write_text(
        f'platform: "{platform}"\nmax_batch_size: 4\n{io}'
        "instance_group [ { count: 1, kind: KIND_GPU, gpus: [ 0 ] } ]\n"
    )
    return tmp_path / "models"


def _run_add_sub_through_cuda_regions(server, model: str) -> None:
    """INPUT0 and OUTPUT0 in CUDA regions (read in place, written straight in), INPUT1
    and OUTPUT1 in the body: the sums and differences a client checks."""
    import tritonclient.http as httpclient
    import tritonclient.utils.cuda_shared_memory as cudashm

    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    a = np.arange(32, dtype=np.float32).reshape(2, 16)
    b = np.ones((2, 16), np.float32)
    handle_in = cudashm.create_shared_memory_region("gin", a.nbytes, 0)
    handle_out = cudashm.create_shared_memory_region("gout", a.nbytes, 0)
    try:
        cudashm.set_shared_memory_region(handle_in, [a])
        client.register_cuda_shared_memory("gin", cudashm.get_raw_handle(handle_in), 0, a.nbytes)
        client.register_cuda_shared_memory("gout", cudashm.get_raw_handle(handle_out), 0, a.nbytes)
        in0 = httpclient.InferInput("INPUT0", [2, 16], "FP32")
        in0.set_shared_memory("gin", a.nbytes)
        in1 = httpclient.InferInput("INPUT1", [2, 16], "FP32")
        in1.set_data_from_numpy(b)
        out0 = httpclient.InferRequestedOutput("OUTPUT0")
        out0.set_shared_memory("gout", a.nbytes)
        out1 = httpclient.InferRequestedOutput("OUTPUT1")
        result = client.infer(model, [in0, in1], outputs=[out0, out1])
        got = cudashm.get_contents_as_numpy(handle_out, np.float32, [2, 16])
        np.testing.assert_array_equal(got, a + b)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
        client.unregister_cuda_shared_memory()
    finally:
        cudashm.destroy_shared_memory_region(handle_in)
        cudashm.destroy_shared_memory_region(handle_out)
        client.close()


def test_onnxruntime_gpu_model_binds_cuda_regions(tmp_path):
    """onnxruntime on the CUDA provider: IOBinding over the client's device memory."""
    import onnxruntime

    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        pytest.skip("no CUDA execution provider here (needs onnxruntime-gpu)")
    import onnx_support

    models = _add_sub_gpu(tmp_path, "onnxruntime_onnx", "model.onnx", onnx_support.add_sub())
    with NaiadServer(models, log_dir=tmp_path, name="cuda-shm-ort") as running:
        _run_add_sub_through_cuda_regions(running, "gpu_add_sub")


def test_tensorrt_model_binds_cuda_regions(tmp_path):
    """TensorRT: the execution context's tensor addresses at the client's device memory."""
    trt = pytest.importorskip("tensorrt", reason="TensorRT is not installed (the gpu extra)")
    import onnx_support

    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    assert parser.parse(onnx_support.add_sub()), parser.get_error(0)
    profile = builder.create_optimization_profile()
    for name in ("INPUT0", "INPUT1"):
        profile.set_shape(name, (1, 16), (2, 16), (4, 16))
    config = builder.create_builder_config()
    config.add_optimization_profile(profile)
    plan = builder.build_serialized_network(network, config)
    models = _add_sub_gpu(tmp_path, "tensorrt_plan", "model.plan", bytes(plan))
    with NaiadServer(models, log_dir=tmp_path, name="cuda-shm-trt") as running:
        _run_add_sub_through_cuda_regions(running, "gpu_add_sub")
