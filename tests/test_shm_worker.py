"""The worker's side of the shm extensions (worker/shm_outputs.py), in process: outputs
written into a mapped region, too-small regions failing the request, the CUDA paths with
cuda_ipc's copies replaced by recorders (no GPU needed to check what they are asked),
and the live-region table unmapping what the frontend released."""

from __future__ import annotations

import base64
import os

import numpy as np
import orjson
import pytest
from naiad import _core, cuda_ipc
from naiad.worker import shm_outputs


@pytest.fixture
def region(tmp_path):
    path = tmp_path / "object"
    path.write_bytes(bytes(8192))
    fd = os.open(path, os.O_RDWR)
    yield path, fd
    os.close(fd)


def _response(outputs, buffers):
    json = orjson.dumps({"outputs": outputs})
    return (0, _core.RESPONSE_FINAL, 0, json, buffers)


def test_output_written_into_region(region, monkeypatch):
    path, fd = region
    monkeypatch.setattr(shm_outputs, "REGIONS", shm_outputs._Regions())
    data = np.arange(8, dtype=np.float32)
    regions = {"outputs": {"OUT": [7, shm_outputs.SYSTEM, str(path), 4096, 4096, 100, 64]}}
    responses = [_response([["OUT", "FP32", [8]]], [memoryview(data).cast("B")])]
    out = shm_outputs.place_outputs(None, [(b"m", [])], responses, lambda _m: regions)
    assert out[0][4] == [b""]  # nothing left for the response block
    got = np.frombuffer(path.read_bytes()[4096 + 100 : 4096 + 132], np.float32)
    np.testing.assert_array_equal(got, data)
    assert shm_outputs.REGIONS.writes == 1


def test_output_too_small_fails_the_request(region, monkeypatch):
    path, _fd = region
    monkeypatch.setattr(shm_outputs, "REGIONS", shm_outputs._Regions())
    regions = {"outputs": {"OUT": [7, shm_outputs.SYSTEM, str(path), 0, 4096, 0, 8]}}
    responses = [_response([["OUT", "FP32", [4]]], [b"x" * 16])]
    out = shm_outputs.place_outputs(None, [(b"m", [])], responses, lambda _m: regions)
    index, flags, code, json, buffers = out[0]
    assert flags & _core.RESPONSE_ERROR and code == 1 and buffers == ()
    assert orjson.loads(json)["error"] == (
        "shared memory size specified with the request for output 'OUT' (8 bytes) should be "
        "at least 16 bytes to hold the results"
    )
    assert path.read_bytes()[:16] == bytes(16)  # nothing written


def test_cuda_output_and_input_calls(monkeypatch):
    calls = []
    monkeypatch.setattr(cuda_ipc, "copy_to_region", lambda *a: calls.append(("to", a)))
    monkeypatch.setattr(cuda_ipc, "copy_from_region", lambda *a: calls.append(("from", a)))
    handle = base64.b64encode(b"h" * 64).decode()
    regions = {
        "outputs": {"OUT": [9, _core.SHM_CUDA, handle, 1, 4096, 128, 32]},
        "cuda_inputs": [[0, 8, handle, 1, 256, 16]],
    }
    shm_outputs.fill_cuda_inputs("arena", [(b"m", [(640, 16)])], lambda _m: regions)
    assert calls[0] == ("from", (8, b"h" * 64, 1, 256, "arena", 640, 16))
    responses = [_response([["OUT", "FP32", [4]]], [b"y" * 16])]
    out = shm_outputs.place_outputs(None, [(b"m", [])], responses, lambda _m: regions)
    kind, args = calls[1]
    assert kind == "to" and args[:4] == (9, b"h" * 64, 1, 128) and bytes(args[4]) == b"y" * 16
    assert out[0][4] == [b""]
    with pytest.raises(ValueError):  # a slot that does not match the region's bytes
        shm_outputs.fill_cuda_inputs("arena", [(b"m", [(640, 8)])], lambda _m: regions)


def test_released_regions_are_unmapped(region, monkeypatch):
    path, _fd = region
    core = _core.Core(1 << 22)
    registry = _core.ShmRegistry(core)
    key = f"/naiad_worker_{os.getpid()}"
    import _posixshmem

    shm_fd = _posixshmem.shm_open(key, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        os.ftruncate(shm_fd, 4096)
        assert registry.register_system("r", key, 0, 4096) is None
        ref = registry.resolve("r", 0, 16)
        regions = shm_outputs._Regions()
        regions.table = registry.table_offset
        regions.start(core.arena)
        view = regions.view(ref.id, f"/proc/self/fd/{ref.fd}", 0, 4096)
        view[:4] = b"abcd"
        assert os.pread(shm_fd, 4, 0) == b"abcd"
        assert ref.id in regions.maps
        registry.unregister(_core.SHM_SYSTEM, "r")
        regions.sweep()
        assert ref.id in regions.maps  # still referenced by the request
        del ref
        regions.sweep()
        assert regions.maps == {}
        assert registry.mapped() == 0
    finally:
        os.close(shm_fd)
        _posixshmem.shm_unlink(key)
