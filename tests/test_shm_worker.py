"""The worker's side of the shm extensions (worker/shm_outputs.py), in process: outputs
written into a mapped region, inputs read in place from it, too-small regions failing
the request, the CUDA paths with cuda-python's runtime replaced by a recorder (the one
seam, cuda_ipc._cudart: no GPU needed to check which copies are asked for, of which
kind, and which are not made at all), and the live-region table unmapping what the
frontend released."""

from __future__ import annotations

import base64
import os

import cuda_recorder
import numpy as np
import orjson
import pytest
from naiad import _core
from naiad.memory import cuda_ipc
from naiad.worker import shm_outputs


@pytest.fixture
def region(tmp_path):
    path = tmp_path / "object"
    path.write_bytes(bytes(8192))
    fd = os.open(path, os.O_RDWR)
    yield path, fd
    os.close(fd)


@pytest.fixture
def posix_object():
    """A POSIX shm object of `size` bytes as a client creates one: (key, fd); unlinked
    after the test."""
    import _posixshmem

    made = []

    def make(tag: str, size: int):
        key = f"/naiad_{tag}_{os.getpid()}"
        fd = _posixshmem.shm_open(key, os.O_CREAT | os.O_RDWR, 0o600)
        made.append((key, fd))
        os.ftruncate(fd, size)
        return key, fd

    yield make
    for key, fd in made:
        os.close(fd)
        _posixshmem.shm_unlink(key)


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
    assert shm_outputs.fill_cuda_inputs("arena", [(b"m", [(640, 16)])], lambda _m: regions) == {}
    assert calls[0] == ("from", (8, b"h" * 64, 1, 256, "arena", 640, 16))
    responses = [_response([["OUT", "FP32", [4]]], [b"y" * 16])]
    out = shm_outputs.place_outputs(None, [(b"m", [])], responses, lambda _m: regions)
    kind, args = calls[1]
    assert kind == "to" and args[:4] == (9, b"h" * 64, 1, 128) and bytes(args[4]) == b"y" * 16
    assert out[0][4] == [b""]
    with pytest.raises(ValueError):  # a slot that does not match the region's bytes
        shm_outputs.fill_cuda_inputs("arena", [(b"m", [(640, 8)])], lambda _m: regions)


def test_released_regions_are_unmapped(posix_object):
    core = _core.Core(1 << 22)
    registry = _core.ShmRegistry(core)
    key, shm_fd = posix_object("worker", 4096)
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


@pytest.fixture
def cudart(monkeypatch):
    return cuda_recorder.install(monkeypatch)


_memcpys = cuda_recorder.memcpys


def test_gpu_model_reads_a_cuda_input_in_place(cudart):
    handle = base64.b64encode(b"g" * 64).decode()
    regions = {"cuda_inputs": [[0, 8, handle, 1, 256, 32]]}
    inputs = [["INPUT0", "FP32", [2, 4]]]
    found = shm_outputs.fill_cuda_inputs(
        None, [(b"m", [(640, 32)])], lambda _m: regions, 1, lambda _m: inputs
    )
    view = found[0, 0]
    assert isinstance(view, cuda_ipc.DeviceArray)
    interface = view.__cuda_array_interface__
    # The client's memory at the offset, not marked read-only: torch.as_tensor refuses
    # a read-only interface (seen on an H200: every in-place input failed).
    assert interface["data"] == (0x7000_0000 + 256, False)
    assert interface["shape"] == (2, 4) and interface["typestr"] == "<f4"
    assert _memcpys(cudart) == []  # no copy at all
    assert cudart.pinned == []
    assert cuda_ipc.COUNTS["in_place"] == 1
    # The handle is opened once per region, on its device.
    shm_outputs.fill_cuda_inputs(
        None, [(b"m", [(640, 32)])], lambda _m: regions, 1, lambda _m: inputs
    )
    assert [c for c in cudart.calls if c[0] == "open"] == [("open", b"g" * 64)]
    assert ("set_device", 1) in cudart.calls


def test_host_model_or_another_device_copies_a_cuda_input_to_the_pinned_arena(cudart):
    arena = bytearray(4096)
    handle = base64.b64encode(b"c" * 64).decode()
    regions = {"cuda_inputs": [[0, 3, handle, 0, 64, 16]]}
    inputs = [["INPUT0", "FP32", [4]]]
    for device in (None, 1):  # a KIND_CPU backend; a GPU backend on another device
        found = shm_outputs.fill_cuda_inputs(
            arena, [(b"m", [(1024, 16)])], lambda _m: regions, device, lambda _m: inputs
        )
        assert found == {}
    target = np.frombuffer(arena, np.uint8).ctypes.data + 1024
    assert _memcpys(cudart) == [("memcpy", "D2H", target, 0x7000_0000 + 64, 16)] * 2
    assert cudart.pinned == [0, 0]  # pinned (once per process: gpu.pin_arena) before each
    assert cuda_ipc.COUNTS["device_to_host"] == 2


