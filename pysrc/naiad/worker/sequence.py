"""The worker's side of sequence batching: what a sequence model sees beyond the
client's inputs.

The core's sequence batcher (csrc/core/sequence_batch_scheduler.h) keeps each sequence on one
slot of one instance and marks each request with its slot and START / END
(`WorkerEndpoint.sequence_words`). `SequenceBackend` wraps the model's backend and
adds, as Triton does:

- the control inputs of `sequence_batching.control_input` (backends/sequence_io.py):
  START, END, READY (with their int32 / fp32 / bool false-true values) and CORRID
  (with its data type);
- the implicit state inputs of `sequence_batching.state`: the state output the model
  returned for the sequence's previous request, or the initial state (zeros or
  `initial_state/<data_file>`) at START. Each slot's state lives in a block of the
  shared arena, freed at END;
- under the direct strategy, slot i at position i of the batch: a slot with no request
  in this batch is filled with a not-ready request (READY false, CORRID 0, a copy of
  another request's inputs and a throwaway state), whose response is dropped.

A Python model gets them per request, with its requests' arrays. A framework backend
(onnxruntime, pytorch: `batch_tensors`) gets them as whole batch-major [N, ...] tensors
in `Batch.tensors` next to the client's, which it feeds its session in one call
(`_execute_whole`).

The state outputs are taken out of the responses: the client never sees them, as in
Triton, unless the config lists them among its outputs too. A decoupled model's
responses are taken as it sends them, from any thread (`_StateStream`): each one that
carries a state output makes it the sequence's state.
"""

from __future__ import annotations

import itertools
import json
import threading
from pathlib import Path

import numpy as np

from naiad import datatypes
from naiad.backends import sequence_io
from naiad.backends.base import SEQUENCE_END, Backend, Batch, RequestHeader, Response

_VALID = 1 << 63
_START = 1 << 32
_END = 1 << 33
_SLOT_MASK = 0xFFFFFFFF

_KINDS = {
    sequence_io.START: "start",
    sequence_io.READY: "ready",
    sequence_io.END: "end",
    sequence_io.CORRID: "corrid",
}


def _wire(config_type: str) -> str:
    return "BYTES" if config_type == "TYPE_STRING" else config_type.removeprefix("TYPE_")


class _Control:
    """One control input: its name, kind, wire datatype and its false / true values,
    per request (`array`) or as the batch-major column of a whole batch (`column`)."""

    __slots__ = ("name", "kind", "datatype", "values", "pair", "corrid_dtype")

    def __init__(self, spec: sequence_io.ControlSpec, shape: tuple):
        self.name = spec.name
        self.kind = _KINDS[spec.kind]
        self.datatype = _wire(spec.data_type)
        self.corrid_dtype = None
        self.values = self.pair = None
        if spec.false_true is None:  # CORRID
            if self.datatype != "BYTES":
                self.corrid_dtype = datatypes.numpy_dtype(self.datatype)
            return
        dtype = datatypes.numpy_dtype(self.datatype)
        self.pair = np.array(spec.false_true, dtype=dtype)
        self.values = tuple(np.full(shape, value, dtype=dtype) for value in spec.false_true)

    def array(self, flag: bool, corrid, shape: tuple):
        if self.values is not None:
            return self.values[1 if flag else 0]
        if self.corrid_dtype is None:  # a string correlation id
            return np.full(shape, _corrid_text(corrid), dtype=object)
        return np.full(shape, corrid if type(corrid) is int else 0, dtype=self.corrid_dtype)

    def column(self, flags: dict, corrids: list, shape: tuple):
        """The control for a whole batch, `shape` ([N, 1]): row i from `flags[kind][i]`
        (numpy bools) or, for CORRID, `corrids[i]`."""
        if self.pair is not None:
            return self.pair[flags[self.kind].astype(np.intp)].reshape(shape)
        if self.corrid_dtype is None:
            return np.array([_corrid_text(c) for c in corrids], dtype=object).reshape(shape)
        values = [c if type(c) is int else 0 for c in corrids]
        return np.array(values, dtype=self.corrid_dtype).reshape(shape)


def _corrid_text(corrid) -> bytes:
    return (corrid if type(corrid) is str else str(corrid) if corrid else "").encode()


