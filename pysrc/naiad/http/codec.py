"""KServe v2 infer request parsing and response encoding, with Triton's binary tensor extension.

Request body: a JSON header, optionally followed (when `Inference-Header-Content-Length` is
sent) by the inputs' binary segments in input order. Binary segments become memoryview slices of
the body (no copy). JSON `data` (flat or nested lists) is converted to Triton's raw wire layout.

Response: JSON, or with binary outputs the JSON header followed by the outputs' raw bytes; the
caller sends `Inference-Header-Content-Length: <json length>` and
`Content-Type: application/octet-stream` then.

Error messages and kinds mirror Triton 2.51's HTTP front end: JSON-shape problems are Triton
"Internal" errors (HTTP 500), protocol misuse is InvalidArgument (HTTP 400).
"""

from __future__ import annotations

import asyncio
import json
import struct
import zlib
from typing import Any

import numpy as np
import orjson

from naiad import _core
from naiad.datatypes import WIRE_DATATYPES, element_size, numpy_dtype
from naiad.errors import Internal, InvalidArgument, NaiadError, error_of_kind
from naiad.inflate import InflatedTooLarge, inflate_body, inflate_soon
from naiad.memory import shm
from naiad.types import InferRequest, InferResponse, InputTensor, OutputTensor, RequestedOutput

__all__ = [
    "parse_header_length",
    "parse_infer_request",
    "encode_infer_response",
    "classify",
    "decompress",
    "too_large_message",
    "BodyTooLarge",
    "UnsupportedEncoding",
]

_U32 = struct.Struct("<I")
_INT64_MAX = (1 << 63) - 1
_OPT_NUMPY = orjson.OPT_SERIALIZE_NUMPY

# Fixed-size wire types -> numpy dtype (BYTES and BF16 are handled on their own).
_NUMPY = {wire: numpy_dtype(wire) for wire in WIRE_DATATYPES if wire not in ("BYTES", "BF16")}

# Triton's (rapidjson) complaints about JSON members of the wrong kind.
_NON_UINT = "attempt to access JSON non-unsigned-integer as unsigned-integer"
_NON_BOOL = "attempt to access JSON non-boolean as boolean"

_SHAPE_MISMATCH = "Unable to parse 'data': Shape does not match true shape of 'data' field"


class UnsupportedEncoding(NaiadError):
    """Content-Encoding other than identity/gzip/deflate (Triton: 501)."""

    http_status = 501


class BodyTooLarge(NaiadError):
    """A request body past --http-max-input-size, as sent or once inflated."""

    http_status = 413


def too_large_message(size, limit: int, body: str = "request body") -> str:
    """What a 413 says: the body's size (or "more than N") and the limit, in the lane's
    words (one wording: csrc/http1/http_framer.h)."""
    return _core.body_too_large_message(size, limit, body)


async def decompress(body, encoding: str, limit: int):
    """Undoes a request's Content-Encoding (gzip/deflate) on a thread, keeping at most
    `limit` bytes (--http-max-input-size): past it, 413 as for a body sent that large."""
    if encoding not in ("gzip", "deflate"):
        raise UnsupportedEncoding("Unsupported compression type")
    try:
        return await inflate_soon(asyncio.get_running_loop(), inflate_body, body, encoding, limit)
    except InflatedTooLarge:
        raise BodyTooLarge(
            too_large_message(f"more than {limit}", limit, "inflated request body")
        ) from None
    except zlib.error as exc:
        raise InvalidArgument(f"failed to decompress the request body: {exc}") from None


_CONTENT_ENCODING = {
    encoding: _core.content_encoding_line(encoding)
    for encoding in (_core.RESPONSE_GZIP, _core.RESPONSE_DEFLATE)
}


def compress_body(parts: list, compression: int) -> tuple[list, bytes]:
    """A response body compressed as Accept-Encoding asked (_core.response_encoding) by
    the fast lane's compressor (csrc/codec/http_compress.h: zlib's default level as Triton,
    the same bytes): (parts, Content-Encoding header line). An empty body stays as it
    is, without the header (Triton's too)."""
    body = _core.compress_body(parts, compression)
    if body is None:
        return parts, b""
    return [body], _CONTENT_ENCODING[compression]


def parse_header_length(value, content_length: int) -> int:
    """Inference-Header-Content-Length, parsed like Triton (C atoi) and range checked."""
    if value is None:
        return content_length
    if isinstance(value, (bytes, bytearray)):
        value = value.decode("latin-1")
    parsed = _atoi(value)
    if parsed < 0 or parsed > content_length:
        raise InvalidArgument(
            f"inference header size should be in range (0, {content_length}), got: {value}"
        )
    return parsed


