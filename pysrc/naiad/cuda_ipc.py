"""CUDA shared memory (Triton's cuda_shared_memory extension) through cuda-python.

A client registers a `cudaIpcMemHandle_t` (64 bytes), the device it lives on and its
byte size. The frontend keeps only that record (csrc/shm_registry.h); the worker that
runs the request opens the handle (`cudaIpcOpenMemHandle`) once per region id and
moves tensors between the client's device memory and the request's slot with
`cudaMemcpy`: device to host for a host-side (KIND_CPU) model's inputs, host to device
for its outputs. Handles are closed when the frontend drops the region from its
live-region table (worker/shm_outputs.py sweeps).

Without cuda-python or a GPU, registration answers as Triton 2.51 does where CUDA cannot
open a handle: 400 "failed to register shared memory region: invalid args" (gRPC
INVALID_ARGUMENT), followed here by the reason.
"""

from __future__ import annotations

import threading

from naiad import gpu

_lock = threading.Lock()
_opened: dict[int, tuple[int, int]] = {}  # region id -> (device, device pointer)


def _cudart():
    """cuda-python's runtime module, or None (naiad.gpu finds it)."""
    return gpu._cudart()


def _check(result):
    """cuda-python returns (error, *values): raise on error, return the values."""
    err = result[0]
    rt = _cudart()
    if int(err) != int(rt.cudaError_t.cudaSuccess):
        name = rt.cudaGetErrorName(err)[1]
        raise RuntimeError(f"CUDA error {name.decode() if isinstance(name, bytes) else name}")
    values = result[1:]
    if not values:
        return None
    return values[0] if len(values) == 1 else values


def unavailable_reason(device_id: int) -> str | None:
    """Why a CUDA region on `device_id` cannot be served here, or None."""
    if _cudart() is None:
        return "cuda-python is not installed"
    count = gpu.device_count()  # the project's one device count (naiad/gpu.py)
    if count == 0:
        return "no CUDA device on this host"
    if device_id < 0 or device_id >= count:
        return f"device {device_id} does not exist ({count} CUDA devices)"
    return None


def _pointer(region_id: int, handle: bytes, device: int) -> int:
    with _lock:
        found = _opened.get(region_id)
        if found is not None:
            return found[1]
        rt = _cudart()
        if rt is None:
            raise RuntimeError("cuda-python is not installed")
        _check(rt.cudaSetDevice(device))
        ipc = rt.cudaIpcMemHandle_t()
        ipc.reserved = handle
        pointer = int(_check(rt.cudaIpcOpenMemHandle(ipc, rt.cudaIpcMemLazyEnablePeerAccess)))
        _opened[region_id] = (device, pointer)
        return pointer


def copy_from_region(region_id, handle, device, offset, arena, arena_offset, size) -> None:
    """Client device memory [offset, offset + size) -> the arena at `arena_offset`."""
    import numpy as np

    if size == 0:
        return
    rt = _cudart()
    source = _pointer(region_id, handle, device) + offset
    target = np.frombuffer(arena, np.uint8, size, arena_offset)
    _check(
        rt.cudaMemcpy(target.ctypes.data, source, size, rt.cudaMemcpyKind.cudaMemcpyDeviceToHost)
    )


def copy_to_region(region_id, handle, device, offset, data) -> None:
    """`data` (a contiguous uint8 array on the host) -> client device memory at `offset`."""
    if data.nbytes == 0:
        return
    rt = _cudart()
    target = _pointer(region_id, handle, device) + offset
    _check(
        rt.cudaMemcpy(
            target, data.ctypes.data, data.nbytes, rt.cudaMemcpyKind.cudaMemcpyHostToDevice
        )
    )


def close_dead(live: set) -> None:
    """Closes the handles of regions no longer in the frontend's live-region table."""
    with _lock:
        dead = [region_id for region_id in _opened if region_id not in live]
        if not dead:
            return
        rt = _cudart()
        for region_id in dead:
            device, pointer = _opened.pop(region_id)
            try:
                _check(rt.cudaSetDevice(device))
                _check(rt.cudaIpcCloseMemHandle(pointer))
            except Exception:
                pass
