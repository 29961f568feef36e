"""Differential: ModelInferRequest forms the C++ reader takes (csrc/http2/grpc_lane.h),
valid and invalid, sent as the same message to Naiad and to the real Triton 2.51, unary
and on a ModelStreamInfer stream; status, message and answer must be the same. Typed
`contents` of inputs (InferTensorContents), ids, request and output parameters
(classification among them) and routes.

Triton comes from perf/'s tools (`make perf-tools` installs it under perf/.tools/, or
$NAIAD_PERF_TOOLS); the test is skipped where it is not installed.
"""

from __future__ import annotations

import json
import os
import struct
import sys
import urllib.request
from multiprocessing import shared_memory
from pathlib import Path

import grpc
import pytest
from server_harness import REPO_ROOT, NaiadServer, make_repository
from triton_peer import TritonPeer
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pbg

# perf/servers.py's TritonServer looks in the same place ($NAIAD_PERF_TOOLS in a worktree).
TOOLS = Path(os.environ.get("NAIAD_PERF_TOOLS", REPO_ROOT / "perf" / ".tools"))
TRITON = TOOLS / "triton" / "bin" / "tritonserver"
GRPC_MODELS = Path(__file__).resolve().parent.parent / "grpc_models"
MODELS = {
    "add_sub": None,
    "identity_bytes": None,
    "identity_all": GRPC_MODELS / "identity_all",
    "request_echo": None,
    "classes": GRPC_MODELS.parent / "surface_models" / "classes",
    "classes_nobatch": GRPC_MODELS.parent / "surface_models" / "classes_nobatch",
}
TIMEOUT = 30


@pytest.fixture(scope="module")
def triton(tmp_path_factory):
    if not TRITON.exists():
        pytest.skip("the real Triton is not installed (make perf-tools installs it)")
    sys.path.insert(0, str(REPO_ROOT / "perf"))
    from servers import TritonServer

    root = tmp_path_factory.mktemp("triton")
    server = TritonServer()
    server.start(make_repository(root / "models", MODELS), None, root / "triton.log")
    yield f"127.0.0.1:{server.grpc_port}"
    server.stop()


@pytest.fixture(scope="module")
def naiad_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("naiad")
    server = NaiadServer(make_repository(root / "models", MODELS), log_dir=root, name="contents")
    server.start(wait="ready", timeout=120)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def naiad(naiad_server):
    return f"{naiad_server.host}:{naiad_server.grpc_port}"


def _assert_the_lanes(before: dict, after: dict) -> None:
    """One call, answered or refused by the C++ lane, not by the general path."""
    taken = ("lane_requests", "lane_refused", "lane_cached")
    assert sum(after[k] - before[k] for k in taken) == 1, (before, after)
    assert after["general_requests"] == before["general_requests"]


def _lanes(server) -> dict:
    with urllib.request.urlopen(f"http://{server.host}:{server.http_port}/v2/naiad/lanes") as r:
        return json.loads(r.read())


def _request(model: str, id: str = "", **fields) -> pb.ModelInferRequest:
    return pb.ModelInferRequest(model_name=model, id=id, **fields)


def _add_sub(field: str, values0, values1=None, id: str = "typed"):
    request = _request("add_sub", id)
    for name, values in (("INPUT0", values0), ("INPUT1", values1 or values0)):
        tensor = request.inputs.add(name=name, datatype="FP32", shape=[1, 16])
        getattr(tensor.contents, field).extend(values)
    return request


def _one(datatype: str, shape, field: str, values, name: str | None = None):
    """identity_all with one input (the others are required too: Triton names the first
    missing one only after reading every input's contents)."""
    request = _request("identity_all", "one")
    tensor = request.inputs.add(name=name or f"IN_{datatype}", datatype=datatype, shape=shape)
    getattr(tensor.contents, field).extend(values)
    return request


