"""GPUs: which devices this host has, and pinning the shared arena for host<->device copies.

- `devices()` / `device_count()` / `supported_gpus()`: the CUDA devices the CUDA runtime
  would show this process (CUDA_VISIBLE_DEVICES applies), found through cuda-python (the
  `gpu` extra) or else NVML (libnvidia-ml, which every NVIDIA driver installs); none on a
  host without either. Triton counts only devices of compute capability >= 6.0
  (`MIN_COMPUTE_CAPABILITY`) as supported, and so do we.
- `pin_arena(arena)`: registers the arena's mapping as page-locked memory
  (cudaHostRegister) in the calling process, so its copies to and from a device are DMA
  without a staging buffer. Registration is per process: each worker that copies
  host<->device does it once (`pin_batch_arena`, from a GPU backend's first batch, whose
  inputs are views of the arena). A no-op (False) without CUDA.

Nothing here initializes a CUDA context in the frontend: discovery asks the runtime for
counts and properties only, and the answer is cached for the life of the process.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
from typing import NamedTuple

log = logging.getLogger("naiad")

# Triton's default --min-supported-compute-capability.
MIN_COMPUTE_CAPABILITY = 6.0


class Device(NamedTuple):
    index: int  # the CUDA device id this process uses for it
    major: int  # compute capability
    minor: int

    @property
    def compute_capability(self) -> float:
        return self.major + self.minor / 10.0


def _cudart():
    """cuda-python's runtime module (new and old layouts), or None."""
    try:
        from cuda.bindings import runtime

        return runtime
    except ImportError:
        pass
    try:
        from cuda import cudart

        return cudart
    except ImportError:
        return None


def _ok(error) -> bool:
    return int(error) == 0  # cudaSuccess / NVML_SUCCESS


def _devices_from_cudart(cudart) -> tuple[Device, ...] | None:
    try:
        error, count = cudart.cudaGetDeviceCount()
    except Exception:  # a driver that cannot be loaded
        return None
    if not _ok(error):
        return ()  # no driver or no device: cudaErrorNoDevice / cudaErrorInsufficientDriver
    found = []
    for index in range(count):
        error, properties = cudart.cudaGetDeviceProperties(index)
        if _ok(error):
            found.append(Device(index, int(properties.major), int(properties.minor)))
    return tuple(found)


