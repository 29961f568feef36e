"""CUDA shared memory (Triton's cuda_shared_memory extension) through cuda-python.

A client registers a `cudaIpcMemHandle_t` (64 bytes), the device it lives on and its
byte size. The frontend keeps only that record (csrc/shm/shm_registry.h); the worker that
runs the request opens the handle (`cudaIpcOpenMemHandle`) once per region id, and
tensors move as the model needs them:
  - a GPU model (a backend with `device_inputs`, on the region's device) reads an input
    in place: `device_view` wraps the client's device memory (`__cuda_array_interface__`),
    no copy; a batch of several requests joins the pieces on the device (the backend);
  - a host-side (KIND_CPU) model's input is copied device to host, once, into its slot
    in the arena, which is pinned (cudaHostRegister) in this process first so the copy is
    DMA;
  - an output goes into the client's region device to device when the model left it on
    the device (a `DeviceArray`), else host to device from its array; a GPU backend
    that wrote it straight into the region (onnxruntime's IOBinding, TensorRT's tensor
    addresses bound to an `OutputTarget`) returns a DeviceArray at the target itself,
    and nothing is copied;
  - a batch of several requests joins its device inputs on the device
    (`join_on_device`: device to device, host pieces host to device).
Handles are closed when the frontend drops the region from its live-region table
(worker/shm_outputs.py sweeps).

Every CUDA call goes through `_cudart()` (cuda-python's runtime module): the one seam
that tests replace with a recorder where no GPU is present (tests/test_shm_worker.py).

Without cuda-python or a GPU, registration answers as Triton 2.51 does where CUDA cannot
open a handle: 400 "failed to register shared memory region: invalid args" (gRPC
INVALID_ARGUMENT), followed here by the reason.
"""

from __future__ import annotations

import threading

from naiad.memory import gpu

_lock = threading.Lock()
_opened: dict[int, tuple[int, int]] = {}  # region id -> (device, device pointer)


def _cudart():
    """cuda-python's runtime module, or None (naiad.memory.gpu finds it)."""
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
    count = gpu.device_count()  # the project's one device count (naiad/memory/gpu.py)
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


class DeviceArray:
    """A tensor in device memory, described for `__cuda_array_interface__` (version 3):
    a client region's bytes (`device_view`) or a model's output left on its device
    (`of_torch`). `keep` holds what owns the memory (a torch tensor) while this lives."""

    __slots__ = ("pointer", "dtype", "shape", "device", "keep")

    def __init__(self, pointer: int, dtype, shape, device: int, keep=None):
        import numpy as np

        self.pointer = pointer
        self.dtype = np.dtype(dtype)
        self.shape = tuple(int(d) for d in shape)
        self.device = device
        self.keep = keep

    @classmethod
    def of_torch(cls, tensor, dtype):
        """A contiguous CUDA torch tensor as a DeviceArray (`dtype`: its numpy dtype)."""
        tensor = tensor.contiguous()
        return cls(tensor.data_ptr(), dtype, tensor.shape, tensor.device.index, tensor)

    @property
    def nbytes(self) -> int:
        count = 1
        for d in self.shape:
            count *= d
        return count * self.dtype.itemsize

    def __getitem__(self, rows: slice) -> DeviceArray:
        """Rows [start, stop) along the first dimension (a request's part of a batch's
        output), the same memory: no copy."""
        start, stop, step = rows.indices(self.shape[0])
        if step != 1:
            raise ValueError("a DeviceArray is sliced by a contiguous row range only")
        row_bytes = self.nbytes // self.shape[0] if self.shape[0] else 0
        return DeviceArray(
            self.pointer + start * row_bytes,
            self.dtype,
            (max(stop - start, 0), *self.shape[1:]),
            self.device,
            self.keep,
        )

    def reshape(self, shape) -> DeviceArray:
        """The same contiguous bytes with another shape of as many elements."""
        reshaped = DeviceArray(self.pointer, self.dtype, shape, self.device, self.keep)
        if reshaped.nbytes != self.nbytes:
            raise ValueError(f"cannot reshape {list(self.shape)} to {list(shape)}")
        return reshaped

    @property
    def __cuda_array_interface__(self) -> dict:
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            # Writable, as Triton's backends get the same memory (libtorch's from_blob):
            # torch.as_tensor refuses an interface that says read-only ("the read only
            # flag is not supported"), which failed every GPU model's in-place input.
            "data": (self.pointer, False),
            "version": 3,
            "strides": None,
            "stream": None,  # the client's bytes are ready: the request arrived after them
        }

    def to_host(self):
        """The same bytes as a host numpy array (one device-to-host copy)."""
        import numpy as np

        out = np.empty(self.shape, self.dtype)
        if out.nbytes:
            rt = _cudart()
            _check(rt.cudaSetDevice(self.device))
            _check(
                rt.cudaMemcpy(
                    out.ctypes.data,
                    self.pointer,
                    out.nbytes,
                    rt.cudaMemcpyKind.cudaMemcpyDeviceToHost,
                )
            )
        return out


