"""The worker's side of sequence batching: what a sequence model sees beyond the
client's inputs.

The core's sequence batcher (csrc/sequence_batch_scheduler.h) keeps each sequence on one
slot of one instance and marks each request with its slot and START / END
(`WorkerEndpoint.sequence_words`). `SequenceBackend` wraps the model's backend and,
per request, adds as Triton does:

- the control inputs of `sequence_batching.control_input`: START, END, READY (with
  their int32 / fp32 / bool false-true values) and CORRID (with its data type);
- the implicit state inputs of `sequence_batching.state`: the state output the model
  returned for the sequence's previous request, or the initial state (zeros or
  `initial_state/<data_file>`) at START. Each slot's state lives in a block of the
  shared arena, freed at END;
- under the direct strategy, slot i at position i of the batch: a slot with no request
  in this batch is filled with a not-ready request (READY false, CORRID 0, a copy of
  another request's inputs and a throwaway state), whose response is dropped.

The state outputs are taken out of the responses: the client never sees them, as in
Triton.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from naiad import datatypes
from naiad.backends.base import Backend, Batch, RequestHeader, Response

_VALID = 1 << 63
_START = 1 << 32
_END = 1 << 33
_SLOT_MASK = 0xFFFFFFFF

_KINDS = {
    "CONTROL_SEQUENCE_START": "start",
    "CONTROL_SEQUENCE_READY": "ready",
    "CONTROL_SEQUENCE_END": "end",
    "CONTROL_SEQUENCE_CORRID": "corrid",
}


def _wire(config_type: str) -> str:
    return "BYTES" if config_type == "TYPE_STRING" else config_type.removeprefix("TYPE_")


class _Control:
    """One control input: its name, kind, wire datatype and its false / true arrays."""

    __slots__ = ("name", "kind", "datatype", "values", "corrid_dtype")

    def __init__(self, name: str, control: dict, shape: tuple):
        self.name = name
        self.kind = _KINDS[control.get("kind", "CONTROL_SEQUENCE_START")]
        self.corrid_dtype = None
        self.values = None
        if self.kind == "corrid":
            self.datatype = _wire(control.get("data_type", "TYPE_UINT64"))
            if self.datatype != "BYTES":
                self.corrid_dtype = datatypes.numpy_dtype(self.datatype)
            return
        for field, datatype, dtype in (
            ("int32_false_true", "INT32", np.int32),
            ("fp32_false_true", "FP32", np.float32),
            ("bool_false_true", "BOOL", np.bool_),
        ):
            pair = control.get(field) or []
            if len(pair) == 2:
                self.datatype = datatype
                self.values = tuple(np.full(shape, value, dtype=dtype) for value in pair)
                return
        raise ValueError(f"sequence batching control '{name}' has no false/true values")

    def array(self, flag: bool, corrid, shape: tuple):
        if self.values is not None:
            return self.values[1 if flag else 0]
        if self.corrid_dtype is None:  # a string correlation id
            value = corrid if type(corrid) is str else str(corrid) if corrid else ""
            return np.full(shape, value.encode(), dtype=object)
        return np.full(shape, corrid if type(corrid) is int else 0, dtype=self.corrid_dtype)


class _State:
    """One implicit state: input and output names, datatype, initial value."""

    __slots__ = ("input_name", "output_name", "datatype", "dtype", "initial")

    def __init__(self, state: dict, model_dir: Path, batched: bool):
        self.input_name = state["input_name"]
        self.output_name = state["output_name"]
        self.datatype = _wire(state.get("data_type", "TYPE_FP32"))
        self.dtype = None if self.datatype == "BYTES" else datatypes.numpy_dtype(self.datatype)
        initial = (state.get("initial_state") or [None])[0]
        dims = [int(d) for d in (initial or state).get("dims", [])]
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
        self.control_shape = (1, 1) if self.batched else (1,)
        self.controls = []
        for entry in batching.get("control_input", []):
            for control in entry.get("control", [])[:1]:
                self.controls.append(_Control(entry["name"], control, self.control_shape))
        self.states = [_State(s, model_dir, self.batched) for s in batching.get("state", [])]
        self.state_outputs = {s.output_name for s in self.states}
        # slot -> {state input name: (arena offset, nbytes, shape) or an object array}
        self.slot_states: dict[int, dict] = {}
        self._headers: dict = {}  # (id(header), header) -> header with the extra inputs

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
        if header.requested_outputs:
            # The model must still produce the state outputs the server keeps.
            out.requested_outputs = list(header.requested_outputs) + sorted(self.state_outputs)
        if len(self._headers) > 1024:
            self._headers.clear()
        self._headers[key] = (header, out)
        return out

    def _controls(self, word: int, corrid, ready: bool) -> list:
        start, end = bool(word & _START), bool(word & _END)
        flags = {"start": start and ready, "end": end and ready, "ready": ready}
        shape = self.control_shape
        return [
            control.array(flags.get(control.kind, False), corrid, shape)
            for control in self.controls
        ]

    def _state_inputs(self, slot: int, start: bool) -> list:
        stored = None if start else self.slot_states.get(slot)
        arrays = []
        for state in self.states:
            value = None if stored is None else stored.get(state.input_name)
            if value is None:
                arrays.append(state.initial.copy())
            elif isinstance(value, tuple):
                offset, _nbytes, shape = value
                arrays.append(np.ndarray(shape, state.dtype, self.arena, offset))
            else:
                arrays.append(value)
        return arrays

    def _keep_state(self, slot: int, outputs: list) -> list:
        """Stores the state outputs among `outputs` as the slot's state; returns the
        other outputs."""
        kept = []
        stored = self.slot_states.setdefault(slot, {})
        for name, array in outputs:
            if name not in self.state_outputs:
                kept.append((name, array))
                continue
            state = next(s for s in self.states if s.output_name == name)
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
            np.ndarray(array.shape, state.dtype, self.arena, offset)[...] = array
            stored[state.input_name] = (offset, array.nbytes, array.shape)
        return kept

    def _free(self, value) -> None:
        if isinstance(value, tuple):
            self.endpoint.free(value[0])

    def _release(self, slot: int) -> None:
        for value in self.slot_states.pop(slot, {}).values():
            self._free(value)

    # -- Backend -------------------------------------------------------------------
    def execute(self, batch: Batch) -> list:
        words = self.endpoint.sequence_words()
        count = len(batch.headers)
        if len(words) != count or not all(word & _VALID for word in words):
            return self.inner.execute(batch)
        # Positions: (index in `batch` or -1 for a not-ready request, slot).
        if self.direct:
            by_slot = {word & _SLOT_MASK: i for i, word in enumerate(words)}
            positions = [(by_slot.get(slot, -1), slot) for slot in range(max(by_slot) + 1)]
        else:
            positions = [(i, word & _SLOT_MASK) for i, word in enumerate(words)]
        headers, arrays = [], []
        for index, slot in positions:
            real = index >= 0
            source = index if real else 0  # a not-ready request copies the first one
            header = batch.headers[source]
            word = words[source]
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
        results = self.inner.execute(Batch(headers, arrays))
        out = [None] * count
        for (index, slot), result in zip(positions, results):
            if index < 0:
                continue
            if self.states and isinstance(result, Response):
                result = Response(self._keep_state(slot, result.outputs), result.parameters)
            if words[index] & _END:
                self._release(slot)
            out[index] = result
        return out

    def finalize(self) -> None:
        for slot in list(self.slot_states):
            self._release(slot)
        self.inner.finalize()

    def __getattr__(self, name):
        # Anything else a worker asks of the backend is the inner one's.
        return getattr(self.inner, name)


def wrap(backend: Backend, args: dict, endpoint) -> Backend:
    """`backend` wrapped in a SequenceBackend when its model uses sequence batching."""
    config = json.loads(args["model_config"])
    if "sequence_batching" not in config:
        return backend
    model_dir = Path(args["model_repository"])
    return SequenceBackend(backend, config, endpoint, model_dir)
