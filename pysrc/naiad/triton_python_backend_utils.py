"""Triton's Python model API (`import triton_python_backend_utils as pb_utils`).

Existing Triton Python models run unmodified against this module: it offers the same classes,
functions and constants as Triton's python_backend, with the same names, signatures and
behaviour. The Python backend (`naiad.backends.python`) registers this module in `sys.modules`
under the name `triton_python_backend_utils` before it imports a model.

What differs from Triton, on purpose:

- BLS requests (`InferenceRequest.exec` / `async_exec`) go through the server's core
  (`naiad.worker.bls`); `load_model` / `unload_model` go to the frontend's model control
  through it too (the repository extension's load and unload), and also work while the
  server starts. `InferenceRequest.get_response_sender` works on the requests execute()
  receives, in decoupled models and, for one response each as in Triton, in the others.
- `MetricFamily` / `Metric` keep their values in the model's process; they are not exported
  on the metrics endpoint yet.
- `Logger` writes to the server's log (observability.triton_log): its file or stderr, its format,
  each severity only while the server's log settings have it on (they follow
  `POST /v2/logging` at run time).
"""

from __future__ import annotations

import enum
import inspect
import json
import threading

import numpy as np
import orjson

from naiad import _core, triton_codes
from naiad import datatypes as _datatypes
from naiad.observability import custom_metrics as _custom_metrics
from naiad.observability import triton_log
from naiad.worker import bls

# --------------------------------------------------------------------------------------------
# Datatypes
# --------------------------------------------------------------------------------------------

# TRITONSERVER_DataType enum values, as Tensor.triton_dtype() returns them: the core's
# datatype table (naiad/datatypes.py), as every table below.
_TYPES = _datatypes.DATATYPES
TRITONSERVER_TYPE_INVALID = 0
TRITONSERVER_TYPE_BOOL = _TYPES["BOOL"].triton_type
TRITONSERVER_TYPE_UINT8 = _TYPES["UINT8"].triton_type
TRITONSERVER_TYPE_UINT16 = _TYPES["UINT16"].triton_type
TRITONSERVER_TYPE_UINT32 = _TYPES["UINT32"].triton_type
TRITONSERVER_TYPE_UINT64 = _TYPES["UINT64"].triton_type
TRITONSERVER_TYPE_INT8 = _TYPES["INT8"].triton_type
TRITONSERVER_TYPE_INT16 = _TYPES["INT16"].triton_type
TRITONSERVER_TYPE_INT32 = _TYPES["INT32"].triton_type
TRITONSERVER_TYPE_INT64 = _TYPES["INT64"].triton_type
TRITONSERVER_TYPE_FP16 = _TYPES["FP16"].triton_type
TRITONSERVER_TYPE_FP32 = _TYPES["FP32"].triton_type
TRITONSERVER_TYPE_FP64 = _TYPES["FP64"].triton_type
TRITONSERVER_TYPE_BYTES = _TYPES["BYTES"].triton_type
TRITONSERVER_TYPE_BF16 = _TYPES["BF16"].triton_type

# Config type name -> numpy type, exactly Triton's table (TYPE_BOOL maps to Python's bool).
TRITON_STRING_TO_NUMPY = {
    d.config_name: bool if d.kind == "bool" else d.numpy.type
    for d in _TYPES.values()
    if d.numpy is not None
}

_NUMPY_OF_TRITON_TYPE = {
    d.triton_type: d.numpy.type for d in _TYPES.values() if d.numpy is not None
}

_TRITON_TYPE_OF_NUMPY = {
    d.numpy: d.triton_type for d in _TYPES.values() if d.numpy is not None and d.kind != "bytes"
}

# Triton datatype enum value <-> wire datatype name ("FP32", "BYTES", ...).
WIRE_OF_TRITON_TYPE = {d.triton_type: d.name for d in _TYPES.values()}
TRITON_TYPE_OF_WIRE = {wire: value for value, wire in WIRE_OF_TRITON_TYPE.items()}

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2


def triton_to_numpy_type(data_type):
    """TRITONSERVER_DataType value (11) -> numpy type (np.float32); None if there is none."""
    return _NUMPY_OF_TRITON_TYPE.get(data_type)


def numpy_to_triton_type(data_type):
    """numpy dtype or type (np.float32) -> TRITONSERVER_DataType value (11); None if none."""
    if data_type is None:
        return None
    try:
        dtype = np.dtype(data_type)
    except TypeError:
        return None
    if dtype.kind in ("O", "S"):
        return TRITONSERVER_TYPE_BYTES
    return _TRITON_TYPE_OF_NUMPY.get(dtype)


def triton_string_to_numpy(triton_type_string):
    """'TYPE_FP32' -> np.float32 (KeyError for an unknown name)."""
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def serialize_byte_tensor(input_tensor):
    """Object/bytes array -> Triton's BYTES layout (4-byte LE length before each element).

    Elements are taken in C order; bytes stay as they are, anything else is `str()`-ed and
    UTF-8 encoded. Returns None when the array does not hold bytes/objects, as Triton does.
    """
    input_tensor = np.asarray(input_tensor)
    if input_tensor.dtype.kind not in ("O", "S", "U"):
        return None
    if input_tensor.size == 0:
        return b""
    return _datatypes.serialize_bytes(input_tensor)


