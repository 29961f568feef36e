"""The request and response records that pass between front ends and models.

Front ends (http/, grpc/) build an `InferRequest` from the wire, hand it to a model
(`scheduling.model.LoadedModel.submit`) and encode the `InferResponse` its future
resolves to.
Tensor data is always carried in Triton's raw wire layout: little-endian element bytes,
and for BYTES a 4-byte little-endian length before each element.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union

Buffer = Union[bytes, bytearray, memoryview]


@dataclass(slots=True)
class InputTensor:
    name: str
    datatype: str  # Triton datatype string: "FP32", "BYTES", ...
    shape: list[int]
    data: Buffer  # raw wire layout, exactly the size shape and datatype imply
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class RequestedOutput:
    name: str
    parameters: dict[str, Any] = field(default_factory=dict)  # e.g. binary_data


@dataclass(slots=True)
class InferRequest:
    model_name: str
    model_version: str  # "" for the policy's default
    id: str
    inputs: list[InputTensor]
    outputs: list[RequestedOutput] | None = None  # None: every output
    parameters: dict[str, Any] = field(default_factory=dict)
    # The W3C traceparent the request came with (HTTP header, gRPC metadata), read only
    # in trace mode opentelemetry (tracing/otel.py); None otherwise.
    traceparent: str | None = None
    tracestate: str | None = None  # its W3C tracestate, read with it


@dataclass(slots=True)
class OutputTensor:
    name: str
    datatype: str
    shape: list[int]
    data: Buffer  # raw wire layout


@dataclass(slots=True)
class InferResponse:
    model_name: str
    model_version: str
    id: str
    outputs: list[OutputTensor]
    parameters: dict[str, Any] = field(default_factory=dict)
