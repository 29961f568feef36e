"""A worker's own requests to other models (BLS), through the core.

This module is the channel and the client in the worker's own terms (CallError, Reply,
Stream); pb_utils (triton_python_backend_utils.py) makes a model's InferenceResponse and
TritonModelException of them, and imports this module, never the other way round.

A Python model's `pb_utils.InferenceRequest(...).exec()` lands here. The request is
validated against the target's config and laid out in the arena exactly as the
frontend lays out a client's request (`_core.WorkerEndpoint.submit`: the one validator,
`layout_request_block`), then handed to the core on the channel's `to_core` ring
(channel.h SubmitMessage). The core queues it on the target model like any other
request, so it batches with direct traffic, and routes its responses back to this
worker as kResponse messages (kRefused when it failed without one) on the same ring
the worker receives batches on.

While it waits, the worker keeps reading that ring (`Channel.pump`): responses go to
the calls they answer, and a batch (the core gives an instance that waits for its own
requests batches nested in the wait: csrc/core/core.h `takes_batch_locked`) runs at once,
nested. So a model that calls itself, or whose caller's only instance is busy, or
calls that nest, never deadlock.

Names resolve through the frontend's model directory (model_directory.py).
"""

from __future__ import annotations

import os
import traceback

import numpy as np
import orjson

from naiad import _core, datatypes, outcome_record
from naiad import sequence_parameters as sequences
from naiad.model_directory import ENVIRONMENT_VARIABLE
from naiad.triton_codes import CANCELLED, INTERNAL, UNAVAILABLE
from naiad.types import InputTensor, RequestedOutput


class CallError(Exception):
    """A request that could not be sent or failed without a response: the message and
    Triton error code its InferenceResponse carries."""

    def __init__(self, message: str, code: int = INTERNAL):
        super().__init__(message)
        self.message = message
        self.code = code


class Directory:
    """The worker's copy of the model directory, read again on a miss."""

    def __init__(self, path: str | None):
        self.path = path
        self.models: dict = {}
        self._specs: dict = {}  # (handle) -> _core.ModelSpec

    def reload(self) -> None:
        """Reads the table again (only on a miss or a refused handle: rare)."""
        if not self.path:
            return
        try:
            with open(self.path, "rb") as f:
                table = orjson.loads(f.read())
        except (OSError, ValueError):
            return
        self.models = table.get("models", {})

    def resolve(self, name: str, version: int, fresh: bool = False):
        """(handle, ModelSpec, decoupled) of `name` at `version` (-1: the one served by
        default); CallError with Triton's message when there is none ready."""
        if fresh:
            self.reload()
        found = self._lookup(name, version)
        # A miss or a not-ready entry may be this worker's copy lagging behind a load:
        # read the table again before answering "not ready".
        if (found is None or isinstance(found, CallError)) and not fresh:
            self.reload()
            found = self._lookup(name, version)
        if isinstance(found, CallError):
            raise found
        if found is None:
            raise _not_ready(name)
        handle = found["handle"]
        spec = self._specs.get(handle)
        if spec is None:
            name_, version_, max_batch_size, inputs, outputs = found["spec"]
            spec = self._specs[handle] = _core.ModelSpec(
                name_, version_, max_batch_size, [tuple(i) for i in inputs], list(outputs)
            )
        return handle, spec, found.get("decoupled", False)

    def _lookup(self, name: str, version: int):
        model = self.models.get(name)
        if not model or not model.get("versions"):
            return None
        versions = model["versions"]
        if version is None or version < 0:
            serving = model.get("serving")
            if serving is None:
                return _not_ready(name)
            entry = versions.get(str(serving))
            return entry if entry is not None and entry["ready"] else None
        entry = versions.get(str(version))
        if entry is None or not entry["ready"]:
            return _not_ready(name)
        return entry


def _submit_error(model_name: str, message: str) -> CallError:
    """A request the server would not take, as Triton's Python backend words it."""
    return CallError(f"Model {model_name} - Error when running inference: {message}", INTERNAL)