def deserialize_bytes_tensor(encoded_tensor):
    """Triton's BYTES layout -> 1-D numpy object array of bytes, in C order."""
    return _datatypes.deserialize_bytes(encoded_tensor)


def _text(value):
    """A string argument as Triton's bindings take it: pybind11 converts `bytes` (UTF-8)
    as well as `str` to a std::string, and models pass bytes read from TYPE_STRING inputs
    (`name.as_numpy()[0]`). Anything else is returned as is, for the caller's own check."""
    if isinstance(value, bytes):
        return value.decode("utf-8")
    return value


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


class TritonError(Exception):
    """An error to put in an InferenceResponse: `TritonError(message, code=INTERNAL)`.

    The code constants are Triton's TRITONSERVER_Error_Code values.
    """

    UNKNOWN = triton_codes.UNKNOWN
    INTERNAL = triton_codes.INTERNAL
    NOT_FOUND = triton_codes.NOT_FOUND
    INVALID_ARG = triton_codes.INVALID_ARG
    UNAVAILABLE = triton_codes.UNAVAILABLE
    UNSUPPORTED = triton_codes.UNSUPPORTED
    ALREADY_EXISTS = triton_codes.ALREADY_EXISTS
    CANCELLED = triton_codes.CANCELLED

    _CODE_NAMES = triton_codes.NAMES

    def __init__(self, message, code=triton_codes.INTERNAL):
        if message is None:
            raise TypeError("TritonError message must not be None")
        if code is None or int(code) not in self._CODE_NAMES:
            raise TypeError(f"TritonError code must be one of the TritonError constants: {code!r}")
        message = str(_text(message))
        super().__init__(message)
        self._message = message
        self._code = int(code)

    def message(self):
        return self._message

    def code(self):
        return self._code

    def code_name(self):
        """The code's name ('INVALID_ARG'); a Naiad addition."""
        return self._CODE_NAMES[self._code]

    def __str__(self):
        return self._message

    def __repr__(self):
        return f"TritonError({self._message!r}, code=TritonError.{self.code_name()})"


class TritonModelException(Exception):
    """The exception the API raises, and that models raise to fail a whole batch."""

    def __init__(self, msg=None):
        super().__init__(msg)
        self._msg = msg

    def message(self):
        return self._msg

    def __str__(self):
        return "" if self._msg is None else str(self._msg)


# --------------------------------------------------------------------------------------------
# Tensor
# --------------------------------------------------------------------------------------------

_DLPACK_CPU = 1
_DLPACK_CUDA = 2
_DLPACK_CUDA_HOST = 3


class _Capsule:
    """Gives a bare DLPack capsule the `__dlpack__` protocol numpy.from_dlpack expects."""

    def __init__(self, capsule):
        self._capsule = capsule

    def __dlpack__(self, stream=None, **kwargs):
        return self._capsule

    def __dlpack_device__(self):
        return (_DLPACK_CPU, 0)


def _triton_type_of_foreign(dtype) -> int:
    """Triton datatype of a non-numpy (torch, cupy, ...) tensor's dtype."""
    try:
        value = numpy_to_triton_type(dtype)
    except Exception:  # noqa: BLE001 - any foreign dtype that numpy cannot read
        value = None
    if value is not None:
        return value
    name = str(dtype).rsplit(".", 1)[-1].lower()
    if name == "bfloat16":
        return TRITONSERVER_TYPE_BF16
    if name == "bool":
        return TRITONSERVER_TYPE_BOOL
    value = numpy_to_triton_type(name) if name.isidentifier() else None
    if value is None:
        raise TritonModelException(f"DLPack tensor dtype {dtype} is not supported.")
    return value


