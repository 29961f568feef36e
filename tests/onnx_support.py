"""Tiny ONNX models built with the `onnx` package for the onnxruntime backend tests, and a
repository of them (good models, auto-complete cases, bad models, warmup) for one server.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import onnx
from onnx import TensorProto, helper
from server_harness import EXAMPLE_MODELS

OPSET = 17

# Wire datatype -> ONNX element type, for every datatype onnxruntime serves (BF16 has no
# numpy dtype on the client side, so it is left out of the identity model).
ONNX_TYPES = {
    "BOOL": TensorProto.BOOL,
    "UINT8": TensorProto.UINT8,
    "UINT16": TensorProto.UINT16,
    "UINT32": TensorProto.UINT32,
    "UINT64": TensorProto.UINT64,
    "INT8": TensorProto.INT8,
    "INT16": TensorProto.INT16,
    "INT32": TensorProto.INT32,
    "INT64": TensorProto.INT64,
    "FP16": TensorProto.FLOAT16,
    "FP32": TensorProto.FLOAT,
    "FP64": TensorProto.DOUBLE,
    "BYTES": TensorProto.STRING,
}
FIXED_TYPES = {wire: elem for wire, elem in ONNX_TYPES.items() if wire != "BYTES"}


def model(nodes, inputs, outputs, initializers=(), opsets=None) -> bytes:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    opsets = opsets or [helper.make_opsetid("", OPSET)]
    proto = helper.make_model(graph, opset_imports=opsets, producer_name="naiad-tests")
    proto.ir_version = 8
    return proto.SerializeToString()


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def add_sub(shape=("batch", 16), elem=TensorProto.FLOAT) -> bytes:
    shape = list(shape)
    return model(
        [
            helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
            helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
        ],
        [vi("INPUT0", elem, shape), vi("INPUT1", elem, shape)],
        [vi("OUTPUT0", elem, shape), vi("OUTPUT1", elem, shape)],
    )


def identity_all(types=None) -> bytes:
    """IN_<T> -> OUT_<T> (Identity) for every datatype (or `types`), batch dim first,
    then 3."""
    nodes, ins, outs = [], [], []
    for wire, elem in (types or ONNX_TYPES).items():
        nodes.append(helper.make_node("Identity", [f"IN_{wire}"], [f"OUT_{wire}"]))
        ins.append(vi(f"IN_{wire}", elem, ["batch", 3]))
        outs.append(vi(f"OUT_{wire}", elem, ["batch", 3]))
    return model(nodes, ins, outs)


def scalar_model() -> bytes:
    """A scalar input and output (no batch dim): auto-complete gives dims [1]."""
    return model(
        [helper.make_node("Neg", ["X"], ["Y"])],
        [vi("X", TensorProto.FLOAT, [])],
        [vi("Y", TensorProto.FLOAT, [])],
    )


def custom_op_model() -> bytes:
    """An op no execution provider implements."""
    return model(
        [helper.make_node("NoSuchOp", ["X"], ["Y"], domain="com.example.naiad")],
        [vi("X", TensorProto.FLOAT, ["batch", 4])],
        [vi("Y", TensorProto.FLOAT, ["batch", 4])],
        opsets=[helper.make_opsetid("", OPSET), helper.make_opsetid("com.example.naiad", 1)],
    )


def sequence_model() -> bytes:
    """An input of a type Triton has no datatype for (a sequence of tensors), which
    onnxruntime itself serves."""
    seq = helper.make_tensor_sequence_value_info("X", TensorProto.FLOAT, ["n"])
    return model(
        [helper.make_node("ConcatFromSequence", ["X"], ["Y"], axis=0)],
        [seq],
        [vi("Y", TensorProto.FLOAT, ["m"])],
    )


def bf16_model() -> bytes:
    """BF16 in and out: onnxruntime has it, numpy (and so Naiad's worker) does not."""
    return model(
        [helper.make_node("Identity", ["X"], ["Y"])],
        [vi("X", TensorProto.BFLOAT16, ["batch", 2])],
        [vi("Y", TensorProto.BFLOAT16, ["batch", 2])],
    )


def _config(name, body: str) -> str:
    return f'name: "{name}"\nbackend: "onnxruntime"\n{body}\n'


_ADD_SUB_IO = """
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]
"""

# name -> (model bytes or None for no file, config.pbtxt text or None for none, extra files)
GOOD = {
    # explicit config, dynamic batching, reads the batch over the arena
    "onnx_add_sub": (
        add_sub(),
        _config(
            "onnx_add_sub",
            "max_batch_size: 8\ndynamic_batching { max_queue_delay_microseconds: 20000 }\n"
            + _ADD_SUB_IO
            + 'parameters { key: "intra_op_thread_count" value: { string_value: "1" } }\n'
            + 'parameters { key: "execution_mode" value: { string_value: "0" } }\n'
            + 'parameters { key: "memory.enable_memory_arena_shrinkage" value: { string_value: "cpu:0" } }\n'
            + "optimization { graph { level: 1 } }",
        ),
        {},
    ),
    # add_sub whose batches leave full (8 rows) or after 5 s: the batching tests send 24
    # rows at once, and their requests share executions however slowly they arrive.
    "onnx_add_sub_full": (
        add_sub(),
        _config(
            "onnx_add_sub_full",
            "max_batch_size: 8\ndynamic_batching { max_queue_delay_microseconds: 5000000 }\n"
            + _ADD_SUB_IO,
        ),
        {},
    ),
    # every datatype, auto-completed (no config.pbtxt)
    "onnx_identity_all": (identity_all(), None, {}),
    # every fixed-size datatype (no BYTES): outputs written in place into the response
    "onnx_identity_fixed": (identity_all(FIXED_TYPES), None, {}),
    # BYTES alone: copied into the response block (its size is known only once it ran)
    "onnx_identity_text": (identity_all({"BYTES": TensorProto.STRING}), None, {}),
    # auto-complete: no config at all
    "onnx_auto": (add_sub(), None, {}),
    # auto-complete: only max_batch_size given (kept; dynamic batching added)
    "onnx_auto_partial": (add_sub(), 'max_batch_size: 16\nbackend: "onnxruntime"', {}),
    # auto-complete: max_batch_size 1 (no dynamic batching added), platform only
    "onnx_auto_mbs1": (add_sub(), 'platform: "onnxruntime_onnx"\nmax_batch_size: 1', {}),
    # auto-complete: no batch dimension -> max_batch_size 0, full dims
    "onnx_auto_nobatch": (add_sub(shape=(2, 3)), None, {}),
    # auto-complete: scalar tensors -> dims [1]
    "onnx_auto_scalar": (scalar_model(), None, {}),
    # auto-complete: inputs given, outputs filled
    "onnx_auto_outputs": (
        add_sub(),
        "max_batch_size: 4\n"
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] },\n'
        '        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]',
        {},
    ),
    # variable width: a request whose widths disagree is rejected by ORT at run time
    "onnx_variable": (
        add_sub(shape=("batch", "width")),
        _config(
            "onnx_variable",
            "max_batch_size: 8\n"
            'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] },\n'
            '        { name: "INPUT1" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
            'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] },\n'
            '         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ -1 ] } ]',
        ),
        {},
    ),
    # warmup: zero, random and file data, two samples
    "onnx_warmup": (
        add_sub(),
        _config(
            "onnx_warmup",
            "max_batch_size: 8\n"
            + _ADD_SUB_IO
            + """
model_warmup [
  { name: "zeros" batch_size: 4 count: 2
    inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 16 ] zero_data: true } }
    inputs { key: "INPUT1" value: { data_type: TYPE_FP32 dims: [ 16 ] random_data: true } } },
  { name: "from_file" batch_size: 1
    inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 16 ] input_data_file: "in0" } }
    inputs { key: "INPUT1" value: { data_type: TYPE_FP32 dims: [ 16 ] zero_data: true } } }
]""",
        ),
        {"warmup/in0": bytes(64)},
    ),
}

