"""ModelInferRequest -> naiad.types.InferRequest and InferResponse -> ModelInferResponse.

Tensor data travels in Triton's raw wire layout (little-endian elements; BYTES with a
4-byte length before each element), so raw contents pass through as they are and typed
`contents` are packed into that layout here. The checks that depend only on the gRPC
message (which contents field, raw and typed together, missing data) live here with
Triton's messages; everything about the model (names, shapes, sizes) is the validator's,
shared with HTTP.
"""

from __future__ import annotations

import struct

import numpy as np

from naiad.errors import InvalidArgument
from naiad.http.codec import classify
from naiad.memory import shm
from naiad.protos import grpc_service_pb2 as pb
from naiad.types import InferRequest, InferResponse, InputTensor, RequestedOutput

# The typed contents field each datatype is sent in, and its numpy element type.
_FIELD_OF_DATATYPE = {
    "BOOL": ("bool_contents", np.bool_),
    "INT8": ("int_contents", np.int8),
    "INT16": ("int_contents", np.int16),
    "INT32": ("int_contents", np.int32),
    "INT64": ("int64_contents", np.int64),
    "UINT8": ("uint_contents", np.uint8),
    "UINT16": ("uint_contents", np.uint16),
    "UINT32": ("uint_contents", np.uint32),
    "UINT64": ("uint64_contents", np.uint64),
    "FP32": ("fp32_contents", np.float32),
    "FP64": ("fp64_contents", np.float64),
    "BYTES": ("bytes_contents", None),
}
# Triton names the type of a contents field by its widest type.
_TYPE_OF_FIELD = {
    "bool_contents": "BOOL",
    "int_contents": "INT32",
    "int64_contents": "INT64",
    "uint_contents": "UINT32",
    "uint64_contents": "UINT64",
    "fp32_contents": "FP32",
    "fp64_contents": "FP64",
    "bytes_contents": "BYTES",
}


def parameters_of(params) -> dict:
    """A protobuf map<string, InferParameter> as a plain dict."""
    if not params:  # the common case, and len() is far cheaper than items()
        return {}
    out = {}
    for key, param in params.items():
        kind = param.WhichOneof("parameter_choice")
        if kind is not None:
            out[key] = getattr(param, kind)
    return out


def set_parameters(target, params: dict) -> None:
    for key, value in params.items():
        param = target[key]
        if isinstance(value, bool):
            param.bool_param = value
        elif isinstance(value, int):
            param.int64_param = value
        elif isinstance(value, float):
            param.double_param = value
        else:
            param.string_param = str(value)


def _typed_bytes(tensor, model_name: str) -> bytes:
    contents = tensor.contents
    used = [field.name for field, _ in contents.ListFields()]
    expected = _FIELD_OF_DATATYPE.get(tensor.datatype)
    if expected is None or used != [expected[0]]:
        # Several fields, or one that is not the datatype's.
        field = used[0] if used else ""
        if expected is None or field != expected[0]:
            raise InvalidArgument(
                f"unexpected explicit tensor data for input tensor '{tensor.name}' for "
                f"model '{model_name}' of type '{_TYPE_OF_FIELD.get(field, field)}', "
                f"expected datatype '{tensor.datatype}'"
            )
    field, dtype = expected
    values = getattr(contents, field)
    if dtype is None:  # BYTES: each element with its 4-byte length
        return b"".join(struct.pack("<I", len(v)) + v for v in values)
    return np.asarray(values, dtype=dtype).astype(np.dtype(dtype).newbyteorder("<")).tobytes()


def to_infer_request(message: pb.ModelInferRequest) -> InferRequest:
    """The InferRequest a ModelInferRequest asks for; InvalidArgument for a malformed one."""
    model_name = message.model_name
    raw = message.raw_input_contents
    n_raw = len(raw)
    inputs = []
    index = -1  # raw_input_contents holds the inputs not in shared memory, in order
    for tensor in message.inputs:
        params = parameters_of(tensor.parameters)
        if "shared_memory_region" in params or "shared_memory_byte_size" in params:
            data = shm.input_from_parameters(tensor.name, params)
            inputs.append(
                InputTensor(tensor.name, tensor.datatype, list(tensor.shape), data, params)
            )
            continue
        index += 1
        typed = tensor.HasField("contents")
        if n_raw:
            if typed:
                raise InvalidArgument(
                    f"contents field must not be specified when using raw_input_contents for "
                    f"'{tensor.name}' for model '{model_name}'"
                )
            if index >= n_raw:
                raise InvalidArgument(
                    f"unable to find data for input tensor '{tensor.name}' for model "
                    f"'{model_name}' in request."
                )
            data = raw[index]
        elif typed:
            data = _typed_bytes(tensor, model_name)
        else:
            raise InvalidArgument(
                f"unable to find data for input tensor '{tensor.name}' for model "
                f"'{model_name}' in request."
            )
        inputs.append(InputTensor(tensor.name, tensor.datatype, list(tensor.shape), data, params))
    if n_raw > index + 1:
        raise InvalidArgument(
            f"raw_input_contents has {n_raw} entries for model '{model_name}' but the "
            f"request has {len(inputs)} inputs"
        )
    outputs = None
    if message.outputs:
        outputs = [RequestedOutput(o.name, parameters_of(o.parameters)) for o in message.outputs]
        for output, sent in zip(outputs, message.outputs):
            classes = output.parameters.get("classification")
            if classes is not None:
                # Triton's checks of class_count (tritonclient sets it only when > 0).
                kind = sent.parameters["classification"].WhichOneof("parameter_choice")
                if kind != "int64_param":
                    raise InvalidArgument(
                        "invalid value type for 'classification' parameter, expected int64_param"
                    )
                if classes <= 0:
                    raise InvalidArgument(
                        "invalid value for 'classification' parameter, expected >= 0"
                    )
            if "shared_memory_region" in output.parameters:  # the worker writes it there
                if "classification" in output.parameters:
                    raise InvalidArgument(
                        "output can't set both 'shared_memory_region' and 'classification'"
                    )
                shm.output_from_parameters(output.name, output.parameters)
    return InferRequest(
        model_name,
        message.model_version,
        message.id,
        inputs,
        outputs,
        parameters_of(message.parameters),
    )


def to_infer_response(
    response: InferResponse, request: InferRequest, batching: bool, labels: dict | None = None
) -> pb.ModelInferResponse:
    """ModelInferResponse with every output in raw_output_contents (as Triton answers)."""
    message = pb.ModelInferResponse(
        model_name=response.model_name,
        model_version=response.model_version,
        id=response.id or request.id,
    )
    if response.parameters:
        set_parameters(message.parameters, response.parameters)
    requested = None
    if request.outputs:
        requested = {o.name: o.parameters for o in request.outputs}
    for output in response.outputs:
        if requested is not None:
            params = requested.get(output.name)
            if params is None:
                continue
            classes = params.get("classification")
            if classes:
                output = classify(output, classes, batching, labels)
        tensor = message.outputs.add()
        tensor.name = output.name
        tensor.datatype = output.datatype
        tensor.shape.extend(output.shape)
        if requested is not None and shm.REF_KEY in params:
            message.raw_output_contents.append(b"")  # in the client's region (as Triton)
            continue
        message.raw_output_contents.append(bytes(output.data))
    return message
