"""The interface between a worker and the backend that runs its model instance.

A worker builds one backend per model instance from the instance's args (exactly the dict
Triton's `initialize()` receives), then for every batch the core sends it calls
`execute(batch)` and writes the results it gets back into the arena; on shutdown it calls
`finalize()`. A backend knows nothing of HTTP, gRPC or the arena's block layout: it sees a
`Batch` (each request's `RequestHeader` and input arrays, numpy views over the arena: no
copy) and answers each request with a `Response` or a `RequestError`.

    class MyBackend(Backend):
        def __init__(self, args):           # load the model; raise to fail the load
            ...
        def execute(self, batch):
            return [Response([("OUTPUT0", run(request.arrays[0]))]) for request in batch.requests]
        def finalize(self):
            ...

Backends are found by the `backend` (or else `platform`) of config.pbtxt through
`naiad.backends.load_backend`.
"""

from __future__ import annotations

import orjson

# A request's success: Response(outputs, parameters=None), outputs as [(name, numpy array),
# ...]. Defined in the core, where the worker's result paths make and read it.
from naiad._core import Response
from naiad.triton_codes import INTERNAL

# TRITONSERVER_RequestFlag bits (pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_*).
SEQUENCE_START = 1
SEQUENCE_END = 2

# Request parameters that Triton's front ends turn into request properties (correlation id,
# sequence flags, priority, timeout, output encoding) instead of passing them to the model.
RESERVED_PARAMETERS = frozenset(
    ("sequence_id", "sequence_start", "sequence_end", "priority", "timeout", "binary_data_output")
)

_UINT64_MAX = (1 << 64) - 1


class RequestHeader:
    """Everything about a request except its tensor data: parsed once per distinct header.

    A client sends the same header (same id, names, shapes, parameters) again and again, so
    a worker keeps these and shares one among the requests that carry it; never modify one.

    - `id`: the request id ("" when the client gave none)
    - `inputs`: ((name, datatype, shape), ...) in the order of `RequestView.arrays`;
      `input_names` and `input_datatypes` the same names and datatypes as tuples of their own
    - `requested_outputs`: the output names the client asked for; empty for all of them
    - `parameters`: the request's parameters without the ones Triton consumes
      (`RESERVED_PARAMETERS`), as a dict; `parameters_json` the same as a JSON object string
    - `timeout_us`: the `timeout` parameter (microseconds), 0 when absent
    - `correlation_id`: the `sequence_id` parameter (an int or a str), 0 when absent
    - `flags`: SEQUENCE_START | SEQUENCE_END as the `sequence_start` / `sequence_end`
      parameters say
    """

    __slots__ = (
        "id",
        "inputs",
        "input_names",
        "input_datatypes",
        "requested_outputs",
        "parameters",
        "parameters_json",
        "timeout_us",
        "correlation_id",
        "flags",
    )

    def __init__(self, request_id: str, inputs: tuple, requested_outputs: list, parameters: dict):
        self.id = request_id
        self.inputs = inputs
        self.input_names = tuple(name for name, _, _ in inputs)
        self.input_datatypes = tuple(datatype for _, datatype, _ in inputs)
        self.requested_outputs = requested_outputs
        self.timeout_us = 0
        self.correlation_id: int | str = 0
        self.flags = 0
        if not parameters:
            self.parameters = {}
            self.parameters_json = "{}"
            return
        timeout = parameters.get("timeout", 0)
        if type(timeout) is int and 0 <= timeout <= _UINT64_MAX:
            self.timeout_us = timeout
        sequence_id = parameters.get("sequence_id", 0)
        # As Triton: an unsigned integer, else a string.
        if (type(sequence_id) is int and 0 <= sequence_id <= _UINT64_MAX) or type(
            sequence_id
        ) is str:
            self.correlation_id = sequence_id
        if parameters.get("sequence_start") is True:
            self.flags |= SEQUENCE_START
        if parameters.get("sequence_end") is True:
            self.flags |= SEQUENCE_END
        own = {key: value for key, value in parameters.items() if key not in RESERVED_PARAMETERS}
        self.parameters = own
        self.parameters_json = orjson.dumps(own).decode() if own else "{}"


class RequestView:
    """One request of a batch: its header and its input arrays (`arrays[i]` holds
    `header.inputs[i]`), numpy views over the arena; BYTES inputs are object arrays of
    bytes, decoded from the arena."""

    __slots__ = ("header", "arrays")

    def __init__(self, header: RequestHeader, arrays: list):
        self.header = header
        self.arrays = arrays

    @property
    def id(self) -> str:
        return self.header.id

    @property
    def parameters(self) -> dict:
        return self.header.parameters

    @property
    def requested_outputs(self) -> list:
        return self.header.requested_outputs

    @property
    def inputs(self) -> list:
        """[(name, datatype, array, shape), ...]."""
        return [
            (name, datatype, array, shape)
            for (name, datatype, shape), array in zip(self.header.inputs, self.arrays)
        ]


