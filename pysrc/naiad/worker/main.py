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

from naiad import _core, datatypes
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
    """A request's metadata (csrc/ipc_schema.h), parsed: (name, datatype, shape) per
    input, requested outputs, id, and the parameters as `parameters()` returns them.
    Where the inputs' bytes are comes with each batch (the request block's slots)."""

    __slots__ = ("request_id", "inputs", "outputs", "parameters")

    def __init__(self, metadata: bytes):
        header = orjson.loads(metadata)
        self.request_id = header["id"]
        self.inputs = tuple(
            (name, datatype, tuple(shape)) for name, datatype, shape in header["inputs"]
        )
        self.outputs = header["outputs"] or []
        parameters = header["parameters"]
        self.parameters = orjson.dumps(parameters).decode() if parameters else _EMPTY_PARAMETERS


# Metadata bytes -> _Layout. A client sends the same request (same id, names and
# shapes) again and again, so most requests skip the JSON parse.
_LAYOUTS: dict[bytes, _Layout] = {}
_LAYOUTS_LIMIT = 1024


def _layout(metadata: bytes) -> _Layout:
    layout = _LAYOUTS.get(metadata)
    if layout is None:
        if len(_LAYOUTS) >= _LAYOUTS_LIMIT:
            _LAYOUTS.clear()
        layout = _LAYOUTS[metadata] = _Layout(metadata)
    return layout


def _build_requests(arena, blocks: list, model_name: str, model_version: int):
    """pb_utils requests over a batch: `blocks` are (metadata, input slots) per request
    (WorkerEndpoint.next), each slot the (arena offset, size) of an input's bytes."""
    requests = []
    from_server = pb_utils.InferenceRequest._from_server
    for metadata, slots in blocks:
        layout = _layout(metadata)
        inputs = [
            _input_tensor(arena, offset, name, datatype, shape, nbytes)
            for (name, datatype, shape), (offset, nbytes) in zip(layout.inputs, slots)
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


def batch_inputs(arena, blocks: list, tensors: list) -> dict:
    """The batch's inputs as whole [N, ...] arrays over the arena, by name: what a
    framework backend feeds its session in one call. `blocks` and `tensors` as
    `WorkerEndpoint.next` gives them; empty when the requests' inputs differ. Needs
    the requests' non-batch shapes to agree (BYTES stay serialized: not in the dict).
    """
    if not tensors or not blocks:
        return {}
    layouts = [_layout(metadata) for metadata, _slots in blocks]
    arrays = {}
    for index, (name, datatype, shape) in enumerate(layouts[0].inputs):
        if datatype == "BYTES" or any(
            layout.inputs[index][2][1:] != shape[1:] for layout in layouts
        ):
            continue
        rows = sum(layout.inputs[index][2][0] for layout in layouts) if shape else 0
        offset, _size = tensors[index]
        arrays[name] = np.ndarray((rows, *shape[1:]), _INPUT_TYPES[datatype][0], arena, offset)
    return arrays


_WIRE_OF_DTYPE: dict = {}


def _wire_datatype(dtype: np.dtype) -> str:
    wire = _WIRE_OF_DTYPE.get(dtype)
    if wire is None:
        wire = _WIRE_OF_DTYPE[dtype] = datatypes.wire_of_numpy(dtype)
    return wire


def _wire_results(results) -> list:
    """Backend results -> responses for `WorkerEndpoint.respond`: one final response
    per request, (request_index, flags, error_code, json, output buffers in wire
    layout). A result is an error string (RequestError carries the TritonError code)
    or the request's output Tensors."""
    responses = []
    for index, result in enumerate(results):
        if isinstance(result, str):
            json = orjson.dumps({"error": str(result)})
            flags = _core.RESPONSE_FINAL | _core.RESPONSE_ERROR
            responses.append((index, flags, getattr(result, "code", 1), json, ()))
            continue
        entries = []
        buffers = []
        for tensor in result:
            array = tensor.as_numpy()
            datatype = _wire_datatype(array.dtype)
            if datatype == "BYTES":
                buffer = datatypes.serialize_bytes(array)
            else:
                if not array.flags.c_contiguous or array.dtype.byteorder == ">":
                    array = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
                buffer = memoryview(array).cast("B") if array.nbytes else b""
            entries.append([tensor.name(), datatype, array.shape])
            buffers.append(buffer)
        json = orjson.dumps({"outputs": entries})
        responses.append((index, _core.RESPONSE_FINAL, 0, json, buffers))
    return responses


class Worker:
    def __init__(self, endpoint, backend, model_name: str, model_version: int):
        self.endpoint = endpoint
        self.arena = endpoint.arena
        self.backend = backend
        self.model_name = model_name
        self.model_version = model_version

    def run(self) -> None:
        while True:
            is_stop, batch_id, blocks, tensors = self.endpoint.next()
            if is_stop:
                return
            try:
                self._run_batch(batch_id, blocks, tensors)
            except Exception:
                traceback.print_exc()
                self.endpoint.complete(batch_id, 0, 0, _core.COMPLETION_WORKER_FAILED)

    def _run_batch(self, batch_id: int, blocks: list, tensors: list) -> None:
        """`tensors`: the batch-major input tensors (see `batch_inputs`), which the
        requests' inputs are views of; a framework backend takes them whole."""
        start = _core.now_ns()
        requests = _build_requests(self.arena, blocks, self.model_name, self.model_version)
        infer_start = _core.now_ns()
        results = self.backend.execute(requests)
        infer_end = _core.now_ns()
        responses = _wire_results(results)
        # start, compute_input, compute_infer, compute_output (ns); the output time
        # covers turning tensors into wire buffers, not the final copy into the arena.
        timings = [start, infer_start - start, infer_end - infer_start, _core.now_ns() - infer_end]
        if not self.endpoint.respond(batch_id, responses, timings, True):
            self.endpoint.complete(batch_id, 0, 0, _core.COMPLETION_WORKER_FAILED)


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
    # terminal reaches the whole process group; the frontend handles it for us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
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