BAD = {
    # version folder without model.onnx
    "bad_missing_file": (
        None,
        _config("bad_missing_file", "max_batch_size: 8\n" + _ADD_SUB_IO),
        {},
    ),
    # model.onnx that is not a model
    "bad_corrupt": (
        b"this is not an onnx model",
        _config("bad_corrupt", "max_batch_size: 8\n" + _ADD_SUB_IO),
        {},
    ),
    # an input name the model does not have
    "bad_input_name": (
        add_sub(),
        _config(
            "bad_input_name", "max_batch_size: 8\n" + _ADD_SUB_IO.replace('"INPUT1"', '"INPUTX"')
        ),
        {},
    ),
    # wrong datatype
    "bad_datatype": (
        add_sub(),
        _config(
            "bad_datatype",
            "max_batch_size: 8\n" + _ADD_SUB_IO.replace("TYPE_FP32", "TYPE_INT32", 1),
        ),
        {},
    ),
    # wrong dims
    "bad_dims": (
        add_sub(),
        _config("bad_dims", "max_batch_size: 8\n" + _ADD_SUB_IO.replace("[ 16 ]", "[ 8 ]", 1)),
        {},
    ),
    # max_batch_size on a model without a batch dimension (full config)
    "bad_max_batch": (
        add_sub(shape=(16,)),
        _config("bad_max_batch", "max_batch_size: 8\n" + _ADD_SUB_IO),
        {},
    ),
    # max_batch_size on a model without a batch dimension (auto-complete refuses)
    "bad_autofill_batch": (add_sub(shape=(16,)), "max_batch_size: 8", {}),
    # a type Triton has no datatype for
    "bad_unsupported_type": (sequence_model(), None, {}),
    # BF16 (auto-complete and an explicit config)
    "bad_bf16": (bf16_model(), None, {}),
    "bad_bf16_config": (
        bf16_model(),
        _config(
            "bad_bf16_config",
            "max_batch_size: 2\n"
            'input [ { name: "X" data_type: TYPE_BF16 dims: [ 2 ] } ]\n'
            'output [ { name: "Y" data_type: TYPE_BF16 dims: [ 2 ] } ]',
        ),
        {},
    ),
    # an op no execution provider has
    "bad_custom_op": (custom_op_model(), None, {}),
    # a warmup that fails: dims the model rejects
    "bad_warmup": (
        add_sub(),
        _config(
            "bad_warmup",
            "max_batch_size: 8\n"
            + _ADD_SUB_IO
            + """
model_warmup [ { name: "wrong_width" batch_size: 2
  inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 3 ] zero_data: true } }
  inputs { key: "INPUT1" value: { data_type: TYPE_FP32 dims: [ 3 ] zero_data: true } } } ]""",
        ),
        {},
    ),
}


def write_model(root: Path, name: str, onnx_bytes, config, files) -> Path:
    folder = root / name
    (folder / "1").mkdir(parents=True, exist_ok=True)
    if onnx_bytes is not None:
        (folder / "1" / "model.onnx").write_bytes(onnx_bytes)
    if config is not None:
        (folder / "config.pbtxt").write_text(config)
    for relative, data in files.items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return folder


def build_repository(root: Path, bad: bool = True, names=None) -> Path:
    """mlp_onnx and conv_onnx (the examples) and GOOD (and BAD) models; `names`: only those of them."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copytree(EXAMPLE_MODELS / "mlp_onnx", root / "mlp_onnx")
    shutil.copytree(EXAMPLE_MODELS / "conv_onnx", root / "conv_onnx")
    for name, spec in {**GOOD, **(BAD if bad else {})}.items():
        if names is None or name in names:
            write_model(root, name, *spec)
    return root


def check_model(data: bytes) -> None:
    onnx.checker.check_model(onnx.load_from_string(data))
