# The core's tables and codecs every side uses: completion, submit, message and response
# constants, error kinds and datatypes, the response block, ModelSpec (the request validator).
# Part of the extension naiad._core: pysrc/naiad/_core.pyx includes it.


# Completion statuses (channel.h CompletionStatus).
COMPLETION_OK = 0
COMPLETION_WORKER_FAILED = 1
COMPLETION_INSTANCE_DIED = 2
COMPLETION_TIMED_OUT = kCompletionTimedOut
COMPLETION_MODEL_GONE = kCompletionModelGone
COMPLETION_CANCELLED = kCompletionCancelled
COMPLETION_SEQUENCE_TIMED_OUT = kCompletionSequenceTimedOut
COMPLETION_ARENA_FULL = kCompletionArenaFull

# Core.cancel results.
CANCEL_UNKNOWN = 0
CANCEL_DROPPED = 1
CANCEL_FLAGGED = 2
# Statistics of requests workers submitted (BLS, ensemble steps), nothing to answer: the
# completion's request ids are [count, rows, queue ns, request ns, compute input ns,
# compute infer ns, compute output ns, whole batch] (csrc/core/core.h RoutedStats).
COMPLETION_ROUTED = kCompletionRouted
# Statistics of workers' requests their called model refused from its queue (a BLS call
# timed out or cancelled there): request_ids are (status, count, summed ns), instance_id
# one of that model's instances (csrc/core/core.h kCompletionRoutedRefused).
COMPLETION_ROUTED_REFUSED = kCompletionRoutedRefused
# A completion's instance id when no instance ran it; with COMPLETION_ROUTED, a worker's
# request to an ensemble whose handle is the completion's batch id.
NO_INSTANCE = kNoInstance
# A worker's model-control request (pb_utils.load_model, unload_model): the completion's
# batch id is its tag, its result block the control block (read_control_block), which
# the frontend frees; Core.reply_control answers it.
COMPLETION_CONTROL = kCompletionControl

# Core.submit results.
SUBMIT_OK = 0
SUBMIT_ARENA_FULL = 1
SUBMIT_QUEUE_FULL = 2
SUBMIT_MODEL_GONE = 3
SUBMIT_UNSUPPORTED_INPUT = 4
# Refused by the sequence batcher (csrc/core/sequence_batch_scheduler.h), as Triton refuses.
SUBMIT_SEQUENCE_BATCH_SIZE = 5
SUBMIT_NO_SEQUENCE_ID = 6
SUBMIT_SEQUENCE_NOT_STARTED = 7

# WorkerEndpoint.wait message kinds (channel.h MessageKind).
MESSAGE_BATCH = 1
MESSAGE_STOP = 2
MESSAGE_RESPONSE = 3
MESSAGE_REFUSED = 4
MESSAGE_CONTROL_REPLY = 5
# A MESSAGE_REFUSED status with this bit is a COMPLETION_* status (queued, then failed);
# without it a SUBMIT_* result (never queued).
REFUSED_QUEUED = 0x100

# Response flags (csrc/ipc/ipc_schema.h ResponseRecord.flags).
RESPONSE_FINAL = kResponseFinal
RESPONSE_ERROR = kResponseError
RESPONSE_MODEL_ERROR = kResponseModelError

def response_counts_as_failure(uint32_t flags):
    """Whether the statistics count a final response with `flags` (RESPONSE_*) as a
    failure: csrc/ipc/ipc_schema.h's one rule (an error the model sent is a success)."""
    return c_response_counts_as_failure(flags)


TENSOR_QUEUE_INPUT = tensor_activity_name(TensorActivity.kQueueInput).decode()
TENSOR_BACKEND_OUTPUT = tensor_activity_name(TensorActivity.kBackendOutput).decode()


def trace_tensor(str name, str datatype, shape, data):
    """Triton's trace-file text of one tensor (csrc/codec/trace_tensor.h), for the general
    path's traced requests at level TENSORS; `data` in wire layout."""
    cdef string out
    cdef vector[int64_t] dims = [int(d) for d in shape]
    cdef const uint8_t[::1] view = memoryview(data).cast("B") if len(data) else b"\0"
    cdef bytes name_bytes = name.encode()
    cdef bytes type_bytes = datatype.encode()
    append_trace_tensor(&out, string_view(PyBytes_AS_STRING(name_bytes), len(name_bytes)),
                        string_view(PyBytes_AS_STRING(type_bytes), len(type_bytes)),
                        dims.data() if dims.size() else NULL, dims.size(), &view[0], len(data))
    return out


