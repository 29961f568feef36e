"""A worker process: owns one model instance and runs the batches the core sends it.

It attaches the shared arena through descriptors inherited from the frontend, loads
the backend the model's config names (naiad.backends) once, reports readiness on its
control pipe, then loops: wait for a batch (GIL released), view each input as a numpy
array over the arena without copying (a backends.base.Batch), let the backend execute
it, write its outputs into a result block in the arena, post the completion.

Launch contract (scheduling/instance.py): argv carries the descriptor numbers and
the channel offset; stdin carries the JSON of Triton's initialize() args.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import sys
import threading
import time
import traceback

import numpy as np
import orjson

from naiad import _core, arena_format, datatypes
from naiad.backends import load_backend
from naiad.backends.base import Backend, Batch, RequestError, RequestHeader
from naiad.gc_tuning import settle_after_startup

_PR_SET_PDEATHSIG = 1


def _parse_args(argv):
    parser = argparse.ArgumentParser(prog="naiad-worker")
    parser.add_argument("--arena-fd", type=int, required=True)
    parser.add_argument("--channel-offset", type=int, required=True)
    parser.add_argument("--wake-fd", type=int, required=True)
    parser.add_argument("--notify-fd", type=int, required=True)
    parser.add_argument("--control-fd", type=int, required=True)
    return parser.parse_args(argv)


def _report(control_fd: int, message: dict) -> None:
    os.write(control_fd, json.dumps(message).encode() + b"\n")


HEARTBEAT_SECONDS = 1.0


def _start_heartbeat(control_fd: int) -> None:
    """Once loaded, a byte on the control pipe every second from a thread of its own: the
    frontend tells a worker that froze (stopped, or stuck in C code holding the GIL) from
    one that is merely busy running a long batch in Python."""

    def beat() -> None:
        try:
            while True:
                time.sleep(HEARTBEAT_SECONDS)
                os.write(control_fd, b".")
        except OSError:  # the frontend closed its end: it is gone or stopping us
            return

    threading.Thread(target=beat, name="naiad-heartbeat", daemon=True).start()


# Per wire datatype: the numpy dtype an input is viewed as (BYTES inputs are decoded).
_INPUT_DTYPES = {
    wire: datatypes.numpy_dtype(wire) for wire in datatypes.WIRE_DATATYPES if wire != "BF16"
}


class _Layout:
    """A request block's header, parsed: the backend's view of it (`header`) and where
    each input lies in the block, as (numpy dtype or None for BYTES, shape, nbytes,
    offset from the block start) per input, in the header's order."""

    __slots__ = ("header", "placements")

    def __init__(self, header_bytes: bytes):
        header = orjson.loads(header_bytes)
        entries = header["inputs"]
        offsets = arena_format.tensor_offsets(
            arena_format.LENGTH_SIZE + len(header_bytes), [entry[3] for entry in entries]
        )
        self.header = RequestHeader(
            header["id"],
            tuple((name, datatype, tuple(shape)) for name, datatype, shape, _ in entries),
            header["outputs"] or [],
            header["parameters"],
        )
        self.placements = tuple(
            (None if datatype == "BYTES" else _INPUT_DTYPES[datatype], tuple(shape), nbytes, offset)
            for (_, datatype, shape, nbytes), offset in zip(entries, offsets)
        )


# Header bytes -> _Layout. A client sends the same header (same id, names and shapes)
# again and again, so most requests skip the JSON parse.
_LAYOUTS: dict[bytes, _Layout] = {}
_LAYOUTS_LIMIT = 1024


def _new_layout(key: bytes) -> _Layout:
    if len(_LAYOUTS) >= _LAYOUTS_LIMIT:
        _LAYOUTS.clear()
    layout = _LAYOUTS[key] = _Layout(key)
    return layout


def _batch(arena, blocks: list[int]) -> Batch:
    """The batch's request blocks as the backend sees them: each input a numpy view over
    the arena (no copy); BYTES inputs decoded into object arrays."""
    header_text = arena_format.header_text
    cached = _LAYOUTS.get
    headers = []
    arrays = []
    for block in blocks:
        key = bytes(header_text(arena, block))
        layout = cached(key) or _new_layout(key)
        headers.append(layout.header)
        arrays.append(
            [
                np.ndarray(shape, dtype, arena, block + offset)
                if dtype is not None
                else datatypes.deserialize_bytes(
                    arena[block + offset : block + offset + nbytes], datatypes.element_count(shape)
                ).reshape(shape)
                for dtype, shape, nbytes, offset in layout.placements
            ]
        )
    return Batch(headers, arrays)


# numpy dtype -> wire datatype, filled as outputs show them.
_WIRE_OF_DTYPE: dict = {}