def test_device_output_goes_device_to_device_and_host_output_host_to_device(cudart):
    handle = base64.b64encode(b"o" * 64).decode()
    regions = {"outputs": {"OUT": [5, _core.SHM_CUDA, handle, 0, 4096, 128, 64]}}
    assert shm_outputs.device_outputs([(b"m", [])], lambda _m: regions, 0) == {(0, "OUT")}
    assert shm_outputs.device_outputs([(b"m", [])], lambda _m: regions, 1) == frozenset()
    on_device = cuda_ipc.DeviceArray(0x9000_0000, np.float32, (2, 4), 0)
    responses = [_response([["OUT", "FP32", [2, 4]]], [on_device])]
    out = shm_outputs.place_outputs(None, [(b"m", [])], responses, lambda _m: regions)
    assert out[0][4] == [b""]
    assert _memcpys(cudart) == [("memcpy", "D2D", 0x7000_0000 + 128, 0x9000_0000, 32)]
    assert cudart.calls[-1] == ("synchronize",)  # done before the answer goes out
    host = np.arange(8, dtype=np.float32)
    responses = [_response([["OUT", "FP32", [8]]], [memoryview(host).cast("B")])]
    shm_outputs.place_outputs(None, [(b"m", [])], responses, lambda _m: regions)
    kind, copy_kind, target, source, size = _memcpys(cudart)[-1]
    assert (copy_kind, target, size) == ("H2D", 0x7000_0000 + 128, 32)
    assert cuda_ipc.COUNTS == {
        "in_place": 0,
        "device_to_host": 0,
        "host_to_device": 1,
        "device_to_device": 1,
        "written_in_place": 0,
    }


def test_device_output_wired_for_a_cuda_region():
    from naiad.backends.base import Response
    from naiad.worker import results

    on_device = cuda_ipc.DeviceArray(0x9000_0000, np.int32, (3,), 0)
    flags, code, json, buffers = results.wire_one(Response([("OUT", on_device)]))
    assert orjson.loads(json) == {"outputs": [["OUT", "INT32", [3]]]}
    assert buffers == [on_device]  # not copied to the host


def test_dead_cuda_regions_are_closed(cudart):
    handle = b"d" * 64
    cuda_ipc.device_view(11, handle, 0, 0, 16, np.float32, (4,))
    cuda_ipc.close_dead({12})
    assert ("close", 0x7000_0000) in cudart.calls
    assert cuda_ipc._opened == {}


def test_system_input_read_in_place_from_the_live_region_table(monkeypatch, posix_object):
    core = _core.Core(1 << 22)
    registry = _core.ShmRegistry(core)
    key, shm_fd = posix_object("inplace", 8192)
    os.pwrite(shm_fd, np.arange(4, dtype=np.float32).tobytes(), 4096 + 32)
    assert registry.register_system("r", key, 4096, 4096) is None
    ref = registry.resolve("r", 32, 16)
    regions = shm_outputs._Regions()
    regions.table = registry.table_offset
    monkeypatch.setattr(shm_outputs, "REGIONS", regions)
    from naiad.worker import main

    array = main._input_array(core.arena, np.dtype(np.float32), (4,), (32, 16, ref.id))
    np.testing.assert_array_equal(array, np.arange(4, dtype=np.float32))
    assert not array.flags.writeable  # the client's bytes: read-only to the model
    os.pwrite(shm_fd, np.full(4, 7, np.float32).tobytes(), 4096 + 32)
    np.testing.assert_array_equal(array, np.full(4, 7, np.float32))  # in place
    # Unregistered and released while the model still holds the array: the mapping
    # stays until the array goes, then the sweep closes it.
    registry.unregister(_core.SHM_SYSTEM, "r")
    del ref
    regions.sweep()
    assert regions.maps == {} and len(regions.retired) == 1
    assert array[0] == 7  # still valid
    del array
    regions.sweep()
    assert regions.retired == []
    with pytest.raises(LookupError):
        regions.input_view(12345)


def test_backends_read_apart_are_those_without_batch_tensors():
    # The frontend's table (naiad/backends/__init__.py) says which models get no batch
    # tensors from client regions; it must match the backend classes.
    import importlib

    from naiad import backends

    for name, target in backends._REGISTRY.items():
        module_name, class_name = target.split(":")
        cls = getattr(importlib.import_module(module_name), class_name)
        assert backends.reads_requests_apart(name) == (not cls.batch_tensors), name
