"""A worker process: owns one model instance and runs the batches the core sends it.

It attaches the shared arena through descriptors inherited from the frontend, loads
the backend once, reports readiness on its control pipe, then loops: wait for a batch
(GIL released), view each input as a numpy array over the arena without copying, run
the model, write the outputs into a result block in the arena, post the completion.

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
import traceback

import numpy as np
import orjson

from naiad import _core, arena_format, datatypes
from naiad import triton_python_backend_utils as pb_utils
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


def _load_backend(args: dict):
    config = json.loads(args["model_config"])
    backend = config.get("backend") or config.get("platform") or ""
    if backend != "python":
        raise RuntimeError(
            f"backend '{backend}' of model '{args['model_name']}' is not supported yet "
            "(supported: python)"
        )
    from naiad.backends.python import PythonModelBackend

    return PythonModelBackend(args)


# Per wire datatype: (numpy dtype, pb_utils triton dtype). Looked up per input.
_INPUT_TYPES = {
    wire: (datatypes.numpy_dtype(wire), pb_utils.numpy_to_triton_type(datatypes.numpy_dtype(wire)))
    for wire in datatypes.WIRE_DATATYPES
    if wire != "BF16"
}
_EMPTY_PARAMETERS = "{}"


def _input_tensor(arena, start: int, name: str, datatype: str, shape: tuple, nbytes: int):
    """A zero-copy numpy view over the arena (BYTES are decoded into an object array)."""
    dtype, triton_dtype = _INPUT_TYPES[datatype]
    if datatype == "BYTES":
        count = datatypes.element_count(shape)
        array = datatypes.deserialize_bytes(arena[start : start + nbytes], count).reshape(shape)
    else:
        array = np.ndarray(shape, dtype, arena, start)
    return pb_utils.Tensor._from_server(name, array, triton_dtype)


class _Layout:
    """A request header, parsed: (name, datatype, shape, nbytes, offset in the block) per
    input, requested outputs, id, and the parameters as `parameters()` returns them."""

    __slots__ = ("request_id", "inputs", "outputs", "parameters")

    def __init__(self, header_bytes: bytes):
        header = orjson.loads(header_bytes)
        entries = header["inputs"]
        offsets = arena_format.tensor_offsets(
            arena_format.LENGTH_SIZE + len(header_bytes), [entry[3] for entry in entries]
        )
        self.request_id = header["id"]
        self.inputs = tuple(
            (name, datatype, tuple(shape), nbytes, offset)
            for (name, datatype, shape, nbytes), offset in zip(entries, offsets)
        )
        self.outputs = header["outputs"] or []
        parameters = header["parameters"]
        self.parameters = orjson.dumps(parameters).decode() if parameters else _EMPTY_PARAMETERS


# Header bytes -> _Layout. A client sends the same header (same id, names and shapes)
# again and again, so most requests skip the JSON parse.
_LAYOUTS: dict[bytes, _Layout] = {}
_LAYOUTS_LIMIT = 1024


def _layout(arena, block: int) -> _Layout:
    key = bytes(arena_format.header_text(arena, block))
    layout = _LAYOUTS.get(key)
    if layout is None:
        if len(_LAYOUTS) >= _LAYOUTS_LIMIT:
            _LAYOUTS.clear()
        layout = _LAYOUTS[key] = _Layout(key)
    return layout


def _build_requests(arena, blocks: list[int], model_name: str, model_version: int):
    requests = []
    from_server = pb_utils.InferenceRequest._from_server
    for block in blocks:
        layout = _layout(arena, block)
        inputs = [
            _input_tensor(arena, block + offset, name, datatype, shape, nbytes)
            for name, datatype, shape, nbytes, offset in layout.inputs
        ]
        requests.append(
            from_server(
                layout.request_id,
                inputs,
                layout.outputs,
                model_name,
                model_version,
                layout.parameters,
            )
        )
    return requests


_WIRE_OF_DTYPE: dict = {}


def _wire_datatype(dtype: np.dtype) -> str:
    wire = _WIRE_OF_DTYPE.get(dtype)
    if wire is None:
        wire = _WIRE_OF_DTYPE[dtype] = datatypes.wire_of_numpy(dtype)
    return wire


def _wire_results(results):
    """Backend results -> (header responses, output buffers in wire layout) for
    `arena_format.encode_result`. A result is an error string (RequestError carries
    the TritonError code) or the request's output Tensors."""
    responses = []
    buffers = []
    for result in results:
        if isinstance(result, str):
            responses.append({"error": str(result), "code": getattr(result, "code", 1)})
            continue
        entries = []
        for tensor in result:
            array = tensor.as_numpy()
            datatype = _wire_datatype(array.dtype)
            if datatype == "BYTES":
                buffer = datatypes.serialize_bytes(array)
                size = len(buffer)
            else:
                if not array.flags.c_contiguous or array.dtype.byteorder == ">":
                    array = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
                size = array.nbytes
                buffer = memoryview(array).cast("B") if size else b""
            entries.append([tensor.name(), datatype, array.shape, size])
            buffers.append(buffer)
        responses.append({"outputs": entries})
    return responses, buffers


class Worker:
    def __init__(self, endpoint, backend, model_name: str, model_version: int):
        self.endpoint = endpoint
        self.arena = endpoint.arena
        self.backend = backend
        self.model_name = model_name
        self.model_version = model_version

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
        requests = _build_requests(self.arena, blocks, self.model_name, self.model_version)
        infer_start = _core.now_ns()
        results = self.backend.execute(requests)
        infer_end = _core.now_ns()
        responses, buffers = _wire_results(results)
        # start, compute_input, compute_infer, compute_output (ns); the output time
        # covers turning tensors into wire buffers, not the final copy into the arena.
        timings = [start, infer_start - start, infer_end - infer_start, _core.now_ns() - infer_end]
        prefix, parts, size = arena_format.encode_result(responses, buffers, timings)
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
        backend = _load_backend(args)
    except Exception as exc:  # reported to the frontend, which prints the load table
        message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
        _report(options.control_fd, {"status": "error", "message": message})
        return 1
    settle_after_startup()
    _report(options.control_fd, {"status": "ready"})
    worker = Worker(endpoint, backend, args["model_name"], int(args["model_version"]))
    worker.run()
    try:
        backend.finalize()
    finally:
        _report(options.control_fd, {"status": "stopped"})
    return 0
