"""Decoupled models in the worker: responses at any time, from any thread.

A decoupled model (`model_transaction_policy { decoupled: true }`) answers each request
with 0..N responses, the last one flagged final, during `execute` or after it returned,
from the worker's thread or from threads of its own. The worker gives its backend one
`BatchStream` per batch; the backend sends through it. Each response goes to the core at
once in a response block of its own (csrc/ipc/ipc_schema.h), and when `execute` returns the
batch ends with its requests kept open (csrc/ipc/channel.h kPostKeepOpen): the instance
takes its next batch while the earlier requests keep streaming. The core keeps an open
request's block (inputs, cancel flag) until its final response.

Posting is thread-safe: WorkerEndpoint serializes posts on the single-producer ring.
"""

from __future__ import annotations

import threading

from naiad import _core, outcome_record
from naiad.backends.base import RequestError, Response
from naiad.triton_codes import INTERNAL, INVALID_ARG
from naiad.worker import results, shm_outputs

_NO_TIMINGS = [0, 0, 0, 0]  # a streamed response is no execution of its own


class BatchStream:
    """The responses of one batch's requests (index = position in the batch)."""

    __slots__ = (
        "endpoint",
        "batch_id",
        "blocks",
        "regions",
        "final",
        "lock",
        "held",
        "__weakref__",
    )

    def __init__(self, endpoint, batch_id: int, blocks: list, regions: list | None = None):
        self.endpoint = endpoint
        self.batch_id = batch_id
        self.blocks = blocks  # each request's block offset: its cancel flag
        # Each request's client shm regions (its block's `regions`), None without any:
        # its outputs placed there are written there, response by response.
        self.regions = regions
        self.final = [False] * len(blocks)
        self.lock = threading.Lock()
        # While a rescheduled run goes (hold_finals): its final responses, posted with
        # the run's timings once it is over (post_held).
        self.held: list | None = None

    def is_final(self, index: int) -> bool:
        return self.final[index]

    def send(self, index: int, result: Response | RequestError | None, final: bool) -> bool:
        """Posts one response of request `index` (None with `final`: only the final
        flag, no response). False when the request was already final (nothing sent)."""
        with self.lock:
            if self.final[index]:
                return False
            if final:
                self.final[index] = True
        if result is None:
            wire = (index, _core.RESPONSE_FINAL, 0, outcome_record.EMPTY, ())
        else:
            flags, code, json, buffers = results.wire_one(result)
            if not final:  # an error response need not end the request either
                flags &= ~_core.RESPONSE_FINAL
            wire = (index, flags, code, json, buffers)
            if self.regions is not None and self.regions[index]:
                # Outputs placed in the client's regions go there; a region too small
                # makes this response an error, and the stream goes on.
                try:
                    wire = shm_outputs.place_response(wire, self.regions[index])
                except Exception as exc:  # the region could not be written: say so
                    message = f"writing an output into its shared memory region failed: {exc}"
                    error_flags = (flags & _core.RESPONSE_FINAL) | _core.RESPONSE_ERROR
                    wire = (index, error_flags, INTERNAL, outcome_record.error_record(message), ())
        endpoint = self.endpoint
        if final and self.held is not None:
            with self.lock:
                if self.held is not None:
                    self.held.append(wire)
                    return True
        if endpoint.respond_open(self.batch_id, [wire], _NO_TIMINGS, False, False):
            # The frontend forwards it while the model goes on (csrc/ipc/worker_endpoint.h).
            endpoint.yield_to_frontend()
        else:
            # No room in the arena for this response: the request ends with an error
            # (a small block), so its client is not left waiting.
            with self.lock:
                self.final[index] = True
            message = "the shared-memory arena has no room for the model's response"
            error = (index, results.FINAL_ERROR, INTERNAL, outcome_record.error_record(message), ())
            self.endpoint.respond_open(self.batch_id, [error], _NO_TIMINGS, False, False)
        return True

    def hold_finals(self) -> None:
        """From now on final responses wait for post_held: a rescheduled run (iterative
        sequences) counts as an execution of its own, which its timings posted with
        its final responses say (the batch is over once they are all out)."""
        with self.lock:
            self.held = []

    def post_held(self, timings: list) -> None:
        """Posts the final responses held since hold_finals with `timings` (the run's),
        in one block: the statistics count the run, and the requests finished."""
        with self.lock:
            held, self.held = self.held or [], None
        if not self.endpoint.respond_open(self.batch_id, held, timings, False, False):
            # No room in the arena: the requests end with an error (a small block).
            message = "the shared-memory arena has no room for the model's response"
            record = outcome_record.error_record(message)
            errors = [(wire[0], results.FINAL_ERROR, INTERNAL, record, ()) for wire in held]
            self.endpoint.respond_open(self.batch_id, errors, _NO_TIMINGS, False, False)

    def cancelled(self, index: int) -> bool:
        """Whether the client cancelled request `index` (the core's flag in its block)."""
        if self.final[index]:
            return False  # its block may be gone already
        return self.endpoint.request_cancelled(self.blocks[index])

    def fail_open(self, message: str, code: int = INTERNAL) -> None:
        """Ends every request not final yet with error `message`."""
        for index in range(len(self.blocks)):
            if not self.final[index]:
                self.send(index, RequestError(message, code), True)