def _atoi(text: str) -> int:
    if text.isascii() and text.isdigit():  # the usual case, in one step
        return int(text)
    text = text.lstrip(" \t\n\r\f\v")
    end = 0
    if text[:1] in ("+", "-"):
        end = 1
    start_digits = end
    while end < len(text) and "0" <= text[end] <= "9":
        end += 1
    if end == start_digits:
        return 0
    return int(text[:end])


def _json_error(body, exc: orjson.JSONDecodeError) -> Internal:
    """Triton's error for a request body (any endpoint's) orjson does not read: rapidjson's
    words and offset where Triton's parser refuses it too (csrc/codec/json_syntax.h)."""
    message = _core.json_syntax_error(body)
    return Internal(message or f"unable to read the request JSON buffer: {exc.msg}")


def _load_json(head: memoryview):
    """The JSON header of an infer body, read as Triton's rapidjson reads it: a header its
    parser refuses gets its message (csrc/codec/json_syntax.h, the lane's too). What it
    takes and orjson does not is read as it reads it: the text ends at a NUL byte (binary
    tensor data sent without Inference-Header-Content-Length: the inputs then miss their
    data, which the caller reports naming the input), a byte order mark is skipped, NaN
    and Infinity are numbers, strings are not checked for UTF-8."""
    try:
        return orjson.loads(head)
    except orjson.JSONDecodeError as exc:
        error = exc
    if _core.json_syntax_error(head) is not None:
        raise _json_error(head, error)
    data = bytes(head)
    nul = data.find(b"\0")
    if nul >= 0:
        data = data[:nul]
    start = 0
    for mark in b"\xef\xbb\xbf":  # each of the mark's bytes, if it comes next
        if start < len(data) and data[start] == mark:
            start += 1
    try:
        return json.loads(data[start:].decode("utf-8", "surrogateescape"))
    except ValueError:
        raise _json_error(data, error) from None


def _missing(member: str) -> Internal:
    return Internal(
        f"Unable to parse '{member}': attempt to access non-existing object member '{member}'"
    )


def _get_str(obj: dict, member: str) -> str:
    value = obj.get(member)
    if type(value) is str:
        return value
    if value is None and member not in obj:
        raise _missing(member)
    raise Internal(f"Unable to parse '{member}': attempt to access JSON non-string as string")


def _check_parameters(params) -> dict:
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise Internal("Unable to parse 'parameters': attempt to access JSON non-object as object")
    for key, value in params.items():
        if not isinstance(value, (str, int, float)):  # bool is an int
            raise InvalidArgument(
                f"parameter '{key}' has invalid type. It should be either "
                "'int', 'bool', or 'string'."
            )
    return params


def parse_infer_request(
    body,
    model_name: str,
    model_version: str = "",
    header_length: int | None = None,
    config=None,
) -> InferRequest:
    """Build an InferRequest from an HTTP infer body.

    `header_length`: the parsed Inference-Header-Content-Length (None: the whole body is JSON).
    A header length of 0 (or an empty body) is Triton's raw binary request: the whole body is
    the data of the model's single input, which needs `config` to name and shape it.
    """
    view = body if isinstance(body, memoryview) else memoryview(body)
    total = view.nbytes
    if header_length is None:
        header_length = total
    if header_length == 0:
        return _raw_request(view, model_name, model_version, config)
    doc = _load_json(view if header_length == total else view[:header_length])
    if not isinstance(doc, dict):
        raise _missing("inputs")

    request_id = ""
    if "id" in doc:
        request_id = _get_str(doc, "id")
    parameters = _check_parameters(doc.get("parameters"))

    inputs_json = doc.get("inputs")
    if type(inputs_json) is not list:
        if "inputs" not in doc:
            raise _missing("inputs")
        raise Internal("Unable to parse 'inputs': attempt to access JSON non-array as array")

    offset = header_length
    inputs = []
    for item in inputs_json:
        if not isinstance(item, dict):
            raise _missing("name")
        name = _get_str(item, "name")
        datatype = _get_str(item, "datatype")
        shape = item.get("shape")
        if type(shape) is not list:
            if "shape" not in item:
                raise _missing("shape")
            raise Internal("Unable to parse 'shape': attempt to access JSON non-array as array")
        for dim in shape:
            # Dims are int64 from here on (the C++ validator, the worker's block).
            if type(dim) is not int or dim < 0 or dim > _INT64_MAX:
                raise Internal(f"Unable to parse 'shape': {_NON_UINT}")
        params = item.get("parameters")
        has_data = "data" in item
        binary_size = None
        has_shm = False
        if params:
            if not isinstance(params, dict):
                raise Internal(
                    "Unable to parse 'parameters': attempt to access JSON non-object as object"
                )
            binary_size = params.get("binary_data_size")
            has_shm = "shared_memory_region" in params
            if binary_size is not None or "binary_data_size" in params:
                if type(binary_size) is not int or binary_size < 0:
                    raise Internal(f"Unable to parse 'binary_data_size': {_NON_UINT}")
        else:
            params = {}
        if has_data + (binary_size is not None) + has_shm != 1:
            raise InvalidArgument(_content_type_error(has_data, binary_size is not None, has_shm))
        if binary_size is not None:
            end = offset + binary_size
            if end > total:
                raise InvalidArgument(
                    f"unexpected size for input '{name}', expecting {end - total} additional "
                    f"bytes for model '{model_name}'"
                )
            data = view[offset:end]
            offset = end
        elif has_shm:  # a RegionRef: the core copies from the client's region
            data = shm.input_from_parameters(name, params, http=True)
        else:
            data = _json_to_wire(name, datatype, shape, item["data"])
        inputs.append(InputTensor(name, datatype, shape, data, params))

    if offset != total:
        raise InvalidArgument(f"unexpected additional input data for model '{model_name}'")

    outputs = None
    outputs_json = doc.get("outputs")
    if outputs_json:
        if type(outputs_json) is not list:
            raise Internal("Unable to parse 'outputs': attempt to access JSON non-array as array")
        outputs = []
        for item in outputs_json:
            if not isinstance(item, dict):
                raise _missing("name")
            name = _get_str(item, "name")
            oparams = item.get("parameters")
            if oparams:
                if not isinstance(oparams, dict):
                    raise Internal(
                        "Unable to parse 'parameters': attempt to access JSON non-object as object"
                    )
                _check_output_parameters(oparams)
                if "shared_memory_region" in oparams:  # the worker writes it there
                    shm.output_from_parameters(name, oparams, http=True)
            else:
                oparams = {}
            outputs.append(RequestedOutput(name, oparams))

    return InferRequest(model_name, model_version, request_id, inputs, outputs, parameters)