class _State:
    """One implicit state: input and output names, datatype, initial value."""

    __slots__ = ("input_name", "output_name", "datatype", "dtype", "initial")

    def __init__(self, state: dict, model_dir: Path, batched: bool):
        spec = sequence_io.StateSpec(state)
        self.input_name = spec.input_name
        self.output_name = spec.output_name
        self.datatype = _wire(spec.data_type)
        self.dtype = None if self.datatype == "BYTES" else datatypes.numpy_dtype(self.datatype)
        initial = (state.get("initial_state") or [None])[0]
        dims = [int(d) for d in initial.get("dims", [])] if initial is not None else spec.dims
        shape = tuple(max(d, 1) for d in dims)
        if batched:
            shape = (1, *shape)
        if initial is not None and initial.get("data_file"):
            raw = (model_dir / "initial_state" / initial["data_file"]).read_bytes()
            if self.dtype is None:
                self.initial = np.array([raw], dtype=object).reshape(shape)
            else:
                count = int(np.prod(shape)) if shape else 1
                self.initial = np.frombuffer(raw, dtype=self.dtype, count=count).reshape(shape)
        elif self.dtype is None:
            self.initial = np.full(shape, b"", dtype=object)
        else:
            self.initial = np.zeros(shape, dtype=self.dtype)