class Tensor(_core.TensorFields):
    """A named tensor: `Tensor(name, numpy_array)`.

    The array is kept as given (no copy) when it is C-contiguous; a non-contiguous array is
    made contiguous, as Triton does. BYTES tensors are numpy object arrays of bytes.

    Its fields (_name, _array, _triton_dtype, _device_tensor, _device_id) and the common
    case of its constructor are in C (naiad._core.TensorFields); the rest is here.
    """

    __slots__ = ()
    # What inspect.signature(Tensor) says: the constructor in C has no signature of its own.
    __signature__ = inspect.Signature(
        [
            inspect.Parameter("name", inspect.Parameter.POSITIONAL_OR_KEYWORD),
            inspect.Parameter("numpy_array", inspect.Parameter.POSITIONAL_OR_KEYWORD),
        ]
    )

    def _init_checked(self, name, numpy_array):
        """Tensor(name, numpy_array) for what TensorFields does not take itself: a name
        that is not a plain non-empty str, an array that is not an exact C-contiguous
        ndarray of a numeric dtype."""
        name = _text(name)
        if type(name) is not str and not isinstance(name, str):
            raise TypeError(f"Tensor name must be a str, got {type(name).__name__}")
        if not name:
            raise TritonModelException("Tensor name cannot be an empty string.")
        if type(numpy_array) is not np.ndarray and not isinstance(numpy_array, np.ndarray):
            numpy_array = np.asarray(numpy_array)
        # Most outputs are of a plain numeric dtype: one dict lookup.
        triton_dtype = _TRITON_TYPE_OF_NUMPY.get(numpy_array.dtype)
        if triton_dtype is None:
            triton_dtype = numpy_to_triton_type(numpy_array.dtype)
        if triton_dtype is None:
            raise TritonModelException(
                f"NumPy dtype {numpy_array.dtype} is not supported. "
                "Use np.object_ (holding bytes) for string tensors."
            )
        if not numpy_array.flags.c_contiguous:
            numpy_array = np.ascontiguousarray(numpy_array)
        self._name = name
        self._array = numpy_array
        self._triton_dtype = triton_dtype
        self._device_tensor = None
        self._device_id = 0

    @classmethod
    def _from_server(cls, name: str, array, triton_dtype: int):
        """A tensor the server built from a validated request: no checks, no copy."""
        tensor = cls.__new__(cls)
        tensor._name = name
        tensor._array = array
        tensor._triton_dtype = triton_dtype
        tensor._device_id = 0
        return tensor

    @classmethod
    def _from_device(cls, name, device_tensor, device_id, triton_dtype):
        tensor = cls.__new__(cls)
        tensor._name = name
        tensor._array = None
        tensor._triton_dtype = triton_dtype
        tensor._device_tensor = device_tensor
        tensor._device_id = device_id
        return tensor

    # name() and as_numpy() are TensorFields'.

    def _not_on_host(self):
        raise TritonModelException("Tensor is stored in GPU and cannot be converted to NumPy.")

    def triton_dtype(self):
        """The TRITONSERVER_DataType value (TRITONSERVER_TYPE_FP32 == 11, ...)."""
        return self._triton_dtype

    def shape(self):
        if self._device_tensor is not None:
            return [int(dim) for dim in self._device_tensor.shape]
        return [int(dim) for dim in self._array.shape]

    def is_cpu(self):
        return self._device_tensor is None

    def _host_array(self, role: str):
        """The tensor's bytes in host memory: its array, or its device tensor copied to
        the host (what goes through the arena: a BLS request's input, an output).
        TritonModelException naming the `role` ("input", "output") and the tensor when
        the copy cannot be made."""
        if self._device_tensor is None:
            return self._array
        from naiad.memory import cuda_ipc

        try:
            return cuda_ipc.to_host(self._device_tensor, self._device_id)
        except Exception as exc:
            raise TritonModelException(
                f"{role} '{self._name}' in GPU memory could not be copied to the host: {exc}"
            ) from None

    def to_dlpack(self):
        """A DLPack capsule over the tensor's memory (no copy)."""
        return self.__dlpack__()

    def __dlpack__(self, stream=None, **kwargs):
        if self._triton_dtype == TRITONSERVER_TYPE_BYTES:
            raise TritonModelException("DLPack does not have support for string tensors.")
        if self._device_tensor is not None:
            return self._device_tensor.__dlpack__(stream=stream)
        return self._array.__dlpack__()

    def __dlpack_device__(self):
        if self._device_tensor is not None:
            return (_DLPACK_CUDA, self._device_id)
        return (_DLPACK_CPU, 0)

    @staticmethod
    def from_dlpack(name, tensor):
        """A Tensor over a DLPack capsule or an object with `__dlpack__` (no copy).

        CPU tensors become numpy views; GPU tensors are kept as they are (`is_cpu()` False).
        """
        name = _text(name)
        if not isinstance(name, str) or name == "":
            raise TritonModelException("Tensor name cannot be an empty string.")
        if type(tensor).__name__ == "PyCapsule":
            tensor = _Capsule(tensor)
        elif not (hasattr(tensor, "__dlpack__") and hasattr(tensor, "__dlpack_device__")):
            raise TritonModelException(
                "Provided tensor is not supported. Tensor must be a DLPack capsule or have "
                "`__dlpack__` and `__dlpack_device__` attributes"
            )
        device_type, device_id = tensor.__dlpack_device__()
        device_type = int(device_type)
        if device_type in (_DLPACK_CPU, _DLPACK_CUDA_HOST):
            try:
                array = np.from_dlpack(tensor)
            except (BufferError, TypeError, RuntimeError) as exc:
                raise TritonModelException(f"Failed to read the DLPack tensor: {exc}") from exc
            return Tensor(name, array)
        if device_type == _DLPACK_CUDA:
            triton_dtype = _triton_type_of_foreign(getattr(tensor, "dtype", None))
            return Tensor._from_device(name, tensor, int(device_id), triton_dtype)
        raise TritonModelException(f"DLDevice type {device_type} is not support by Python backend.")

    def __repr__(self):
        wire = WIRE_OF_TRITON_TYPE.get(self._triton_dtype, "?")
        where = "CPU" if self.is_cpu() else f"GPU:{self._device_id}"
        return f"Tensor({self._name!r}, {wire}, shape={self.shape()}, {where})"


# --------------------------------------------------------------------------------------------
# Requests and responses
# --------------------------------------------------------------------------------------------


class MemoryType(enum.IntEnum):
    TRITONSERVER_MEMORY_GPU = 0
    TRITONSERVER_MEMORY_CPU = 1


TRITONSERVER_MEMORY_GPU = MemoryType.TRITONSERVER_MEMORY_GPU
TRITONSERVER_MEMORY_CPU = MemoryType.TRITONSERVER_MEMORY_CPU


