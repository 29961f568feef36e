"""A worker's side of the shared-memory extensions: inputs read in place from the
client's region, outputs written straight into it, and CUDA inputs filled from the
client's device memory.

An input of a request that runs alone stays in the client's system region
(csrc/core/batch_assembler.h): its slot names the region id and the offset in it
(`slot_buffer`), and the worker reads it through its own mapping of the region, found
by id in the live-region table, no copy. The frontend keeps the id in the table until
the request is answered, which is after the worker posted its response, so the
mapping is valid for as long as the model runs on the request.

A request block names its regions under `regions` (naiad/memory/shm.py, `block_regions`):
  {"outputs": {name: [id, kind, where, device_or_map_offset, map_length, offset, size]},
   "cuda_inputs": [[input index, id, handle (base64), device, offset, size]],
   "names": {id: region name}}
For a system region `where` is the frontend's `/proc/<pid>/fd/<fd>` of the object: the
worker maps the registered range once per region id, the first time a request uses it
(the client may have unlinked the key since), and keeps the mapping until the frontend
drops the id from the live-region table in the arena (csrc/shm/shm_registry.h,
RegionTable): a thread looks at the table's epoch every second, and each batch does
before it writes. The frontend keeps an id in the table while a request uses it, so a
write never meets an unmapped region.

A client may truncate its object while a request reads or writes it here: the SIGBUS
guard (csrc/shm/shm_fault_guard.h) swaps the mapping for zero pages and counts a fault. The
request whose bytes those were fails with the region named (HTTP 400, gRPC
INVALID_ARGUMENT), the others in its batch are answered: an output write checks the
count after it copies (`place_response`), and the regions read in place during a batch
are checked once the model answered it (`refuse_truncated_reads`).

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

from naiad import _core, datatypes, outcome_record
from naiad.triton_codes import INTERNAL, INVALID_ARG

SYSTEM = _core.SHM_SYSTEM

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
        # id -> (mmap, its view of the region's bytes, the same read-only, its handle in
        # the SIGBUS guard, csrc/shm/shm_fault_guard.h)
        self.maps: dict[int, tuple[mmap.mmap, memoryview, memoryview, int]] = {}
        # Mappings of dead regions that a model's arrays still export: closed later.
        self.retired: list[tuple[mmap.mmap, memoryview, memoryview, int]] = []
        self.arena = None
        self.table = int(os.environ.get("NAIAD_SHM_TABLE", "0") or 0)
        self.epoch = None
        self.sweeper = None
        self.writes = 0
        # Region ids read in place since the last refuse_truncated_reads (this batch's).
        self.read: set[int] = set()

    def start(self, arena) -> None:
        if self.arena is None:
            self.arena = arena

    def view(self, region_id: int, where: str, map_offset: int, map_length: int) -> memoryview:
        """A writable view of the region's bytes (an output's target)."""
        return self._mapped(region_id, where, map_offset, map_length)[1]

    def input_view(self, region_id: int) -> memoryview:
        """A read-only view of live region `region_id` (an input read in place), mapped
        from what the frontend's live-region table says about it."""
        self.read.add(region_id)
        found = self.maps.get(region_id)
        if found is not None:
            _check_intact(region_id, found)
            return found[2]
        entry = (
            _core.region_table_entry(self.arena, self.table, region_id)
            if self.table and self.arena is not None
            else None
        )
        if entry is None:
            raise LookupError(f"shared memory region {region_id} is no longer registered")
        return self._mapped(region_id, *entry)[2]

    def _mapped(self, region_id: int, where: str, map_offset: int, map_length: int):
        with self.lock:
            found = self.maps.get(region_id)
            if found is not None:
                _check_intact(region_id, found)
                return found
            if not self._live(region_id):
                raise LookupError(f"shared memory region {region_id} is no longer registered")
            page = mmap.ALLOCATIONGRANULARITY
            start = map_offset - map_offset % page
            try:
                fd = os.open(where, os.O_RDWR | os.O_CLOEXEC)
                access = mmap.ACCESS_WRITE
            except PermissionError:  # a client's read-only object: inputs only
                fd = os.open(where, os.O_RDONLY | os.O_CLOEXEC)
                access = mmap.ACCESS_READ
            try:
                mapping = mmap.mmap(
                    fd, map_offset + map_length - start, access=access, offset=start
                )
            except ValueError:  # mmap checks the object's size: it shrank since resolve
                raise TruncatedRegion(region_id) from None
            finally:
                os.close(fd)
            # The client may shrink its object under this mapping: the guard turns the
            # SIGBUS into zero pages, and the region is refused from then on.
            watch = _core.shm_guard_watch_mapping(mapping, access == mmap.ACCESS_WRITE)
            view = memoryview(mapping)[map_offset - start :]
            found = self.maps[region_id] = (mapping, view, view.toreadonly(), watch)
            if self.sweeper is None and self.table:
                self.sweeper = threading.Thread(target=self._sweep_loop, daemon=True)
                self.sweeper.start()
            return found

    def _live(self, region_id: int) -> bool:
        if not self.table or self.arena is None:
            return True
        return region_id in _core.region_table(self.arena, self.table)[1]

    def sweep(self) -> None:
        """Unmaps the regions the frontend no longer keeps alive."""
        cuda = sys.modules.get("naiad.memory.cuda_ipc")
        if not self.table or self.arena is None:
            return
        if not (self.maps or self.retired or (cuda and cuda._opened)):
            return
        epoch = _core.region_table_epoch(self.arena, self.table)
        if epoch == self.epoch and not self.retired:
            return
        with self.lock:
            epoch, live = _core.region_table(self.arena, self.table)
            for region_id in [r for r in self.maps if r not in live]:
                self.retired.append(self.maps.pop(region_id))
            self.retired = [m for m in self.retired if not _close(m)]
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


