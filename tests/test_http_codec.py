"""naiad.http.codec: infer request parsing (JSON and binary tensor data) and response encoding."""

from __future__ import annotations

import asyncio
import gzip
import json
import struct
import zlib

import numpy as np
import orjson
import pytest
from naiad import _core
from naiad.errors import Internal, InvalidArgument
from naiad.http.codec import (
    BodyTooLarge,
    UnsupportedEncoding,
    classify,
    compress_body,
    decompress,
    encode_infer_response,
    parse_header_length,
    parse_infer_request,
)
from naiad.protos import model_config_pb2 as mc
from naiad.types import InferRequest, InferResponse, OutputTensor, RequestedOutput


def parse(doc, **kw):
    body = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    return parse_infer_request(body, "addsub", "", **kw)


def binary_body(header, *segments):
    h = json.dumps(header).encode()
    return h + b"".join(segments), len(h)


def err(exc_type, fn, *args, **kw):
    with pytest.raises(exc_type) as info:
        fn(*args, **kw)
    return info.value.message


# ---------------------------------------------------------------------------------------------
# Requests


def test_json_request_flat_and_nested():
    req = parse(
        {
            "id": "r1",
            "parameters": {"priority": 1, "flag": True, "s": "x"},
            "inputs": [
                {"name": "A", "shape": [2, 2], "datatype": "FP32", "data": [1, 2.5, 3, 4]},
                {"name": "B", "shape": [2, 2], "datatype": "INT64", "data": [[1, 2], [3, -4]]},
                {"name": "C", "shape": [3], "datatype": "BOOL", "data": [True, False, True]},
                {"name": "D", "shape": [1, 2], "datatype": "UINT8", "data": [[0, 255]]},
            ],
            "outputs": [{"name": "O", "parameters": {"binary_data": True}}],
        }
    )
    assert req.id == "r1" and req.model_name == "addsub"
    assert req.parameters == {"priority": 1, "flag": True, "s": "x"}
    a, b, c, d = req.inputs
    assert (a.name, a.datatype, a.shape) == ("A", "FP32", [2, 2])
    assert np.frombuffer(a.data, np.float32).tolist() == [1, 2.5, 3, 4]
    assert np.frombuffer(b.data, "<i8").tolist() == [1, 2, 3, -4]
    assert bytes(c.data) == b"\x01\x00\x01"
    assert bytes(d.data) == b"\x00\xff"
    assert req.outputs == [RequestedOutput("O", {"binary_data": True})]


def test_deeply_nested_data_is_refused_as_triton_does():
    """Triton 2.51 answers data nested 1,000 deep (the JSON parser's limit is 1,024) with
    its shape mismatch (HTTP 500), not a recursion error; a mix of depths still flattens."""
    for depth in (1000, 40):
        body = (
            b'{"inputs": [{"name": "A", "shape": [1, 16], "datatype": "FP32", "data": '
            + b"[" * depth
            + b"1.0"
            + b"]" * depth
            + b"}]}"
        )
        assert err(Internal, parse_infer_request, body, "m") == (
            "Unable to parse 'data': Shape does not match true shape of 'data' field"
        )
    body = b'{"inputs": [{"name": "S", "shape": [3], "datatype": "BYTES", "data": [["a", ["b"]], "c"]}]}'
    assert bytes(parse_infer_request(body, "m").inputs[0].data) == b"\1\0\0\0a\1\0\0\0b\1\0\0\0c"


def test_json_bytes_are_length_prefixed_utf8():
    req = parse(
        {
            "inputs": [
                {
                    "name": "S",
                    "shape": [2, 2],
                    "datatype": "BYTES",
                    "data": [["abc", ""], ["héllo", "x"]],
                }
            ]
        }
    )
    expected = b"".join(
        struct.pack("<I", len(s)) + s for s in (b"abc", b"", "héllo".encode(), b"x")
    )
    assert bytes(req.inputs[0].data) == expected


def test_no_outputs_means_all_and_no_id_is_empty():
    req = parse({"inputs": [], "outputs": []})
    assert req.outputs is None and req.id == "" and req.parameters == {}