def _check_output_parameters(params: dict) -> None:
    if "binary_data" in params and type(params["binary_data"]) is not bool:
        raise Internal(f"Unable to parse 'binary_data': {_NON_BOOL}")
    if "classification" in params:
        value = params["classification"]
        if type(value) is not int or value < 0:
            raise Internal(f"Unable to set 'classification': {_NON_UINT}")
    if "shared_memory_region" in params:
        if "classification" in params:
            raise InvalidArgument(
                "Output can't set both 'shared_memory_region' and 'classification'"
            )
        if params.get("binary_data"):
            raise InvalidArgument("Output can't set both 'shared_memory_region' and 'binary_data'")


def _content_type_error(has_data: bool, has_binary: bool, has_shm: bool) -> str:
    text = (
        "Input must set only one of the following fields: 'data', 'binary_data_size' in "
        "'parameters', 'shared_memory_region' in 'parameters'. But"
    )
    if not (has_data or has_binary or has_shm):
        return text + " no field is set"
    text += " set"
    if has_data:
        text += " 'data'"
    if has_binary:
        text += " 'binary_data_size'"
    if has_shm:
        text += " 'shared_memory_region'"
    return text


_U64_MASK = (1 << 64) - 1


def _flatten(data: list) -> list:
    """The items of nested arrays in order, as Triton flattens them. Without recursion: a
    client's nesting (up to the JSON parser's own limit) must not reach Python's
    recursion limit, nor the lane reader's depth."""
    out = []
    pending = [iter(data)]
    while pending:
        for item in pending[-1]:
            if type(item) is list:
                pending.append(iter(item))
                break
            out.append(item)
        else:
            pending.pop()
    return out


def _json_to_wire(name: str, datatype: str, shape: list, data) -> bytes:
    """JSON `data` (flat or nested) -> raw wire bytes of `datatype`, read by the lane's
    reader (csrc/codec/kserve_json.h read_tensor_data) as Triton reads it: one set of rules
    for both paths."""
    count = 1
    for dim in shape:
        count *= dim
    if type(data) is list:
        data = _flatten(data)
    # Triton's element count is a 64-bit product (a larger one wraps).
    wire, kind, message = _core.json_tensor_data(
        orjson.dumps(data), datatype, name, count & _U64_MASK
    )
    if wire is None:
        raise error_of_kind(kind, message or f"unable to read the 'data' of input '{name}'")
    return wire