def _not_ready(model_name: str) -> CallError:
    """Triton's words for a BLS request to a model (or version) not served."""
    return _submit_error(
        model_name,
        f"Failed for execute the inference request. Model '{model_name}' is not ready.",
    )


def refusal(model_name: str, status: int, sequence: tuple = (0, b"", 0)) -> CallError:
    """The error of a request the core refused (MESSAGE_REFUSED `status`); `sequence`:
    the request's (correlation id, string correlation id, flags), for the sequence
    batcher's messages."""
    if status & _core.REFUSED_QUEUED:
        status &= ~_core.REFUSED_QUEUED
        if status == _core.COMPLETION_TIMED_OUT:
            return CallError("Request timeout expired", UNAVAILABLE)
        if status == _core.COMPLETION_CANCELLED:  # ResponseIterator.cancel() while queued
            return CallError("Request was cancelled", CANCELLED)
        if status == _core.COMPLETION_MODEL_GONE:
            return CallError(
                f"Request for unknown model: '{model_name}' is not at ready state", UNAVAILABLE
            )
        if status == _core.COMPLETION_INSTANCE_DIED:
            return CallError(
                f"Failed to process the request(s) for model '{model_name}': the model "
                "instance's worker process exited while running it; it is being restarted"
            )
        return CallError(
            f"Failed to process the request(s) for model '{model_name}': the worker could "
            "not run the batch (see the server log)"
        )
    if status == _core.SUBMIT_QUEUE_FULL:
        return _submit_error(model_name, "Exceeds maximum queue size")
    if status == _core.SUBMIT_ARENA_FULL:
        return _submit_error(model_name, "the shared-memory arena has no room for the request")
    if status == _core.SUBMIT_MODEL_GONE:
        return _not_ready(model_name)
    refused = sequences.refusal(status, model_name, sequence)
    if refused is not None:  # the sequence batcher's, in Triton's words
        return _submit_error(model_name, refused.message)
    return _submit_error(model_name, "the request's inputs cannot be read")


class Call:
    """One request in flight: what the core sent back for it so far. `on_response(call,
    offset, read)` (when set) takes each response block as it comes (`read`: its
    read_outputs) and frees it; otherwise (offset, read) pairs are kept in `blocks` for
    the caller to take and free."""

    __slots__ = (
        "tag",
        "model_name",
        "sequence",
        "done",
        "blocks",
        "error",
        "on_response",
        "on_done",
        "retry",
    )

    def __init__(self, tag: int, model_name: str, on_response=None, on_done=None, sequence=None):
        self.tag = tag
        self.model_name = model_name
        # (correlation id, string correlation id as UTF-8, START|END flags), or None
        self.sequence = sequence
        self.done = False
        self.blocks: list = []  # (offset, size) of response blocks not taken yet
        self.error: CallError | None = None
        self.on_response = on_response
        self.on_done = on_done
        self.retry = None  # sends it again once, when the core refused a stale handle


class ControlCall:
    """A model-control request in flight (pb_utils.load_model, unload_model): the
    frontend's answer once it came, {} or {"error": message}."""

    __slots__ = ("tag", "reply")

    def __init__(self, tag: int):
        self.tag = tag
        self.reply: dict | None = None