def _close(mapped: tuple) -> bool:
    """Unmaps a dead region's mapping; False while a model still holds an array over it
    (numpy keeps the buffer exported): the mapping stays valid and is closed later."""
    mapping, view, readonly, watch = mapped
    try:
        readonly.release()
        view.release()
        _core.shm_guard_unwatch_mapping(watch)
        mapping.close()
    except BufferError:
        return False
    return True


class TruncatedRegion(LookupError):
    """A client shrank a region's object while this worker had it mapped (its args: the
    region id)."""


def _check_intact(region_id: int, mapped: tuple) -> None:
    if _core.shm_guard_fault_count(mapped[3]):
        raise TruncatedRegion(region_id)


REGIONS = _Regions()


def truncated_message(regions: dict | None, region_id: int) -> str:
    """The error of a request during which region `region_id` was truncated, naming it
    as the client registered it (`names` of its block's `regions`): the frontend's text
    (csrc/shm/shm_registry.h truncated_in_use_message)."""
    name = ((regions or {}).get("names") or {}).get(str(region_id))
    return _core.shm_truncated_message(name if name is not None else f"#{region_id}")


def _faulted(region_id: int) -> bool:
    found = REGIONS.maps.get(region_id)
    return found is not None and _core.shm_guard_fault_count(found[3]) != 0


def refuse_unreadable(arena, blocks: list, regions_of) -> dict:
    """{request index: error} for the requests of `blocks` with an input to read in place
    from a region this worker cannot read any more: its mapping took a fault in an
    earlier batch (the client grew the object back since, so the frontend's check
    passed), or the object is shorter than the region (mmap refuses it). The worker
    answers them with the error and runs the others; it maps the rest here, as reading
    them would."""
    refused = {}
    REGIONS.start(arena)
    for k, (metadata, slots) in enumerate(blocks):
        for slot in slots:
            if len(slot) != 3:
                continue
            try:
                REGIONS.input_view(slot[2])
            except TruncatedRegion:
                refused[k] = truncated_message(regions_of(metadata), slot[2])
                break
    return refused