# Copies and in-place reads made by this process, by kind (tests read them).
COUNTS = {
    "in_place": 0,
    "device_to_host": 0,
    "host_to_device": 0,
    "device_to_device": 0,
    "written_in_place": 0,  # outputs a GPU backend wrote straight into the client's region
}


class OutputTarget:
    """The range [offset, offset + size) of a client's CUDA region on `device` that an
    output goes to: a GPU backend may bind it as the output's memory (`pointer`, the
    handle opened once per region) and return `written()`, so nothing is copied."""

    __slots__ = ("region_id", "handle", "device", "offset", "size")

    def __init__(self, region_id: int, handle: bytes, device: int, offset: int, size: int):
        self.region_id = region_id
        self.handle = handle
        self.device = device
        self.offset = offset
        self.size = size

    @property
    def pointer(self) -> int:
        return _pointer(self.region_id, self.handle, self.device) + self.offset

    def written(self, dtype, shape) -> DeviceArray:
        """The output the backend wrote at `pointer`, as the DeviceArray it returns."""
        return DeviceArray(self.pointer, dtype, shape, self.device)


def join_on_device(pieces: list, target: int, device: int, stream=None) -> None:
    """The pieces of a batch's input, one after another, into device memory at
    `target`: a DeviceArray (a client's CUDA region) device to device, a contiguous
    host array (a request sent in the body or system shm, in the pinned arena) host to
    device. On `stream` when given (stream-ordered before the model that reads them),
    else done before returning."""
    rt = _cudart()
    _check(rt.cudaSetDevice(device))
    at = target
    for piece in pieces:
        size = piece.nbytes
        if size == 0:
            continue
        if isinstance(piece, DeviceArray):
            source, kind = piece.pointer, rt.cudaMemcpyKind.cudaMemcpyDeviceToDevice
            COUNTS["device_to_device"] += 1
        else:
            source, kind = piece.ctypes.data, rt.cudaMemcpyKind.cudaMemcpyHostToDevice
            COUNTS["host_to_device"] += 1
        if stream is not None:
            _check(rt.cudaMemcpyAsync(at, source, size, kind, stream))
        else:
            _check(rt.cudaMemcpy(at, source, size, kind))
        at += size
    if stream is None:
        _check(rt.cudaDeviceSynchronize())