def _raw_request(view: memoryview, model_name: str, model_version: str, config) -> InferRequest:
    """Triton's raw binary request: the whole body is the data of the model's only input."""
    prefix = "[request id: <id_unknown>] "
    count = len(config.input) if config is not None else 0
    if count != 1:
        raise InvalidArgument(
            f"{prefix}Raw request must only have 1 input (found 1) to be deduced but got "
            f"{count} inputs in '{model_name}' model configuration"
        )
    from naiad.datatypes import wire_of_config
    from naiad.protos import model_config_pb2

    config_input = config.input[0]
    wire = wire_of_config(model_config_pb2.DataType.Name(config_input.data_type))
    shape = [1] if config.max_batch_size != 0 else []
    dynamic_axis = -1
    element_cnt = 1
    for dim in config_input.dims:
        if dim == -1:
            if dynamic_axis != -1:
                raise InvalidArgument(
                    f"{prefix}The shape of the raw input '{config_input.name}' can not be "
                    "deduced because there are more than one variable-sized dimension"
                )
            dynamic_axis = len(shape)
        else:
            element_cnt *= dim
        shape.append(int(dim))
    data = view
    if wire == "BYTES":
        if dynamic_axis != -1 or element_cnt != 1:
            raise InvalidArgument(
                f"{prefix}For BYTE datatype raw input '{config_input.name}', the model must "
                "have input shape [1]"
            )
        data = _U32.pack(view.nbytes) + bytes(view)
    elif dynamic_axis != -1:
        size = element_size(wire) or 1
        shape[dynamic_axis] = view.nbytes // (element_cnt * size) if element_cnt else 0
    tensor = InputTensor(config_input.name, wire, shape, data, {})
    return InferRequest(model_name, model_version, "", [tensor], None, {})


# ---------------------------------------------------------------------------------------------
# Responses


def classify(
    output: OutputTensor, count: int, batching: bool, labels: dict | None = None
) -> OutputTensor:
    """Triton's classification extension (csrc/codec/classification.h): the top `count`
    "value:index[:label]" strings per batch item, as a BYTES output."""
    lines = labels.get(output.name, ()) if labels else ()
    try:
        data, shape = _core.classify(
            output.datatype, output.data, list(output.shape), batching, count, lines
        )
    except ValueError as exc:
        raise InvalidArgument(str(exc)) from None
    return OutputTensor(output.name, "BYTES", shape, data)


def _bytes_to_json(data) -> list:
    view = memoryview(data).cast("B") if not isinstance(data, bytes) else data
    end = len(view)
    offset = 0
    items = []
    unpack = _U32.unpack_from
    while offset + 4 <= end:
        (length,) = unpack(view, offset)
        offset += 4
        items.append(bytes(view[offset : offset + length]).decode("utf-8", "replace"))
        offset += length
    return items


def encode_infer_response(
    response: InferResponse,
    request: InferRequest | None = None,
    batching: bool = True,
    labels: dict | None = None,
) -> tuple[list, int | None]:
    """Encode a response: (body parts, json header length or None when all JSON).

    Outputs requested with `binary_data: true` (or, for outputs not named in the request,
    request parameter `binary_data_output: true`) travel as raw segments after the JSON.
    """
    requested: dict[str, dict] | None = None
    default_binary = False
    if request is not None:
        if request.parameters:
            default_binary = request.parameters.get("binary_data_output", False) is True
        if request.outputs:
            requested = {o.name: o.parameters for o in request.outputs}

    out_json: list[dict[str, Any]] = []
    segments: list = []
    for output in response.outputs:
        binary = default_binary
        if requested is not None:
            params = requested.get(output.name)
            if params is None:
                continue  # not requested
            if params:
                if shm.REF_KEY in params:  # written into the client's region: no data
                    out_json.append(
                        {"name": output.name, "datatype": output.datatype, "shape": output.shape}
                    )
                    continue
                binary = params.get("binary_data", False) is True
                classes = params.get("classification")
                if classes:
                    output = classify(output, classes, batching, labels)
            else:
                binary = False
        if binary:
            data = output.data
            size = data.nbytes if isinstance(data, memoryview) else len(data)
            segments.append(data)
            out_json.append(
                {
                    "name": output.name,
                    "datatype": output.datatype,
                    "shape": output.shape,
                    "parameters": {"binary_data_size": size},
                }
            )
        else:
            out_json.append(
                {
                    "name": output.name,
                    "datatype": output.datatype,
                    "shape": output.shape,
                    "data": _output_json_data(output),
                }
            )

    doc: dict[str, Any] = {}
    request_id = response.id or (request.id if request is not None else "")
    if request_id:
        doc["id"] = request_id
    doc["model_name"] = response.model_name
    doc["model_version"] = response.model_version
    if response.parameters:
        doc["parameters"] = response.parameters
    doc["outputs"] = out_json
    header = orjson.dumps(doc, option=_OPT_NUMPY)
    if not segments:
        return [header], None
    return [header, *segments], len(header)


def _output_json_data(output: OutputTensor):
    datatype = output.datatype
    if datatype == "BYTES":
        return _bytes_to_json(output.data)
    dtype = _NUMPY.get(datatype)
    if dtype is None or datatype == "FP16":
        if datatype in ("FP16", "BF16"):
            raise InvalidArgument(
                f"sending {datatype} data via JSON is not supported. Please use the binary "
                "data format for output"
            )
        raise InvalidArgument("Invalid data type for output tensor")
    return np.frombuffer(output.data, dtype=dtype)