def test_binary_segments_are_views_of_the_body():
    a = np.arange(16, dtype=np.float32).tobytes()
    b = np.arange(16, 32, dtype=np.float32).tobytes()
    header = {
        "inputs": [
            {
                "name": "INPUT0",
                "shape": [1, 16],
                "datatype": "FP32",
                "parameters": {"binary_data_size": 64},
            },
            {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": list(range(16))},
            {
                "name": "INPUT2",
                "shape": [1, 16],
                "datatype": "FP32",
                "parameters": {"binary_data_size": 64},
            },
        ]
    }
    body, hl = binary_body(header, a, b)
    req = parse_infer_request(body, "addsub", "1", hl)
    assert req.model_version == "1"
    first, _, third = req.inputs
    assert isinstance(first.data, memoryview) and first.data.obj is body
    assert bytes(first.data) == a and bytes(third.data) == b
    assert first.parameters == {"binary_data_size": 64}


def test_header_length_parsing_like_triton():
    assert parse_header_length(None, 10) == 10
    assert parse_header_length("4", 10) == 4
    assert parse_header_length(b"7", 10) == 7
    assert parse_header_length("336xyz", 400) == 336  # C atoi
    assert parse_header_length("abc", 10) == 0
    assert err(InvalidArgument, parse_header_length, "100000", 336) == (
        "inference header size should be in range (0, 336), got: 100000"
    )
    assert err(InvalidArgument, parse_header_length, "-1", 336) == (
        "inference header size should be in range (0, 336), got: -1"
    )


def test_binary_truncated_and_extra():
    a = b"\0" * 64
    header = {
        "inputs": [
            {
                "name": "INPUT0",
                "shape": [1, 16],
                "datatype": "FP32",
                "parameters": {"binary_data_size": 64},
            },
            {
                "name": "INPUT1",
                "shape": [1, 16],
                "datatype": "FP32",
                "parameters": {"binary_data_size": 64},
            },
        ]
    }
    body, hl = binary_body(header, a, a[:32])
    assert err(InvalidArgument, parse_infer_request, body, "addsub", "", hl) == (
        "unexpected size for input 'INPUT1', expecting 32 additional bytes for model 'addsub'"
    )
    body, hl = binary_body(header, a, a, b"xx")
    assert err(InvalidArgument, parse_infer_request, body, "addsub", "", hl) == (
        "unexpected additional input data for model 'addsub'"
    )


@pytest.mark.parametrize(
    "body,message",
    [
        (b'{"inputs": [', "failed to parse the request JSON buffer: Invalid value. at 12"),
        (
            b"{} x",
            "failed to parse the request JSON buffer: The document root must not be "
            "followed by other values. at 3",
        ),
        (
            b"[1,2]",
            "Unable to parse 'inputs': attempt to access non-existing object member 'inputs'",
        ),
        (b"{}", "Unable to parse 'inputs': attempt to access non-existing object member 'inputs'"),
        (b'{"inputs": 5}', "Unable to parse 'inputs': attempt to access JSON non-array as array"),
        (
            b'{"id": 5, "inputs": []}',
            "Unable to parse 'id': attempt to access JSON non-string as string",
        ),
        (
            b'{"inputs": [{"shape": [1], "datatype": "FP32", "data": [1]}]}',
            "Unable to parse 'name': attempt to access non-existing object member 'name'",
        ),
        (
            b'{"inputs": [{"name": "A", "shape": [1], "data": [1]}]}',
            "Unable to parse 'datatype': attempt to access non-existing object member 'datatype'",
        ),
        (
            b'{"inputs": [{"name": "A", "datatype": "FP32", "data": [1]}]}',
            "Unable to parse 'shape': attempt to access non-existing object member 'shape'",
        ),
        (
            b'{"inputs": [{"name": "A", "shape": [-1], "datatype": "FP32", "data": [1]}]}',
            "Unable to parse 'shape': attempt to access JSON non-unsigned-integer as "
            "unsigned-integer",
        ),
        (
            b'{"inputs": [{"name": "A", "shape": [9223372036854775808], "datatype": "FP32", '
            b'"data": [1]}]}',
            "Unable to parse 'shape': attempt to access JSON non-unsigned-integer as "
            "unsigned-integer",
        ),
        (
            b'{"inputs": [{"name": "A", "shape": [2], "datatype": "FP32", "data": [1]}]}',
            "Unable to parse 'data': Shape does not match true shape of 'data' field",
        ),
        (
            b'{"inputs": [{"name": "A", "shape": [2], "datatype": "FP32", "data": [[1], [2, 3]]}]}',
            "Unable to parse 'data': Shape does not match true shape of 'data' field",
        ),
        (
            b'{"inputs": [{"name": "A", "shape": [1], "datatype": "FP32", "data": ["1"]}]}',
            "Unable to parse 'data': attempt to access JSON non-number as double",
        ),
        (
            b'{"inputs": [{"name": "A", "shape": [1], "datatype": "FP32", "data": [true]}]}',
            "Unable to parse 'data': attempt to access JSON non-number as double",
        ),
        (
            b'{"inputs": [{"name": "A", "shape": [1], "datatype": "INT32", "data": [0.5]}]}',
            "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer",
        ),
        (
            b'{"inputs": [{"name": "A", "shape": [1], "datatype": "UINT8", "data": [-1]}]}',
            "Unable to parse 'data': attempt to access JSON non-unsigned-integer as "
            "unsigned-integer",
        ),
        (
            b'{"inputs": [{"name": "A", "shape": [2], "datatype": "BOOL", "data": [1, 0]}]}',
            "Unable to parse 'data': attempt to access JSON non-boolean as boolean",
        ),
        (
            b'{"inputs": [{"name": "A", "shape": [1], "datatype": "FP32", "data": null}]}',
            "Unable to parse 'data': attempt to access JSON non-array as array",
        ),
        (
            b'{"inputs": [{"name": "A", "shape": [1], "datatype": "BYTES", "data": [1]}]}',
            "Unable to parse JSON bytes array: attempt to access JSON non-string as string",
        ),
        (
            b'{"inputs": [], "outputs": [{"name": "O", "parameters": {"binary_data": 1}}]}',
            "Unable to parse 'binary_data': attempt to access JSON non-boolean as boolean",
        ),
    ],
)
def test_json_shape_errors_are_500_like_triton(body, message):
    exc = err(Internal, parse_infer_request, body, "addsub")
    assert exc == message
    assert Internal.http_status == 500


@pytest.mark.parametrize(
    "doc,message",
    [
        (
            {"inputs": [{"name": "A", "shape": [1], "datatype": "FP32"}]},
            "Input must set only one of the following fields: 'data', 'binary_data_size' in "
            "'parameters', 'shared_memory_region' in 'parameters'. But no field is set",
        ),
        (
            {
                "inputs": [
                    {
                        "name": "A",
                        "shape": [1],
                        "datatype": "FP32",
                        "data": [1],
                        "parameters": {"binary_data_size": 4},
                    }
                ]
            },
            "Input must set only one of the following fields: 'data', 'binary_data_size' in "
            "'parameters', 'shared_memory_region' in 'parameters'. But set 'data' "
            "'binary_data_size'",
        ),
        (
            {"inputs": [{"name": "H", "shape": [1], "datatype": "FP16", "data": [1]}]},
            "receiving FP16 data via JSON is not supported. Please use the binary data format for "
            "input H",
        ),
        (
            {"inputs": [{"name": "A", "shape": [1], "datatype": "FOO", "data": [1]}]},
            "invalid datatype for input A",
        ),
        (
            {"inputs": [], "parameters": {"p": [1]}},
            "parameter 'p' has invalid type. It should be either 'int', 'bool', or 'string'.",
        ),
        (
            {
                "inputs": [
                    {
                        "name": "A",
                        "shape": [1],
                        "datatype": "FP32",
                        "parameters": {"binary_data_size": 4},
                    }
                ]
            },
            "unexpected size for input 'A', expecting 4 additional bytes for model 'addsub'",
        ),
    ],
)
def test_protocol_errors_are_400(doc, message):
    assert err(InvalidArgument, parse, doc) == message


def _one_input_config(data_type, dims, max_batch=0):
    c = mc.ModelConfig(name="raw", max_batch_size=max_batch)
    c.input.add(name="IN", data_type=data_type, dims=dims)
    return c


def test_raw_binary_request():
    data = np.arange(6, dtype=np.float32).tobytes()
    req = parse_infer_request(data, "raw", "", 0, _one_input_config(mc.TYPE_FP32, [-1], 4))
    (tensor,) = req.inputs
    assert (tensor.name, tensor.datatype, tensor.shape) == ("IN", "FP32", [1, 6])
    assert bytes(tensor.data) == data
    req = parse_infer_request(b"hello", "raw", "", 0, _one_input_config(mc.TYPE_STRING, [1]))
    assert req.inputs[0].shape == [1] and bytes(req.inputs[0].data) == b"\x05\0\0\0hello"
    assert err(
        InvalidArgument,
        parse_infer_request,
        b"hello",
        "raw",
        "",
        0,
        _one_input_config(mc.TYPE_STRING, [-1], 8),
    ) == (
        "[request id: <id_unknown>] For BYTE datatype raw input 'IN', the model must have "
        "input shape [1]"
    )


def test_decompress():
    payload = b'{"inputs": []}'

    def run(body, encoding, limit=1 << 20):
        return asyncio.run(decompress(body, encoding, limit))

    assert run(gzip.compress(payload), "gzip") == payload
    assert run(zlib.compress(payload), "deflate") == payload
    raw = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    assert run(raw.compress(payload) + raw.flush(), "deflate") == payload  # sent raw
    assert err(UnsupportedEncoding, run, payload, "br") == "Unsupported compression type"
    assert UnsupportedEncoding.http_status == 501
    # Past the limit once inflated: 413, as a body sent that large.
    assert err(BodyTooLarge, run, gzip.compress(bytes(4097)), "gzip", 4096) == (
        "inflated request body of more than 4096 bytes exceeds the maximum allowed input size "
        "of 4096 bytes; use --http-max-input-size to increase the limit"
    )
    assert BodyTooLarge.http_status == 413
    assert run(gzip.compress(bytes(4096)), "gzip", 4096) == bytes(4096)
    assert err(InvalidArgument, run, gzip.compress(payload)[:-9], "gzip").startswith(
        "failed to decompress the request body: "
    )


def _zlib_body(parts: list, wbits: int) -> bytes:
    # What the general path sent before it called the lane's compressor (and what was
    # checked byte for byte against Triton 2.51): Python's zlib, default level.
    compressor = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, wbits)
    return b"".join([compressor.compress(part) for part in parts] + [compressor.flush()])


