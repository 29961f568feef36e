"""The tensors a sequence model takes beyond its config's `input` and `output`: the
control inputs and the implicit state of `sequence_batching`, as Triton's backends read
them from the config (backend_common GetBooleanSequenceControlProperties /
GetTypedSequenceControlProperties).

A framework backend (onnxruntime, pytorch) checks them against its model at load and
feeds them with the config's inputs; the worker (worker/sequence.py) makes their values.
One definition of each here: a control's kind, name, datatype and false / true values;
a state's input and output names, datatype and dims.
"""

from __future__ import annotations

START = "CONTROL_SEQUENCE_START"
READY = "CONTROL_SEQUENCE_READY"
END = "CONTROL_SEQUENCE_END"
CORRID = "CONTROL_SEQUENCE_CORRID"
KINDS = (START, END, READY, CORRID)  # the order Triton's backends check them in

# A boolean control's false / true field -> the config datatype of its tensor.
_FALSE_TRUE_FIELDS = (
    ("int32_false_true", "TYPE_INT32"),
    ("fp32_false_true", "TYPE_FP32"),
    ("bool_false_true", "TYPE_BOOL"),
)


class ControlSpec:
    """One control input: `name`, `kind` (CONTROL_SEQUENCE_*), `data_type` (a config
    type: INT32 / FP32 / BOOL for the boolean controls, the configured one for CORRID,
    TYPE_UINT64 when unset) and, for a boolean control, `false_true` (its two values)."""

    __slots__ = ("name", "kind", "data_type", "false_true")

    def __init__(self, name: str, control: dict):
        self.name = name
        self.kind = control.get("kind", START)
        self.false_true = None
        if self.kind == CORRID:
            self.data_type = control.get("data_type", "TYPE_UINT64")
            return
        for field, data_type in _FALSE_TRUE_FIELDS:
            pair = control.get(field) or []
            if len(pair) == 2:
                self.data_type = data_type
                self.false_true = (pair[0], pair[1])
                return
        raise ValueError(f"sequence batching control '{name}' has no false/true values")


class StateSpec:
    """One implicit state: `input_name`, `output_name`, `data_type` (a config type),
    `dims` (without the batch dimension)."""

    __slots__ = ("input_name", "output_name", "data_type", "dims")

    def __init__(self, state: dict):
        self.input_name = state["input_name"]
        self.output_name = state["output_name"]
        self.data_type = state.get("data_type", "TYPE_FP32")
        self.dims = [int(d) for d in state.get("dims", [])]


def controls(config: dict) -> list[ControlSpec]:
    """The control inputs of `config`'s sequence batching, in the config's order (each
    control_input's first control: one kind per tensor)."""
    batching = config.get("sequence_batching") or {}
    return [
        ControlSpec(entry["name"], control)
        for entry in batching.get("control_input", [])
        for control in entry.get("control", [])[:1]
    ]


def states(config: dict) -> list[StateSpec]:
    """The implicit states of `config`'s sequence batching, in the config's order."""
    batching = config.get("sequence_batching") or {}
    return [StateSpec(state) for state in batching.get("state", [])]


def client_visible_states(config: dict) -> frozenset:
    """The state outputs the config also lists among its outputs: the client gets them
    too, as Triton's backends return them (the rest the server keeps to itself)."""
    outputs = {io.get("name") for io in config.get("output", [])}
    return frozenset(s.output_name for s in states(config) if s.output_name in outputs)