def _visible(indices: list[int]) -> list[int] | None:
    """Which NVML indices CUDA_VISIBLE_DEVICES leaves, in its order; None: all of them."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    chosen = []
    for item in value.split(","):
        item = item.strip()
        if not item.lstrip("-").isdigit():
            break  # a UUID or MIG name we do not map: stop, as CUDA stops at a bad entry
        number = int(item)
        if number < 0 or number not in indices:
            break
        chosen.append(number)
    return chosen


def visible_nvml_indices(indices: list[int]) -> list[int]:
    """The NVML device indices this process's CUDA sees, in CUDA's order."""
    visible = _visible(sorted(indices))
    return sorted(indices) if visible is None else visible


def _devices_from_nvml() -> tuple[Device, ...]:
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return ()
    if not _ok(nvml.nvmlInit_v2()):
        return ()
    try:
        count = ctypes.c_uint(0)
        if not _ok(nvml.nvmlDeviceGetCount_v2(ctypes.byref(count))):
            return ()
        capabilities = {}
        for index in range(count.value):
            handle = ctypes.c_void_p()
            major, minor = ctypes.c_int(0), ctypes.c_int(0)
            if _ok(nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle))) and _ok(
                nvml.nvmlDeviceGetCudaComputeCapability(
                    handle, ctypes.byref(major), ctypes.byref(minor)
                )
            ):
                capabilities[index] = (major.value, minor.value)
        order = visible_nvml_indices(list(capabilities))
        return tuple(
            Device(cuda_index, *capabilities[nvml_index])
            for cuda_index, nvml_index in enumerate(order)
        )
    finally:
        nvml.nvmlShutdown()


@functools.cache
def devices() -> tuple[Device, ...]:
    """The CUDA devices of this host, as this process sees them (cached)."""
    cudart = _cudart()
    if cudart is not None:
        found = _devices_from_cudart(cudart)
        if found is not None:
            return found
    return _devices_from_nvml()


def device_count() -> int:
    """How many CUDA devices this process can use; 0 without CUDA."""
    return len(devices())


def supported_gpus(min_compute_capability: float = MIN_COMPUTE_CAPABILITY) -> list[int]:
    """The device ids Triton would place GPU instances on: compute capability at least
    `min_compute_capability`, in id order."""
    return [
        device.index
        for device in devices()
        if device.compute_capability + 1e-9 >= min_compute_capability
    ]


# (address, size) of the ranges this process registered.
_PINNED: set[tuple[int, int]] = set()
_CUDA_HOST_REGISTER_PORTABLE = 1


def _address(buffer) -> tuple[int, int]:
    view = memoryview(buffer)
    if view.readonly:
        raise ValueError("the arena must be a writable buffer")
    size = view.nbytes
    if size == 0:
        return 0, 0
    return ctypes.addressof(ctypes.c_char.from_buffer(view)), size


def pin_arena(arena, device: int | None = None) -> bool:
    """Page-lock the arena (a writable buffer over the shared mapping) for this process's
    host<->device copies. True when it is registered (now or before); False without CUDA
    or when the runtime refuses (the copies then stage through the driver's own pinned
    buffers, slower but correct). `device`: the CUDA device this process works on, made
    current first so that no context is created on another one."""
    address, size = _address(arena)
    if size == 0:
        return False
    if (address, size) in _PINNED:
        return True
    if not devices():
        return False
    cudart = _cudart()
    if cudart is not None:
        if device is not None:
            cudart.cudaSetDevice(device)
        (error,) = cudart.cudaHostRegister(address, size, _CUDA_HOST_REGISTER_PORTABLE)
        registered = _ok(error)
        detail = str(error)
    else:
        registered, detail = _register_through_torch(address, size)
    if not registered:
        log.warning("could not pin the arena (%d bytes) for CUDA copies: %s", size, detail)
        return False
    _PINNED.add((address, size))
    return True


def unpin_arena(arena) -> None:
    """Undo `pin_arena` (before the mapping goes away)."""
    address, size = _address(arena)
    if (address, size) not in _PINNED:
        return
    _PINNED.discard((address, size))
    cudart = _cudart()
    if cudart is not None:
        cudart.cudaHostUnregister(address)
        return
    import torch

    torch.cuda.cudart().cudaHostUnregister(address)


def _register_through_torch(address: int, size: int) -> tuple[bool, str]:
    """cudaHostRegister through PyTorch's CUDA runtime binding, for a host with torch's
    CUDA build but without cuda-python."""
    try:
        import torch

        if not torch.cuda.is_available():
            return False, "torch has no CUDA"
        error = torch.cuda.cudart().cudaHostRegister(address, size, _CUDA_HOST_REGISTER_PORTABLE)
    except Exception as exc:  # no CUDA runtime in this torch build
        return False, str(exc)
    return _ok(error), str(error)


def pin_batch_arena(batch, device: int) -> bool:
    """`pin_arena` for the buffer a batch's input arrays view (the shared arena): what a
    GPU backend calls on its first batch, so that its host->device copies read pinned
    memory. False when the inputs are not views of one buffer or CUDA is missing."""
    for arrays in getattr(batch, "arrays", ()):
        for array in arrays:
            base = getattr(array, "base", None)
            if base is not None and not isinstance(base, type(array)):
                try:
                    return pin_arena(base, device)
                except (TypeError, ValueError):
                    # Not the arena: a read-only view of a client's shm region (an
                    # input read in place); the next array may be over the arena.
                    continue
    return False
