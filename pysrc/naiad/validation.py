"""Request validation against a model config, with Triton's checks, order and messages.

Front-end independent: the HTTP and gRPC front ends build an `InferRequest` and the model
calls `validate_request` (or a `RequestValidator` it built once) before submitting it.

The checks run in the order Triton's `InferenceRequest::Normalize` runs them, so the first
error a client sees is the one Triton would report:

1. duplicate input names
2. unknown requested output names
3. unknown input names
4. input count (missing required inputs; `optional: true` inputs may be absent)
5. batch dimension (batching models): present, equal across inputs, <= max_batch_size
6. per input: datatype, shape against dims (-1 is a wildcard), data byte size
   (BYTES: element count)
"""

from __future__ import annotations

import struct

from naiad.datatypes import element_size, wire_of_config
from naiad.errors import InvalidArgument
from naiad.types import InferRequest

__all__ = ["RequestValidator", "validate_request", "log_prefix", "count_bytes_elements"]

_U32 = struct.Struct("<I")

_SHAPE_NOTE = (
    "NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension "
    "to be prepended to each input shape. If you want to specify the full shape including "
    "the batch dim in your input dims config, try setting max_batch_size to zero. See the "
    "model configuration docs for more info on max_batch_size."
)


def log_prefix(request_id: str) -> str:
    """Triton's `LogRequest()` prefix: '[request id: <id>] ', '<id_unknown>' when empty."""
    return f"[request id: {request_id or '<id_unknown>'}] "


def dims_string(dims) -> str:
    """Triton's DimsListToString: [-1,16]."""
    return "[" + ",".join(str(d) for d in dims) + "]"


def _names_string(names) -> str:
    return "[" + ",".join(f"'{n}'" for n in names) + "]"


def _datatype_name(config_type: int) -> str:
    from naiad.protos import model_config_pb2

    return model_config_pb2.DataType.Name(config_type)


def count_bytes_elements(data, prefix: str, input_name: str, model_name: str) -> int:
    """Number of elements in a BYTES buffer in Triton's layout; InvalidArgument if malformed."""
    view = data if isinstance(data, memoryview) else memoryview(data)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    end = len(view)
    offset = 0
    count = 0
    unpack = _U32.unpack_from
    while offset < end:
        if offset + 4 > end:
            raise InvalidArgument(
                f"{prefix}incomplete string length indicator for inference input "
                f"'{input_name}' for model '{model_name}', expecting 4 bytes but only "
                f"{end - offset} bytes available. Please make sure the string length "
                "indicator is in one buffer."
            )
        (length,) = unpack(view, offset)
        offset += 4
        if offset + length > end:
            raise InvalidArgument(
                f"incomplete string data for inference input '{input_name}', expecting "
                f"string of length {length} but only {end - offset} bytes available"
            )
        offset += length
        count += 1
    return count


class _InputSpec:
    __slots__ = ("name", "wire", "dims", "size", "is_shape_tensor", "optional", "fixed")

    def __init__(self, model_input):
        self.name = model_input.name
        self.wire = wire_of_config(_datatype_name(model_input.data_type))
        self.dims = tuple(int(d) for d in model_input.dims)
        self.size = element_size(self.wire)
        self.is_shape_tensor = bool(getattr(model_input, "is_shape_tensor", False))
        self.optional = bool(getattr(model_input, "optional", False))
        # Dims with no wildcard: the shape check is a tuple comparison.
        self.fixed = -1 not in self.dims