def _every_type():
    request = _request("identity_all", "every")
    values = {
        "BOOL": ("bool_contents", [True, False, True]),
        "UINT8": ("uint_contents", [0, 255, 256 + 7]),  # past the type: its low byte
        "UINT16": ("uint_contents", [1, 65535, 70000]),
        "UINT32": ("uint_contents", [0, 4294967295, 12]),
        "UINT64": ("uint64_contents", [0, 2**64 - 1, 5]),
        "INT8": ("int_contents", [-128, 127, 300]),
        "INT16": ("int_contents", [-32768, 32767, -40000]),
        "INT32": ("int_contents", [-(2**31), 2**31 - 1, 0]),
        "INT64": ("int64_contents", [-(2**63), 2**63 - 1, -1]),
        "FP32": ("fp32_contents", [1.5, float("inf"), -0.0]),
        "FP64": ("fp64_contents", [2.25, float("-inf"), 1e300]),
    }
    for datatype, (field, data) in values.items():
        tensor = request.inputs.add(name=f"IN_{datatype}", datatype=datatype, shape=[3])
        getattr(tensor.contents, field).extend(data)
    tensor = request.inputs.add(name="IN_STRING", datatype="BYTES", shape=[3])
    tensor.contents.bytes_contents.extend([b"alpha", b"", b"\x00\xff"])
    return request


def _bytes(words, shape):
    request = _request("identity_bytes")
    tensor = request.inputs.add(name="INPUT0", datatype="BYTES", shape=shape)
    tensor.contents.bytes_contents.extend(words)
    return request


def _two_fields(first: str, second: str):
    request = _add_sub("fp32_contents", [1.0] * 16)
    contents = request.inputs[0].contents
    contents.Clear()
    getattr(contents, first).extend([1] * 16)
    getattr(contents, second).extend([1] * 16)
    return request


def _empty_contents():
    request = _add_sub("fp32_contents", [1.0] * 16)
    request.inputs[0].contents.ClearField("fp32_contents")
    request.inputs[0].contents.SetInParent()  # present, every field empty
    return request


def _typed_then_missing():
    request = _add_sub("fp32_contents", [1.0] * 16)
    request.inputs[1].ClearField("contents")
    return request


def _shm_and_contents():
    request = _add_sub("fp32_contents", [1.0] * 16)
    params = request.inputs[0].parameters
    params["shared_memory_region"].string_param = "nope"
    params["shared_memory_byte_size"].int64_param = 64
    return request


def _raw_beside_typed():
    request = _add_sub("fp32_contents", [1.0] * 16)
    request.inputs[1].ClearField("contents")
    request.raw_input_contents.append(b"\0" * 64)
    return request


def _raw(model: str = "add_sub", version: str = "", id: str = "", rows: int = 1):
    request = pb.ModelInferRequest(model_name=model, model_version=version, id=id)
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="FP32", shape=[rows, 16])
        request.raw_input_contents.append(struct.pack("<16f", *range(16)) * rows)
    return request


def _parameter(key: str, kind: str, value, request=None):
    request = request or _raw(id="p")
    if kind is None:
        request.parameters[key].SetInParent()
    else:
        setattr(request.parameters[key], kind, value)
    return request


def _output(name: str, **parameters):
    request = _raw(id="o")
    output = request.outputs.add(name=name)
    for key, (kind, value) in parameters.items():
        setattr(output.parameters[key], kind, value)
    return request


def _input_parameter(key: str, kind: str | None, value=None):
    request = _raw(id="i")
    if kind is None:
        request.inputs[0].parameters[key].SetInParent()
    else:
        setattr(request.inputs[0].parameters[key], kind, value)
    return request


def _echo(**parameters):
    """request_echo answers with what its model saw of the request's parameters."""
    request = pb.ModelInferRequest(model_name="request_echo", id="echo")
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 1])
    request.raw_input_contents.append(struct.pack("<f", 1.0))
    for key, (kind, value) in parameters.items():
        setattr(request.parameters[key], kind, value)
    return request


