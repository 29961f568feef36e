"""The h2load scenarios' hand-written gRPC messages, read back by protobuf's generated code
(tritonclient's grpc_service_pb2), and the answer check h2load's counts rely on.

perf/.tools/venv/bin/python -m pytest perf/tests/test_h2load_messages.py -q
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import numpy as np
import pytest

PERF = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PERF))

import h2load_load  # noqa: E402

pb = pytest.importorskip("tritonclient.grpc.service_pb2")


def test_the_request_is_the_model_infer_request_protobuf_reads():
    small = np.arange(16, dtype=np.float32).reshape(1, 16)
    large = np.random.default_rng(3).standard_normal((1, 3, 224, 224)).astype(np.float32)
    payload = h2load_load.infer_request(
        "identity_fp32", {"INPUT0": small, "INPUT1": large}, ["OUTPUT0"]
    )
    request = pb.ModelInferRequest()
    request.ParseFromString(payload)
    assert request.model_name == "identity_fp32"
    assert [(t.name, t.datatype, list(t.shape)) for t in request.inputs] == [
        ("INPUT0", "FP32", [1, 16]),
        ("INPUT1", "FP32", [1, 3, 224, 224]),
    ]
    assert [o.name for o in request.outputs] == ["OUTPUT0"]
    assert request.raw_input_contents[0] == small.tobytes()
    assert request.raw_input_contents[1] == large.tobytes()


def test_the_grpc_message_prefix_is_uncompressed_and_big_endian():
    message = h2load_load.grpc_message(b"x" * 300)
    assert message[:5] == struct.pack(">BI", 0, 300) and message[5:] == b"x" * 300


def test_the_response_outputs_are_read_in_the_order_protobuf_wrote_them():
    response = pb.ModelInferResponse(model_name="add_sub")
    want = {
        "OUTPUT0": np.arange(16, dtype=np.float32).reshape(1, 16),
        "OUTPUT1": -np.arange(16, dtype=np.float32).reshape(1, 16),
    }
    for name, array in want.items():
        tensor = response.outputs.add(name=name, datatype="FP32")
        tensor.shape.extend(array.shape)
        response.raw_output_contents.append(array.tobytes())
    got = h2load_load.infer_response_outputs(response.SerializeToString())
    assert list(got) == list(want)
    for name, array in want.items():
        np.testing.assert_array_equal(got[name], array)


def test_outputs_without_their_raw_contents_are_refused():
    response = pb.ModelInferResponse()
    response.outputs.add(name="OUTPUT0", datatype="FP32").shape.extend([1, 16])
    with pytest.raises(ValueError, match="1 outputs described, 0 raw contents"):
        h2load_load.infer_response_outputs(response.SerializeToString())
