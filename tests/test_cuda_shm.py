"""Triton's CUDA shared-memory extension (naiad/cuda_ipc.py): a client's device buffer
registered by its cudaIpcMemHandle_t, an input read from it and an output written into
it by the worker, over HTTP. Needs a GPU and cuda-python (the `gpu` extra); elsewhere the
tests skip and say why (tests/test_shm.py checks the answer without CUDA)."""

from __future__ import annotations

import numpy as np
import pytest
import requests
from naiad import cuda_ipc
from server_harness import NaiadServer
from shm_support import SHM_MODELS

_REASON = cuda_ipc.unavailable_reason(0)
pytestmark = pytest.mark.skipif(_REASON is not None, reason=f"CUDA shared memory: {_REASON}")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with NaiadServer(SHM_MODELS, log_dir=tmp_path_factory.mktemp("cuda_shm")) as running:
        yield running


def test_cuda_region_input_and_output(server):
    import tritonclient.http as httpclient
    import tritonclient.utils.cuda_shared_memory as cudashm

    extensions = requests.get(server.url + "/v2", timeout=20).json()["extensions"]
    assert "cuda_shared_memory" in extensions
    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    data = np.arange(16, dtype=np.float32).reshape(2, 8)
    handle_in = cudashm.create_shared_memory_region("cin", data.nbytes, 0)
    handle_out = cudashm.create_shared_memory_region("cout", data.nbytes, 0)
    try:
        cudashm.set_shared_memory_region(handle_in, [data])
        client.register_cuda_shared_memory("cin", cudashm.get_raw_handle(handle_in), 0, data.nbytes)
        client.register_cuda_shared_memory(
            "cout", cudashm.get_raw_handle(handle_out), 0, data.nbytes
        )
        status = client.get_cuda_shared_memory_status()
        assert {r["name"] for r in status} == {"cin", "cout"}
        inp = httpclient.InferInput("INPUT0", [2, 8], "FP32")
        inp.set_shared_memory("cin", data.nbytes)
        out = httpclient.InferRequestedOutput("OUTPUT0", binary_data=False)
        out.set_shared_memory("cout", data.nbytes)
        client.infer("shm_identity", [inp], outputs=[out])
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
        cudashm.destroy_shared_memory_region(handle_in)
        cudashm.destroy_shared_memory_region(handle_out)
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
        handle_in = cudashm.create_shared_memory_region("gin", data.nbytes, 0)
        handle_out = cudashm.create_shared_memory_region("gout", data.nbytes, 0)
        try:
            cudashm.set_shared_memory_region(handle_in, [data])
            client.register_cuda_shared_memory(
                "gin", cudashm.get_raw_handle(handle_in), 0, data.nbytes
            )
            client.register_cuda_shared_memory(
                "gout", cudashm.get_raw_handle(handle_out), 0, data.nbytes
            )
            inp = httpclient.InferInput("INPUT__0", [2, 8], "FP32")
            inp.set_shared_memory("gin", data.nbytes)
            out = httpclient.InferRequestedOutput("OUTPUT__0", binary_data=True)
            out.set_shared_memory("gout", data.nbytes)
            client.infer("pt_twice_gpu", [inp], outputs=[out])
            got = cudashm.get_contents_as_numpy(handle_out, np.float32, [2, 8])
            np.testing.assert_array_equal(got, data * 2)
            client.unregister_cuda_shared_memory()
        finally:
            cudashm.destroy_shared_memory_region(handle_in)
            cudashm.destroy_shared_memory_region(handle_out)
            client.close()