class Batch:
    """The requests of one execution, in the order their results must come back:
    request i is `headers[i]` with its input arrays `arrays[i]` (`arrays[i][j]` holds
    input `headers[i].inputs[j]`). `requests` gives the same as RequestViews; the two
    parallel lists spare the hot path an object per request.

    `tensors`: the batch's inputs as whole batch-major `[N, ...]` arrays over the arena
    by name (worker.main.batch_inputs), what a framework backend feeds its session in one
    call; filled only for a backend whose `batch_tensors` is true, else an empty dict.

    `device_inputs`: for a backend with `device_inputs` true (a GPU backend), the inputs
    the client placed in CUDA shared memory on its device, read in place, by (request
    index, input index): `naiad.memory.cuda_ipc.DeviceArray`s (`__cuda_array_interface__`);
    their `arrays` entries then hold no data. Empty otherwise. `device_outputs`: the
    (request index, output name) pairs such a backend may leave on its device, as
    `DeviceArray`s, because the client placed them in CUDA shared memory there.
    `output_targets`: the same pairs -> `naiad.memory.cuda_ipc.OutputTarget`, the client's
    device memory each goes to: a backend that writes an output there itself (bound as
    the output's memory) returns `target.written(dtype, shape)` and nothing is copied.

    `reserve`: for a backend whose `places_outputs` is true, when the worker can take
    outputs written in place (no client shm outputs), `reserve(outputs, rows)` lays out
    the batch's response block before the model runs and returns it
    (_core.ReservedResponse: each output's batch-major run in the arena; None when there
    is no room), else None. A backend that wrote every request's outputs there sets
    `placed` to that block (the worker posts it as it is) and still returns its results
    (views of the block), or discards the block and answers the usual way.

    `trace_contexts`: for the requests traced in trace mode opentelemetry, their model
    spans' W3C context as Triton gives a model it (request.trace().get_context()), by
    request index; None when no request of the batch has one."""

    __slots__ = (
        "headers",
        "arrays",
        "tensors",
        "device_inputs",
        "device_outputs",
        "output_targets",
        "reserve",
        "placed",
        "batch_id",
        "trace_contexts",
    )

    def __init__(self, headers: list[RequestHeader], arrays: list[list], tensors=None):
        self.headers = headers
        self.arrays = arrays
        self.tensors = tensors if tensors is not None else {}
        self.device_inputs = {}
        self.device_outputs = frozenset()
        self.output_targets = {}
        self.reserve = None
        self.placed = None
        self.batch_id = 0  # the core's id of the batch (the worker's; 0 in tests)
        self.trace_contexts = None  # {request index: its trace context}, or None

    def __len__(self) -> int:
        return len(self.headers)

    @property
    def requests(self) -> list[RequestView]:
        return [RequestView(header, arrays) for header, arrays in zip(self.headers, self.arrays)]


class RequestError:
    """A request's failure: the message the client gets and a Triton error code.
    `by_model`: the model itself answered with this error (a Python model's
    InferenceResponse(error=...)), which Triton 2.51 counts as a success in the
    statistics (csrc/ipc/ipc_schema.h kResponseModelError)."""

    __slots__ = ("message", "code", "by_model")

    def __init__(self, message: str, code: int = INTERNAL, by_model: bool = False):
        self.message = message
        self.code = int(code)
        self.by_model = by_model

    def __repr__(self) -> str:
        return f"RequestError({self.message!r}, code={self.code})"


class Rescheduled:
    """A request the model released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE
    (iterative sequences): no answer yet; the backend runs it again (run_rescheduled).
    The worker notes where its answer goes: the core's batch, the request's index there
    and the client shm regions its outputs go to (None: none)."""

    __slots__ = ("batch_id", "index", "regions")

    def __init__(self):
        self.batch_id = 0
        self.index = 0
        self.regions = None


Result = Response | RequestError


class Backend:
    """One loaded model instance. Subclasses load in `__init__(args)`: `args` is the dict
    Triton's `initialize()` receives (model_config as JSON text, model_name, model_version,
    model_repository, model_instance_kind/name/device_id); an exception fails the load and
    its message is what the server reports."""

    # True: the worker fills `Batch.tensors` (the batch-major input arrays by name).
    batch_tensors = False
    # True: the backend can write outputs straight into the response block
    # (`Batch.reserve`).
    places_outputs = False
    # True once the model ran out of memory (MemoryError): the worker answers the batch,
    # then exits and the frontend starts a fresh one.
    out_of_memory = False

    def execute(self, batch: Batch) -> list[Result]:
        """One Response or RequestError per request of `batch`, in its order."""
        raise NotImplementedError

    def finalize(self) -> None:
        """Release the model; called once, after the last batch."""