def now_ns():
    """CLOCK_MONOTONIC in ns: the clock the core and the workers stamp with."""
    return monotonic_ns()


cdef object _arena_view(Arena& arena):
    return PyMemoryView_FromMemory(<char*>arena.base(), <Py_ssize_t>arena.size(), PyBUF_WRITE)


cdef class BlockResponse:
    """One response of a response block (csrc/ipc/ipc_schema.h): the batch index of the
    request it answers, its RESPONSE_* flags, its error code, its outcome JSON
    (worker/outcome_record.py) and each output's (arena offset, size)."""

    cdef readonly uint32_t request_index
    cdef readonly uint32_t flags
    cdef readonly int32_t error_code
    cdef readonly bytes json
    cdef readonly tuple outputs


cdef class ResponseBlock:
    """A response block as read_response_block reads it: the batch's worker-side timings
    (ns: start, compute_input, compute_infer, compute_output) and its responses in record
    order."""

    cdef readonly list timings
    cdef readonly list responses


def read_response_block(buffer, uint64_t offset, uint64_t size):
    """The ResponseBlock at `offset` of `buffer` (the arena), or None when the block is not
    readable (every offset and size is checked against it)."""
    cdef const uint8_t[::1] memory = buffer
    cdef uint64_t total = memory.shape[0]
    if offset == 0 or offset > total or size > total - offset:
        return None
    cdef const uint8_t* block = &memory[0] + offset
    cdef ResponseBlockView view
    if not view_response_block(block, size, &view):
        return None
    cdef ResponseBlock out = ResponseBlock.__new__(ResponseBlock)
    out.responses = []
    cdef uint32_t r, o
    cdef const ResponseRecordC* record
    cdef BlockResponse response
    for r in range(view.header.n_responses):
        record = &view.records[r]
        response = BlockResponse.__new__(BlockResponse)
        response.request_index = record.request_index
        response.flags = record.flags
        response.error_code = record.error_code
        response.json = PyBytes_FromStringAndSize(<const char*>(block + record.json_offset),
                                                  record.json_size)
        response.outputs = tuple([(offset + view.outputs[record.first_output + o].offset,
                                   view.outputs[record.first_output + o].size)
                                  for o in range(record.n_outputs)])
        out.responses.append(response)
    out.timings = [view.header.timings[0], view.header.timings[1], view.header.timings[2],
                   view.header.timings[3]]
    return out


def response_started(buffer, uint64_t offset, uint64_t size):
    """When each response's request started (monotonic ns, in record order) for a block
    that answers requests that started apart (the core's answer to ensemble requests that
    ended together, csrc/ipc/ipc_schema.h kResponseStartedEach): what a request's queue time
    counts up to instead of its completion's dispatch time. None for any other block."""
    cdef const uint8_t[::1] memory = buffer
    cdef uint64_t total = memory.shape[0]
    if offset == 0 or offset > total or size > total - offset:
        return None
    cdef ResponseBlockView view
    if not view_response_block(&memory[0] + offset, size, &view) or view.started == NULL:
        return None
    cdef uint32_t r
    return [view.started_ns(r) for r in range(view.header.n_responses)]


cdef list _response_entries(list responses, list timings, vector[ResponseEntry]* entries,
                            uint64_t* c_timings):
    """Fills `entries` and `c_timings` (4) from `responses` [(request_index, flags,
    error_code, json bytes, [output buffers in wire layout])]; returns the objects the
    entries' views point into, to keep until the block is written."""
    cdef ResponseEntry entry
    cdef OutputBytes output
    cdef const uint8_t[::1] view
    cdef list keep = []
    cdef int i
    for i in range(4):
        c_timings[i] = timings[i]
    entries.reserve(len(responses))
    for request_index, flags, error_code, json, buffers in responses:
        entry.request_index = request_index
        entry.flags = flags
        entry.error_code = error_code
        keep.append(json)
        entry.json = string_view(PyBytes_AS_STRING(json), PyBytes_GET_SIZE(json))
        entry.outputs.clear()
        for data in buffers:
            view = memoryview(data).cast("B")
            keep.append(view)
            output.size = view.shape[0]
            output.data = <const void*>&view[0] if view.shape[0] > 0 else NULL
            entry.outputs.push_back(output)
        entries.push_back(entry)
    return keep