def _extra_raw():
    request = _raw()
    request.raw_input_contents.append(b"\0" * 64)
    return request


def _classes(model: str, datatype: str, fmt: str, rows, output: str, count, kind="int64_param"):
    """classes / classes_nobatch echo IN_<type> as OUT_<type>, asked to classify it."""
    request = _request(model, "c")
    batching = model == "classes"
    shape = [len(rows), len(rows[0])] if batching else [len(rows[0])]
    request.inputs.add(name=f"IN_{datatype}", datatype=datatype, shape=shape)
    data = b"".join(
        struct.pack(f"<{len(row)}{fmt}", *row) for row in (rows if batching else rows[:1])
    )
    request.raw_input_contents.append(data)
    setattr(request.outputs.add(name=output).parameters["classification"], kind, count)
    return request


def _typed_for_unknown_model():
    request = _add_sub("int_contents", [1] * 16)
    request.model_name = "nope"
    return request


CASES = {
    "fp32": _add_sub("fp32_contents", [float(i) for i in range(16)]),
    "fp32_short": _add_sub("fp32_contents", [1.0] * 16, [1.0] * 15),
    "fp32_long": _add_sub("fp32_contents", [1.0] * 16, [1.0] * 17),
    "int_for_fp32": _add_sub("int_contents", [1] * 16),
    "fp64_for_fp32": _add_sub("fp64_contents", [1.0] * 16),
    "bytes_for_fp32": _add_sub("bytes_contents", [b"x"] * 16),
    "bool_for_fp32": _add_sub("bool_contents", [True] * 16),
    "two_fields_same_type_first": _two_fields("fp32_contents", "fp64_contents"),
    "two_fields_bool_first": _two_fields("bool_contents", "fp32_contents"),
    "two_fields_int_uint": _two_fields("int_contents", "uint_contents"),
    "empty_contents": _empty_contents(),
    "typed_then_missing": _typed_then_missing(),
    "shm_and_contents": _shm_and_contents(),
    "raw_beside_typed": _raw_beside_typed(),
    "every_type": _every_type(),
    "fp16": _one("FP16", [2], "fp32_contents", [1.0, 2.0]),
    "bf16": _one("BF16", [2], "fp32_contents", [1.0, 2.0], name="IN_FP16"),
    "int_for_int64": _one("INT64", [2], "int_contents", [1, 2]),
    "int64_for_int32": _one("INT32", [2], "int64_contents", [1, 2]),
    "uint_for_uint64": _one("UINT64", [2], "uint_contents", [1, 2]),
    "uint64_for_uint32": _one("UINT32", [2], "uint64_contents", [1, 2]),
    "int_for_uint8": _one("UINT8", [2], "int_contents", [1, 2]),
    "uint_for_int8": _one("INT8", [2], "uint_contents", [1, 2]),
    "unknown_datatype": _one("FOO", [2], "fp32_contents", [1.0, 2.0], name="IN_FP32"),
    "bytes": _bytes([b"alpha", b"", b"\x00\x01"], [1, 3]),
    "bytes_short": _bytes([b"alpha", b"beta"], [1, 3]),
    "bytes_long": _bytes([b"a", b"b", b"c", b"d"], [1, 3]),
    "fp32_for_bytes": _one("BYTES", [1], "fp32_contents", [1.0], name="IN_STRING"),
    "extra_raw": _extra_raw(),
    # Ids: any characters come back as sent.
    "id_quotes": _raw(id='say "hi" \\ back'),
    "id_controls": _raw(id="tab\tnew\nline\x01"),
    "id_unicode": _raw(id="h\u00e9llo \u2603 \U0001f600"),
    "id_invalid_refused": _add_sub("fp32_contents", [1.0] * 16, [1.0] * 15, id='q"\n'),
    # Request parameters: the forms Triton takes and its refusals.
    "priority_int": _parameter("priority", "int64_param", 1),
    "priority_uint": _parameter("priority", "uint64_param", 1),
    "priority_negative": _parameter("priority", "int64_param", -1),
    "priority_double": _parameter("priority", "double_param", 1.0),
    "priority_string": _parameter("priority", "string_param", "1"),
    "timeout_int": _parameter("timeout", "int64_param", 10_000_000),
    "timeout_uint": _parameter("timeout", "uint64_param", 10),
    "timeout_bool": _parameter("timeout", "bool_param", True),
    "sequence_id_uint": _parameter("sequence_id", "uint64_param", 3),
    "sequence_id_bool": _parameter("sequence_id", "bool_param", True),
    "sequence_start_int": _parameter("sequence_start", "int64_param", 1),
    "sequence_end_string": _parameter("sequence_end", "string_param", "yes"),
    "custom_int": _parameter("mine", "int64_param", -5),
    "custom_bool": _parameter("mine", "bool_param", False),
    "custom_string": _parameter("mine", "string_param", 'a "quoted" \\ value'),
    "custom_double": _parameter("mine", "double_param", 0.5),
    "custom_uint": _parameter("mine", "uint64_param", 5),
    "custom_unset": _parameter("mine", None, None),
    "reserved_prefix": _parameter("triton_mine", "bool_param", True),
    "empty_final_response": _parameter("triton_enable_empty_final_response", "bool_param", True),
    "empty_final_response_int": _parameter("triton_enable_empty_final_response", "int64_param", 1),
    "binary_data_output": _output("OUTPUT0", binary_data=("bool_param", True)),
    "output_unknown_parameter": _output("OUTPUT0", mine=("int64_param", 3)),
    "classification": _output("OUTPUT0", classification=("int64_param", 3)),
    "classification_too_many": _output("OUTPUT1", classification=("int64_param", 40)),
    "classification_zero": _output("OUTPUT0", classification=("int64_param", 0)),
    "classification_negative": _output("OUTPUT0", classification=("int64_param", -2)),
    "classification_uint": _output("OUTPUT0", classification=("uint64_param", 2)),
    "classification_string": _output("OUTPUT0", classification=("string_param", "2")),
    "classification_and_shm": _output(
        "OUTPUT0",
        classification=("int64_param", 2),
        shared_memory_region=("string_param", "r"),
        shared_memory_byte_size=("int64_param", 64),
    ),
    # Classification by the lane, with the model's labels (some empty, fewer than the
    # classes), ties in std::sort's order, batched and not; types without an order.
    "classes_fp32_labels": _classes(
        "classes", "FP32", "f", [[0.5, 2.0, 2.0, -1.0, 7.5, 2.0], [1, 1, 1, 1, 1, 1]], "OUT_FP32", 4
    ),
    "classes_int32_labels_all": _classes("classes", "INT32", "i", [[3, -7, 3, 9]], "OUT_INT32", 9),
    "classes_fp64_no_labels": _classes("classes", "FP64", "d", [[1e-7, 3.25, -2.5]], "OUT_FP64", 2),
    "classes_uint8": _classes("classes", "UINT8", "B", [[3, 200, 7], [9, 9, 1]], "OUT_UINT8", 1),
    "classes_nobatch": _classes("classes_nobatch", "FP32", "f", [[0.25, 4.0, 1.0]], "OUT_FP32", 2),
    "classes_fp16": _classes("classes", "FP16", "e", [[1.0, 2.0]], "OUT_FP16", 1),
    "classes_bool": _classes("classes", "BOOL", "?", [[True, False]], "OUT_BOOL", 1),
    "classes_bytes": _classes("classes", "BYTES", "5s", [[b"\x01\0\0\0a"]], "OUT_STRING", 1),
    "classes_zero": _classes("classes", "FP32", "f", [[1.0]], "OUT_FP32", 0),
    "classes_uint_kind": _classes("classes", "FP32", "f", [[1.0]], "OUT_FP32", 2, "uint64_param"),
    # Tensor parameters: other keys than shm's are ignored; shm keys without the
    # region they go with are refused.
    "input_parameter": _input_parameter("mine", "int64_param", 3),
    "input_parameter_unset": _input_parameter("mine", None),
    "input_binary_data_size": _input_parameter("binary_data_size", "int64_param", 64),
    "input_shm_offset_alone": _input_parameter("shared_memory_offset", "int64_param", 0),
    "input_shm_size_alone": _input_parameter("shared_memory_byte_size", "int64_param", 64),
    "input_shm_region_alone": _input_parameter("shared_memory_region", "string_param", "r"),
    "output_shm_region_alone": _output("OUTPUT0", shared_memory_region=("string_param", "r")),
    "output_shm_size_alone": _output("OUTPUT1", shared_memory_byte_size=("int64_param", 64)),
    # Routes: models and versions not served.
    "unknown_model": _raw(model="nope"),
    "unknown_version": _raw(version="7"),
    "version_not_a_number": _raw(version="one"),
    "version_negative": _raw(version="-1"),
    "empty_model_name": _raw(model=""),
    "version_zero": _raw(version="0"),
    "version_read_as_stol": _raw(version=" +01abc"),
    "version_past_long": _raw(version="9223372036854775808"),
    "version_long_min": _raw(version="-9223372036854775808"),
    # The version string is read before the model is looked up, and the model before
    # the inputs' data.
    "unknown_model_bad_version": _raw(model="nope", version="one"),
    "unknown_model_bad_contents": _typed_for_unknown_model(),
}


