"""What the shared-memory tests share (HTTP here, gRPC in tests/grpc_clients): regions
created with tritonclient.utils.shared_memory, and /proc checks that a server process
and its workers hold no mapping or fd of a region's object."""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from pathlib import Path

import numpy as np
import tritonclient.utils.shared_memory as shm
from server_harness import descendants

SHM_MODELS = Path(__file__).resolve().parent / "shm_models"
_serial = itertools.count()


def new_key(tag: str) -> str:
    return f"/naiad_t{os.getpid()}_{tag}_{next(_serial)}"


class Region:
    """A client's system shared-memory region (tritonclient's helpers)."""

    def __init__(self, tag: str, byte_size: int):
        self.key = new_key(tag)
        self.name = self.key[1:]
        self.byte_size = byte_size
        self.handle = shm.create_shared_memory_region(self.name, self.key, byte_size)

    def write(self, arrays, offset: int = 0) -> None:
        shm.set_shared_memory_region(self.handle, arrays, offset=offset)

    def write_bytes(self, data: bytes, offset: int = 0) -> None:
        self.write([np.frombuffer(data, np.uint8)], offset)

    def read(self, dtype, shape, offset: int = 0) -> np.ndarray:
        return shm.get_contents_as_numpy(self.handle, dtype, shape, offset=offset).copy()

    def destroy(self) -> None:
        if self.handle is not None:
            shm.destroy_shared_memory_region(self.handle)
            self.handle = None

    def __enter__(self) -> Region:
        return self

    def __exit__(self, *exc) -> None:
        self.destroy()


@contextlib.contextmanager
def cuda_in_out(client, data: np.ndarray, names=("cin", "cout")):
    """Two CUDA regions of `data`'s size on device 0 (tritonclient's cuda_shared_memory),
    the first holding `data`, registered with `client` (HTTP or gRPC) under `names`;
    yields their handles and destroys them after."""
    import tritonclient.utils.cuda_shared_memory as cudashm

    handles = []
    try:
        for name in names:
            handles.append(cudashm.create_shared_memory_region(f"t_{name}", data.nbytes, 0))
        cudashm.set_shared_memory_region(handles[0], [data])
        for name, handle in zip(names, handles):
            client.register_cuda_shared_memory(name, cudashm.get_raw_handle(handle), 0, data.nbytes)
        yield handles
    finally:
        for handle in handles:
            cudashm.destroy_shared_memory_region(handle)


def held_by(pid: int, key: str) -> list[str]:
    """The mappings and fds of process `pid` (and its descendants) on `key`'s object."""
    path = "/dev/shm" + key
    found = []
    for each in [pid, *descendants(pid)]:
        try:
            for line in Path(f"/proc/{each}/maps").read_text().splitlines():
                if line.endswith(path) or line.endswith(path + " (deleted)"):
                    found.append(f"{each} maps {line}")
            for fd in Path(f"/proc/{each}/fd").iterdir():
                try:
                    target = os.readlink(fd)
                except OSError:
                    continue
                if target in (path, path + " (deleted)"):
                    found.append(f"{each} fd {fd.name}")
        except OSError:
            continue
    return found


def wait_released(pid: int, key: str, timeout: float = 5.0) -> list[str]:
    """Waits until nothing of `pid`'s tree holds `key` (workers sweep every second)."""
    deadline = time.monotonic() + timeout
    while True:
        held = held_by(pid, key)
        if not held or time.monotonic() > deadline:
            return held
        time.sleep(0.2)