class Channel:
    """The worker's channel with the BLS client on top: `next()` as the endpoint's for
    the worker loop, `pump()` while a model waits for its own requests."""

    def __init__(self, endpoint):
        self.endpoint = endpoint
        self.arena = endpoint.arena
        self.directory = Directory(os.environ.get(ENVIRONMENT_VARIABLE))
        self.calls: dict[int, Call] = {}
        self.controls: dict[int, ControlCall] = {}
        # This instance's name (Triton's stub names it in model-control errors) and its
        # model's.
        self.instance_name = ""
        self.model_name = ""
        self._next_tag = 1
        # The stop message read while waiting for a call (pump): the worker loop's next.
        self._stop = None
        # Runs a batch that arrives nested in a wait: (batch_id, blocks, tensors).
        self.run_batch = None
        # The worker loop's calls, bound once (no __getattr__ per batch).
        for name in ("respond", "respond_results", "complete", "alloc"):
            if hasattr(endpoint, name):
                setattr(self, name, getattr(endpoint, name))

    def __getattr__(self, name):  # complete, respond, alloc, ...: the endpoint's
        return getattr(self.endpoint, name)

    @property
    def trace_contexts(self):  # the last batch's (WorkerEndpoint.trace_contexts)
        return self.endpoint.trace_contexts

    def next(self, block: bool = True):
        """The worker loop's next batch or stop, as WorkerEndpoint.next; messages for
        calls that are over (their caller gave up) are freed. `block` False: None when
        no batch or stop is waiting."""
        if self._stop is not None:
            return self._stop
        while True:
            message = self.endpoint.wait(block)
            if message is None:
                return None
            if message.kind == _core.MESSAGE_BATCH or message.kind == _core.MESSAGE_STOP:
                return message
            self._deliver(message)

    # -- calls ------------------------------------------------------------------------
    def submit(
        self,
        model_name: str,
        version: int,
        request_id: str,
        inputs: list,
        outputs: list | None,
        parameters: dict | None,
        timeout_us: int = 0,
        priority: int = 0,
        on_response=None,
        on_done=None,
        sequence: tuple | None = None,
        trace_parent=(0, 0),
        trace_state: bytes | None = None,
    ) -> Call:
        """Sends a request; its Call is done at once (with `error`) when it could not be
        sent. `inputs`: InputTensor records (their data may be arena slices);
        `sequence`: its (correlation id, string correlation id, flags), as
        sequence_parameters.sequence_of gives them. `trace_parent`: (batch id, 1 + index)
        of the request whose trace it continues (pb_utils InferenceTrace._parent), or
        (0, 0); `trace_state`: the client tracestate of its context
        (InferenceTrace._client_state)."""
        tag = self._next_tag
        self._next_tag += 1
        call = Call(tag, model_name, on_response, on_done, sequence)
        params = orjson.dumps(parameters) if parameters else b"{}"
        requested = _requested(outputs)

        def send(fresh: bool) -> Call:
            try:
                handle, spec, _decoupled = self.directory.resolve(model_name, version, fresh)
            except CallError as exc:
                return self._finish(call, exc)
            # The frontend is woken once, before this worker blocks (pump, serve).
            result = self.endpoint.submit(
                handle,
                tag,
                spec,
                request_id,
                inputs,
                requested,
                params,
                priority,
                timeout_us,
                False,
                sequence,
                *trace_parent,
                trace_state=trace_state,
            )
            if type(result) is str:
                return self._finish(call, _submit_error(model_name, result))
            if result != _core.SUBMIT_OK:
                return self._finish(call, refusal(model_name, result, sequence or (0, b"", 0)))
            self.calls[tag] = call
            return call

        # The handle in this worker's copy of the directory may be stale (the model was
        # reloaded since): the core then refuses it as gone, and it is sent once more
        # with the directory read afresh (_deliver).
        call.retry = send
        return send(False)

    def _finish(self, call: Call, error: CallError | None) -> Call:
        call.retry = None
        call.error = error
        call.done = True
        if call.on_done is not None:
            call.on_done(call)
        return call

    def pump(self, until) -> None:
        """Reads the channel until `until()` is true: responses go to their calls, a
        nested batch runs at once, a stop is kept for the worker loop."""
        endpoint = self.endpoint
        wait = endpoint.wait
        while not until():
            message = wait(False)
            if message is None:  # nothing there: wake the frontend for our submits, block
                endpoint.wake()
                message = wait()
            kind = message.kind
            if kind == _core.MESSAGE_BATCH:
                if self.run_batch is None:  # nothing to run it: fail it, never hang
                    self.endpoint.complete(message.tag, 0, 0, _core.COMPLETION_WORKER_FAILED)
                    continue
                try:
                    self.run_batch(message.tag, message.requests, message.tensors)
                except Exception:
                    traceback.print_exc()
                    self.endpoint.complete(message.tag, 0, 0, _core.COMPLETION_WORKER_FAILED)
            elif kind == _core.MESSAGE_STOP:
                self._stop = message
            else:
                self._deliver(message)

    def control(self, request: dict, files: list) -> dict:
        """Sends a model-control request (`request`: the control block's JSON, `files`
        the bytes of its "files" in order) to the frontend and waits for its answer,
        reading the channel meanwhile (a batch nested in the wait runs, as in pump):
        {} or {"error": message}."""
        tag = self._next_tag
        self._next_tag += 1
        call = self.controls[tag] = ControlCall(tag)
        if not self.endpoint.control(tag, orjson.dumps(request), files):
            del self.controls[tag]
            return {"error": "the shared-memory arena has no room for the request"}
        self.pump(lambda: call.reply is not None)
        return call.reply

    def _deliver(self, message) -> None:
        """A message for one of this worker's calls (a _core.ChannelMessage that is no
        batch or stop): a control reply, a response, or a refusal."""
        kind, tag = message.kind, message.tag
        if kind == _core.MESSAGE_CONTROL_REPLY:
            reply = {"error": "the server could not read the request"}
            if message.offset:
                try:
                    reply = orjson.loads(
                        bytes(self.arena[message.offset : message.offset + message.size])
                    )
                finally:
                    self.endpoint.free(message.offset)
            control = self.controls.pop(tag, None)
            if control is not None:
                control.reply = reply
            return
        call = self.calls.get(tag)
        if kind == _core.MESSAGE_RESPONSE:
            if call is None:
                self.endpoint.free(message.offset)
                return
            read = read_outputs(self.arena, message.offset, message.size)
            final = any(flags & _core.RESPONSE_FINAL for flags, *_rest in read)
            if call.on_response is not None:
                call.on_response(call, message.offset, read)
            else:
                call.blocks.append((message.offset, read))
            if final:
                del self.calls[tag]
                self._finish(call, None)
            return
        if call is not None:  # refused
            del self.calls[tag]
            retry = call.retry
            call.retry = None
            if message.status == _core.SUBMIT_MODEL_GONE and retry is not None:
                retry(True)
                return
            self._finish(
                call, refusal(call.model_name, message.status, call.sequence or (0, b"", 0))
            )

    def cancel(self, call: Call) -> None:
        """Cancels a call still in flight (ResponseIterator.cancel()); its responses, a
        cancellation error among them, keep coming until the final one."""
        if not call.done:
            self.endpoint.cancel(call.tag)