@pytest.mark.parametrize("size", [1, 100, 5000, 70000, 300000])
def test_compressor_gives_pythons_zlib_bytes(size):
    rng = np.random.default_rng(size)
    header = json.dumps({"outputs": [{"name": "O", "data": list(range(size // 50))}]}).encode()
    tensor = rng.integers(0, 8, size, dtype=np.uint8)  # compressible, not trivially
    noise = rng.integers(0, 256, size // 3, dtype=np.uint8).tobytes()
    for parts in ([header[:size]], [header, memoryview(tensor), b"", noise]):
        for encoding, wbits, line in (
            (_core.RESPONSE_GZIP, 31, b"Content-Encoding: gzip\r\n"),
            (_core.RESPONSE_DEFLATE, 15, b"Content-Encoding: deflate\r\n"),
        ):
            expected = _zlib_body(parts, wbits)
            assert _core.compress_body(parts, encoding) == expected
            assert compress_body(parts, encoding) == ([expected], line)


def test_compressor_leaves_empty_bodies_and_identity():
    assert _core.compress_body([b"", memoryview(b"")], _core.RESPONSE_GZIP) is None
    assert _core.compress_body([b"x"], _core.RESPONSE_IDENTITY) is None
    assert compress_body([b""], _core.RESPONSE_DEFLATE) == ([b""], b"")
    assert _core.content_encoding_line(_core.RESPONSE_IDENTITY) == b""
    with pytest.raises(ValueError, match="no response encoding 7"):
        _core.compress_body([b"x"], 7)


# ---------------------------------------------------------------------------------------------
# Responses


def _response(**kw):
    outputs = [
        OutputTensor("OUT", "FP32", [1, 3], np.array([0.5, 1.0, -2.0], np.float32).tobytes()),
        OutputTensor("S", "BYTES", [2], b"\x02\0\0\0hi\x03\0\0\0\xff\xfe!"),
        OutputTensor("B", "BOOL", [2], b"\x01\x00"),
        OutputTensor("I", "INT8", [2], np.array([-3, 7], np.int8).tobytes()),
    ]
    return InferResponse("m", "1", kw.pop("id", ""), outputs, **kw)


def test_encode_json_response():
    parts, hl = encode_infer_response(_response(id="x"), None)
    assert hl is None and len(parts) == 1
    doc = orjson.loads(parts[0])
    assert list(doc) == ["id", "model_name", "model_version", "outputs"]
    assert doc["outputs"] == [
        {"name": "OUT", "datatype": "FP32", "shape": [1, 3], "data": [0.5, 1.0, -2.0]},
        {"name": "S", "datatype": "BYTES", "shape": [2], "data": ["hi", "\ufffd\ufffd!"]},
        {"name": "B", "datatype": "BOOL", "shape": [2], "data": [True, False]},
        {"name": "I", "datatype": "INT8", "shape": [2], "data": [-3, 7]},
    ]


def test_encode_omits_empty_id_and_keeps_parameters():
    parts, _ = encode_infer_response(_response(parameters={"sequence_end": True}), None)
    doc = orjson.loads(parts[0])
    assert "id" not in doc and doc["parameters"] == {"sequence_end": True}


def test_encode_binary_outputs_and_filtering():
    request = InferRequest(
        "m",
        "",
        "rid",
        [],
        [
            RequestedOutput("S", {"binary_data": True}),
            RequestedOutput("OUT", {}),
        ],
    )
    parts, hl = encode_infer_response(_response(), request)
    body = b"".join(bytes(p) for p in parts)
    doc = orjson.loads(body[:hl])
    assert doc["id"] == "rid"
    # Response order is the model's; outputs not requested are left out.
    assert [o["name"] for o in doc["outputs"]] == ["OUT", "S"]
    assert doc["outputs"][1] == {
        "name": "S",
        "datatype": "BYTES",
        "shape": [2],
        "parameters": {"binary_data_size": 13},
    }
    assert body[hl:] == b"\x02\0\0\0hi\x03\0\0\0\xff\xfe!"


def test_encode_binary_data_output_default_applies_to_unnamed_outputs_only():
    request = InferRequest("m", "", "", [], None, {"binary_data_output": True})
    parts, hl = encode_infer_response(_response(), request)
    doc = orjson.loads(parts[0])
    assert all("data" not in o for o in doc["outputs"])
    assert len(b"".join(bytes(p) for p in parts)) == hl + 12 + 13 + 2 + 2
    request.outputs = [RequestedOutput("OUT")]
    parts, hl = encode_infer_response(_response(), request)
    assert hl is None and orjson.loads(parts[0])["outputs"][0]["data"] == [0.5, 1.0, -2.0]


def test_encode_fp16_as_json_is_refused_like_triton():
    response = InferResponse("m", "1", "", [OutputTensor("H", "FP16", [1], b"\0\0")])
    assert err(InvalidArgument, encode_infer_response, response, None) == (
        "sending FP16 data via JSON is not supported. Please use the binary data format for output"
    )
    request = InferRequest("m", "", "", [], [RequestedOutput("H", {"binary_data": True})])
    parts, hl = encode_infer_response(response, request)
    assert bytes(parts[1]) == b"\0\0"


def test_classification():
    values = np.array([[0.1, 0.7, 0.2], [3, 1, 2]], np.float32)
    out = OutputTensor("P", "FP32", [2, 3], values.tobytes())
    result = classify(out, 2, batching=True)
    assert result.datatype == "BYTES" and result.shape == [2, 2]
    items = [bytes(x).decode() for x in _split_bytes(result.data)]
    assert items == ["0.700000:1", "0.200000:2", "3.000000:0", "2.000000:2"]
    result = classify(
        OutputTensor("P", "INT32", [3], np.array([5, 9, 1], np.int32).tobytes()), 5, batching=False
    )
    assert result.shape == [3]
    # Integers print as integers (std::to_string, as Triton 2.51 answers).
    assert [bytes(x).decode() for x in _split_bytes(result.data)] == ["9:1", "5:0", "1:2"]
    labelled = classify(out, 1, batching=True, labels={"P": [b"a", b"b", b""]})
    assert [bytes(x).decode() for x in _split_bytes(labelled.data)] == [
        "0.700000:1:b",
        "3.000000:0:a",
    ]


def _split_bytes(data):
    items, offset = [], 0
    while offset < len(data):
        (n,) = struct.unpack_from("<I", data, offset)
        items.append(data[offset + 4 : offset + 4 + n])
        offset += 4 + n
    return items