class PreferredMemory:
    """Where a BLS caller prefers output tensors: PreferredMemory(type, device_id=0)."""

    def __init__(self, preferred_memory_type, preferred_device_id=0):
        self.preferred_memory_type = preferred_memory_type
        self.preferred_device_id = preferred_device_id


class InferenceTrace:
    """A request's trace, `request.trace()`: passed as InferenceRequest(trace=...), it
    makes the BLS call a child trace of the request's when the request is traced (as
    Triton's Python backend; a call without it is not traced). get_context() is the
    trace context, as Triton 2.51 gives it: in trace mode opentelemetry, for a traced
    request, its model span's W3C context as a JSON object string,
    '{"traceparent":"00-<trace id>-<span id>-<flags>"}' (the core draws the ids,
    csrc/core/trace_context.h); None otherwise (mode triton, a request not traced)."""

    def __init__(self, context=None):
        self._context = context or None
        self._request = None  # the server's request whose trace this is (worker/bls.py)

    def get_context(self):
        return self._context

    def _parent(self) -> tuple:
        """(batch id, 1 + index) of the request this is the trace of, while the model
        runs it: a BLS call made with it is a child trace of that request's (the core
        makes it one only if that request is traced); else (0, 0)."""
        parent = self._request
        if parent is not None:
            for batch_id, requests in reversed(_RUNNING):
                for index, request in enumerate(requests):
                    if request is parent:
                        return batch_id, index + 1
        return 0, 0

    def _client_state(self) -> bytes | None:
        """The client's tracestate in this context (as the JSON string literal a request
        block carries), for the called model's context; None without one."""
        context = self._context
        if not context or '"tracestate"' not in context:
            return None
        value = orjson.loads(context).get("tracestate")
        return orjson.dumps(value) if isinstance(value, str) else None


def _set_trace_contexts(requests: list, contexts: dict) -> None:
    """Gives the requests of a batch traced in mode opentelemetry their trace contexts
    (Batch.trace_contexts: by request index), before the model sees them."""
    for index, context in contexts.items():
        request = requests[index]
        trace = request._trace = InferenceTrace(context)
        trace._request = request


# The batches a model's execute() runs now, innermost last: (the core's batch id, its
# requests), so a BLS call made with trace=request.trace() can name its request
# (backends/python.py pushes them, worker/bls.py reads them).
_RUNNING: list = []


def _parameters_json(parameters) -> str:
    """dict (or JSON object string) of str -> bool/int/str, as Triton's JSON string."""
    if parameters is None:
        return "{}"
    if isinstance(parameters, str):
        try:
            parameters = json.loads(parameters) if parameters else {}
        except ValueError as exc:
            raise TritonModelException(f"parameters is not valid JSON: {exc}") from exc
    if not isinstance(parameters, dict):
        raise TritonModelException(f"Expect parameters to be a dict, found type {type(parameters)}")
    for key, value in parameters.items():
        if not isinstance(key, str):
            raise TritonModelException(
                f"Expect parameters keys to have type str, found type {type(key)}"
            )
        if not isinstance(value, (bool, int, str)):
            raise TritonModelException(
                f"Expect parameters values to have type bool/int/str, found type {type(value)}"
            )
    return json.dumps(parameters)


_NO_SENDER = (
    "InferenceRequest.get_response_sender() is available on the requests a model's "
    "execute() receives, while it runs"
)