_REQUESTED: dict = {}


def _requested(outputs) -> list | None:
    """RequestedOutput records for output names, kept per tuple of names."""
    if not outputs:
        return None
    key = tuple(outputs)
    found = _REQUESTED.get(key)
    if found is None:
        found = _REQUESTED[key] = [RequestedOutput(name) for name in outputs]
    return found


def read_outputs(arena, offset: int, size: int) -> list:
    """The responses of a block: [(flags, error_code, outcome_record.Outcome, [(name,
    datatype, shape, arena offset, nbytes)])]."""
    block = _core.read_response_block(arena, offset, size)
    if block is None:
        unreadable = outcome_record.Outcome(error="unreadable")
        return [(_core.RESPONSE_FINAL | _core.RESPONSE_ERROR, INTERNAL, unreadable, [])]
    out = []
    for response in block.responses:
        outcome = outcome_record.read(response.json)
        tensors = [
            (name, datatype, shape, start, nbytes)
            for (name, datatype, shape), (start, nbytes) in zip(outcome.outputs, response.outputs)
        ]
        out.append((response.flags, response.error_code, outcome, tensors))
    return out


def array_of(arena, datatype: str, shape, start: int, nbytes: int) -> np.ndarray:
    """An output tensor copied out of the arena as numpy."""
    if datatype == "BYTES":
        return datatypes.deserialize_bytes(
            bytes(arena[start : start + nbytes]), datatypes.element_count(shape)
        ).reshape(shape)
    dtype = datatypes.numpy_dtype(datatype)
    return np.frombuffer(arena, dtype, datatypes.element_count(shape), start).reshape(shape).copy()