def reads_settled(results: list) -> bool:
    """Whether the batch's reads in place (REGIONS.read) need no check per request: no
    region read took a fault, and no output of `results` (the backend's Responses) is a
    view of one, so nothing reads a region after this. The common case: the model
    computed new arrays, and the worker posts through respond_results (C++). Clears
    REGIONS.read when so; else the worker calls refuse_truncated_reads."""
    read = REGIONS.read
    if not read:
        return True
    if any(_faulted(region_id) for region_id in read):
        return False
    views = [
        np.frombuffer(REGIONS.maps[region_id][2], np.uint8)
        for region_id in read
        if region_id in REGIONS.maps
    ]
    for result in results:
        for _name, array in getattr(result, "outputs", ()):
            if type(array) is np.ndarray and any(np.may_share_memory(array, v) for v in views):
                return False
    read.clear()
    return True


def refuse_truncated_reads(blocks: list, responses: list, regions_of) -> list:
    """The batch's wire responses (one per request of `blocks`), with each request that
    read an input in place from a region truncated meanwhile answered with that error
    instead: what the model read there, or answered from there, is the guard's zeros.
    The worker calls it, when reads_settled says so, before it posts them.

    An output that is a view of such an input (an identity model's) is read only when
    the response is written: it is copied out first, so that any fault of that read is
    counted before the check. A mapping that faulted before the batch was refused when
    its input was read (_check_intact), so a fault seen here came during the batch."""
    read, REGIONS.read = REGIONS.read, set()
    views = [
        np.frombuffer(REGIONS.maps[region_id][2], np.uint8)
        for region_id in read
        if region_id in REGIONS.maps
    ]
    responses = [_detached(response, views) for response in responses]
    faulted = {region_id for region_id in read if _faulted(region_id)}
    if not faulted:
        return responses
    error_flags = _core.RESPONSE_FINAL | _core.RESPONSE_ERROR
    for k, (metadata, slots) in enumerate(blocks):
        for slot in slots:
            if len(slot) == 3 and slot[2] in faulted:
                error = truncated_message(regions_of(metadata), slot[2])
                json = outcome_record.error_record(error)
                responses[k] = (responses[k][0], error_flags, INVALID_ARG, json, ())
                break
    return responses


def _detached(response: tuple, views: list) -> tuple:
    """`response` with its output buffers that lie in one of `views` (regions read in
    place) copied out of them."""
    index, flags, code, json, buffers = response
    kept = list(buffers)
    for j, buffer in enumerate(kept):
        if type(buffer) is memoryview and any(
            np.may_share_memory(np.frombuffer(buffer, np.uint8), view) for view in views
        ):
            kept[j] = bytes(buffer)
    return (index, flags, code, json, kept)


def slot_buffer(arena, slot: tuple) -> tuple:
    """(buffer, offset, size) of an input slot as WorkerEndpoint.next gives it: bytes
    in the arena (offset, size), or in a client's system-shm region, read in place
    (offset in the region, size, region id: a request that ran alone; the core checked
    the range against the region at submit, csrc/shm/shm_registry.h)."""
    if len(slot) == 2:
        return arena, slot[0], slot[1]
    offset, size, region_id = slot
    REGIONS.start(arena)
    return REGIONS.input_view(region_id), offset, size


def region_array(view: memoryview, dtype, shape, offset: int) -> np.ndarray:
    """An input's array over a region's view. np.frombuffer, not np.ndarray(buffer=):
    the array then holds an export of the mapping, so a sweep cannot unmap the region
    under a model that kept the array (the mapping waits in `retired`)."""
    count = 1
    for d in shape:
        count *= d
    return np.frombuffer(view, dtype, count, offset).reshape(shape)