def _unary(url: str, request):
    # No deadline: a call with one (grpc-timeout) is still handed to Python, and these
    # calls are the C++ I/O loop's (pytest-timeout bounds a hang).
    with grpc.insecure_channel(url) as channel:
        stub = pbg.GRPCInferenceServiceStub(channel)
        try:
            return "OK", stub.ModelInfer(request)
        except grpc.RpcError as exc:
            return exc.code().name, exc.details()


def _streamed(url: str, request):
    with grpc.insecure_channel(url) as channel:
        stub = pbg.GRPCInferenceServiceStub(channel)
        (answer,) = list(stub.ModelStreamInfer(iter([request]), timeout=TIMEOUT))
        if answer.error_message:
            return "ERROR", answer.error_message, answer.infer_response.id
        return "OK", answer.infer_response


def _same_answer(ours, theirs):
    assert ours[0] == theirs[0], (ours, theirs)
    if ours[0] != "OK":
        assert ours[1:] == theirs[1:]
        return
    mine, other = ours[1], theirs[1]
    assert mine.id == other.id
    assert [(o.name, o.datatype, list(o.shape)) for o in mine.outputs] == [
        (o.name, o.datatype, list(o.shape)) for o in other.outputs
    ]
    assert list(mine.raw_output_contents) == list(other.raw_output_contents)


