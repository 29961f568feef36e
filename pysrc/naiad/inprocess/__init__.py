"""Naiad's in-process API, shaped as Triton's `tritonserver` package (docs/in_process.md).

import naiad

with naiad.Server(model_repository="model_repository") as server:
    for response in server.model("add_sub").infer(inputs={...}):
        numpy.from_dlpack(response.outputs["OUTPUT0"])
"""

from naiad.inprocess.errors import (
    AlreadyExistsError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    TritonError,
    UnavailableError,
    UnknownError,
    UnsupportedError,
)
from naiad.inprocess.model import (
    SEQUENCE_END,
    SEQUENCE_START,
    AsyncResponseIterator,
    InferenceRequest,
    InferenceResponse,
    Model,
    ResponseIterator,
)
from naiad.inprocess.options import ModelControlMode, Options, RateLimitMode
from naiad.inprocess.server import ModelDictionary, Server
from naiad.inprocess.tensor import Tensor

__all__ = [
    "SEQUENCE_END",
    "SEQUENCE_START",
    "AlreadyExistsError",
    "AsyncResponseIterator",
    "InferenceRequest",
    "InferenceResponse",
    "InternalError",
    "InvalidArgumentError",
    "Model",
    "ModelControlMode",
    "ModelDictionary",
    "NotFoundError",
    "Options",
    "RateLimitMode",
    "ResponseIterator",
    "Server",
    "Tensor",
    "TritonError",
    "UnavailableError",
    "UnknownError",
    "UnsupportedError",
]