def input_of(name: str, array: np.ndarray, datatype: str) -> InputTensor:
    """An InputTensor over a numpy array's bytes (wire layout; BYTES serialized)."""
    return InputTensor(name, datatype, list(array.shape), datatypes.wire_buffer(array, datatype))


# The worker's channel once main() attached it; None outside a worker.
channel: Channel | None = None


def attach(endpoint) -> Channel:
    global channel
    channel = Channel(endpoint)
    return channel


# -- the calls behind pb_utils.InferenceRequest.exec / async_exec ------------------------


class Reply:
    """One response of a call, as pb_utils makes its InferenceResponse of it: `error` (a
    CallError), or `outputs` [(name, numpy array, wire datatype)] and `parameters`."""

    __slots__ = ("error", "outputs", "parameters")

    def __init__(self, error: CallError | None = None, outputs=(), parameters=None):
        self.error = error
        self.outputs = outputs
        self.parameters = parameters


def current() -> Channel:
    """The worker's channel; CallError outside a worker."""
    if channel is None:
        raise CallError("BLS requests can only be made from a model running in a Naiad worker")
    return channel


def start(
    model_name: str,
    version: int,
    request_id: str,
    inputs: list,
    outputs: list,
    parameters_json: str,
    correlation_id,
    flags: int,
    timeout_us: int,
    trace_parent: tuple,
    trace_state: bytes | None,
) -> Call:
    """Sends a pb_utils.InferenceRequest's request (`inputs`: InputTensor records);
    CallError for a correlation id the sequence batcher cannot take."""
    chan = current()
    parameters = orjson.loads(parameters_json) if parameters_json not in ("", "{}") else {}
    # The correlation id and flags go to the core's sequence batcher, and, as request
    # parameters, to the called model (request.correlation_id(), request.flags()).
    if correlation_id:
        parameters["sequence_id"] = correlation_id
    if flags & sequences.START:
        parameters["sequence_start"] = True
    if flags & sequences.END:
        parameters["sequence_end"] = True
    try:
        sequence = sequences.sequence_of(parameters)
    except sequences.ParameterError as exc:
        raise CallError(f"correlation_id {correlation_id!r}: {exc}") from None
    return chan.submit(
        model_name,
        version,
        request_id,
        inputs,
        outputs or None,
        parameters,
        timeout_us=max(int(timeout_us), 0),
        sequence=sequence if sequence != (0, b"", 0) else None,
        trace_parent=trace_parent,
        trace_state=trace_state,
    )


def _reply(chan: Channel, offset: int, read: list) -> Reply:
    """The Reply of a response block (`read`: read_outputs of it; the block is freed
    here)."""
    try:
        flags, code, outcome, tensors = read[0]
        if flags & _core.RESPONSE_ERROR:
            return Reply(CallError(outcome.error or "", code))
        outputs = [
            (name, array_of(chan.arena, datatype, shape, start, nbytes), datatype)
            for name, datatype, shape, start, nbytes in tensors
        ]
        return Reply(outputs=outputs, parameters=outcome.parameters or None)
    finally:
        chan.endpoint.free(offset)


def result(call: Call) -> Reply:
    """A non-decoupled call's response, once it is done (read from the channel until
    then): its last response, or its error."""
    chan = current()
    if not call.done:
        chan.pump(lambda: call.done)
    if call.error is not None:
        for offset, _read in call.blocks:
            chan.endpoint.free(offset)
        return Reply(call.error)
    replies = [_reply(chan, offset, read) for offset, read in call.blocks]
    call.blocks = []
    if not replies:
        return Reply(CallError(f"model '{call.model_name}' sent no response"))
    return replies[-1]