def _wire_datatype(dtype: np.dtype) -> str:
    """The wire datatype of an output dtype not in _WIRE_OF_DTYPE yet; remembered there."""
    wire = _WIRE_OF_DTYPE[dtype] = datatypes.wire_of_numpy(dtype)
    return wire


def _wire_results(results: list) -> tuple[list, list]:
    """The backend's Responses and RequestErrors -> (outcomes, output buffers in wire
    layout) for `arena_format.encode_result`."""
    wire_of = _WIRE_OF_DTYPE.get
    outcomes = []
    buffers = []
    for result in results:
        if isinstance(result, RequestError):
            outcomes.append({"error": result.message, "code": result.code})
            continue
        entries = []
        for name, array in result.outputs:
            datatype = wire_of(array.dtype) or _wire_datatype(array.dtype)
            if datatype == "BYTES":
                buffer = datatypes.serialize_bytes(array)
                size = len(buffer)
            else:
                if not array.flags.c_contiguous or array.dtype.byteorder == ">":
                    array = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
                size = array.nbytes
                buffer = memoryview(array).cast("B") if size else b""
            entries.append([name, datatype, array.shape, size])
            buffers.append(buffer)
        if result.parameters:
            outcomes.append({"outputs": entries, "parameters": result.parameters})
        else:
            outcomes.append({"outputs": entries})
    return outcomes, buffers


class Worker:
    def __init__(self, endpoint, backend: Backend):
        self.endpoint = endpoint
        self.arena = endpoint.arena
        self.backend = backend

    def run(self) -> None:
        while True:
            is_stop, batch_id, blocks = self.endpoint.next()
            if is_stop:
                return
            try:
                self._run_batch(batch_id, blocks)
            except Exception:
                traceback.print_exc()
                self.endpoint.complete(batch_id, 0, 0, _core.COMPLETION_WORKER_FAILED)

    def _run_batch(self, batch_id: int, blocks: list[int]) -> None:
        start = _core.now_ns()
        batch = _batch(self.arena, blocks)
        infer_start = _core.now_ns()
        results = self.backend.execute(batch)
        infer_end = _core.now_ns()
        if len(results) != len(blocks):
            raise RuntimeError(
                f"the backend answered {len(results)} of the batch's {len(blocks)} requests"
            )
        outcomes, buffers = _wire_results(results)
        # start, compute_input, compute_infer, compute_output (ns); the output time
        # covers turning tensors into wire buffers, not the final copy into the arena.
        timings = [start, infer_start - start, infer_end - infer_start, _core.now_ns() - infer_end]
        prefix, parts, size = arena_format.encode_result(outcomes, buffers, timings)
        offset = self.endpoint.alloc(size, batch_id)
        if offset == 0:
            self.endpoint.complete(batch_id, 0, 0, _core.COMPLETION_WORKER_FAILED)
            return
        arena = self.arena
        arena[offset : offset + len(prefix)] = prefix
        for part_offset, buffer in parts:
            start_at = offset + part_offset
            arena[start_at : start_at + len(buffer)] = buffer
        self.endpoint.complete(batch_id, offset, size, _core.COMPLETION_OK)


def _die_with_parent() -> None:
    """A worker must not outlive its frontend, however the frontend ends (even SIGKILL)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the frontend died before prctl took effect
        os._exit(1)


def _yield_to_frontend() -> None:
    """SCHED_BATCH: a woken worker does not preempt the running frontend.

    When they share a core, the frontend then finishes its event-loop turn (reading
    and queueing every request that arrived) before the worker runs the batch; on
    separate cores nothing changes. Best effort: not every platform has it.
    """
    try:
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    except (AttributeError, OSError):
        pass


def main(argv=None) -> int:
    options = _parse_args(sys.argv[1:] if argv is None else argv)
    _die_with_parent()
    _yield_to_frontend()
    # The frontend owns shutdown: it asks through the channel. A Ctrl-C in the
    # terminal, or a supervisor's SIGTERM to the process group, reaches us too; the
    # frontend handles it for us (and we die with it: _die_with_parent).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    args = json.loads(sys.stdin.read())
    try:
        endpoint = _core.WorkerEndpoint(
            options.arena_fd, options.channel_offset, options.wake_fd, options.notify_fd
        )
        backend = load_backend(args)
    except Exception as exc:  # reported to the frontend, which prints the load table
        message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
        _report(options.control_fd, {"status": "error", "message": message})
        return 1
    settle_after_startup()
    _report(options.control_fd, {"status": "ready"})
    _start_heartbeat(options.control_fd)
    Worker(endpoint, backend).run()
    # The frontend learns that this worker is done from its exit (a pidfd).
    backend.finalize()
    return 0