class InferenceRequest(_core.RequestFields):
    """A request: the ones a model's execute() receives, or a BLS request it builds.

    InferenceRequest(request_id="", correlation_id=0, inputs, requested_output_names,
    model_name, model_version=-1, flags=0, timeout=0, preferred_memory=None, trace=None,
    parameters=None) -- the same parameters, order and defaults as Triton's; pass them by
    keyword as Triton's documentation does.
    """

    def __init__(
        self,
        request_id="",
        correlation_id=0,
        inputs=None,
        requested_output_names=None,
        model_name="",
        model_version=-1,
        flags=0,
        timeout=0,
        preferred_memory=None,
        trace=None,
        parameters=None,
    ):
        if inputs is None:
            raise TypeError("InferenceRequest() missing required argument 'inputs'")
        if requested_output_names is None:
            raise TypeError("InferenceRequest() missing required argument 'requested_output_names'")
        if request_id is None:
            request_id = ""
        request_id = _text(request_id)
        model_name = _text(model_name)
        if not isinstance(correlation_id, (int, str)) or isinstance(correlation_id, bool):
            raise TritonModelException("Correlation ID must be integer or string")
        inputs = list(inputs)
        for tensor in inputs:
            if not isinstance(tensor, Tensor):
                raise TritonModelException(
                    f"Input tensor for request with id '{request_id}' and model name "
                    f"'{model_name}' should not be empty."
                    if tensor is None
                    else f"inputs must be pb_utils.Tensor objects, found type {type(tensor)}"
                )
        names = []
        for output_name in requested_output_names:
            output_name = _text(output_name)
            if output_name == "" or not isinstance(output_name, str):
                raise TritonModelException(
                    f"Requested output name for request with id '{request_id}' and model "
                    f"name '{model_name}' should not be empty."
                )
            if output_name not in names:
                names.append(output_name)
        self._request_id = str(request_id)
        self._correlation_id = correlation_id
        self._inputs = inputs
        self._requested_output_names = names
        self._model_name = model_name
        self._model_version = int(model_version)
        self._flags = int(flags)
        self._timeout = int(timeout)
        self._preferred_memory = preferred_memory
        self._trace = trace if trace is not None else InferenceTrace()
        self._parameters = _parameters_json(parameters)
        self._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL

    def inputs(self):
        return self._inputs

    def request_id(self):
        return self._request_id

    def correlation_id(self):
        return self._correlation_id

    def requested_output_names(self):
        """The set of output names the client asked for (a set, as in Triton)."""
        return set(self._requested_output_names)

    def model_name(self):
        return self._model_name

    def model_version(self):
        return self._model_version

    def flags(self):
        return self._flags

    def set_flags(self, flags):
        self._flags = int(flags)

    def timeout(self):
        return self._timeout

    def parameters(self):
        """The request parameters as a JSON object string, as Triton gives them."""
        return self._parameters

    def trace(self):
        trace = self._trace
        if trace is None:  # a request the server handed the model
            trace = self._trace = InferenceTrace()
            trace._request = self
        return trace

    # What a request the server built has (naiad._core.server_requests makes them, with
    # the fields of _core.RequestFields): class-level, so that each of the requests a
    # model receives does not store them again.
    _preferred_memory = None
    _trace = None  # made on the first trace() (no work per request here)

    # Set by the Python backend on the requests of a running model: a callable that
    # says whether the client cancelled the request (a flag the core sets in shared
    # memory), and a decoupled model's response sender. A model that is not decoupled
    # gets its sender on the first get_response_sender(), from the backend's factory
    # (set while its execute() runs; None where there is no such request).
    _cancel_probe = None
    _response_sender = None
    _single_sender_factory = None

    def is_cancelled(self):
        probe = self._cancel_probe
        return False if probe is None else bool(probe())

    def set_release_flags(self, flags):
        self._release_flags = int(flags)

    def release_flags(self):
        return self._release_flags

    def get_response_sender(self):
        sender = self._response_sender
        if sender is None:
            factory = InferenceRequest._single_sender_factory
            sender = None if factory is None else factory(self)
            if sender is None:
                raise TritonModelException(_NO_SENDER)
            self._response_sender = sender
        return sender

    def exec(self, decoupled=False):
        """Runs the request on `model_name` through the server (BLS): the
        InferenceResponse (errors in it: `has_error()`), or with `decoupled` an
        iterator of them."""
        call = self._send()
        if decoupled:
            return ResponseIterator(bls.Stream(call))
        return _response_of(_bls(bls.result, call))

    def async_exec(self, decoupled=False):
        """As exec(), awaitable; requests awaited together run concurrently."""
        return _Pending(self._send(), decoupled)

    def _wire_inputs(self):
        """The inputs as the core takes them (InputTensor records); one in GPU memory is
        copied to the host first (the request goes through the arena)."""
        inputs = []
        for tensor in self._inputs:
            wire = WIRE_OF_TRITON_TYPE.get(tensor._triton_dtype, "BYTES")
            array = tensor._array if tensor._device_tensor is None else tensor._host_array("input")
            inputs.append(bls.input_of(tensor._name, array, wire))
        return inputs

    def _send(self):
        """Sends the request to the core (worker/bls.py): its call in flight."""
        trace = self._trace
        return _bls(
            bls.start,
            self._model_name,
            self._model_version,
            self._request_id,
            self._wire_inputs(),
            list(self._requested_output_names),
            self._parameters,
            self._correlation_id,
            self._flags,
            self._timeout,
            trace._parent() if trace is not None else (0, 0),
            trace._client_state() if trace is not None else None,
        )

    def __repr__(self):
        return (
            f"InferenceRequest(request_id={self._request_id!r}, model_name={self._model_name!r}, "
            f"inputs={[t.name() for t in self._inputs]}, "
            f"requested_output_names={self._requested_output_names})"
        )


class InferenceResponse(_core.ResponseFields):
    """InferenceResponse(output_tensors=[], error=None, parameters=None).

    Its fields (_output_tensors, _error, _parameters, _parameters_dict) and the common
    case of its constructor are in C (naiad._core.ResponseFields); the rest is here."""

    # No attributes beyond those fields, as Triton's (a pybind11 class): and no
    # __dict__ to allocate per response.
    __slots__ = ()
    __signature__ = inspect.Signature(
        [
            inspect.Parameter(
                "output_tensors", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None
            ),
            inspect.Parameter("error", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None),
            inspect.Parameter("parameters", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None),
        ]
    )

    def _init_checked(self, output_tensors, error, parameters):
        """InferenceResponse(...) for what ResponseFields does not take itself: an error,
        parameters, outputs that are not a list of pb_utils Tensors."""
        self._error = None
        self._parameters = "{}"
        self._parameters_dict = None
        if output_tensors is None:
            output_tensors = []
        elif type(output_tensors) is not list and not isinstance(output_tensors, (list, tuple)):
            raise TritonModelException('"output_tensors" must be a list.')
        for tensor in output_tensors:
            if type(tensor) is not Tensor and not isinstance(tensor, Tensor):
                raise TritonModelException(
                    f"output_tensors must hold pb_utils.Tensor objects, found type {type(tensor)}"
                )
        self._output_tensors = list(output_tensors)
        if error is not None:
            if not isinstance(error, TritonError):
                if not isinstance(error, str):
                    raise TritonModelException(
                        f"error must be a pb_utils.TritonError, found type {type(error)}"
                    )
                error = TritonError(error)
            self._error = error
        if parameters is not None:
            self._parameters = _parameters_json(parameters)
            self._parameters_dict = json.loads(self._parameters) or None

    def output_tensors(self):
        return self._output_tensors

    def has_error(self):
        return self._error is not None

    def error(self):
        return self._error

    def parameters(self):
        return self._parameters