def encode_response_block(list responses, list timings):
    """A response block as WorkerEndpoint.respond writes one, as bytes (tests):
    `responses` [(request_index, flags, error_code, json bytes, [output buffers])]."""
    cdef vector[ResponseEntry] entries
    cdef uint64_t c_timings[4]
    cdef list keep = _response_entries(responses, timings, &entries, c_timings)
    cdef bytes block = PyBytes_FromStringAndSize(NULL, response_block_size(entries))
    write_response_block(<uint8_t*>PyBytes_AS_STRING(block), entries, c_timings)
    return block


def input_order_key(list indices):
    """The core's input_order of a request whose inputs are the config inputs
    `indices`, in request order (the fast lane computes the same)."""
    cdef vector[uint32_t] c_indices = indices
    return c_input_order_key(c_indices.data(), c_indices.size())


cdef bytes _set_sequence(SubmitOptions* options, tuple sequence):
    """Sets a submit's correlation id and START/END flags from `sequence`, (id int,
    string id as UTF-8 bytes or b"", flags) as sequence_parameters.sequence_of gives
    them (None: none). Returns the string id's bytes, which the options view: the
    caller keeps them alive until its submit returns."""
    if sequence is None:
        return b""
    cdef bytes key = sequence[1]
    options.sequence_id = sequence[0]
    options.sequence_key = string_view(PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key))
    options.sequence_flags = sequence[2]
    return key


# Error kinds (csrc/codec/infer_types.h ErrorKind), the one table of their HTTP statuses and
# gRPC codes, and of the pb_utils.TritonError codes a worker reports
# (csrc/codec/error_status.h): the lanes and the general paths all answer through them.
ERROR_UNKNOWN = <uint8_t>ErrorKind.kUnknown
ERROR_INTERNAL = <uint8_t>ErrorKind.kInternal
ERROR_NOT_FOUND = <uint8_t>ErrorKind.kNotFound
ERROR_INVALID_ARGUMENT = <uint8_t>ErrorKind.kInvalidArgument
ERROR_UNAVAILABLE = <uint8_t>ErrorKind.kUnavailable
ERROR_UNSUPPORTED = <uint8_t>ErrorKind.kUnsupported
ERROR_ALREADY_EXISTS = <uint8_t>ErrorKind.kAlreadyExists


def triton_error_codes():
    """Triton's error codes (TRITONSERVER_Error_Code), a dict per row of the core's table
    (csrc/codec/error_status.h): code, name (as pb_utils.TritonError's constant), kind
    (ERROR_*) a response that failed with it answers as."""
    cdef size_t i
    return [
        {
            "code": <int32_t>kTritonCodes[i].code,
            "name": _view_text(kTritonCodes[i].name),
            "kind": <uint8_t>kTritonCodes[i].kind,
        }
        for i in range(kTritonCodeCount)
    ]


def http_status_of_kind(uint8_t kind):
    """Triton's HTTP status for an error of `kind` (ERROR_*)."""
    return error_status_of(<ErrorKind>kind).http_status


def grpc_code_of_kind(uint8_t kind):
    """Triton's gRPC status code for an error of `kind` (ERROR_*), from the same table
    (csrc/codec/error_status.h)."""
    return error_status_of(<ErrorKind>kind).grpc_code


def error_kind_of_code(int64_t code):
    """The error kind (ERROR_*) of a pb_utils.TritonError code."""
    return <uint8_t>error_kind_of_triton_code(code)


cdef inline str _view_text(string_view text):
    return text.data()[:text.size()].decode()


def datatypes():
    """Triton's tensor datatypes, a dict per row of the core's one table
    (csrc/codec/datatype.h): name, config_name, triton_type, size, kind."""
    cdef size_t i
    return [
        {
            "name": _view_text(kDatatypes[i].name),
            "config_name": _view_text(kDatatypes[i].config_name),
            "triton_type": kDatatypes[i].triton_type,
            "size": kDatatypes[i].size,
            "kind": _view_text(element_kind_name(kDatatypes[i].kind)),
        }
        for i in range(kDatatypeCount)
    ]


def log_prefix(str request_id):
    """Triton's LogRequest() prefix, '[request id: <id>] ' ('<id_unknown>' when empty),
    as the validator's messages carry it."""
    return c_log_prefix(_utf8_view(request_id)).decode("utf-8", "replace")