def to_host(device_tensor, device: int):
    """A model's tensor in device memory (a torch or CuPy tensor, anything with
    `__cuda_array_interface__` or `__dlpack__`) copied to a host numpy array: what goes
    through the arena (a BLS request's input, a Python model's output). Waits for the
    stream the tensor names first, so the bytes copied are the ones the model wrote.
    ValueError when it cannot be read (not contiguous, no interface)."""
    interface = getattr(device_tensor, "__cuda_array_interface__", None)
    keep = None
    if interface is None:
        try:
            import torch
        except ImportError:
            raise ValueError(
                "the tensor has no __cuda_array_interface__, and reading a DLPack tensor "
                "needs PyTorch"
            ) from None
        keep = torch.from_dlpack(device_tensor).contiguous()
        torch.cuda.current_stream(keep.device).synchronize()
        interface = keep.__cuda_array_interface__
    import numpy as np

    dtype = np.dtype(interface["typestr"])
    shape = tuple(int(d) for d in interface["shape"])
    strides = interface.get("strides")
    if strides is not None and not _c_contiguous(shape, strides, dtype.itemsize):
        raise ValueError(f"the tensor is not contiguous (strides {list(strides)})")
    rt = _cudart()
    stream = interface.get("stream")
    if stream is not None:  # version 3: the stream its bytes are written on
        _check(rt.cudaSetDevice(device))
        _check(rt.cudaStreamSynchronize(stream))
    host = DeviceArray(interface["data"][0], dtype, shape, device, keep).to_host()
    COUNTS["device_to_host"] += 1
    return host


def _c_contiguous(shape: tuple, strides, itemsize: int) -> bool:
    """Whether `strides` (bytes) lay `shape` out row after row (a dimension of one
    element may have any stride)."""
    step = itemsize
    for dim, stride in zip(reversed(shape), reversed(tuple(strides))):
        if dim > 1 and stride != step:
            return False
        step *= dim
    return True


def device_view(region_id, handle, device, offset, size, dtype, shape) -> DeviceArray:
    """Client device memory [offset, offset + size) as a DeviceArray of `dtype` and
    `shape`, read in place by a GPU model on `device` (no copy). The frontend checked the
    range against the region and the tensor's byte size (csrc/shm/shm_registry.h)."""
    array = DeviceArray(_pointer(region_id, handle, device) + offset, dtype, shape, device)
    if array.nbytes != size:
        raise ValueError(f"CUDA shared memory input of {size} bytes viewed as {array.nbytes} bytes")
    COUNTS["in_place"] += 1
    return array


def copy_from_region(region_id, handle, device, offset, arena, arena_offset, size) -> None:
    """Client device memory [offset, offset + size) -> the arena at `arena_offset`, by
    DMA: the arena is pinned in this process first (gpu.pin_arena, once)."""
    import numpy as np

    if size == 0:
        return
    gpu.pin_arena(arena, device)
    rt = _cudart()
    source = _pointer(region_id, handle, device) + offset
    target = np.frombuffer(arena, np.uint8, size, arena_offset)
    _check(
        rt.cudaMemcpy(target.ctypes.data, source, size, rt.cudaMemcpyKind.cudaMemcpyDeviceToHost)
    )
    COUNTS["device_to_host"] += 1


def copy_to_region(region_id, handle, device, offset, data) -> None:
    """An output -> client device memory at `offset`: device to device from a
    DeviceArray (a GPU model's output left on its device), else host to device from a
    contiguous uint8 host array."""
    if data.nbytes == 0:
        return
    rt = _cudart()
    target = _pointer(region_id, handle, device) + offset
    if isinstance(data, DeviceArray):
        if data.pointer == target:  # the backend wrote it there (OutputTarget)
            COUNTS["written_in_place"] += 1
            return
        _check(
            rt.cudaMemcpy(
                target, data.pointer, data.nbytes, rt.cudaMemcpyKind.cudaMemcpyDeviceToDevice
            )
        )
        # A device-to-device cudaMemcpy may return before it is done: the client reads
        # the region once answered, so wait here.
        _check(rt.cudaDeviceSynchronize())
        COUNTS["device_to_device"] += 1
        return
    _check(
        rt.cudaMemcpy(
            target, data.ctypes.data, data.nbytes, rt.cudaMemcpyKind.cudaMemcpyHostToDevice
        )
    )
    COUNTS["host_to_device"] += 1


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
