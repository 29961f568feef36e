"""The ensemble scheduler (`platform: "ensemble"`), run in a worker process of its own.

An ensemble model has one worker that never computes anything: for each request of
the batches the core sends it, it runs the steps of `ensemble_scheduling` as soon as
their inputs exist, each step as a request of the worker's own to the step's model
(worker/bls.py: through the core, so it goes through that model's own queue and
batcher and batches with its direct traffic). Tensors stay in the shared arena: an
ensemble input or a step's output is handed to the next step as a slice of the arena
(the core copies it once into the step's request block), and the ensemble's outputs
are copied once from the last steps' response blocks into its own response block.
Nothing passes through Python bytes or numpy.

The worker is event-driven (`serve`): while its steps run, the core gives it more
batches (an instance waiting for its own requests takes batches nested in the wait:
csrc/core.h), so many ensemble requests are in flight at once and each batch is
answered as soon as its requests are done, in any order.

The graph was checked when the model loaded (scheduling/ensemble.py).
"""

from __future__ import annotations

import json
import traceback

import orjson

from naiad import _core
from naiad.backends.base import Backend
from naiad.types import InputTensor
from naiad.worker import bls, shm_outputs

_FINAL = _core.RESPONSE_FINAL
_FINAL_ERROR = _core.RESPONSE_FINAL | _core.RESPONSE_ERROR


class _Step:
    __slots__ = ("index", "model_name", "model_version", "inputs", "outputs", "output_names")

    def __init__(self, index: int, step: dict):
        self.index = index
        self.model_name = step["model_name"]
        self.model_version = int(step.get("model_version", -1) or -1)
        # (step model's input name, ensemble tensor), (step output, ensemble tensor)
        self.inputs = list((step.get("input_map") or {}).items())
        self.outputs = dict(step.get("output_map") or {})
        self.output_names = list(self.outputs)


class _Request:
    """One ensemble request in flight."""

    __slots__ = (
        "batch",
        "index",
        "id",
        "parameters",
        "requested",
        "tensors",
        "waiting",
        "running",
        "blocks",
        "error",
        "done",
    )

    def __init__(self, batch, index: int, request_id: str, parameters: dict, requested):
        self.batch = batch
        self.index = index
        self.id = request_id
        self.parameters = parameters
        self.requested = requested
        self.tensors: dict = {}  # ensemble tensor -> (datatype, shape, arena slice)
        self.waiting: list = []  # steps not sent yet
        self.running = 0  # steps sent, not answered
        self.blocks: list = []  # response blocks its tensors live in (freed at the end)
        self.error: tuple | None = None  # (message, code)
        self.done = False


class _Batch:
    __slots__ = ("id", "requests", "left", "start_ns")

    def __init__(self, batch_id: int, start_ns: int):
        self.id = batch_id
        self.requests: list = []
        self.left = 0
        self.start_ns = start_ns