# The core makes and recognizes these classes (server_requests, plain_python_results) and
# its constructors (TensorFields, ResponseFields) take this dtype table.
_core.bind_pb_utils(Tensor, InferenceRequest, InferenceResponse, _TRITON_TYPE_OF_NUMPY)


class InferenceResponseSender:
    """A decoupled model's way to answer a request: `request.get_response_sender()`.

    `send(response=None, flags=0)` sends one response; the request's last send carries
    `flags=TRITONSERVER_RESPONSE_COMPLETE_FINAL` (with a response, or None for the flag
    alone). Any thread may send, during execute() or after it returned. The server
    builds these (`_stream` is the backend's per-request stream)."""

    def __init__(self, _stream=None):
        if _stream is None:
            raise TritonModelException(
                "InferenceResponseSender objects are made by the server: use "
                "request.get_response_sender()"
            )
        self._stream = _stream
        self._closed = False
        self._lock = threading.Lock()

    @staticmethod
    def _final(response, flags) -> bool:
        """Whether a send with these arguments is the final one; raises Triton's error
        for arguments it refuses."""
        flags = int(flags)
        if flags not in (0, TRITONSERVER_RESPONSE_COMPLETE_FINAL):
            raise TritonModelException(
                "Unable to send response. Unsupported flag provided, only "
                "TRITONSERVER_RESPONSE_COMPLETE_FINAL is supported"
            )
        final = flags == TRITONSERVER_RESPONSE_COMPLETE_FINAL
        if response is None and not final:
            raise TritonModelException(
                "Inference Response object must be provided when the response flags is set to zero."
            )
        if response is not None and not isinstance(response, InferenceResponse):
            raise TritonModelException(
                f"Expected an 'InferenceResponse' object, found type '{type(response)}'."
            )
        return final

    def send(self, response=None, flags=0):
        final = self._final(response, flags)
        with self._lock:
            if self._closed:
                raise TritonModelException(
                    "Unable to send response. Response sender has been closed."
                )
            if final:
                self._closed = True
        self._stream.send(response, final)

    def is_cancelled(self):
        return self._stream.cancelled()


# --------------------------------------------------------------------------------------------
# BLS: a model's own requests (InferenceRequest.exec), sent through the worker's channel
# --------------------------------------------------------------------------------------------


def _bls(function, *args):
    """`function(*args)` of the BLS client (worker/bls.py), its CallError raised as the
    TritonModelException a model sees."""
    try:
        return function(*args)
    except bls.CallError as exc:
        raise TritonModelException(exc.message) from None


def _response_of(reply) -> InferenceResponse:
    """The InferenceResponse of a BLS call's bls.Reply."""
    if reply.error is not None:
        return InferenceResponse(error=TritonError(reply.error.message, reply.error.code))
    outputs = [
        Tensor._from_server(name, array, TRITON_TYPE_OF_WIRE[datatype])
        for name, array, datatype in reply.outputs
    ]
    return InferenceResponse(outputs, parameters=reply.parameters)


class _Pending:
    """What async_exec returns: the request is already sent; awaiting it reads the
    channel until its response is in (other calls' responses meanwhile go to them, so
    several awaited together run concurrently)."""

    __slots__ = ("call", "decoupled")

    def __init__(self, call, decoupled: bool):
        self.call = call
        self.decoupled = decoupled

    def __await__(self):
        if self.decoupled:
            return ResponseIterator(bls.Stream(self.call))
        return _response_of(_bls(bls.result, self.call))
        yield  # a generator: `await` takes it


class ResponseIterator:
    """exec(decoupled=True): each response as it arrives, the last one flagged final
    (it may have no outputs, as in Triton)."""

    def __init__(self, stream):
        self._stream = stream

    def __iter__(self):
        return self

    def __next__(self):
        reply = _bls(self._stream.next)
        if reply is None:
            raise StopIteration
        return _response_of(reply)

    def cancel(self):
        """Cancels the request (python_backend's ResponseIterator.cancel(), from its
        25.05 release): queued, it is dropped and the iterator ends with a "Request was
        cancelled" error; running, the called model's request.is_cancelled() turns
        true. The responses sent meanwhile, and the final one, still come."""
        _bls(self._stream.cancel)


# --------------------------------------------------------------------------------------------
# Lookups
# --------------------------------------------------------------------------------------------


# The request's input Tensor called `name`, or None. A model calls it for every input
# of every request: it is the core's function itself, not a Python function calling it.
get_input_tensor_by_name = _core.get_input_tensor_by_name


def get_output_tensor_by_name(inference_response, name):
    """The response's output Tensor called `name`, or None."""
    for tensor in inference_response.output_tensors():
        if tensor.name() == name:
            return tensor
    return None