@pytest.mark.parametrize("case", list(CASES))
def test_unary_as_triton(naiad_server, naiad, triton, case):
    before = _lanes(naiad_server)
    ours, theirs = _unary(naiad, CASES[case]), _unary(triton, CASES[case])
    _same_answer(ours, theirs)
    _assert_the_lanes(before, _lanes(naiad_server))
    if ours[0] == "OK":
        assert dict(ours[1].parameters) == dict(theirs[1].parameters)


STREAMED = [
    "fp32",
    "fp32_short",
    "int_for_fp32",
    "bytes",
    "every_type",
    "id_quotes",
    "custom_double",
    "classification",
    "unknown_model",
    "unknown_version",
    "version_not_a_number",
    "version_negative",
]


def _varint(n: int) -> bytes:
    out = b""
    while n >= 0x80:
        out += bytes([n & 0x7F | 0x80])
        n >>= 7
    return out + bytes([n])


def _tag(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _string(field: int, data: bytes) -> bytes:
    return _tag(field, 2) + _varint(len(data)) + data


def _without_model(request) -> bytes:
    """The message's bytes after its model_name field (written first)."""
    data = request.SerializeToString()
    return data[len(_string(1, request.model_name.encode())) :]


_GOOD = _raw(id="p").SerializeToString()
_PARAMETER = _parameter("k", "string_param", "x").SerializeToString()

# Message bytes as protobuf's parser (grpc++) reads them: what it cannot parse is refused
# with INTERNAL before Triton sees the call; what it skips (unknown fields, groups, known
# fields of another wire type) changes nothing. Every one is the C++ lane's.
RAW_CASES = {
    "truncated_varint": b"\xff",
    "truncated_length": _GOOD[:-3],
    "field_zero": b"\x00\x01" + _GOOD,
    "field_past_max": _GOOD + _varint((1 << 29) << 3) + b"\x01",
    "field_max": _GOOD + _varint(((1 << 29) - 1) << 3) + b"\x01",
    "varint_11_bytes": _GOOD + _tag(20, 0) + b"\xff" * 10 + b"\x01",
    "varint_10th_byte_big": _GOOD + _tag(20, 0) + b"\xff" * 9 + b"\x7f",
    "model_as_varint": _tag(1, 0) + _varint(5) + _without_model(_raw(id="p")),
    "model_as_fixed32_after": _GOOD + _tag(1, 5) + b"abcd",
    "id_as_varint": _GOOD + _tag(3, 0) + _varint(1),
    "inputs_as_varint": _GOOD + _tag(5, 0) + _varint(1),
    "raw_as_varint": _GOOD + _tag(7, 0) + _varint(1),
    "model_as_group": _GOOD + _tag(1, 3) + _tag(1, 4),
    "unknown_group": _GOOD + _tag(20, 3) + _tag(1, 0) + _varint(3) + _tag(20, 4),
    "unknown_group_nested": _GOOD + _tag(20, 3) + _tag(21, 3) + _tag(21, 4) + _tag(20, 4),
    "group_ended_by_another": _GOOD + _tag(20, 3) + _tag(21, 4),
    "group_not_ended": _GOOD + _tag(20, 3),
    "group_end_alone": _GOOD + _tag(20, 4),
    "wire_type_6": _GOOD + _tag(20, 6),
    "model_not_utf8": _string(1, b"add\xffsub") + _without_model(_raw(id="p")),
    "unknown_model_not_utf8": _string(1, b"\xff"),
    "id_not_utf8": _GOOD + _string(3, b"\xc3"),
    "model_overlong_utf8": _string(1, b"\xc0\xaf"),
    "model_surrogate_utf8": _string(1, b"\xed\xa0\x80"),
    "model_past_max_utf8": _string(1, b"\xf4\x90\x80\x80"),
    "model_max_utf8": _string(1, b"\xf4\x8f\xbf\xbf"),
    "string_param_not_utf8": _PARAMETER.replace(b"\x01x", b"\x01\xff"),
    "parameter_key_not_utf8": _PARAMETER.replace(b"\x01k", b"\x01\xfe"),
    # fp32_contents of INPUT0 sent as a varint: an unknown field, the contents empty.
    "fp32_contents_as_varint": _string(1, b"add_sub")
    + _string(
        5,
        _string(1, b"INPUT0")
        + _string(2, b"FP32")
        + _string(3, b"\x01\x10")
        + _string(5, _tag(6, 0) + _varint(1)),
    )
    + _string(5, _add_sub("fp32_contents", [1.0] * 16).inputs[1].SerializeToString()),
}


def _raw_call(url: str, data: bytes):
    with grpc.insecure_channel(url) as channel:
        infer = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        try:
            return "OK", pb.ModelInferResponse.FromString(infer(data))  # as _unary
        except grpc.RpcError as exc:
            return exc.code().name, exc.details()


@pytest.mark.parametrize("case", list(RAW_CASES))
def test_message_bytes_as_triton(naiad_server, naiad, triton, case):
    before = _lanes(naiad_server)
    ours, theirs = _raw_call(naiad, RAW_CASES[case]), _raw_call(triton, RAW_CASES[case])
    _same_answer(ours, theirs)
    _assert_the_lanes(before, _lanes(naiad_server))


def _shm_parameters(which: str, **parameters) -> pb.ModelInferRequest:
    """add_sub with INPUT0 (`which` "in") or OUTPUT0 ("out") in region "r" as told."""
    request = _raw(id="s")
    if which == "in":
        tensor = request.inputs[0]
        del request.raw_input_contents[0]
    else:
        tensor = request.outputs.add(name="OUTPUT0")
    for key, (kind, value) in parameters.items():
        setattr(tensor.parameters[key], kind, value)
    return request


def _placed(which: str, offset, size):
    parameters = {
        "shared_memory_region": ("string_param", "r"),
        "shared_memory_byte_size": ("int64_param", size),
    }
    if offset is not None:
        parameters["shared_memory_offset"] = ("int64_param", offset)
    return _shm_parameters(which, **parameters)


_REGION = ("string_param", "r")
_SIZE = ("int64_param", 64)
# Tensor shm parameters of the wrong kind, and offsets and sizes past region "r" (256
# bytes, registered on both servers): Triton's checks in its order, all the lane's.
SHM_CASES = {
    "region_int": ("in", {"shared_memory_region": ("int64_param", 3)}),
    "region_int_with_size": (
        "in",
        {"shared_memory_region": ("int64_param", 3), "shared_memory_byte_size": _SIZE},
    ),
    "size_uint": (
        "in",
        {"shared_memory_region": _REGION, "shared_memory_byte_size": ("uint64_param", 64)},
    ),
    "size_string": (
        "in",
        {"shared_memory_region": _REGION, "shared_memory_byte_size": ("string_param", "64")},
    ),
    "offset_uint": (
        "in",
        {
            "shared_memory_region": _REGION,
            "shared_memory_byte_size": _SIZE,
            "shared_memory_offset": ("uint64_param", 0),
        },
    ),
    "offset_bool_size_string": (
        "in",
        {
            "shared_memory_region": _REGION,
            "shared_memory_byte_size": ("string_param", "x"),
            "shared_memory_offset": ("bool_param", True),
        },
    ),
    "offset_and_size_without_region": (
        "in",
        {"shared_memory_byte_size": _SIZE, "shared_memory_offset": ("uint64_param", 0)},
    ),
    "out_region_int": (
        "out",
        {"shared_memory_region": ("int64_param", 3), "shared_memory_byte_size": _SIZE},
    ),
    "out_size_uint": (
        "out",
        {"shared_memory_region": _REGION, "shared_memory_byte_size": ("uint64_param", 64)},
    ),
    "out_offset_double": (
        "out",
        {
            "shared_memory_region": _REGION,
            "shared_memory_byte_size": _SIZE,
            "shared_memory_offset": ("double_param", 1.0),
        },
    ),
    "out_region_int_and_classification": (
        "out",
        {
            "shared_memory_region": ("int64_param", 1),
            "classification": ("uint64_param", 2),
        },
    ),
}
PLACES = [
    (255, 0),
    (256, 0),
    (300, 0),
    (2**62, 2**62),
    (2**63 - 1, 1),
    (0, 2**63 - 1),
    (192, 64),
    (250, 64),
    (None, 64),
]


@pytest.fixture(scope="module")
def regions(naiad, triton):
    """Region "r" of 256 zero bytes registered on both servers (a segment each)."""
    segments = []
    for url in (naiad, triton):
        segment = shared_memory.SharedMemory(create=True, size=256)
        segments.append(segment)
        with grpc.insecure_channel(url) as channel:
            pbg.GRPCInferenceServiceStub(channel).SystemSharedMemoryRegister(
                pb.SystemSharedMemoryRegisterRequest(
                    name="r", key="/" + segment.name, offset=0, byte_size=256
                ),
                timeout=TIMEOUT,
            )
    yield
    for url, segment in zip((naiad, triton), segments):
        with grpc.insecure_channel(url) as channel:
            pbg.GRPCInferenceServiceStub(channel).SystemSharedMemoryUnregister(
                pb.SystemSharedMemoryUnregisterRequest(name="r"), timeout=TIMEOUT
            )
        segment.close()
        segment.unlink()


@pytest.mark.parametrize("case", list(SHM_CASES))
def test_shm_parameters_as_triton(naiad_server, naiad, triton, regions, case):
    which, parameters = SHM_CASES[case]
    request = _shm_parameters(which, **parameters)
    before = _lanes(naiad_server)
    _same_answer(_unary(naiad, request), _unary(triton, request))
    _assert_the_lanes(before, _lanes(naiad_server))


@pytest.mark.parametrize("which", ["in", "out"])
@pytest.mark.parametrize("place", PLACES, ids=str)
def test_shm_places_as_triton(naiad, triton, regions, which, place):
    # A place the registry refuses is still answered by the general path (the codec
    # falls back when a region does not resolve): the same words, from one registry.
    request = _placed(which, *place)
    _same_answer(_unary(naiad, request), _unary(triton, request))


@pytest.mark.parametrize("case", STREAMED)
def test_streamed_as_triton(naiad, triton, case):
    _same_answer(_streamed(naiad, CASES[case]), _streamed(triton, CASES[case]))


def test_the_model_sees_the_parameters_as_sent(naiad):
    """Naiad only (Triton 2.51's Python backend refuses request_echo's dict response
    parameter): the C++ reader passes each parameter to the model with its type."""
    request = _echo(
        whole=("double_param", 2.0),
        half=("double_param", 0.5),
        big=("double_param", 1e300),
        text=("string_param", 'a "quoted" \\ value'),
        number=("int64_param", -3),
        flag=("bool_param", True),
    )
    status, response = _unary(naiad, request)
    assert status == "OK", response
    seen = json.loads(response.parameters["request_parameters"].string_param)
    assert seen == {
        "whole": 2.0,
        "half": 0.5,
        "big": 1e300,
        "text": 'a "quoted" \\ value',
        "number": -3,
        "flag": True,
    }
    assert type(seen["whole"]) is float


def test_unloaded_and_never_loaded_models_as_triton(tmp_path):
    """Explicit model control: a model unloaded (its version known, not ready) and one in
    the repository never loaded, asked for by ModelInfer with and without a version;
    status and message as Triton's (the lane answers them from the control plane's
    table, csrc/codec/model_lookup.h)."""
    if not TRITON.exists():
        pytest.skip("the real Triton is not installed (make perf-tools installs it)")
    repository = make_repository(tmp_path / "models", MODELS)
    control = ["--model-control-mode=explicit", "--load-model=add_sub"]
    naiad = NaiadServer(repository, log_dir=tmp_path, name="unloaded", extra_args=control)
    naiad.start(wait="ready", timeout=120)
    try:
        with TritonPeer(repository, tmp_path, control) as triton:
            triton.wait_ready(["add_sub"])
            urls = (f"{naiad.host}:{naiad.grpc_port}", f"127.0.0.1:{triton.grpc_port}")
            for url in urls:
                with grpc.insecure_channel(url) as channel:
                    stub = pbg.GRPCInferenceServiceStub(channel)
                    stub.RepositoryModelUnload(
                        pb.RepositoryModelUnloadRequest(model_name="add_sub"), timeout=TIMEOUT
                    )
            asked = [
                _raw(),
                _raw(version="1"),
                _raw(version="2"),
                _raw(model="identity_bytes"),
                _raw(model="identity_bytes", version="1"),
            ]
            for request in asked:
                ours, theirs = (_unary(url, request) for url in urls)
                assert ours[0] != "OK"
                _same_answer(ours, theirs)
                _same_answer(_streamed(urls[0], request), _streamed(urls[1], request))
    finally:
        naiad.stop()