class RequestValidator:
    """Validates requests for one model; build it once per loaded model, call per request."""

    __slots__ = (
        "model_name",
        "model_version",
        "max_batch_size",
        "inputs",
        "input_order",
        "output_names",
        "required",
        "required_count",
        "input_count",
        "_unknown_input_fmt",
    )

    def __init__(self, config, model_name: str = "", model_version: int = 0):
        self.model_name = model_name or config.name
        self.model_version = model_version
        self.max_batch_size = int(config.max_batch_size)
        self.inputs = {i.name: _InputSpec(i) for i in config.input}
        self.input_order = [i.name for i in config.input]
        self.output_names = frozenset(o.name for o in config.output)
        self.required = [n for n in self.input_order if not self.inputs[n].optional]
        self.required_count = len(self.required)
        self.input_count = len(self.input_order)

    def __call__(self, request: InferRequest) -> int:
        return self.validate(request)

    def validate(self, request: InferRequest) -> int:
        """Raise InvalidArgument with Triton's message; return the request's batch size
        (the first dim for a batching model, 1 for a non-batching one)."""
        model = self.model_name
        inputs = request.inputs
        specs = self.inputs

        # 1. duplicates (Triton rejects them while the request is built).
        if len(inputs) > 1:
            seen = set()
            for tensor in inputs:
                if tensor.name in seen:
                    raise InvalidArgument(
                        f"{log_prefix(request.id)}input '{tensor.name}' already exists in request"
                    )
                seen.add(tensor.name)

        # 2. requested outputs.
        if request.outputs:
            names = self.output_names
            for out in request.outputs:
                if out.name not in names:
                    raise InvalidArgument(
                        f"unexpected inference output '{out.name}' for model '{model}'"
                    )

        # 3. unknown inputs.
        for tensor in inputs:
            if tensor.name not in specs:
                raise InvalidArgument(
                    f"unexpected inference input '{tensor.name}' for model '{model}'"
                )

        # 4. count / required inputs.
        count = len(inputs)
        if (
            count > self.input_count
            or count < self.required_count
            or (self.required_count != self.input_count and not self._has_required(inputs))
        ):
            self._raise_count(request)

        # 5. batch dimension.
        mbs = self.max_batch_size
        if mbs > 0:
            batch = None
            for tensor in inputs:
                if specs[tensor.name].is_shape_tensor:
                    continue
                shape = tensor.shape
                if not shape:
                    raise InvalidArgument(
                        f"{log_prefix(request.id)}input '{tensor.name}' has no shape but model "
                        f"requires batch dimension for '{model}'"
                    )
                if batch is None:
                    batch = shape[0]
                elif shape[0] != batch:
                    raise InvalidArgument(
                        f"{log_prefix(request.id)}input '{tensor.name}' batch size does not "
                        f"match other inputs for '{model}'"
                    )
            batch = batch or 0
            if batch > mbs:
                raise InvalidArgument(
                    f"{log_prefix(request.id)}inference request batch-size must be <= {mbs} "
                    f"for '{model}'"
                )
        else:
            batch = 0

        # 6. per input: datatype, shape, size.
        for tensor in inputs:
            spec = specs[tensor.name]
            if tensor.datatype != spec.wire:
                raise InvalidArgument(
                    f"{log_prefix(request.id)}inference input '{tensor.name}' data-type is "
                    f"'{tensor.datatype}', but model '{model}' expects '{spec.wire}'"
                )
            shape = tensor.shape
            if mbs > 0 and not spec.is_shape_tensor:
                dims_shape = shape[1:]
                # Triton's ShapeWithBatchDim prepends the batch only when it is non-zero.
                full_shape = shape if batch > 0 else dims_shape
            else:
                dims_shape = shape
                full_shape = shape
            if not self._shape_matches(spec, dims_shape):
                if mbs > 0:
                    expected = dims_string((-1,) + spec.dims)
                    note = _SHAPE_NOTE
                else:
                    expected = dims_string(spec.dims)
                    note = ""
                raise InvalidArgument(
                    f"{log_prefix(request.id)}unexpected shape for input '{tensor.name}' for "
                    f"model '{model}'. Expected {expected}, got {dims_string(shape)}. {note}"
                )
            elements = 1
            for dim in full_shape:
                elements *= dim
            if spec.size:
                expected_bytes = elements * spec.size
                got = _nbytes(tensor.data)
                if got != expected_bytes:
                    raise InvalidArgument(
                        f"{log_prefix(request.id)}input byte size mismatch for input "
                        f"'{tensor.name}' for model '{model}'. Expected {expected_bytes}, "
                        f"got {got}"
                    )
            else:
                prefix = log_prefix(request.id)
                got = count_bytes_elements(tensor.data, prefix, tensor.name, model)
                if got != elements:
                    if got > elements:
                        raise InvalidArgument(
                            f"{prefix}unexpected number of string elements {got} for inference "
                            f"input '{tensor.name}' for model '{model}', expecting {elements}"
                        )
                    raise InvalidArgument(
                        f"{prefix}expected {elements} string elements for inference input "
                        f"'{tensor.name}' for model '{model}', got {got}"
                    )
        return batch if mbs > 0 else 1

    @staticmethod
    def _shape_matches(spec: _InputSpec, shape) -> bool:
        dims = spec.dims
        if len(dims) != len(shape):
            return False
        if spec.fixed:
            return tuple(shape) == dims
        for want, got in zip(dims, shape):
            if want != -1 and want != got:
                return False
        return True

    def _has_required(self, inputs) -> bool:
        present = {t.name for t in inputs}
        return all(name in present for name in self.required)

    def _raise_count(self, request: InferRequest):
        present = [t.name for t in request.inputs]
        present_set = set(present)
        missing = [n for n in self.required if n not in present_set]
        got = len(present)
        if self.required_count == self.input_count:
            expected = f"expected {self.input_count} inputs"
        else:
            expected = (
                f"expected number of inputs between {self.required_count} and {self.input_count}"
            )
        raise InvalidArgument(
            f"{log_prefix(request.id)}{expected} but got {got} inputs for model "
            f"'{self.model_name}'. Got input(s) {_names_string(present)}, but missing required "
            f"input(s) {_names_string(missing)}. Please provide all required input(s)."
        )


def _nbytes(data) -> int:
    if isinstance(data, memoryview):
        return data.nbytes
    return len(data)


# id(config) -> (config, name, version, validator). The config is kept alive with its entry so
# its id cannot be reused by another object while cached.
_CACHE: dict[int, tuple] = {}
_CACHE_LIMIT = 1024


def validate_request(config, model_name: str, model_version: int, request: InferRequest) -> int:
    """Validate `request` against `config` (a ModelConfig); see `RequestValidator.validate`.

    The per-config lookup tables are built once and cached by the config's identity."""
    entry = _CACHE.get(id(config))
    if entry is None or entry[0] is not config or entry[1] != model_name:
        if len(_CACHE) >= _CACHE_LIMIT:
            _CACHE.clear()
        entry = (config, model_name, RequestValidator(config, model_name, model_version))
        _CACHE[id(config)] = entry
    return entry[2].validate(request)