cdef class ModelSpec:
    """A model version as the validator and the KServe codec see it (csrc/codec/infer_types.h).

    `inputs`: [(name, wire datatype, dims, element size (0: BYTES), optional,
    is_shape_tensor, shape_keyed)] in config order; `outputs`: output names."""

    cdef CModelSpec spec

    def __init__(self, str name, str version, int64_t max_batch_size, list inputs,
                 list outputs):
        cdef InputSpec item
        self.spec.name = name.encode()
        self.spec.name_json = json_string_text(self.spec.name)
        self.spec.version = version.encode()
        self.spec.max_batch_size = max_batch_size
        for input_name, datatype, dims, element_size, optional, shape_tensor, shape_keyed \
                in inputs:
            item.name = input_name.encode()
            item.name_json = json_string_text(item.name)
            item.datatype = datatype.encode()
            item.dims = dims
            item.element_size = element_size
            item.optional = optional
            item.shape_tensor = shape_tensor
            item.shape_keyed = shape_keyed
            self.spec.inputs.push_back(item)
        for output_name in outputs:
            self.spec.outputs.push_back(output_name.encode())
            self.spec.outputs_json.push_back(json_string_text(self.spec.outputs.back()))

    def set_labels(self, dict labels):
        """Each output's label lines (bytes), by output name: what classification names
        classes after (csrc/codec/classification.h). Set before the codec copies the spec."""
        cdef size_t i
        self.spec.output_labels.clear()
        self.spec.output_labels.resize(self.spec.outputs.size())
        for i in range(self.spec.outputs.size()):
            for line in labels.get(self.spec.outputs[i].decode(), ()):
                self.spec.output_labels[i].push_back(line)

    def validate(self, str request_id, list inputs, outputs):
        """Runs the one validator (csrc/codec/request_validator.h) over a request the Python
        general path parsed: `inputs` are InputTensor records (name, datatype, shape,
        wire-layout buffer) in request order, `outputs` the RequestedOutput records or
        None for all. Returns (batch_size, shape_key), or Triton's message (str) when
        the request is invalid."""
        cdef _RequestView view = _RequestView(request_id, inputs, outputs)
        cdef string error
        if not validate_request(self.spec, &view.request, &error):
            return error.decode("utf-8", "replace")
        return view.request.batch_size, view.request.shape_key

    def submit(self, Core core, uint64_t core_model, uint64_t core_request_id,
               str request_id, list inputs, outputs, bytes parameters, uint32_t priority,
               uint64_t timeout_us, tuple sequence=None, bytes regions=b"",
               bint traced=False, bint trace_tensors=False, tuple trace_parent=None,
               bytes trace_state=None):
        """Validates a request the Python general path parsed (as `validate`), lays out
        its block for the worker with the lane's layout_request_block
        (csrc/ipc/request_block.h) and queues it on `core`. `parameters`: the request
        parameters as a JSON object. Returns (SUBMIT_* result, batch_size, block size),
        or Triton's message (str) when the request is invalid (nothing queued). The
        block size is what the request takes in the arena: its metadata and inputs.
        `sequence`: (correlation id int, correlation id str as UTF-8 bytes or b"",
        START|END flags) for a sequence model. `traced`: the request was sampled for
        tracing (Core.take_trace_stamps); `trace_tensors`: its child traces keep their
        tensors (level TENSORS); `trace_parent`: in trace mode opentelemetry, the
        client's traceparent as tracing.otel.parse_traceparent gives it, whose trace the
        request's spans join."""
        cdef _RequestView view = _RequestView(request_id, inputs, outputs)
        cdef string error
        if not validate_request(self.spec, &view.request, &error):
            return error.decode("utf-8", "replace")
        # The block's header is JSON: the id goes in escaped.
        cdef string id_json = json_view_text(view.request.id)
        view.request.id = string_view(id_json.data(), id_json.size())
        view.request.parameters = string_view(PyBytes_AS_STRING(parameters),
                                              PyBytes_GET_SIZE(parameters))
        # Outputs written into client shm regions (naiad/memory/shm.py), for the worker.
        view.request.output_regions = string_view(PyBytes_AS_STRING(regions),
                                                  PyBytes_GET_SIZE(regions))
        if trace_state is not None:  # a JSON string literal (tracing/otel.py)
            view.request.trace_state = string_view(PyBytes_AS_STRING(trace_state),
                                                   PyBytes_GET_SIZE(trace_state))
        cdef RequestBlock block
        cdef ModelHandle handle = _handle(core_model)
        cdef SubmitRequest submit
        cdef SubmitResult result
        cdef uint64_t size = 0
        cdef size_t i
        cdef RegionRef ref
        # Kept alive here: the options view its bytes until the submit returns.
        cdef bytes sequence_key = _set_sequence(&submit.options, sequence)
        with nogil:
            layout_request_block(self.spec, view.request, &block)
        # Inputs in client shm regions go to the core as typed sources: it copies them
        # out of the registry's mapping (bounds checked again), once; CUDA ones are
        # room only, filled by the worker that owns the device.
        for i in range(min(block.inputs.size(), len(inputs))):
            data = inputs[i].data
            if type(data) is RegionRef:
                ref = <RegionRef>data
                block.inputs[i].kind = ref.ref.kind
                block.inputs[i].region = ref.ref.id
                block.inputs[i].offset = ref.ref.object_offset - ref.ref.region_offset \
                    if ref.ref.kind == InputKind.kSystemShm else ref.ref.object_offset
                block.inputs[i].data = NULL
        with nogil:
            submit.request_id = core_request_id
            submit.metadata = string_view(block.metadata.data(), block.metadata.size())
            submit.inputs = block.inputs
            submit.options.batch_size = view.request.batch_size
            submit.options.priority = priority
            submit.options.timeout_us = timeout_us
            submit.options.shape_key = view.request.shape_key
            submit.options.input_order = block.input_order
            submit.options.traced = traced
            submit.options.trace_tensors = trace_tensors
        if trace_parent is not None:  # the client's (trace id, span id, flags)
            submit.options.trace_id_high = trace_parent[0] >> 64
            submit.options.trace_id_low = trace_parent[0] & 0xFFFFFFFFFFFFFFFF
            submit.options.trace_flags = trace_parent[2]
        with nogil:
            result = core._core.submit(handle, submit)
            size = block.metadata.size()
            for i in range(block.inputs.size()):
                size += block.inputs[i].size
        return <int>result, view.request.batch_size, size


