"""Request validation for the Python general path: a thin call into the one validator.

The checks, their order and Triton's messages live in C++ (csrc/codec/request_validator.h),
where the infer fast lane runs them too. The general path parses what the C++ reader
does not take yet (JSON tensor data, ...) into an `InferRequest`; `RequestValidator`
hands its inputs to the same validator and raises its message as InvalidArgument.
`spec` (a _core.ModelSpec) also lays out and queues such requests, with the lane's
block layout (SubmitPath.submit, scheduling/submit_path.py).
"""

from __future__ import annotations

from naiad import _core
from naiad.datatypes import element_size, wire_of_config
from naiad.errors import InvalidArgument
from naiad.types import InferRequest

__all__ = ["RequestValidator", "log_prefix"]


# Triton's `LogRequest()` prefix: '[request id: <id>] ', '<id_unknown>' when empty.
log_prefix = _core.log_prefix


def _datatype_name(config_type: int) -> str:
    from naiad.protos import model_config_pb2

    return model_config_pb2.DataType.Name(config_type)


class RequestValidator:
    """Validates requests for one model version; build it once, call per request."""

    __slots__ = ("model_name", "max_batch_size", "spec", "spec_args")

    def __init__(self, config, model_name: str = "", model_version: int = 0):
        self.model_name = model_name or config.name
        self.max_batch_size = int(config.max_batch_size)
        inputs = []
        for model_input in config.input:
            dims = [int(d) for d in model_input.dims]
            wire = wire_of_config(_datatype_name(model_input.data_type))
            inputs.append(
                (
                    model_input.name,
                    wire,
                    dims,
                    element_size(wire),
                    bool(model_input.optional),
                    bool(model_input.is_shape_tensor),
                    # Variable dims and not ragged: requests of different shapes never
                    # share a batch (the validator computes their shape key).
                    -1 in dims and not model_input.allow_ragged_batch,
                )
            )
        # What the spec is built from: workers rebuild it (model_directory.py).
        self.spec_args = (
            self.model_name,
            str(model_version),
            self.max_batch_size,
            inputs,
            [output.name for output in config.output],
        )
        self.spec = _core.ModelSpec(*self.spec_args)

    def __call__(self, request: InferRequest) -> int:
        return self.validate(request)

    def validate(self, request: InferRequest) -> int:
        """Raise InvalidArgument with Triton's message; return the request's batch size
        (the first dim for a batching model, 1 for a non-batching one)."""
        return self.check(request)[0]

    def check(self, request: InferRequest) -> tuple[int, int]:
        """As `validate`, returning (batch size, shape key): requests whose keys differ
        never share a batch."""
        result = self.spec.validate(request.id, request.inputs, request.outputs)
        if type(result) is str:
            raise InvalidArgument(result)
        return result
