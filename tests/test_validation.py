"""naiad.validation: Triton's request checks, in Triton's order, with Triton's messages
(recorded from a real Triton 2.51 for the same configs and requests), through the
general path's entry point into the one C++ validator (csrc/codec/request_validator.h)."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from naiad.errors import InvalidArgument
from naiad.protos import model_config_pb2 as mc
from naiad.types import InferRequest, InputTensor, RequestedOutput
from naiad.validation import RequestValidator

P = "[request id: <id_unknown>] "
NOTE = (
    "NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to "
    "be prepended to each input shape. If you want to specify the full shape including the "
    "batch dim in your input dims config, try setting max_batch_size to zero. See the model "
    "configuration docs for more info on max_batch_size."
)


def addsub_config():
    c = mc.ModelConfig(name="addsub", max_batch_size=64)
    c.input.add(name="INPUT0", data_type=mc.TYPE_FP32, dims=[16])
    c.input.add(name="INPUT1", data_type=mc.TYPE_FP32, dims=[16])
    c.output.add(name="OUTPUT0", data_type=mc.TYPE_FP32, dims=[16])
    c.output.add(name="OUTPUT1", data_type=mc.TYPE_FP32, dims=[16])
    return c


def nobatch_config():
    c = mc.ModelConfig(name="nobatch", max_batch_size=0)
    c.input.add(name="H", data_type=mc.TYPE_FP16, dims=[2, 2])
    c.input.add(name="B", data_type=mc.TYPE_BOOL, dims=[-1])
    c.input.add(name="OPT", data_type=mc.TYPE_INT32, dims=[1], optional=True)
    c.output.add(name="HO", data_type=mc.TYPE_FP16, dims=[2, 2])
    return c


def bytes_config():
    c = mc.ModelConfig(name="identity_bytes", max_batch_size=8)
    c.input.add(name="INPUT0", data_type=mc.TYPE_STRING, dims=[-1])
    c.output.add(name="OUTPUT0", data_type=mc.TYPE_STRING, dims=[-1])
    return c


def fp32(name, shape, count=None):
    n = int(np.prod(shape)) if count is None else count
    return InputTensor(name, "FP32", list(shape), np.zeros(n, np.float32).tobytes())


def addsub_request(batch=1, request_id="", outputs=None):
    return InferRequest(
        "addsub",
        "",
        request_id,
        [fp32("INPUT0", [batch, 16]), fp32("INPUT1", [batch, 16])],
        outputs,
    )


def bytes_tensor(items, shape):
    data = b"".join(struct.pack("<I", len(x)) + x for x in items)
    return InputTensor("INPUT0", "BYTES", shape, memoryview(data))


def check(config, request, message):
    with pytest.raises(InvalidArgument) as info:
        RequestValidator(config, config.name, 1).validate(request)
    assert info.value.message == message
    assert info.value.http_status == 400


def test_valid_requests_return_batch_size():
    v = RequestValidator(addsub_config(), "addsub", 1)
    assert v.validate(addsub_request(1)) == 1
    assert v.validate(addsub_request(64)) == 64
    outputs = [RequestedOutput("OUTPUT1")]
    assert v.validate(addsub_request(3, outputs=outputs)) == 3
    nb = RequestValidator(nobatch_config(), "nobatch", 1)
    req = InferRequest(
        "nobatch",
        "",
        "",
        [
            InputTensor("H", "FP16", [2, 2], b"\0" * 8),
            InputTensor("B", "BOOL", [5], b"\1" * 5),
        ],
    )
    assert nb.validate(req) == 1  # non-batching models count as one
    req.inputs.append(InputTensor("OPT", "INT32", [1], b"\0" * 4))
    assert nb.validate(req) == 1
    by = RequestValidator(bytes_config(), "identity_bytes", 1)
    assert (
        by.validate(InferRequest("identity_bytes", "", "", [bytes_tensor([b"a", b""], [1, 2])]))
        == 1
    )


def test_shape_key_separates_variable_shapes_only():
    cfg = bytes_config()
    v = RequestValidator(cfg, cfg.name, 1)

    def key(shape):
        n = int(np.prod(shape))
        tensor = bytes_tensor([b"x"] * n, shape)
        return v.check(InferRequest("identity_bytes", "", "", [tensor]))[1]

    assert key([1, 3]) == key([2, 3]) != key([1, 4])
    assert key([1, 3]) != 0
    assert RequestValidator(addsub_config(), "addsub", 1).check(addsub_request(2)) == (2, 0)


def test_messages_echo_names_and_ids_as_sent():
    req = addsub_request(request_id='naïve "id"')
    req.inputs[0].datatype = "INT32"
    check(
        addsub_config(),
        req,
        "[request id: naïve \"id\"] inference input 'INPUT0' data-type is 'INT32', but model "
        "'addsub' expects 'FP32'",
    )


def test_unknown_input():
    req = addsub_request()
    req.inputs[0].name = "BOGUS"
    check(addsub_config(), req, "unexpected inference input 'BOGUS' for model 'addsub'")


def test_unknown_output_is_checked_before_inputs():
    req = addsub_request(outputs=[RequestedOutput("BAD")])
    req.inputs[0].name = "BOGUS"
    check(addsub_config(), req, "unexpected inference output 'BAD' for model 'addsub'")


def test_missing_input():
    req = addsub_request()
    req.inputs.pop()
    check(
        addsub_config(),
        req,
        f"{P}expected 2 inputs but got 1 inputs for model 'addsub'. Got input(s) ['INPUT0'], "
        "but missing required input(s) ['INPUT1']. Please provide all required input(s).",
    )
    req.inputs.pop()
    check(
        addsub_config(),
        req,
        f"{P}expected 2 inputs but got 0 inputs for model 'addsub'. Got input(s) [], but "
        "missing required input(s) ['INPUT0','INPUT1']. Please provide all required input(s).",
    )


def test_missing_input_with_optional_inputs():
    req = InferRequest("nobatch", "", "", [InputTensor("B", "BOOL", [3], b"\1\0\1")])
    check(
        nobatch_config(),
        req,
        f"{P}expected number of inputs between 2 and 3 but got 1 inputs for model 'nobatch'. "
        "Got input(s) ['B'], but missing required input(s) ['H']. Please provide all required "
        "input(s).",
    )
    # Right count, but a required input is replaced by the optional one (Triton lets this
    # through to the backend; we answer with the same message instead).
    req.inputs.append(InputTensor("OPT", "INT32", [1], b"\0" * 4))
    check(
        nobatch_config(),
        req,
        f"{P}expected number of inputs between 2 and 3 but got 2 inputs for model 'nobatch'. "
        "Got input(s) ['B','OPT'], but missing required input(s) ['H']. Please provide all "
        "required input(s).",
    )


def test_duplicate_input():
    req = addsub_request()
    req.inputs.append(fp32("INPUT0", [1, 16]))
    check(addsub_config(), req, f"{P}input 'INPUT0' already exists in request")


def test_datatype_mismatch_uses_request_id_prefix():
    req = addsub_request(request_id="myid")
    req.inputs[0].datatype = "INT32"
    check(
        addsub_config(),
        req,
        "[request id: myid] inference input 'INPUT0' data-type is 'INT32', but model 'addsub' "
        "expects 'FP32'",
    )


def test_shape_mismatch_batching_and_not():
    req = addsub_request()
    req.inputs[0] = fp32("INPUT0", [1, 8])
    check(
        addsub_config(),
        req,
        f"{P}unexpected shape for input 'INPUT0' for model 'addsub'. Expected [-1,16], got "
        f"[1,8]. {NOTE}",
    )
    req = InferRequest(
        "nobatch",
        "",
        "",
        [InputTensor("H", "FP16", [1, 2, 2], b"\0" * 8), InputTensor("B", "BOOL", [1], b"\1")],
    )
    check(
        nobatch_config(),
        req,
        f"{P}unexpected shape for input 'H' for model 'nobatch'. Expected [2,2], got [1,2,2]. ",
    )


def test_batch_checks():
    check(
        addsub_config(),
        addsub_request(65),
        f"{P}inference request batch-size must be <= 64 for 'addsub'",
    )
    req = addsub_request()
    req.inputs[1] = fp32("INPUT1", [2, 16])
    # Triton names an input in its own (hash map) order; we name the first that disagrees
    # with the ones before it in request order.
    check(
        addsub_config(),
        req,
        f"{P}input 'INPUT1' batch size does not match other inputs for 'addsub'",
    )
    req = addsub_request()
    req.inputs[0] = fp32("INPUT0", [], count=16)
    check(
        addsub_config(),
        req,
        f"{P}input 'INPUT0' has no shape but model requires batch dimension for 'addsub'",
    )


def test_batch_check_comes_before_shape_and_dtype():
    req = addsub_request(65)
    req.inputs[0] = InputTensor("INPUT0", "INT32", [65, 8], b"\0" * (65 * 8 * 4))
    check(addsub_config(), req, f"{P}inference request batch-size must be <= 64 for 'addsub'")


def test_byte_size_mismatch():
    req = addsub_request()
    req.inputs[1] = fp32("INPUT1", [1, 16], count=24)
    check(
        addsub_config(),
        req,
        f"{P}input byte size mismatch for input 'INPUT1' for model 'addsub'. Expected 64, got 96",
    )


def test_zero_batch_is_sized_without_the_batch_dim_like_triton():
    req = addsub_request(0)
    check(
        addsub_config(),
        req,
        f"{P}input byte size mismatch for input 'INPUT0' for model 'addsub'. Expected 64, got 0",
    )


def test_bytes_element_count():
    cfg = bytes_config()

    def req(tensor, rid=""):
        return InferRequest("identity_bytes", "", rid, [tensor])

    check(
        cfg,
        req(bytes_tensor([b"abc", b"x"], [1, 3]), "s"),
        "[request id: s] expected 3 string elements for inference input 'INPUT0' for model "
        "'identity_bytes', got 2",
    )
    check(
        cfg,
        req(bytes_tensor([b"a", b"b", b"c", b"d"], [1, 3])),
        f"{P}unexpected number of string elements 4 for inference input 'INPUT0' for model "
        "'identity_bytes', expecting 3",
    )
    truncated = InputTensor("INPUT0", "BYTES", [1, 3], b"\1\0\0\0a\1\0\0\0b\1\0\0\0c\2\0")
    check(
        cfg,
        req(truncated),
        f"{P}incomplete string length indicator for inference input 'INPUT0' for model "
        "'identity_bytes', expecting 4 bytes but only 2 bytes available. Please make sure the "
        "string length indicator is in one buffer.",
    )
    short = InputTensor("INPUT0", "BYTES", [1, 1], b"\5\0\0\0ab")
    check(
        cfg,
        req(short),
        "incomplete string data for inference input 'INPUT0', expecting string of length 5 but "
        "only 2 bytes available",
    )


def test_string_config_type_is_wire_bytes():
    req = InferRequest("identity_bytes", "", "", [InputTensor("INPUT0", "UINT8", [1, 1], b"a")])
    check(
        bytes_config(),
        req,
        f"{P}inference input 'INPUT0' data-type is 'UINT8', but model 'identity_bytes' expects "
        "'BYTES'",
    )