cdef class _RequestView:
    """A ParsedRequest over a general-path InferRequest's fields, without copies: names
    and ids are views of the str objects' own UTF-8, tensor data Py_buffers held until
    this object goes."""

    cdef ParsedRequest request
    cdef Py_buffer* buffers
    cdef Py_ssize_t held
    cdef list keep  # the objects the views point into

    def __cinit__(self, str request_id, list inputs, outputs):
        cdef RequestInput item
        cdef Py_ssize_t count = len(inputs)
        cdef Py_ssize_t i
        self.keep = [request_id, inputs, outputs]
        self.buffers = <Py_buffer*>PyMem_Malloc(max(count, 1) * sizeof(Py_buffer))
        if self.buffers == NULL:
            raise MemoryError()
        self.request.id = _utf8_view(request_id)
        self.request.inputs.reserve(count)
        for i in range(count):
            tensor = inputs[i]
            item.name = _utf8_view(tensor.name)
            item.datatype = _utf8_view(tensor.datatype)
            item.shape = tensor.shape
            if type(tensor.data) is RegionRef and (<RegionRef>tensor.data).ref.kind != InputKind.kSystemShm:
                # A CUDA region's bytes stay on the device: the size is what is checked
                # here; a BYTES tensor's elements are checked by the worker once it has
                # copied them to the host (check_bytes_input), as Triton leaves them to
                # the backend.
                PyObject_GetBuffer(b"", &self.buffers[i], PyBUF_SIMPLE)
                self.held += 1
                item.data = NULL
                item.size = (<RegionRef>tensor.data).ref.size
                item.on_device = True
                self.request.inputs.push_back(item)
                item.on_device = False
                continue
            PyObject_GetBuffer(tensor.data, &self.buffers[i], PyBUF_SIMPLE)
            self.held += 1
            item.data = <const uint8_t*>self.buffers[i].buf
            item.size = self.buffers[i].len
            self.request.inputs.push_back(item)
        if outputs:
            for output in outputs:
                self.request.output_names.push_back(_utf8_view(output.name))

    def __dealloc__(self):
        cdef Py_ssize_t i
        if self.buffers != NULL:
            for i in range(self.held):
                PyBuffer_Release(&self.buffers[i])
            PyMem_Free(self.buffers)


cdef inline bytes _view_bytes(string_view text):
    return PyBytes_FromStringAndSize(text.data(), text.size())


cdef inline string_view _utf8_view(str text) except *:
    """A view of `text`'s UTF-8 form, cached in the str object itself (no copy)."""
    cdef Py_ssize_t size
    cdef const char* data = PyUnicode_AsUTF8AndSize(text, &size)
    return string_view(data, size)