def run_batch(
    worker,
    batch_id: int,
    batch,
    timings: list,
    regions: list | None = None,
    failed: dict | None = None,
    answered: list | None = None,
) -> None:
    """Runs one batch of a decoupled model: the backend's `execute_decoupled(batch,
    stream)` sends through the stream (now or later); then the batch ends with an
    empty response block carrying the timings (statistics) and its unanswered
    requests kept open. `regions`: each request's client shm regions (outputs placed
    in them are written there), or None when none has any. `failed`: request index ->
    Triton's message for requests whose BYTES from a CUDA region were malformed
    (answered with it, final); `batch` then holds the others, and `regions` is over
    `answered`, the batch's blocks as they came."""
    endpoint = worker.endpoint
    if regions is not None:
        shm_outputs.REGIONS.start(endpoint.arena)
        shm_outputs.REGIONS.sweep()
    blocks = endpoint.request_blocks(endpoint.batch_desc)
    stream = BatchStream(endpoint, batch_id, blocks, regions)
    target = stream
    if failed:
        for index, message in failed.items():
            stream.send(index, RequestError(message, INVALID_ARG), True)
        target = _Subset(stream, [k for k in range(len(answered)) if k not in failed])
    infer_start = _core.now_ns()
    if len(batch):
        worker.backend.execute_decoupled(batch, target)
    infer_end = _core.now_ns()
    start = timings[0]
    timings = [start, infer_start - start, infer_end - infer_start, 0]
    if not endpoint.respond_open(batch_id, [], timings, True, True):
        endpoint.end_batch(batch_id, True)


def batch_stream(stream) -> BatchStream:
    """The BatchStream under `stream` (a request's _RequestStream, a _Subset, or a
    sequence model's state stream: each keeps the one it wraps in `stream`)."""
    while not isinstance(stream, BatchStream):
        stream = stream.stream
    return stream


class _Subset:
    """A BatchStream seen by a backend that runs only some of its requests (`keep`:
    the batch index of each of them, in order)."""

    def __init__(self, stream: BatchStream, keep: list):
        self.stream = stream
        self.keep = keep

    def is_final(self, index: int) -> bool:
        return self.stream.is_final(self.keep[index])

    def send(self, index: int, result, final: bool) -> bool:
        return self.stream.send(self.keep[index], result, final)

    def cancelled(self, index: int) -> bool:
        return self.stream.cancelled(self.keep[index])

    def fail_open(self, message: str, code: int = INTERNAL) -> None:
        self.stream.fail_open(message, code)