class EnsembleBackend(Backend):
    def __init__(self, args: dict):
        config = json.loads(args["model_config"])
        self.name = args.get("model_name") or config.get("name", "")
        scheduling = config.get("ensemble_scheduling") or {}
        self.steps = [_Step(i, step) for i, step in enumerate(scheduling.get("step") or [])]
        self.outputs = [output["name"] for output in config.get("output") or []]
        self.batches: dict[int, _Batch] = {}
        self.channel: bls.Channel | None = None

    def execute(self, batch):  # the worker loop is `serve`
        raise RuntimeError("an ensemble runs through serve()")

    # -- the loop -----------------------------------------------------------------------
    def serve(self, channel: bls.Channel) -> None:
        self.channel = channel
        stopping = False
        endpoint = channel.endpoint
        wait = endpoint.wait
        while not (stopping and not self.batches):
            # Everything already there first; the frontend is woken (for the steps sent
            # meanwhile) only before blocking, so it takes them together.
            message = wait(False)
            if message is None:
                endpoint.wake()
                message = wait()
            kind, ident, first, second = message
            if kind == _core.MESSAGE_BATCH:
                try:
                    self._start(ident, first)
                except Exception:
                    traceback.print_exc()
                    self._abandon(ident)
            elif kind == _core.MESSAGE_STOP:
                stopping = True
            else:
                channel._deliver(kind, ident, first, second)

    def _abandon(self, batch_id: int) -> None:
        batch = self.batches.pop(batch_id, None)
        if batch is not None:
            for request in batch.requests:
                self._release(request)
        self.channel.complete(batch_id, 0, 0, _core.COMPLETION_WORKER_FAILED)

    def _start(self, batch_id: int, blocks: list) -> None:
        arena = self.channel.arena
        batch = self.batches[batch_id] = _Batch(batch_id, _core.now_ns())
        for index, (metadata, slots) in enumerate(blocks):
            header = orjson.loads(metadata)
            parameters = header.get("parameters") or {}
            request = _Request(batch, index, header["id"], parameters, header.get("outputs"))
            for (name, datatype, shape), slot in zip(header["inputs"], slots):
                buffer, offset, size = shm_outputs.slot_buffer(arena, slot)
                request.tensors[name] = (datatype, shape, buffer[offset : offset + size])
            request.waiting = list(self.steps)
            batch.requests.append(request)
        batch.left = len(batch.requests)
        for request in batch.requests:
            self._advance(request)

    # -- one request ----------------------------------------------------------------------
    def _advance(self, request: _Request) -> None:
        """Sends every step whose inputs exist; finishes the request when nothing runs."""
        if request.error is None:
            still = []
            for step in request.waiting:
                if all(tensor in request.tensors for _, tensor in step.inputs):
                    self._send(request, step)
                    if request.error is not None:
                        break
                else:
                    still.append(step)
            request.waiting = still
        if request.running == 0 and not request.done:
            if request.error is None and request.waiting:
                request.error = (
                    f"in ensemble '{self.name}', step(s) "
                    + ", ".join(f"'{s.model_name}'" for s in request.waiting)
                    + " never received all their inputs",
                    bls.INTERNAL,
                )
            self._finish(request)

    def _send(self, request: _Request, step: _Step) -> None:
        inputs = []
        for model_input, tensor in step.inputs:
            datatype, shape, data = request.tensors[tensor]
            inputs.append(InputTensor(model_input, datatype, shape, data))
        request.running += 1

        def on_response(call, offset, read, request=request, step=step):
            self._on_response(request, step, offset, read)

        def on_done(call, request=request):
            request.running -= 1
            if call.error is not None and request.error is None:
                request.error = (self._step_error(call.error.message), call.error.code)
            self._advance(request)

        self.channel.submit(
            step.model_name,
            step.model_version,
            request.id,
            inputs,
            step.output_names,
            request.parameters,
            on_response=on_response,
            on_done=on_done,
        )

    def _on_response(self, request: _Request, step: _Step, offset: int, read: list) -> None:
        request.blocks.append(offset)
        arena = self.channel.arena
        for flags, code, outcome, tensors in read:
            if flags & _core.RESPONSE_ERROR:
                if request.error is None:
                    request.error = (self._step_error(outcome.get("error", "")), code)
                continue
            for name, datatype, shape, start, nbytes in tensors:
                target = step.outputs.get(name)
                if target is not None:
                    request.tensors[target] = (datatype, shape, arena[start : start + nbytes])

    def _step_error(self, message: str) -> str:
        """A step's error as the ensemble's request gets it (Triton's wording)."""
        return f"in ensemble '{self.name}', {message}"

    def _finish(self, request: _Request) -> None:
        request.done = True
        batch = request.batch
        batch.left -= 1
        if batch.left == 0:
            self._respond(batch)

    def _respond(self, batch: _Batch) -> None:
        responses = []
        for request in batch.requests:
            if request.error is not None:
                message, code = request.error
                body = orjson.dumps({"error": message})
                responses.append((request.index, _FINAL_ERROR, code, body, ()))
                continue
            names = request.requested or self.outputs
            entries = []
            buffers = []
            missing = None
            for name in names:
                found = request.tensors.get(name)
                if found is None:
                    missing = name
                    break
                datatype, shape, data = found
                entries.append([name, datatype, shape])
                buffers.append(data)
            if missing is not None:
                body = orjson.dumps(
                    {"error": f"in ensemble '{self.name}', no step produced output '{missing}'"}
                )
                responses.append((request.index, _FINAL_ERROR, bls.INTERNAL, body, ()))
                continue
            responses.append(
                (request.index, _FINAL, 0, orjson.dumps({"outputs": entries}), buffers)
            )
        end = _core.now_ns()
        timings = [batch.start_ns, 0, end - batch.start_ns, 0]
        del self.batches[batch.id]
        try:
            if not self.channel.respond(batch.id, responses, timings, True):
                self.channel.complete(batch.id, 0, 0, _core.COMPLETION_WORKER_FAILED)
        finally:
            for request in batch.requests:
                self._release(request)

    def _release(self, request: _Request) -> None:
        request.tensors.clear()
        free = self.channel.endpoint.free
        for offset in request.blocks:
            free(offset)
        request.blocks = []

    def finalize(self) -> None:
        pass