def get_input_config_by_name(model_config, name):
    """The model config dict's input entry called `name`, or None."""
    for entry in model_config.get("input", ()) or ():
        if entry.get("name") == name:
            return entry
    return None


def get_output_config_by_name(model_config, name):
    """The model config dict's output entry called `name`, or None."""
    for entry in model_config.get("output", ()) or ():
        if entry.get("name") == name:
            return entry
    return None


def using_decoupled_model_transaction_policy(model_config):
    """True if the model config dict sets model_transaction_policy { decoupled: true }."""
    policy = model_config.get("model_transaction_policy") or {}
    return bool(policy.get("decoupled", False))


_model_dir = None


def get_model_dir():
    """The folder of the running model's file (its version folder), as in Triton."""
    return _model_dir


def _set_model_dir(path):
    global _model_dir
    _model_dir = path


def load_model(model_name, config="", files=None):
    """Loads (or reloads) `model_name` in explicit model-control mode: `config` a JSON
    config overriding config.pbtxt, `files` {"file:<path>": bytes} the model folder."""
    _bls(bls.load_model, _text(model_name), _text(config), files)


def unload_model(model_name, unload_dependents=False):
    """Unloads `model_name` (explicit model-control mode)."""
    _bls(bls.unload_model, _text(model_name), unload_dependents)


def is_model_ready(model_name, model_version=""):
    """Whether the server serves `model_name` (at `model_version`) and it is ready."""
    return _bls(bls.is_model_ready, _text(model_name), _text(model_version))


# --------------------------------------------------------------------------------------------
# Auto-complete configuration
# --------------------------------------------------------------------------------------------


class ModelConfig:
    """The model configuration a model's `auto_complete_config(auto_complete_model_config)`
    receives and returns. Only max_batch_size, inputs, outputs, dynamic batching and the
    transaction policy may be set.

    `ModelConfig(model_config)` takes the config as a JSON string (as Triton) or a dict.
    """

    def __init__(self, model_config):
        if isinstance(model_config, (str, bytes)):
            config = json.loads(model_config)
        elif isinstance(model_config, dict):
            config = json.loads(json.dumps(model_config))
        else:
            raise TypeError("ModelConfig takes the model configuration as a JSON string or dict")
        config.setdefault("max_batch_size", 0)
        config.setdefault("input", [])
        config.setdefault("output", [])
        self._model_config = config

    def _name(self):
        return str(self._model_config.get("name", ""))

    def as_dict(self):
        return self._model_config

    def set_max_batch_size(self, max_batch_size):
        current = int(self._model_config.get("max_batch_size", 0) or 0)
        if current > max_batch_size:
            raise ValueError(
                f"configuration specified max_batch_size {current}, but in auto-complete-config "
                f"function for model '{self._name()}' specified max_batch_size {max_batch_size}"
            )
        self._model_config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self):
        for other in ("sequence_batching", "ensemble_scheduling"):
            if other in self._model_config:
                raise ValueError(
                    f"Configuration specified scheduling_choice as '{other}', but "
                    f"auto-complete-config function for model '{self._name()}' tries to set "
                    "scheduling_choice as 'dynamic_batching'"
                )
        self._model_config.setdefault("dynamic_batching", {})

    def _add_tensor(self, kind, tensor, valid):
        model = self._name()
        if not isinstance(tensor, dict):
            raise ValueError(
                f"{kind} in auto-complete-config function for model '{model}' must be a dict"
            )
        label = f"{kind} '{tensor.get('name', '')}'"
        for prop in tensor:
            if prop not in valid:
                allowed = ", ".join(f"'{p}'" for p in valid[:-1]) + f" and '{valid[-1]}'"
                raise ValueError(
                    f"{label} in auto-complete-config function for model '{model}' contains "
                    f"property other than {allowed}."
                )
        for prop in ("name", "data_type", "dims"):
            if prop not in tensor:
                who = kind if prop == "name" else label
                raise ValueError(
                    f"{who} in auto-complete-config function for model '{model}' is missing "
                    f"'{prop}' property."
                )
        name = tensor["name"]
        for existing in self._model_config.setdefault(kind, []):
            if existing.get("name") != name:
                continue
            current_type = existing.get("data_type", "TYPE_INVALID")
            if current_type != "TYPE_INVALID" and current_type != tensor["data_type"]:
                raise ValueError(
                    f"unable to load model '{model}', configuration expects datatype "
                    f"{current_type} for {kind} '{name}', model provides {tensor['data_type']}"
                )
            current_dims = existing.get("dims")
            if current_dims and list(current_dims) != list(tensor["dims"]):
                raise ValueError(
                    f"model '{model}', tensor '{name}': the model expects dims "
                    f"{list(tensor['dims'])} but the model configuration specifies dims "
                    f"{list(current_dims)}"
                )
            if (
                "optional" in existing
                and "optional" in tensor
                and existing["optional"] != tensor["optional"]
            ):
                raise ValueError(
                    f"model '{model}', tensor '{name}': the model expects optional "
                    f"{tensor['optional']} but the model configuration specifies optional "
                    f"{existing['optional']}"
                )
            existing["data_type"] = tensor["data_type"]
            existing["dims"] = list(tensor["dims"])
            if "optional" in tensor:
                existing["optional"] = tensor["optional"]
            return
        entry = dict(tensor)
        entry["dims"] = list(tensor["dims"])
        self._model_config[kind].append(entry)

    def add_input(self, input):  # noqa: A002 - Triton's parameter name
        self._add_tensor("input", input, ["name", "data_type", "dims", "optional"])

    def add_output(self, output):
        self._add_tensor("output", output, ["name", "data_type", "dims"])

    def set_model_transaction_policy(self, transaction_policy_dict):
        model = self._name()
        for prop in transaction_policy_dict:
            if prop != "decoupled":
                raise ValueError(
                    "model transaction property in auto-complete-config function for model "
                    f"'{model}' contains property other than 'decoupled'."
                )
        policy = self._model_config.setdefault("model_transaction_policy", {})
        if "decoupled" in transaction_policy_dict:
            wanted = transaction_policy_dict["decoupled"]
            if "decoupled" in policy and policy["decoupled"] != wanted:
                raise ValueError(
                    f"trying to change decoupled property in auto-complete-config for model "
                    f"'{model}', which is already set to '{policy['decoupled']}'."
                )
            policy["decoupled"] = wanted


