"""Sequence models of the framework backends, built from code: an accumulator as an ONNX
graph and as a TorchScript module, each with the four control inputs and one implicit
state.

    OUTPUT = STATE_IN + INPUT, and the state output is OUTPUT (the running sum);
    CTRL = [START, END, READY] as the model received them; CORRID_OUT = CORRID.

The ONNX models (`seq_onnx_direct`, `seq_onnx_oldest`, `seq_onnx_nobatch`) take START
as INT32, END as FP32, READY as BOOL and CORRID as UINT64; the TorchScript one
(`seq_pt_direct`) INT32, FP32, BOOL and INT64 (Triton's pytorch backend has no
UINT64), named <name>__<index> as Triton's pytorch backend binds them.
`seq_onnx_oldest` lists its state output among its outputs, so a client may ask for it.

    build_repository(dest, torch=True)
"""

from __future__ import annotations

from pathlib import Path

from onnx import TensorProto, helper

OPSET = 17

_CONTROLS = """  control_input [
    {{ name: "{start}" control [ {{ kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] }} ] }},
    {{ name: "{end}" control [ {{ kind: CONTROL_SEQUENCE_END fp32_false_true: [ 0, 1 ] }} ] }},
    {{ name: "{ready}" control [ {{ kind: CONTROL_SEQUENCE_READY bool_false_true: [ false, true ] }} ] }},
    {{ name: "{corrid}" control [ {{ kind: CONTROL_SEQUENCE_CORRID data_type: {corrid_type} }} ] }}
  ]
  state [ {{ input_name: "{state_in}" output_name: "{state_out}" data_type: TYPE_FP32 dims: [ 1 ] }} ]
"""


def _sequence_batching(strategy: str, **names) -> str:
    """The config's sequence_batching block: the strategy (a 50 ms window, so that
    concurrent sequences share batches: under direct, as in Triton, the window is kept
    only below `minimum_slot_utilization`, here two of an instance's four slots) and the
    controls and state under `names`."""
    window = (
        "  oldest { max_candidate_sequences: 4 max_queue_delay_microseconds: 50000 }\n"
        if strategy == "oldest"
        else "  direct { max_queue_delay_microseconds: 50000 minimum_slot_utilization: 0.5 }\n"
    )
    return (
        "sequence_batching {\n  max_sequence_idle_microseconds: 5000000\n"
        + window
        + _CONTROLS.format(**names)
        + "}\n"
    )