class SequenceBackend(Backend):
    """`inner` with control inputs, implicit state and not-ready requests added."""

    def __init__(self, inner: Backend, config: dict, endpoint, model_dir: Path):
        self.inner = inner
        self.endpoint = endpoint
        self.arena = endpoint.arena
        batching = config.get("sequence_batching", {})
        self.batched = int(config.get("max_batch_size", 0) or 0) > 0
        self.direct = "oldest" not in batching
        policy = config.get("model_transaction_policy") or {}
        self.decoupled = bool(policy.get("decoupled", False))
        # A framework backend (onnxruntime, pytorch) takes the batch's tensors whole: the
        # control and state inputs come to it batch-major too (_execute_whole).
        self.whole = bool(getattr(inner, "batch_tensors", False))
        self.batch_tensors = self.whole  # the worker fills Batch.tensors for it
        # CUDA shared-memory tensors go through host memory (the worker copies them):
        # the batches built here do not carry in-place device inputs or outputs.
        self.device_inputs = False
        self.control_shape = (1, 1) if self.batched else (1,)
        self.controls = [
            _Control(spec, self.control_shape) for spec in sequence_io.controls(config)
        ]
        self.states = [_State(s, model_dir, self.batched) for s in batching.get("state", [])]
        self.state_outputs = {s.output_name for s in self.states}
        self.state_of_output = {s.output_name: s for s in self.states}
        # State outputs the config lists among its outputs too: the client gets them.
        self.visible_states = sequence_io.client_visible_states(config)
        if self.decoupled and self.states:
            # The state outputs pass the response's requested-output filter, to be
            # taken out here (_StateStream) rather than dropped there.
            inner.kept_outputs = frozenset(self.state_outputs)
        # slot -> {state input name: (arena offset, nbytes, shape) or an object array}
        self.slot_states: dict[int, dict] = {}
        # Decoupled models send from any thread: slot_states under this lock, and each
        # slot's sequence numbered so that a late response of an ended sequence does
        # not write into the next one's state.
        self._lock = threading.Lock()
        self._sequence_of_slot: dict[int, int] = {}
        self._sequence_numbers = itertools.count(1)
        self._headers: dict = {}  # (id(header), header) -> header with the extra inputs
        self.corrid_controls = [c for c in self.controls if c.kind == "corrid"]
        self._columns: dict = {}  # flags per position -> control columns (_flag_columns)
        # iterative_sequence: a request that starts a sequence ends it in the core
        # (_model_word); a rescheduled run's controls are refreshed by the Python
        # backend through rerun_controls.
        self.iterative = bool(batching.get("iterative_sequence", False))
        if self.iterative and hasattr(inner, "refresh_controls"):
            inner.refresh_controls = self.rerun_controls

    # -- the extra inputs ----------------------------------------------------------
    def _header(self, header: RequestHeader) -> RequestHeader:
        """`header` with the control and state inputs appended (cached: headers are
        shared among the requests that carry them)."""
        key = id(header)
        cached = self._headers.get(key)
        if cached is not None and cached[0] is header:
            return cached[1]
        extra = []
        for control in self.controls:
            extra.append((control.name, control.datatype, self.control_shape))
        for state in self.states:
            extra.append((state.input_name, state.datatype, state.initial.shape))
        out = RequestHeader.__new__(RequestHeader)
        for name in RequestHeader.__slots__:
            setattr(out, name, getattr(header, name))
        out.inputs = tuple(header.inputs) + tuple(extra)
        out.input_names = tuple(name for name, _, _ in out.inputs)
        out.input_datatypes = tuple(datatype for _, datatype, _ in out.inputs)
        if header.requested_outputs and not self.decoupled:
            # The model must still produce the state outputs the server keeps.
            wanted = list(header.requested_outputs)
            out.requested_outputs = wanted + sorted(self.state_outputs.difference(wanted))
        if len(self._headers) > 1024:
            self._headers.clear()
        self._headers[key] = (header, out)
        return out

    def _model_word(self, header: RequestHeader, word: int) -> int:
        """The sequence word of a request as the model sees it: the core's, but for an
        iterative model's request that starts a sequence, which the core ends with it
        (START and END, LoadedModel._iterative_sequence) and which, as in Triton 2.51,
        has START alone unless its client sent END."""
        if self.iterative and word & _END and not header.flags & SEQUENCE_END:
            return word & ~_END
        return word

    def rerun_controls(self) -> dict:
        """The controls of a rescheduled request's next run, by input name (its CORRID
        stays): as Triton's sequence batcher flags a rescheduled request, neither START
        nor END, but READY."""
        return {
            control.name: control.array(control.kind == "ready", 0, self.control_shape)
            for control in self.controls
            if control.kind != "corrid"
        }

    def _controls(self, word: int, corrid, ready: bool) -> list:
        start, end = bool(word & _START), bool(word & _END)
        flags = {"start": start and ready, "end": end and ready, "ready": ready}
        shape = self.control_shape
        return [
            control.array(flags.get(control.kind, False), corrid, shape)
            for control in self.controls
        ]

    def _state_inputs(self, slot: int, start: bool, copy: bool = False) -> list:
        """The slot's state inputs: views of its arena blocks (copies with `copy`, for a
        decoupled model whose responses may rewrite them while it runs), or the
        initial state."""
        stored = None if start else self.slot_states.get(slot)
        arrays = []
        for state in self.states:
            value = None if stored is None else stored.get(state.input_name)
            if value is None:
                arrays.append(state.initial.copy())
            elif isinstance(value, tuple):
                offset, _nbytes, shape = value
                view = np.ndarray(shape, state.dtype, self.arena, offset)
                arrays.append(view.copy() if copy else view)
            else:
                arrays.append(value)
        return arrays

    def _keep_state(self, slot: int, outputs: list, requested, store: bool = True) -> list:
        """Stores the state outputs among `outputs` as the slot's state (not with
        `store` false); returns the outputs the client gets: the others, and a state
        output the config lists among its outputs where the client asked for it
        (`requested`: the client's requested outputs, empty for all)."""
        kept = []
        stored = self.slot_states.setdefault(slot, {}) if store else None
        for name, array in outputs:
            state = self.state_of_output.get(name)
            if state is None:
                kept.append((name, array))
                continue
            if name in self.visible_states and (not requested or name in requested):
                kept.append((name, array))
            if not store:
                continue
            if state.dtype is None:
                self._free(stored.pop(state.input_name, None))
                stored[state.input_name] = np.array(array, dtype=object)
                continue
            array = np.ascontiguousarray(array, dtype=state.dtype)
            old = stored.get(state.input_name)
            if isinstance(old, tuple) and old[1] == array.nbytes and array.nbytes:
                offset = old[0]
            else:
                self._free(old)
                offset = self.endpoint.alloc(max(array.nbytes, 1), 0)
                if offset == 0:
                    raise MemoryError("the shared-memory arena has no room for a sequence state")
            if array.nbytes:  # a byte copy into the block (cheaper than an array view)
                self.arena[offset : offset + array.nbytes] = array.reshape(-1).view(np.uint8)
            stored[state.input_name] = (offset, array.nbytes, array.shape)
        return kept

    def _free(self, value) -> None:
        if isinstance(value, tuple):
            self.endpoint.free(value[0])

    def _release(self, slot: int) -> None:
        for value in self.slot_states.pop(slot, {}).values():
            self._free(value)

    def _positions(self, words: list) -> list:
        """(index in the batch or -1 for a not-ready request, slot) per position of the
        batch the model runs: under direct, slot i at position i."""
        if self.direct:
            by_slot = {word & _SLOT_MASK: i for i, word in enumerate(words)}
            return [(by_slot.get(slot, -1), slot) for slot in range(max(by_slot) + 1)]
        return [(i, word & _SLOT_MASK) for i, word in enumerate(words)]

    # -- Backend -------------------------------------------------------------------
    def execute(self, batch: Batch) -> list:
        words = self.endpoint.sequence_words()
        count = len(batch.headers)
        if len(words) != count or not all(word & _VALID for word in words):
            return self.inner.execute(batch)
        positions = self._positions(words)
        if self.whole:
            return self._execute_whole(batch, words, positions)
        headers, arrays = [], []
        for index, slot in positions:
            real = index >= 0
            source = index if real else 0  # a not-ready request copies the first one
            header = batch.headers[source]
            word = self._model_word(header, words[source])
            corrid = header.correlation_id if real else 0
            extra = self._controls(word, corrid, real)
            if real:
                if word & _START:  # a new sequence: nothing of the slot's last one stays
                    self._release(slot)
                extra += self._state_inputs(slot, bool(word & _START))
            else:
                extra += [state.initial.copy() for state in self.states]
            headers.append(self._header(header))
            arrays.append(list(batch.arrays[source]) + extra)
        inner = _inner_batch(batch, headers, arrays, [index for index, _ in positions])
        return self._finish(batch, words, positions, self.inner.execute(inner))

    def _execute_whole(self, batch: Batch, words: list, positions: list) -> list:
        """A framework backend's batch: the client's inputs, control inputs and state
        inputs as whole batch-major [N, ...] tensors (`Batch.tensors`). The client's
        are the worker's tensors as they are when the batch has no gap to fill; the
        controls are built per batch; the states are the slots' blocks joined."""
        count = len(batch.headers)
        n = len(positions)
        sources = [index if index >= 0 else 0 for index, _ in positions]
        names = batch.headers[0].input_names
        tensors = batch.tensors
        if sources == list(range(count)) and all(name in tensors for name in names):
            inputs = {name: tensors[name] for name in names}
        else:  # gaps filled with copies of the first request, or BYTES inputs
            inputs = {}
            for name in names:
                parts = [batch.arrays[s][batch.headers[s].input_names.index(name)] for s in sources]
                inputs[name] = np.concatenate(parts) if self.batched else parts[0]
        # Per position: its START / END bits, or 4 for a not-ready request.
        key = tuple((words[index] >> 32) & 3 if index >= 0 else 4 for index, _ in positions)
        extra = self._flag_columns(key)
        if self.corrid_controls:
            corrids = [
                batch.headers[index].correlation_id if index >= 0 else 0 for index, _ in positions
            ]
            shape = (n, 1) if self.batched else (1,)
            for control in self.corrid_controls:
                extra[control.name] = control.column(None, corrids, shape)
        if self.states:
            per_position = []
            for (index, slot), bits in zip(positions, key):
                if index < 0:
                    per_position.append([state.initial for state in self.states])
                    continue
                start = bool(bits & 1)
                if start:  # a new sequence: nothing of the slot's last one stays
                    self._release(slot)
                per_position.append(self._state_inputs(slot, start))
            for k, state in enumerate(self.states):
                parts = [row[k] for row in per_position]
                extra[state.input_name] = np.concatenate(parts) if self.batched else parts[0]
        inputs.update(extra)
        # Each position's arrays too (Batch's contract): its own inputs and its rows of
        # the extra tensors.
        columns = list(extra.values())
        headers, arrays = [], []
        for i, s in enumerate(sources):
            headers.append(self._header(batch.headers[s]))
            rows = [column[i : i + 1] for column in columns] if self.batched else columns
            arrays.append(list(batch.arrays[s]) + rows)
        inner = _inner_batch(batch, headers, arrays, [index for index, _ in positions], inputs)
        results = self.inner.execute(inner)
        return self._finish(batch, words, positions, results)

    def _flag_columns(self, key: tuple) -> dict:
        """The START / END / READY control columns of a batch whose positions have the
        flags `key` (per position its START | END << 1 bits, 4: not ready): built once
        per pattern (a few recur: most batches start and end nothing), then shared."""
        columns = self._columns.get(key)
        if columns is None:
            ready = np.array([bits != 4 for bits in key], dtype=bool)
            flags = {
                "ready": ready,
                "start": np.array([bits != 4 and bool(bits & 1) for bits in key], dtype=bool),
                "end": np.array([bits != 4 and bool(bits & 2) for bits in key], dtype=bool),
            }
            shape = (len(key), 1) if self.batched else (1,)
            columns = {
                control.name: control.column(flags, None, shape)
                for control in self.controls
                if control.kind != "corrid"
            }
            if len(self._columns) > 256:
                self._columns.clear()
            self._columns[key] = columns
        return dict(columns)

    def _finish(self, batch: Batch, words: list, positions: list, results: list) -> list:
        """The batch's results from the model's: the not-ready requests' dropped, the
        state outputs kept as their slots' state, the slots of ended sequences freed."""
        out = [None] * len(batch.headers)
        for (index, slot), result in zip(positions, results):
            if index < 0:
                continue
            if self.states and isinstance(result, Response):
                requested = batch.headers[index].requested_outputs
                outputs = self._keep_state(slot, result.outputs, requested)
                result = Response(outputs, result.parameters)
            if words[index] & _END:
                self._release(slot)
            out[index] = result
        return out

    def execute_decoupled(self, batch: Batch, stream) -> None:
        """A decoupled sequence model: the control inputs and the slot's state inputs;
        each response it sends that carries a state output makes that the sequence's
        state (the last one sent before the sequence's next request runs is what that
        request gets), the state outputs taken out of the response (_StateStream)."""
        words = self.endpoint.sequence_words()
        if len(words) != len(batch.headers) or not all(word & _VALID for word in words):
            self.inner.execute_decoupled(batch, stream)
            return
        headers, arrays, targets = [], [], []
        with self._lock:
            for header, own, word in zip(batch.headers, batch.arrays, words):
                word = self._model_word(header, word)
                slot = word & _SLOT_MASK
                start = bool(word & _START)
                if start or slot not in self._sequence_of_slot:
                    self._release(slot)
                    self._sequence_of_slot[slot] = next(self._sequence_numbers)
                extra = self._controls(word, header.correlation_id, True)
                extra += self._state_inputs(slot, start, copy=True)
                targets.append((slot, self._sequence_of_slot[slot], header.requested_outputs))
                if word & _END:  # its responses' states go nowhere: no request follows
                    self._release(slot)
                    self._sequence_of_slot[slot] = next(self._sequence_numbers)
                headers.append(self._header(header))
                arrays.append(list(own) + extra)
        if self.states:
            stream = _StateStream(stream, self, targets)
        inner = _inner_batch(batch, headers, arrays, list(range(len(headers))))
        self.inner.execute_decoupled(inner, stream)

    def _take_state(self, target: tuple, result: Response) -> Response:
        """A decoupled response without its state outputs, which become its sequence's
        state unless that sequence has ended since (`target`: slot, sequence number,
        the client's requested outputs)."""
        slot, sequence, requested = target
        if not any(name in self.state_of_output for name, _ in result.outputs):
            return result
        with self._lock:
            current = self._sequence_of_slot.get(slot) == sequence
            outputs = self._keep_state(slot, result.outputs, requested, store=current)
        return Response(outputs, result.parameters)

    def finalize(self) -> None:
        with self._lock:
            for slot in list(self.slot_states):
                self._release(slot)
        self.inner.finalize()

    @property
    def out_of_memory(self) -> bool:
        return self.inner.out_of_memory

    def __getattr__(self, name):
        # Anything else a worker asks of the backend is the inner one's.
        return getattr(self.inner, name)