class Stream:
    """A decoupled call's responses as they arrive (pb_utils.ResponseIterator's), the
    last one flagged final; then its error, if it failed."""

    def __init__(self, call: Call):
        self.call = call
        self._error_sent = False

    def next(self) -> Reply | None:
        """The next response (read from the channel until one comes); None at the end."""
        call = self.call
        chan = current()
        if not call.blocks and not call.done:
            chan.pump(lambda: call.blocks or call.done)
        if call.blocks:
            offset, read = call.blocks.pop(0)
            return _reply(chan, offset, read)
        if call.error is not None and not self._error_sent:
            self._error_sent = True
            return Reply(call.error)
        return None

    def cancel(self) -> None:
        current().cancel(self.call)


# -- pb_utils.load_model / unload_model / is_model_ready -----------------------------------


def _control_error(what: str, chan: Channel, message: str) -> CallError:
    """python_backend's words for a model-control request the server refused."""
    return CallError(
        f"{what}: Failed to process the request for model '{chan.instance_name}', "
        f"message: {message}"
    )


def _caller(chan: Channel) -> dict:
    """Who asks: the frontend refuses a load or unload from an initialize that the
    target's load waits for (run_batch is set once the worker serves)."""
    return {
        "caller": chan.instance_name,
        "model": chan.model_name,
        "initializing": chan.run_batch is None,
    }


def load_model(model_name: str, config: str = "", files=None) -> None:
    """pb_utils.load_model(): the frontend loads (or reloads) `model_name` as a load
    request of the repository extension would, `config` (JSON text) overriding its
    config.pbtxt and `files` ({"file:<path>": bytes}) its folder. Returns once the
    model is served (or raises CallError with the reason)."""
    chan = current()
    names: list = []
    contents: list = []
    if files is not None:
        if not isinstance(files, dict):
            raise CallError(
                f"failed to load model '{model_name}', files should be a dictionary of file "
                "paths and file contents"
            )
        for key, value in files.items():
            names.append(str(key))
            contents.append(bytes(value))
    request = {
        "op": "load",
        "name": model_name,
        "config": config or "",
        "files": names,
        **_caller(chan),
    }
    reply = chan.control(request, contents)
    if "error" in reply:
        raise _control_error("Failed to load model", chan, reply["error"])


def unload_model(model_name: str, unload_dependents: bool = False) -> None:
    """pb_utils.unload_model(): as an unload request of the repository extension.
    Returns once the model takes no new request; its requests in flight (the one
    calling this, when a model unloads itself) still finish, as in Triton."""
    chan = current()
    request = {
        "op": "unload",
        "name": model_name,
        "unload_dependents": bool(unload_dependents),
        **_caller(chan),
    }
    reply = chan.control(request, [])
    if "error" in reply:
        raise _control_error("Failed to unload model", chan, reply["error"])


def is_model_ready(model_name: str, model_version: str = "") -> bool:
    """pb_utils.is_model_ready(): from the model directory, read afresh (the frontend
    rewrites it before it answers a load or unload). An unknown model or version is
    not ready; a version that is no integer >= 0 raises, in Triton's words."""
    chan = current()
    text = str(model_version)
    version = -1
    if text:
        try:
            version = int(text)
        except ValueError:
            raise _control_error(
                "Failed to check model readiness",
                chan,
                f"failed to get model version from specified version string '{text}' "
                "(details: stol), version should be an integral value > 0",
            ) from None
        if version < 0:
            raise _control_error(
                "Failed to check model readiness",
                chan,
                f"failed to get model version from specified version string '{text}', "
                "version should be an integral value > 0",
            )
    try:
        chan.directory.resolve(model_name, version, fresh=True)
    except CallError:
        return False
    return True