# --------------------------------------------------------------------------------------------
# Logging
# --------------------------------------------------------------------------------------------


def set_log_verbose(level):
    """Show Logger.log_verbose lines when level > 0 (the server's log_verbose_level; a
    worker follows the server's settings by itself, naiad/observability/triton_log.py)."""
    triton_log.apply({"log_verbose_level": int(level)})


class Logger:
    """Triton's model logger: Logger.log_info(msg), log_warn, log_error, log_verbose, log.

    Lines go to the server's log (its file or stderr) in its current format, each
    severity only while the server has it on, as Triton's Python backend does."""

    class LogLevel(enum.IntEnum):
        INFO = 0
        WARNING = 1
        ERROR = 2
        VERBOSE = 3

    INFO = LogLevel.INFO
    WARNING = LogLevel.WARNING
    ERROR = LogLevel.ERROR
    VERBOSE = LogLevel.VERBOSE

    _SEVERITIES = {0: triton_log.INFO, 1: triton_log.WARNING, 2: triton_log.ERROR, 3: "V"}

    @staticmethod
    def log(message, level=LogLevel.INFO):
        severity = Logger._SEVERITIES.get(int(level), triton_log.INFO)
        if not triton_log.enabled(severity):
            return
        frame = inspect.currentframe()
        caller = frame.f_back if frame is not None else None
        while caller is not None and caller.f_globals.get("__name__") == __name__:
            caller = caller.f_back
        if caller is None:
            path, line = "model.py", 0
        else:
            path, line = caller.f_code.co_filename, caller.f_lineno
        triton_log.write(severity, path, line, str(_text(message)))

    @staticmethod
    def log_info(message):
        Logger.log(message, Logger.LogLevel.INFO)

    @staticmethod
    def log_warn(message):
        Logger.log(message, Logger.LogLevel.WARNING)

    @staticmethod
    def log_error(message):
        Logger.log(message, Logger.LogLevel.ERROR)

    @staticmethod
    def log_verbose(message):
        Logger.log(message, Logger.LogLevel.VERBOSE)


# --------------------------------------------------------------------------------------------
# Custom metrics: shared by the model's instances and shown on /metrics
# (naiad/observability/custom_metrics.py)
# --------------------------------------------------------------------------------------------


class MetricKind(enum.IntEnum):
    COUNTER = _custom_metrics.COUNTER
    GAUGE = _custom_metrics.GAUGE
    HISTOGRAM = _custom_metrics.HISTOGRAM


def _metric_call(call, *args):
    try:
        return call(*args)
    except _custom_metrics.MetricError as exc:
        raise TritonModelException(str(exc)) from None


class Metric:
    """One metric of a family (one set of labels). Another instance of the model that
    makes the same family and labels shares its value, as in Triton."""

    def __init__(self, family, labels, buckets):
        self._family = family
        self._kind = int(family.kind)
        self._labels = {_text(key): _text(value) for key, value in (labels or {}).items()}
        self._buckets = [float(b) for b in buckets] if buckets is not None else None
        self._slot = _metric_call(
            _custom_metrics.store().metric, family.name, self._labels, self._buckets
        )

    def increment(self, value):
        _metric_call(_custom_metrics.store().increment, self._kind, self._slot, float(value))

    def set(self, value):
        _metric_call(_custom_metrics.store().set, self._kind, self._slot, float(value))

    def observe(self, value):
        store = _custom_metrics.store()
        _metric_call(store.observe, self._kind, self._slot, self._buckets, float(value))

    def value(self):
        return _custom_metrics.store().value(self._kind, self._slot)


class MetricFamily:
    COUNTER = MetricKind.COUNTER
    GAUGE = MetricKind.GAUGE
    HISTOGRAM = MetricKind.HISTOGRAM

    def __init__(self, name, description, kind):
        self.name = _text(name)
        self.description = _text(description)
        self.kind = MetricKind(kind)
        _metric_call(_custom_metrics.store().family, self.name, self.description, int(self.kind))

    def Metric(self, labels=None, buckets=None):  # noqa: N802 - Triton's method name
        return Metric(self, labels, buckets)
