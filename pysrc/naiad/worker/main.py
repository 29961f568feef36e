"""A worker process: owns one model instance and runs the batches the core sends it.

It attaches the shared arena through descriptors inherited from the frontend, loads
the backend the model's config names (naiad.backends) once, reports readiness on its
control pipe, then loops: wait for a batch (GIL released), view each input as a numpy
array over the arena without copying (a backends.base.Batch: rows of the batch-major
input tensors), let the backend execute it, post its outputs as a response block
(csrc/ipc/ipc_schema.h, through WorkerEndpoint.respond) that also ends the batch.

Launch contract (scheduling/instance.py): argv carries the descriptor numbers and
the channel offset; stdin carries the JSON of Triton's initialize() args.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import json
import os
import resource
import signal
import sys
import threading
import time
import traceback

import numpy as np
import orjson

from naiad import _core, datatypes, outcome_record
from naiad.backends import load_backend
from naiad.backends.base import Backend, Batch, RequestError, RequestHeader, Rescheduled
from naiad.memory import gpu
from naiad.memory.gc_tuning import settle_after_startup
from naiad.observability import triton_log
from naiad.triton_codes import INVALID_ARG
from naiad.worker import bls, decoupled, results, shm_outputs
from naiad.worker import sequence as sequence_batching
from naiad.worker.signals import ignore_shutdown_signals

_PR_SET_PDEATHSIG = 1


def _parse_args(argv):
    parser = argparse.ArgumentParser(prog="naiad-worker")
    parser.add_argument("--arena-fd", type=int, required=True)
    parser.add_argument("--channel-offset", type=int, required=True)
    parser.add_argument("--wake-fd", type=int, required=True)
    parser.add_argument("--notify-fd", type=int, required=True)
    parser.add_argument("--control-fd", type=int, required=True)
    # The server's log settings: one JSON line now, another after each change.
    parser.add_argument("--settings-fd", type=int, default=-1)
    # NAIAD_WORKER_MEMORY_LIMIT_BYTES (repository/worker_limits.py), 0: none.
    parser.add_argument("--memory-limit", type=int, default=0)
    parser.add_argument("--instance", default="")  # model/instance, for ps (unused)
    return parser.parse_args(argv)


def _report(control_fd: int, message: dict) -> None:
    os.write(control_fd, json.dumps(message).encode() + b"\n")


HEARTBEAT_SECONDS = 1.0


class _SettingsAcks:
    """Says on the control pipe that a log settings line was applied (the frontend
    answers a settings change once every worker has). Those applied while the model
    loads are said after the handshake line, which stays one JSON line of its own."""

    def __init__(self, control_fd: int):
        self.control_fd = control_fd
        self.lock = threading.Lock()
        self.held = 0  # applied before open()
        self.opened = False

    def applied(self) -> None:
        with self.lock:
            if not self.opened:
                self.held += 1
                return
        self._say(1)

    def open(self) -> None:
        with self.lock:
            self.opened = True
            held, self.held = self.held, 0
        self._say(held)

    def _say(self, count: int) -> None:
        if count:
            try:
                os.write(self.control_fd, triton_log.SETTINGS_APPLIED * count)
            except OSError:  # the frontend closed its end: it is gone or stopping us
                pass


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
    """A request's metadata (csrc/ipc/ipc_schema.h), parsed: the backend's view of it
    (`header`) and the numpy dtype (None for BYTES) and shape of each input, in the
    metadata's order. Where the inputs' bytes are comes with each batch (the request
    block's slots)."""

    __slots__ = ("header", "placements", "regions")

    def __init__(self, metadata: bytes):
        header = orjson.loads(metadata)
        inputs = tuple((name, datatype, tuple(shape)) for name, datatype, shape in header["inputs"])
        self.header = RequestHeader(
            header["id"], inputs, header["outputs"] or [], header["parameters"]
        )
        self.placements = tuple(
            (None if datatype == "BYTES" else _INPUT_DTYPES[datatype], shape)
            for _name, datatype, shape in inputs
        )
        self.regions = shm_outputs.note_layout(header)  # client shm regions, or None


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


def _regions_of(metadata: bytes):
    return _layout(metadata).regions


def _inputs_of(metadata: bytes):
    return _layout(metadata).header.inputs


def _batch(arena, blocks: list, tensors: list = (), layouts: list | None = None) -> Batch:
    """The batch's requests as the backend sees them: `blocks` are (metadata, input
    slots) per request (WorkerEndpoint.next), each slot the (arena offset, size) of an
    input's bytes; `tensors` the batch-major tensors they lie in, if any; `layouts`
    their parsed metadata when the caller has it. Each input is a numpy view over the
    arena (no copy): a row range of the batch-major tensor when the batch has them;
    BYTES inputs decoded into object arrays."""
    if layouts is None:
        layouts = _core.layouts_of(blocks, _layout)
    if tensors and layouts.count(layouts[0]) == len(layouts):
        arrays = _same_layout_arrays(arena, layouts[0], len(layouts), blocks, tensors)
        if arrays is not None:
            return Batch([layouts[0].header] * len(layouts), arrays)
    arrays = []
    for layout, (_metadata, slots) in zip(layouts, blocks):
        arrays.append(
            [
                _input_array(arena, dtype, shape, slot)
                for (dtype, shape), slot in zip(layout.placements, slots)
            ]
        )
    return Batch([layout.header for layout in layouts], arrays)


def _same_layout_arrays(arena, layout: _Layout, count: int, blocks: list, tensors: list):
    """The inputs of `count` requests that share one layout (a client sending the same
    request again and again): each numeric input's views cut from its batch-major
    tensor in one numpy call (each request's rows follow the previous one's,
    csrc/ipc/ipc_schema.h), rather than one view per request and input; None when a
    tensor is not in the arena (a client's shm region)."""
    columns = []
    for index, (dtype, shape) in enumerate(layout.placements):
        tensor = tensors[index]
        if len(tensor) != 2:
            return None
        if dtype is None or not shape:  # BYTES, decoded per request; a scalar
            columns.append(
                [_input_array(arena, dtype, shape, slots[index]) for _metadata, slots in blocks]
            )
            continue
        whole = np.ndarray((count, *shape), dtype, arena, tensor[0])
        if whole.nbytes != tensor[1]:
            return None
        columns.append(whole)
    # Per request, its row of each column: the row views made in C.
    return _core.rows_by_request(columns, count)


def _input_array(arena, dtype, shape, slot: tuple):
    """One input as a numpy view: over the arena, or (a slot of three) read in place
    from the client's shm region (shm_outputs.slot_buffer), read-only there."""
    if len(slot) == 2:
        buffer, (offset, nbytes) = arena, slot
        if dtype is not None:
            return np.ndarray(shape, dtype, buffer, offset)
    else:
        buffer, offset, nbytes = shm_outputs.slot_buffer(arena, slot)
        if dtype is not None:
            return shm_outputs.region_array(buffer, dtype, shape, offset)
    return datatypes.deserialize_bytes(
        buffer[offset : offset + nbytes], datatypes.element_count(shape)
    ).reshape(shape)


def batch_inputs(arena, blocks: list, tensors: list) -> dict:
    """The batch's inputs as whole [N, ...] arrays over the arena, by name: what a
    framework backend feeds its session in one call. `blocks` and `tensors` as
    `WorkerEndpoint.next` gives them; empty when the requests' inputs differ. An input
    whose requests' non-batch shapes differ (a ragged input) is the 1-D run of all their
    elements, one request after another (BYTES stay serialized: not in the dict).
    """
    if not tensors or not blocks:
        return {}
    layouts = _core.layouts_of(blocks, _layout)
    arrays = {}
    for index, (name, datatype, shape) in enumerate(layouts[0].header.inputs):
        if datatype == "BYTES":
            continue
        if all(layout.header.inputs[index][2][1:] == shape[1:] for layout in layouts):
            rows = sum(layout.header.inputs[index][2][0] for layout in layouts) if shape else 0
            dims = (rows, *shape[1:])
        else:
            dims = (
                sum(datatypes.element_count(layout.header.inputs[index][2]) for layout in layouts),
            )
        dtype = _INPUT_DTYPES[datatype]
        if len(tensors[index]) == 2:
            arrays[name] = np.ndarray(dims, dtype, arena, tensors[index][0])
        else:  # one request's input read in place from its client region
            buffer, offset, _size = shm_outputs.slot_buffer(arena, tensors[index])
            arrays[name] = shm_outputs.region_array(buffer, dtype, dims, offset)
    return arrays


# The worker's hot path (WorkerEndpoint.respond_results) writes the response of a
# Response whose outputs are all of these dtypes in C++: native byte order, fixed-size
# elements (wire datatype as bytes); anything else goes through results.wire_one.
_FAST_WIRE = {
    np.dtype(dtype): wire.encode()
    for wire in datatypes.WIRE_DATATYPES
    if wire not in ("BYTES", "BF16")
    for dtype in [datatypes.numpy_dtype(wire)]
    if dtype.isnative
}
# Output name -> its JSON string text, as respond_results fills it.
_OUTPUT_NAMES: dict = {}


class Worker:
    def __init__(self, endpoint, backend: Backend, model_name: str = "", batching: bool = False):
        self.endpoint = endpoint
        self.arena = endpoint.arena
        self.backend = backend
        # For the messages of BYTES inputs checked here (from CUDA regions: _bytes_error).
        self.model_name = model_name
        self.batching = batching
        # A decoupled model answers through a stream, at any time (worker/decoupled.py).
        self.decoupled = bool(getattr(backend, "decoupled", False))
        # A GPU backend that reads inputs on its device: CUDA-shm inputs there stay
        # there (cuda_ipc.device_view), no copy to the host.
        self.input_device = (
            getattr(backend, "device_id", None)
            if getattr(backend, "device_inputs", False)
            else None
        )
        # A backend that writes its outputs into the response block itself (onnxruntime):
        # the batch carries the way to lay that block out (Batch.reserve).
        self.reserve_response = (
            endpoint.reserve_response
            if getattr(backend, "places_outputs", False) and not self.decoupled
            else None
        )
        # An iterative model's requests waiting for their next run (the backend's list):
        # see _run_rescheduled; None for other models.
        self.rescheduled = backend.rescheduled if getattr(backend, "iterative", False) else None

    def _run_rescheduled(self) -> None:
        """One run of the requests the model rescheduled (iterative sequences), as
        Triton's execution of a later batch: each batch they came in (still open for
        them) gets one block with the run's timings, so that the statistics count the
        run, and the answers of those that finished in it."""
        start = _core.now_ns()
        if self.decoupled:
            streams = {}
            for _request, target in self.rescheduled:
                stream = decoupled.batch_stream(target.stream)
                streams[stream.batch_id] = stream
            for stream in streams.values():
                stream.hold_finals()
            self.backend.run_rescheduled()
            timings = [start, 0, _core.now_ns() - start, 0]
            for stream in streams.values():
                stream.post_held(timings)
            return
        answers = self.backend.run_rescheduled()
        timings = [start, 0, _core.now_ns() - start, 0]
        by_batch: dict = {}
        for target, result in answers:
            wires = by_batch.setdefault(target.batch_id, [])
            if type(result) is not Rescheduled:
                wire = (target.index, *results.wire_one(result))
                if target.regions:  # outputs placed in the client's shm regions
                    wire = shm_outputs.place_response(wire, target.regions)
                wires.append(wire)
        for batch_id, wires in by_batch.items():
            if not self.endpoint.respond_open(batch_id, wires, timings, False, False):
                errors = [(wire[0], *results.wire_one(_ARENA_FULL)) for wire in wires]
                self.endpoint.respond_open(batch_id, errors, timings, False, False)

    def _respond_rescheduled(
        self, batch_id: int, blocks: list, outcomes: list, timings: list
    ) -> bool:
        """Answers a batch some of whose requests the model rescheduled (iterative
        sequences): the others now, the batch ending with those kept open for their
        answers from later runs (_run_rescheduled). False when it rescheduled none."""
        answers = []
        for index, outcome in enumerate(outcomes):
            if type(outcome) is Rescheduled:
                outcome.batch_id, outcome.index = batch_id, index
                if shm_outputs.active:
                    outcome.regions = _regions_of(blocks[index][0])
            else:
                answers.append((index, outcome))
        # A not-ready request the model rescheduled (its result dropped): nobody waits.
        self.rescheduled[:] = [entry for entry in self.rescheduled if entry[1].batch_id]
        if len(answers) == len(outcomes):
            return False
        answers = [(index, *results.wire_one(outcome)) for index, outcome in answers]
        if shm_outputs.active:  # outputs placed in the client's shm regions go there
            answers = shm_outputs.place_outputs(self.arena, blocks, answers, _regions_of)
        if not self.endpoint.respond_open(batch_id, answers, timings, True, True):
            self.endpoint.complete(batch_id, 0, 0, _core.COMPLETION_ARENA_FULL)
        return True

    def run(self) -> None:
        # A Python model's requests rescheduled for another iteration (iterative
        # sequences) run whenever no batch is waiting, so that neither starves the other.
        rescheduled = self.rescheduled
        while True:
            if rescheduled:
                message = self.endpoint.next(False)
                if message is None:
                    self._run_rescheduled()
                    continue
            else:
                message = self.endpoint.next()
            if message.kind == _core.MESSAGE_STOP:
                return
            try:
                self._run_batch(message.tag, message.requests, message.tensors)
            except Exception as exc:
                traceback.print_exc()
                self.endpoint.complete(message.tag, 0, 0, _core.COMPLETION_WORKER_FAILED)
                if isinstance(exc, MemoryError):
                    _exit_out_of_memory()
            if self.backend.out_of_memory:
                _exit_out_of_memory()

    def _run_batch(self, batch_id: int, blocks: list, tensors: list) -> None:
        """`tensors`: the batch-major input tensors (see `batch_inputs`), which the
        requests' inputs are views of; a framework backend takes them whole."""
        start = _core.now_ns()
        device_inputs = None
        failed = None
        # Before the shm check: parsing a layout with `regions` is what turns this
        # worker's shm path on, so the first request with a CUDA input gets it filled too.
        layouts = _core.layouts_of(blocks, _layout)
        if shm_outputs.active:  # CUDA-shm inputs: read in place on the GPU, or copied in
            failed = {}
            device_inputs = shm_outputs.fill_cuda_inputs(
                self.arena,
                blocks,
                _regions_of,
                self.input_device,
                _inputs_of,
                self._bytes_error,
                failed,
            )
            # Inputs in client regions this worker can no longer read: those requests
            # fail with the region named, the others run.
            failed.update(shm_outputs.refuse_unreadable(self.arena, blocks, _regions_of))
        answered = blocks
        if failed:
            # Malformed BYTES from a CUDA region: those requests get Triton's message,
            # the others run as a batch of their own (their batch-major tensors no
            # longer hold only them: the backend joins their rows).
            keep = [k for k in range(len(blocks)) if k not in failed]
            blocks = [blocks[k] for k in keep]
            layouts = [layouts[k] for k in keep]
            tensors = []
            new_index = {old: new for new, old in enumerate(keep)}
            device_inputs = {
                (new_index[k], index): array
                for (k, index), array in device_inputs.items()
                if k in new_index
            }
        batch = _batch(self.arena, blocks, tensors, layouts)
        batch.batch_id = batch_id
        contexts = self.endpoint.trace_contexts  # this batch's (read before it runs)
        if contexts is not None:
            if failed:
                contexts = {new_index[k]: text for k, text in contexts.items() if k in new_index}
            batch.trace_contexts = contexts
        if device_inputs:
            batch.device_inputs = device_inputs
        if self.input_device is not None and shm_outputs.active:
            batch.output_targets = shm_outputs.output_targets(
                blocks, _regions_of, self.input_device
            )
            batch.device_outputs = frozenset(batch.output_targets)
        if self.backend.batch_tensors:  # framework backends take the inputs whole
            batch.tensors = batch_inputs(self.arena, blocks, tensors)
        if self.decoupled:
            regions = None
            if shm_outputs.active:  # outputs in client regions, written response by response
                # By the batch's request index, as the stream answers them.
                regions = [_regions_of(metadata) for metadata, _slots in answered]
                if not any(regions):
                    regions = None
            decoupled.run_batch(self, batch_id, batch, [start], regions, failed, answered)
            # Not checked for truncation: its responses went out as the model sent them.
            shm_outputs.REGIONS.read.clear()
            return
        if failed:
            self._answer_subset(batch_id, batch, answered, failed, start)
            return
        if self.reserve_response is not None and not shm_outputs.active:
            batch.reserve = functools.partial(self.reserve_response, batch_id)
        infer_start = _core.now_ns()
        outcomes = self.backend.execute(batch)
        infer_end = _core.now_ns()
        placed = batch.placed
        if len(outcomes) != len(blocks):
            if placed is not None:
                placed.discard()
            raise RuntimeError(
                f"the backend answered {len(outcomes)} of the batch's {len(blocks)} requests"
            )
        # start, compute_input, compute_infer, compute_output (ns): the endpoint stamps
        # the output's end once the response block is built (respond_results builds it
        # in C++, with the copy into the arena), and the frontend once the answers are
        # made (csrc/codec/kserve_codec.h extend_to_answered).
        timings = [start, infer_start - start, infer_end - infer_start, _core.now_ns() - infer_end]
        if len(_OUTPUT_NAMES) > 4096:  # a model inventing output names
            _OUTPUT_NAMES.clear()
        # One response block: every request's final response, and the batch ends, but
        # for a worker that ran out of memory and exits next (run): its batch stays
        # open so that no new batch is sent to it, which only its death would fail.
        done = not self.backend.out_of_memory
        rescheduled = self.rescheduled is not None
        if rescheduled and self._respond_rescheduled(batch_id, blocks, outcomes, timings):
            return
        if placed is not None:  # the outputs are in the block already: post it as it is
            # Not checked for truncated regions: its outputs are in the block already.
            shm_outputs.REGIONS.read.clear()
            placed.post(timings, done)
            return
        read_in_place = not shm_outputs.reads_settled(outcomes)
        places = shm_outputs.active and any(_regions_of(metadata) for metadata, _slots in blocks)
        if read_in_place or places:
            responses = results.wire_results(outcomes)
            if read_in_place:  # inputs read in a client's region: it may have shrunk
                responses = shm_outputs.refuse_truncated_reads(blocks, responses, _regions_of)
            if places:
                # Outputs the client placed in shm regions are written there, not in the block.
                responses = shm_outputs.place_outputs(self.arena, blocks, responses, _regions_of)
            posted = self.endpoint.respond(batch_id, responses, timings, done)
        else:
            posted = self.endpoint.respond_results(
                batch_id, outcomes, timings, done, _FAST_WIRE, _OUTPUT_NAMES, results.wire_one
            )
        if not posted:
            self.endpoint.complete(batch_id, 0, 0, _core.COMPLETION_ARENA_FULL)

    def _bytes_error(self, metadata: bytes, index: int, buffer, offset: int, size: int):
        """Triton's message for a BYTES input whose bytes (copied from a CUDA region into
        `buffer` at `offset`) are malformed, else None: the validator's check in C++."""
        header = _layout(metadata).header
        name, _datatype, shape = header.inputs[index]
        return _core.check_bytes_input(
            self.model_name, header.id, name, shape, self.batching, buffer, offset, size
        )

    def _answer_subset(self, batch_id: int, batch: Batch, blocks: list, failed: dict, start):
        """Runs `batch` (the requests of `blocks` not in `failed`) and answers every
        request of `blocks`: `failed` ones with their message (INVALID_ARG)."""
        keep = [k for k in range(len(blocks)) if k not in failed]
        responses = [
            (k, results.FINAL_ERROR, INVALID_ARG, outcome_record.error_record(message), ())
            for k, message in failed.items()
        ]
        infer_start = infer_end = _core.now_ns()
        if keep:
            outcomes = self.backend.execute(batch)
            infer_end = _core.now_ns()
            if len(outcomes) != len(keep):
                raise RuntimeError(
                    f"the backend answered {len(outcomes)} of the batch's {len(keep)} requests"
                )
            responses += [(keep[r[0]], *r[1:]) for r in results.wire_results(outcomes)]
        responses.sort(key=lambda response: response[0])
        if shm_outputs.REGIONS.read:  # inputs read in a client's region: it may have shrunk
            responses = shm_outputs.refuse_truncated_reads(blocks, responses, _regions_of)
        responses = shm_outputs.place_outputs(self.arena, blocks, responses, _regions_of)
        timings = [start, infer_start - start, infer_end - infer_start, _core.now_ns() - infer_end]
        done = not self.backend.out_of_memory
        if not self.endpoint.respond(batch_id, responses, timings, done):
            self.endpoint.complete(batch_id, 0, 0, _core.COMPLETION_ARENA_FULL)


# A rescheduled request's answer for which the arena has no room.
_ARENA_FULL = RequestError("the shared-memory arena has no room for the model's response")

# The exit status of a worker that ran out of memory: the frontend restarts it.
EXIT_OUT_OF_MEMORY = 3


def _exit_out_of_memory() -> None:
    """After a MemoryError in the model (its batch answered with it), a fresh process:
    what the model half-built is gone, and the frontend restarts the worker."""
    sys.stderr.write("naiad worker: the model ran out of memory; exiting to be restarted\n")
    sys.stderr.flush()
    os._exit(EXIT_OUT_OF_MEMORY)


def _limit_memory(limit: int) -> None:
    """RLIMIT_DATA: the worker's private memory (heap, anonymous mappings), not the shared
    arena it maps nor its libraries' code, so the limit is what the model allocates."""
    if limit > 0:
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))


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