def accumulator_onnx(batched: bool = True) -> bytes:
    """The accumulator as an ONNX graph: [batch, 1] tensors (or [1] with `batched`
    false)."""
    shape = ["batch", 1] if batched else [1]
    ctrl_shape = ["batch", 3] if batched else [3]
    axis = 1 if batched else 0

    def vi(name, elem, dims=shape):
        return helper.make_tensor_value_info(name, elem, dims)

    nodes = [
        helper.make_node("Add", ["STATE_IN", "INPUT"], ["OUTPUT"]),
        helper.make_node("Identity", ["OUTPUT"], ["STATE_OUT"]),
        helper.make_node("Cast", ["START"], ["start_f"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["READY"], ["ready_f"], to=TensorProto.FLOAT),
        helper.make_node("Concat", ["start_f", "END", "ready_f"], ["CTRL"], axis=axis),
        helper.make_node("Identity", ["CORRID"], ["CORRID_OUT"]),
    ]
    graph = helper.make_graph(
        nodes,
        "accumulator",
        [
            vi("INPUT", TensorProto.FLOAT),
            vi("START", TensorProto.INT32),
            vi("END", TensorProto.FLOAT),
            vi("READY", TensorProto.BOOL),
            vi("CORRID", TensorProto.UINT64),
            vi("STATE_IN", TensorProto.FLOAT),
        ],
        [
            vi("OUTPUT", TensorProto.FLOAT),
            vi("STATE_OUT", TensorProto.FLOAT),
            vi("CTRL", TensorProto.FLOAT, ctrl_shape),
            vi("CORRID_OUT", TensorProto.UINT64),
        ],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="naiad-tests"
    )
    model.ir_version = 8
    return model.SerializeToString()


def onnx_config(name: str, strategy: str, batched: bool = True, instances: int = 1) -> str:
    outputs = [
        '{ name: "OUTPUT" data_type: TYPE_FP32 dims: [ 1 ] }',
        '{ name: "CTRL" data_type: TYPE_FP32 dims: [ 3 ] }',
        '{ name: "CORRID_OUT" data_type: TYPE_UINT64 dims: [ 1 ] }',
    ]
    if strategy == "oldest":  # its state output is also an output the client may ask for
        outputs.append('{ name: "STATE_OUT" data_type: TYPE_FP32 dims: [ 1 ] }')
    return (
        f'name: "{name}"\nbackend: "onnxruntime"\nmax_batch_size: {4 if batched else 0}\n'
        'input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        f"output [ {', '.join(outputs)} ]\n"
        + _sequence_batching(
            strategy,
            start="START",
            end="END",
            ready="READY",
            corrid="CORRID",
            corrid_type="TYPE_UINT64",
            state_in="STATE_IN",
            state_out="STATE_OUT",
        )
        + f"instance_group [ {{ count: {instances} kind: KIND_CPU }} ]\n"
        'parameters { key: "intra_op_thread_count" value { string_value: "1" } }\n'
    )


def torch_config(name: str, strategy: str) -> str:
    return (
        f'name: "{name}"\nbackend: "pytorch"\nmax_batch_size: 4\n'
        'input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        "output [\n"
        '  { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 1 ] },\n'
        '  { name: "CTRL__1" data_type: TYPE_FP32 dims: [ 3 ] },\n'
        '  { name: "CORRID_OUT__2" data_type: TYPE_INT64 dims: [ 1 ] }\n'
        "]\n"
        + _sequence_batching(
            strategy,
            start="START__1",
            end="END__2",
            ready="READY__3",
            corrid="CORRID__4",
            corrid_type="TYPE_INT64",
            state_in="STATE_IN__5",
            state_out="STATE_OUT__3",
        )
        + "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
        'parameters { key: "INTRA_OP_THREAD_COUNT" value { string_value: "1" } }\n'
    )


def accumulator_torch():
    """The accumulator as a scripted TorchScript module (imports torch)."""
    import torch

    class Accumulator(torch.nn.Module):
        def forward(
            self,
            INPUT__0: torch.Tensor,
            START__1: torch.Tensor,
            END__2: torch.Tensor,
            READY__3: torch.Tensor,
            CORRID__4: torch.Tensor,
            STATE_IN__5: torch.Tensor,
        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
            total = STATE_IN__5 + INPUT__0
            ctrl = torch.cat([START__1.float(), END__2, READY__3.float()], dim=1)
            return total, ctrl, CORRID__4.clone(), total.clone()

    return torch.jit.script(Accumulator().eval())


ONNX_MODELS = {
    "seq_onnx_direct": ("direct", True, 2),
    "seq_onnx_oldest": ("oldest", True, 1),
    "seq_onnx_nobatch": ("direct", False, 1),
}
TORCH_MODELS = {"seq_pt_direct": "direct"}


def build_repository(dest: Path, torch: bool = True) -> Path:
    dest = Path(dest)
    for name, (strategy, batched, instances) in ONNX_MODELS.items():
        folder = dest / name
        (folder / "1").mkdir(parents=True)
        (folder / "1" / "model.onnx").write_bytes(accumulator_onnx(batched))
        (folder / "config.pbtxt").write_text(onnx_config(name, strategy, batched, instances))
    if torch:
        module = accumulator_torch()
        for name, strategy in TORCH_MODELS.items():
            folder = dest / name
            (folder / "1").mkdir(parents=True)
            module.save(str(folder / "1" / "model.pt"))
            (folder / "config.pbtxt").write_text(torch_config(name, strategy))
    return dest
