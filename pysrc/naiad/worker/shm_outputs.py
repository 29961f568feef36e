"""A worker's side of the shared-memory extensions: outputs written straight into the
client's region, and CUDA inputs filled from the client's device memory.

A request block names its regions under `regions` (naiad/shm.py, `block_regions`):
  {"outputs": {name: [id, kind, where, device_or_map_offset, map_length, offset, size]},
   "cuda_inputs": [[input index, id, handle (base64), device, offset, size]]}
For a system region `where` is the frontend's `/proc/<pid>/fd/<fd>` of the object: the
worker maps the registered range once per region id, the first time a request uses it
(the client may have unlinked the key since), and keeps the mapping until the frontend
drops the id from the live-region table in the arena (csrc/shm_registry.h,
RegionTable): a thread looks at the table's epoch every second, and each batch does
before it writes. The frontend keeps an id in the table while a request uses it, so a
write never meets an unmapped region.

Copies: a shm output is copied once, from the model's array into the region; nothing of
it goes through the response block or the frontend.
"""

from __future__ import annotations

import base64
import mmap
import os
import sys
import threading

import numpy as np
import orjson

from naiad import _core

SYSTEM = _core.SHM_SYSTEM
_INTERNAL_CODE = 1  # TRITONSERVER_ERROR_INTERNAL: HTTP 500, gRPC INTERNAL

# True once a request block with `regions` was seen (the worker's hot path checks it).
active = False


def note_layout(header: dict):
    """Called with each newly parsed request metadata: its `regions`, or None."""
    global active
    regions = header.get("regions")
    if regions is not None:
        active = True
    return regions


class _Regions:
    """The system regions this worker mapped, by id (copied-to counters for tests)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.maps: dict[int, tuple[mmap.mmap, memoryview]] = {}
        self.arena = None
        self.table = int(os.environ.get("NAIAD_SHM_TABLE", "0") or 0)
        self.epoch = None
        self.sweeper = None
        self.writes = 0

    def start(self, arena) -> None:
        if self.arena is None:
            self.arena = arena

    def view(self, region_id: int, where: str, map_offset: int, map_length: int) -> memoryview:
        with self.lock:
            found = self.maps.get(region_id)
            if found is not None:
                return found[1]
            if not self._live(region_id):
                raise LookupError(f"shared memory region {region_id} is no longer registered")
            page = mmap.ALLOCATIONGRANULARITY
            start = map_offset - map_offset % page
            fd = os.open(where, os.O_RDWR | os.O_CLOEXEC)
            try:
                mapping = mmap.mmap(
                    fd, map_offset + map_length - start, mmap.MAP_SHARED, offset=start
                )
            finally:
                os.close(fd)
            view = memoryview(mapping)[map_offset - start :]
            self.maps[region_id] = (mapping, view)
            if self.sweeper is None and self.table:
                self.sweeper = threading.Thread(target=self._sweep_loop, daemon=True)
                self.sweeper.start()
            return view

    def _live(self, region_id: int) -> bool:
        if not self.table or self.arena is None:
            return True
        return region_id in _core.region_table(self.arena, self.table)[1]

    def sweep(self) -> None:
        """Unmaps the regions the frontend no longer keeps alive."""
        cuda = sys.modules.get("naiad.cuda_ipc")
        if not self.table or self.arena is None or not (self.maps or (cuda and cuda._opened)):
            return
        epoch = _core.region_table_epoch(self.arena, self.table)
        if epoch == self.epoch:
            return
        with self.lock:
            epoch, live = _core.region_table(self.arena, self.table)
            for region_id in [r for r in self.maps if r not in live]:
                mapping, view = self.maps.pop(region_id)
                view.release()
                mapping.close()
            if cuda is not None:
                cuda.close_dead(live)
            self.epoch = epoch

    def _sweep_loop(self) -> None:
        import time

        while True:
            time.sleep(1.0)
            try:
                self.sweep()
            except Exception:  # never take the worker down from here
                pass


REGIONS = _Regions()


def fill_cuda_inputs(arena, blocks: list, regions_of) -> None:
    """Copies each CUDA-shm input from the client's device memory into its slot."""
    from naiad import cuda_ipc

    for metadata, slots in blocks:
        regions = regions_of(metadata)
        if not regions:
            continue
        for index, region_id, handle, device, offset, size in regions.get("cuda_inputs", ()):
            slot_offset, slot_size = slots[index]
            if slot_size != size:
                raise ValueError(f"CUDA input {index}: slot of {slot_size} bytes for {size}")
            cuda_ipc.copy_from_region(
                region_id, base64.b64decode(handle), device, offset, arena, slot_offset, size
            )


def place_outputs(arena, blocks: list, responses: list, regions_of) -> list:
    """Writes the outputs that requests placed in shm regions into them, and leaves
    them out of the response block (metadata stays, size 0). An output that does not
    fit its region fails its request with Triton's message."""
    REGIONS.start(arena)
    REGIONS.sweep()
    return [place_response(r, regions_of(blocks[r[0]][0])) for r in responses]


def place_response(response: tuple, regions: dict | None) -> tuple:
    """One wire response (request_index, flags, code, JSON, buffers) with the outputs its
    request placed in shm `regions` (its block's `regions`) written there and left out
    (size 0). An output that does not fit makes it an error response with Triton's
    message, final only if the response was (a decoupled model's stream goes on). The
    caller has started REGIONS (place_outputs, or a decoupled batch's BatchStream)."""
    index, flags, code, json, buffers = response
    wanted = regions.get("outputs") if regions else None
    if not wanted or flags & _core.RESPONSE_ERROR:
        return response
    outcome = orjson.loads(json)
    buffers = list(buffers)
    for j, (name, _datatype, _shape) in enumerate(outcome.get("outputs", ())):
        place = wanted.get(name)
        if place is None:
            continue
        region_id, kind, where, arg, map_length, offset, size = place
        data = buffers[j]
        nbytes = data.nbytes if isinstance(data, memoryview) else len(data)
        if nbytes > size:
            error = (
                f"shared memory size specified with the request for output '{name}' "
                f"({size} bytes) should be at least {nbytes} bytes to hold the results"
            )
            error_flags = (flags & _core.RESPONSE_FINAL) | _core.RESPONSE_ERROR
            return (index, error_flags, _INTERNAL_CODE, orjson.dumps({"error": error}), ())
        if kind == SYSTEM:
            target = REGIONS.view(region_id, where, arg, map_length)
            target[offset : offset + nbytes] = memoryview(data).cast("B")
        else:
            from naiad import cuda_ipc

            cuda_ipc.copy_to_region(
                region_id, base64.b64decode(where), arg, offset, np.frombuffer(data, np.uint8)
            )
        REGIONS.writes += 1
        buffers[j] = b""
    return (index, flags, code, json, buffers)