def _pin_for_gpu(arena, args: dict) -> None:
    """Where CUDA is present, a KIND_GPU instance's worker page-locks the arena
    (cudaHostRegister, gpu.pin_arena) before its first batch: its host<->device copies,
    CUDA shared-memory ones included, are then DMA. Without CUDA nothing happens."""
    if args.get("model_instance_kind") == "GPU":
        gpu.pin_arena(arena, int(args.get("model_instance_device_id") or 0))


def _serve(channel, backend: Backend, args: dict) -> None:
    """Runs batches until stopped, in a Worker, which also runs the batches that arrive
    nested while a model waits for its own requests (BLS)."""
    config = json.loads(args.get("model_config") or "{}")
    batching = int(config.get("max_batch_size") or 0) > 0
    worker = Worker(channel, backend, args.get("model_name", ""), batching)
    channel.run_batch = worker._run_batch
    worker.run()


def main(argv=None) -> int:
    options = _parse_args(sys.argv[1:] if argv is None else argv)
    _die_with_parent()
    _yield_to_frontend()
    _limit_memory(options.memory_limit)
    # The frontend owns shutdown: it asks through the channel, handles a Ctrl-C or a
    # SIGTERM to the process group for us, and we die with it (_die_with_parent).
    ignore_shutdown_signals()
    args = json.loads(sys.stdin.read())
    triton_log.install()
    acks = _SettingsAcks(options.control_fd)
    if options.settings_fd >= 0:
        triton_log.follow(options.settings_fd, acks.applied)
    try:
        endpoint = _core.WorkerEndpoint(
            options.arena_fd, options.channel_offset, options.wake_fd, options.notify_fd
        )
        # The channel with the BLS client on top (worker/bls.py): models' own requests.
        endpoint = bls.attach(endpoint)
        endpoint.instance_name = args.get("model_instance_name", "")
        endpoint.model_name = args.get("model_name", "")
        backend = load_backend(args)
        _pin_for_gpu(endpoint.arena, args)
        backend = sequence_batching.wrap(backend, args, endpoint)
        from naiad.worker.warmup import run_warmup

        run_warmup(backend, args)  # model_warmup samples, before the model is READY
    except Exception as exc:  # reported to the frontend, which prints the load table
        message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
        _report(options.control_fd, {"status": "error", "message": message})
        return 1
    settle_after_startup()
    _report(options.control_fd, {"status": "ready"})
    acks.open()
    _start_heartbeat(options.control_fd)
    _serve(endpoint, backend, args)
    # The frontend learns that this worker is done from its exit (a pidfd).
    backend.finalize()
    return 0
