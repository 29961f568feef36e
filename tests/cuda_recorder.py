"""cuda-python's runtime replaced by a recorder, through the one seam every CUDA call of
Naiad goes through (`naiad.memory.cuda_ipc._cudart`): tests check without a GPU which copies
are asked for, of which kind and between which pointers, and which are not made at all.
Handles open at 0x7000_0000 (+0x1000 per handle); every call succeeds; nothing is
copied (a test that needs bytes in the arena writes them itself)."""

from __future__ import annotations

from naiad.memory import cuda_ipc

IPC_BASE = 0x7000_0000


class FakeCudart:
    class cudaError_t:  # noqa: N801 (cuda-python's names)
        cudaSuccess = 0

    class cudaMemcpyKind:  # noqa: N801
        cudaMemcpyDeviceToHost = "D2H"
        cudaMemcpyHostToDevice = "H2D"
        cudaMemcpyDeviceToDevice = "D2D"

    class cudaIpcMemHandle_t:  # noqa: N801
        reserved = None

    cudaIpcMemLazyEnablePeerAccess = 1

    def __init__(self):
        self.calls = []
        self.opened = 0
        self.pinned = []

    def cudaSetDevice(self, device):  # noqa: N802
        self.calls.append(("set_device", device))
        return (0,)

    def cudaIpcOpenMemHandle(self, handle, flags):  # noqa: N802
        self.calls.append(("open", bytes(handle.reserved)))
        self.opened += 1
        return (0, IPC_BASE + 0x1000 * (self.opened - 1))

    def cudaIpcCloseMemHandle(self, pointer):  # noqa: N802
        self.calls.append(("close", pointer))
        return (0,)

    def cudaMemcpy(self, target, source, size, kind):  # noqa: N802
        self.calls.append(("memcpy", kind, target, source, size))
        return (0,)

    def cudaMemcpyAsync(self, target, source, size, kind, stream):  # noqa: N802
        self.calls.append(("memcpy", kind, target, source, size))
        return (0,)

    def cudaStreamSynchronize(self, stream):  # noqa: N802
        self.calls.append(("stream_synchronize", stream))
        return (0,)

    def cudaDeviceSynchronize(self):  # noqa: N802
        self.calls.append(("synchronize",))
        return (0,)

    def cudaMalloc(self, size):  # noqa: N802
        self.calls.append(("malloc", size))
        return (0, 0xA000_0000 + 0x10_0000 * sum(1 for c in self.calls if c[0] == "malloc"))

    def cudaFree(self, pointer):  # noqa: N802
        self.calls.append(("free", pointer))
        return (0,)

    def cudaGetErrorName(self, error):  # noqa: N802
        return (0, b"cudaErrorFake")


def install(monkeypatch) -> FakeCudart:
    """A fresh recorder as cuda_ipc's runtime, no handle open, the counters at zero, and
    arena pinning recorded (by device) instead of made."""
    fake = FakeCudart()
    monkeypatch.setattr(cuda_ipc, "_cudart", lambda: fake)
    monkeypatch.setattr(cuda_ipc, "_opened", {})
    monkeypatch.setattr(cuda_ipc, "COUNTS", dict.fromkeys(cuda_ipc.COUNTS, 0))
    monkeypatch.setattr(cuda_ipc.gpu, "pin_arena", lambda arena, device: fake.pinned.append(device))
    return fake


def memcpys(fake: FakeCudart) -> list:
    return [call for call in fake.calls if call[0] == "memcpy"]
