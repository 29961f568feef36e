"""Build the ONNX models Naiad ships from code, with the `onnx` package (nothing downloaded).

    .venv/bin/python tools/build_onnx_models.py          # writes the files below
    .venv/bin/python tools/build_onnx_models.py --check  # exit 1 if a committed file differs

- model_repository/mlp_onnx/1/model.onnx: a small MLP classifier, INPUT [-1, 16] FP32 ->
  Gemm(16x32) -> Relu -> Gemm(32x10) -> OUTPUT [-1, 10] FP32 (logits) and
  PROBABILITIES [-1, 10] (softmax). Weights from a fixed seed, so the file is the same
  on every run (tests/test_onnx_example.py checks the committed one).
- model_repository/conv_onnx/1/model.onnx: a small convolutional classifier, INPUT
  [-1, 3, 64, 64] FP32 -> OUTPUT [-1, 10] (see conv()): the example where model compute
  dominates, which perf/onnx_limit.py measures against onnxruntime in-process.
- perf/models/add_sub_onnx/1/model.onnx: add_sub as an ONNX graph (OUTPUT0 = INPUT0 + INPUT1,
  OUTPUT1 = INPUT0 - INPUT1, FP32 [-1, 16]), the perf/ ONNX scenario's model.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
# Opset and IR version pinned so the bytes do not change with the onnx package.
OPSET = 17
IR_VERSION = 8


def _model(graph) -> onnx.ModelProto:
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="naiad"
    )
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model


def mlp(features: int = 16, hidden: int = 32, classes: int = 10, seed: int = 0):
    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal((features, hidden)) / np.sqrt(features)).astype(np.float32)
    b1 = (rng.standard_normal(hidden) * 0.1).astype(np.float32)
    w2 = (rng.standard_normal((hidden, classes)) / np.sqrt(hidden)).astype(np.float32)
    b2 = (rng.standard_normal(classes) * 0.1).astype(np.float32)
    nodes = [
        helper.make_node("Gemm", ["INPUT", "w1", "b1"], ["h"], name="fc1"),
        helper.make_node("Relu", ["h"], ["a"], name="relu"),
        helper.make_node("Gemm", ["a", "w2", "b2"], ["OUTPUT"], name="fc2"),
        helper.make_node("Softmax", ["OUTPUT"], ["PROBABILITIES"], name="softmax", axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, ["batch", features])],
        [
            helper.make_tensor_value_info("OUTPUT", TensorProto.FLOAT, ["batch", classes]),
            helper.make_tensor_value_info("PROBABILITIES", TensorProto.FLOAT, ["batch", classes]),
        ],
        initializer=[
            numpy_helper.from_array(w1, "w1"),
            numpy_helper.from_array(b1, "b1"),
            numpy_helper.from_array(w2, "w2"),
            numpy_helper.from_array(b2, "b2"),
        ],
    )
    return _model(graph), (w1, b1, w2, b2)


def add_sub(width: int = 16, elem=TensorProto.FLOAT, batch=True):
    shape = ["batch", width] if batch else [width]
    nodes = [
        helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
        helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
    ]
    graph = helper.make_graph(
        nodes,
        "add_sub",
        [
            helper.make_tensor_value_info("INPUT0", elem, shape),
            helper.make_tensor_value_info("INPUT1", elem, shape),
        ],
        [
            helper.make_tensor_value_info("OUTPUT0", elem, shape),
            helper.make_tensor_value_info("OUTPUT1", elem, shape),
        ],
    )
    return _model(graph)


def conv(classes: int = 10, seed: int = 0):
    """A small convolutional classifier over FP32 [3, 64, 64] images: conv 3->32 (3x3) ->
    Relu -> conv 32->64 (3x3) -> Relu -> conv 64->128 (3x3, stride 2) -> Relu -> global
    average pool -> Gemm 128->10 (logits). About 155 M multiply-adds per image (93 k
    weights): model compute, not the server, dominates, which perf/onnx_limit.py uses to
    measure the server against the model run in-process."""
    rng = np.random.default_rng(seed)

    def weights(*shape):
        fan_in = int(np.prod(shape[1:]))
        return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)

    w1, b1 = weights(32, 3, 3, 3), np.zeros(32, np.float32)
    w2, b2 = weights(64, 32, 3, 3), np.zeros(64, np.float32)
    w3, b3 = weights(128, 64, 3, 3), np.zeros(128, np.float32)
    w4, b4 = weights(10, 128).T.copy(), np.zeros(classes, np.float32)
    same = {"pads": [1, 1, 1, 1]}
    nodes = [
        helper.make_node("Conv", ["INPUT", "w1", "b1"], ["c1"], **same),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], **same),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"], strides=[2, 2], **same),
        helper.make_node("Relu", ["c3"], ["r3"]),
        helper.make_node("GlobalAveragePool", ["r3"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"], axis=1),
        helper.make_node("Gemm", ["f", "w4", "b4"], ["OUTPUT"]),
    ]
    graph = helper.make_graph(
        nodes,
        "conv",
        [helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, ["batch", 3, 64, 64])],
        [helper.make_tensor_value_info("OUTPUT", TensorProto.FLOAT, ["batch", classes])],
        initializer=[
            numpy_helper.from_array(array, name)
            for name, array in (
                ("w1", w1),
                ("b1", b1),
                ("w2", w2),
                ("b2", b2),
                ("w3", w3),
                ("b3", b3),
                ("w4", w4),
                ("b4", b4),
            )
        ],
    )
    return _model(graph)


def outputs() -> dict[Path, bytes]:
    return {
        ROOT / "model_repository/mlp_onnx/1/model.onnx": mlp()[0].SerializeToString(),
        ROOT / "perf/models/add_sub_onnx/1/model.onnx": add_sub().SerializeToString(),
        ROOT / "model_repository/conv_onnx/1/model.onnx": conv().SerializeToString(),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    options = parser.parse_args(argv)
    stale = []
    for path, data in outputs().items():
        if options.check:
            if not path.exists() or path.read_bytes() != data:
                stale.append(path)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        print(f"wrote {path.relative_to(ROOT)} ({len(data)} bytes)")
    for path in stale:
        print(f"differs from what the script builds: {path.relative_to(ROOT)}", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