def fill_cuda_inputs(
    arena,
    blocks: list,
    regions_of,
    device: int | None = None,
    inputs_of=None,
    bytes_error=None,
    errors: dict | None = None,
) -> dict:
    """The batch's CUDA-shm inputs. With `device` (the worker's backend reads device
    inputs, on that GPU; `inputs_of(metadata)` gives a request's (name, datatype, shape)
    per input): an input on that device is read in place, returned as
    {(request index, input index): cuda_ipc.DeviceArray} and its slot is left unfilled.
    Every other one, and every BYTES input (its elements are read on the host), is
    copied from the client's device memory into its slot (device to host, once).

    A BYTES input is then checked element by element, as the frontend checks one in
    the body or in system shm: `bytes_error(metadata, input index, arena, offset, size)`
    gives Triton's message for malformed bytes (the worker's `_bytes_error`, over the
    validator's check in C++). The message goes into `errors` under the request index
    (the worker answers that request with it and runs the others), or raises
    ValueError without `errors`."""
    from naiad.memory import cuda_ipc

    in_place = {}
    for k, (metadata, slots) in enumerate(blocks):
        regions = regions_of(metadata)
        if not regions:
            continue
        for index, region_id, handle, region_device, offset, size in regions.get("cuda_inputs", ()):
            slot_offset, slot_size = slots[index]
            if slot_size != size:
                raise ValueError(f"CUDA input {index}: slot of {slot_size} bytes for {size}")
            raw = base64.b64decode(handle)
            _name, datatype, shape = inputs_of(metadata)[index] if inputs_of else (None,) * 3
            if device is not None and region_device == device and datatype != "BYTES":
                in_place[k, index] = cuda_ipc.device_view(
                    region_id, raw, device, offset, size, datatypes.numpy_dtype(datatype), shape
                )
                continue
            cuda_ipc.copy_from_region(
                region_id, raw, region_device, offset, arena, slot_offset, size
            )
            if datatype == "BYTES" and bytes_error is not None:
                message = bytes_error(metadata, index, arena, slot_offset, size)
                if message is not None:
                    if errors is None:
                        raise ValueError(message)
                    errors.setdefault(k, message)
    return in_place


def output_targets(blocks: list, regions_of, device: int) -> dict:
    """{(request index, output name): cuda_ipc.OutputTarget} for the outputs the batch's
    requests placed in CUDA regions on `device`: a GPU backend may leave those on the
    device, or write them straight into the target."""
    from naiad.memory import cuda_ipc

    found = {}
    for k, (metadata, _slots) in enumerate(blocks):
        regions = regions_of(metadata)
        if not regions:
            continue
        for name, place in (regions.get("outputs") or {}).items():
            region_id, kind, where, region_device, _length, offset, size = place
            if kind != SYSTEM and region_device == device:
                found[k, name] = cuda_ipc.OutputTarget(
                    region_id, base64.b64decode(where), device, offset, size
                )
    return found


def device_outputs(blocks: list, regions_of, device: int) -> frozenset:
    """(request index, output name) of the outputs the batch's requests placed in CUDA
    regions on `device` (the keys of `output_targets`)."""
    return frozenset(output_targets(blocks, regions_of, device))


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
    buffers = list(buffers)
    for j, (name, _datatype, _shape) in enumerate(outcome_record.read(json).outputs):
        place = wanted.get(name)
        if place is None:
            continue
        region_id, kind, where, arg, map_length, offset, size = place
        data = buffers[j]
        nbytes = data.nbytes if hasattr(data, "nbytes") else len(data)
        if nbytes > size:
            error = _core.shm_output_too_small(name, size, nbytes)
            error_flags = (flags & _core.RESPONSE_FINAL) | _core.RESPONSE_ERROR
            return (index, error_flags, INTERNAL, outcome_record.error_record(error), ())
        from naiad.memory import cuda_ipc

        device_output = isinstance(data, cuda_ipc.DeviceArray)
        if kind == SYSTEM:
            try:
                target = REGIONS.view(region_id, where, arg, map_length)
                watch = REGIONS.maps[region_id][3]
                faults = _core.shm_guard_fault_count(watch)
                host = data.to_host() if device_output else data
                target[offset : offset + nbytes] = memoryview(host).cast("B")
                if _core.shm_guard_fault_count(watch) != faults:
                    raise TruncatedRegion(region_id)
            except TruncatedRegion:
                # The copy went to the guard's zero pages, not to the client's object.
                error = truncated_message(regions, region_id)
                error_flags = (flags & _core.RESPONSE_FINAL) | _core.RESPONSE_ERROR
                return (index, error_flags, INVALID_ARG, outcome_record.error_record(error), ())
        else:
            # A GPU model's output left on its device goes device to device.
            cuda_ipc.copy_to_region(
                region_id,
                base64.b64decode(where),
                arg,
                offset,
                data if device_output else np.frombuffer(data, np.uint8),
            )
        REGIONS.writes += 1
        buffers[j] = b""
    return (index, flags, code, json, buffers)