class _StateStream:
    """A decoupled batch's stream (worker/decoupled.py BatchStream) that takes the state
    outputs out of each response sent, into the sequence's state."""

    __slots__ = ("stream", "owner", "targets")

    def __init__(self, stream, owner: SequenceBackend, targets: list):
        self.stream = stream
        self.owner = owner
        self.targets = targets  # per request: (slot, sequence number, requested outputs)

    def send(self, index: int, result, final: bool) -> bool:
        if type(result) is Response:
            result = self.owner._take_state(self.targets[index], result)
        return self.stream.send(index, result, final)

    def __getattr__(self, name):
        return getattr(self.stream, name)


def wrap(backend: Backend, args: dict, endpoint) -> Backend:
    """`backend` wrapped in a SequenceBackend when its model uses sequence batching."""
    config = json.loads(args["model_config"])
    if "sequence_batching" not in config:
        return backend
    model_dir = Path(args["model_repository"])
    return SequenceBackend(backend, config, endpoint, model_dir)


def _inner_batch(batch: Batch, headers: list, arrays: list, sources: list, tensors=None) -> Batch:
    """The batch the wrapped backend runs: position i holds request `sources[i]` of
    `batch` (-1: a not-ready request's gap). The requests' trace contexts go with them
    (Batch.trace_contexts); a gap has none."""
    inner = Batch(headers, arrays, tensors)
    contexts = batch.trace_contexts
    if contexts is not None:
        inner.trace_contexts = {
            i: contexts[source] for i, source in enumerate(sources) if source in contexts
        } or None
    return inner
