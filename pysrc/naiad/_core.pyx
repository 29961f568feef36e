# cython: language_level=3, boundscheck=False, wraparound=False
"""The only place Python touches the C++ core (csrc/).

`Core` is the frontend's side: it queues requests, forms batches and collects
completions. `FastLane` takes the common HTTP infer request from body to queued block
and from result block to response bytes. `ModelSpec.validate` is the one request
validator, for the requests the Python general path parses. `WorkerEndpoint` is a
worker's side of one instance channel. Every call that copies tensor data or may block releases the GIL.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.bytearray cimport PyByteArray_FromStringAndSize
from cpython.memoryview cimport PyMemoryView_FromMemory
from cpython.buffer cimport (
    PyBUF_C_CONTIGUOUS, PyBUF_SIMPLE, PyBUF_WRITE, PyBuffer_FillInfo, PyBuffer_Release,
    PyObject_GetBuffer
)
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_INCREF
from cpython.unicode cimport PyUnicode_AsUTF8AndSize
from libc.string cimport memcmp, memcpy
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libcpp cimport bool as cbool
from libcpp.string cimport string
from libcpp.memory cimport shared_ptr
from libcpp.string_view cimport string_view
from libcpp.utility cimport move, pair
from libcpp.vector cimport vector

cimport numpy as cnp
from naiad._native.request cimport *
from naiad._native.ipc cimport *
from naiad._native.core cimport *
from naiad._native.codec cimport *
from naiad._native.http1 cimport *
from naiad._native.http2 cimport *
from naiad._native.tls cimport *
from naiad._native.shm cimport *
from cpython.unicode cimport PyUnicode_GET_LENGTH

from collections import namedtuple

# numpy's C API: pb_utils.Tensor's constructor (TensorFields) reads an array's dtype and
# layout without Python calls.
cnp.import_array()


HTTP_MAX_HEAD = kHttpMaxHead  # csrc/http1/http_scan.h
HTTP_MAX_PIPELINE = kHttpMaxPipeline


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


# How a lane answer counts (FastLane.complete, GrpcLane.complete): a failure, a success,
# or an error response the model sent, which Triton 2.51 counts as a success
# (csrc/ipc/ipc_schema.h response_counts_as_failure).
cdef enum:
    _REPLY_FAILED = 0
    _REPLY_OK = 1
    _REPLY_MODEL_ERROR = 2
REPLY_FAILED = _REPLY_FAILED
REPLY_OK = _REPLY_OK
REPLY_MODEL_ERROR = _REPLY_MODEL_ERROR


cdef inline int _reply_status(const Answer& answer):
    if answer.response.error == ErrorKind.kNone:
        return _REPLY_OK
    return _REPLY_FAILED if answer.counted_failure else _REPLY_MODEL_ERROR


cdef QueuePolicy _queue_policy(policy):
    """A ModelQueuePolicy message as the batcher's QueuePolicy."""
    cdef QueuePolicy out
    out.timeout_action = TimeoutAction.kDelay if policy.timeout_action == 1 \
        else TimeoutAction.kReject
    out.default_timeout_us = policy.default_timeout_microseconds
    out.allow_timeout_override = policy.allow_timeout_override
    out.max_queue_size = policy.max_queue_size
    return out


cdef BatcherConfig _batcher_config(config):
    """The core's scheduling policy from a ModelConfig message: the one place that
    reads dynamic_batching. A model without it (or without batching) runs one request
    per execution."""
    cdef BatcherConfig c
    c.max_batch_size = max(config.max_batch_size, 1)
    c.dynamic_batching = False
    if not config.HasField("dynamic_batching") or config.max_batch_size <= 0:
        return c
    batching = config.dynamic_batching
    c.dynamic_batching = True
    for size in batching.preferred_batch_size:
        c.preferred_batch_sizes.push_back(size)
    c.max_queue_delay_us = batching.max_queue_delay_microseconds
    c.preserve_ordering = batching.preserve_ordering
    c.priority_levels = batching.priority_levels
    c.default_priority_level = batching.default_priority_level
    c.default_policy = _queue_policy(batching.default_queue_policy)
    per_level = batching.priority_queue_policy
    cdef uint32_t level
    for level in range(1, c.priority_levels + 1):
        if level in per_level:
            c.level_policies.push_back(_queue_policy(per_level[level]))
            c.level_has_policy.push_back(True)
        else:
            c.level_policies.push_back(c.default_policy)
            c.level_has_policy.push_back(False)
    return c


cdef SequenceConfig _sequence_config(config):
    """The sequence batcher's policy from a ModelConfig with sequence_batching, with
    Triton's default idle time (1 s)."""
    cdef SequenceConfig c
    batching = config.sequence_batching
    c.max_batch_size = max(config.max_batch_size, 1)
    c.max_sequence_idle_us = batching.max_sequence_idle_microseconds or 1000000
    c.oldest = batching.HasField("oldest")
    c.iterative = batching.iterative_sequence
    if c.oldest:
        oldest = batching.oldest
        c.max_candidate_sequences = max(oldest.max_candidate_sequences, 0)
        c.max_queue_delay_us = oldest.max_queue_delay_microseconds
        c.preserve_ordering = oldest.preserve_ordering
        for size in oldest.preferred_batch_size:
            if size > 0:
                c.preferred_batch_sizes.push_back(size)
    else:
        c.max_queue_delay_us = batching.direct.max_queue_delay_microseconds
        c.minimum_slot_utilization = batching.direct.minimum_slot_utilization
    return c


cdef ModelHandle _handle(uint64_t value):
    cdef ModelHandle handle
    handle.value = value
    return handle


def trace_tree_order(ids):
    """The order Triton writes a trace tree's traces in (csrc/core/trace_tree.h); `ids` in
    the order the traces started."""
    cdef vector[uint64_t] started = ids
    return list(c_trace_tree_order(started))


# What the core kept of a traced request (Core.take_trace_stamps): when its submit began
# and when it was queued (monotonic ns), and in trace mode opentelemetry the SpanIds of
# its model span (else None).
TraceTimes = namedtuple("TraceTimes", "request_start_ns queue_start_ns span")
# A model span's ids, as its model was given them (csrc/core/trace_context.h): the 128-bit
# trace id, the span id and the W3C trace-flags, ints.
SpanIds = namedtuple("SpanIds", "trace_id span_id flags")
# A finished child trace (csrc/core/core.h ChildTrace, Core.take_trace_children): the core's
# ids of the request and of its parent request, its model's core handle value, its
# request id (JSON string text), its request start and queue start ns, its batch's
# worker timings (compute start, input, infer, output ns: zeros for an ensemble), its
# request end ns, its [(activity name, tensor text)] at level TENSORS, its SpanIds or
# None.
ChildTraceRecord = namedtuple(
    "ChildTraceRecord",
    "request_id parent model id_text request_start_ns queue_start_ns timings end_ns tensors"
    " span",
)


cdef object _span_ids(const SpanContext& span):
    if span.span_id == 0:
        return None
    return SpanIds((<object>span.trace_id_high << 64) | span.trace_id_low, span.span_id,
                   span.trace_flags)


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


cdef list _completions(vector[Completion]& done):
    cdef list out = []
    cdef size_t i
    for i in range(done.size()):
        out.append((done[i].batch_id, done[i].status, done[i].instance_id,
                    done[i].result_offset, done[i].result_size, done[i].dispatch_ns,
                    list(done[i].request_ids)))
    return out


cdef class Core:
    """The frontend's core: one shared arena, model queues and instance channels."""

    cdef CCore* _core
    cdef readonly object arena
    cdef readonly int arena_fd
    cdef readonly int notify_fd

    def __cinit__(self, uint64_t arena_bytes):
        self._core = new CCore(arena_bytes)
        self.arena = _arena_view(self._core.arena())
        self.arena_fd = self._core.arena().fd()
        self.notify_fd = self._core.notify_fd()

    def __dealloc__(self):
        # The arena memoryview may outlive us only if someone kept it; the server
        # drops every view before the core goes.
        del self._core

    def new_request_id(self):
        """A request id, unique across the fast lane and the general path."""
        return self._core.new_request_id()

    def add_model(self, config, bint batch_tensors=True):
        """Registers a model under the scheduling policy of `config` (a ModelConfig
        message). Returns its handle, an int that goes stale once removed.
        `batch_tensors` False: its workers read each request's inputs apart, so inputs
        in client shm regions are read in place in any batch (Core::set_batch_tensors)."""
        cdef ModelHandle handle
        if config.platform == "ensemble":  # orchestrated in the core: no instances
            return self._core.add_ensemble().value
        if config.HasField("sequence_batching"):
            handle = naiad_add_sequence_model(self._core, _sequence_config(config))
        else:
            handle = self._core.add_model(_batcher_config(config))
        if not batch_tensors:
            self._core.set_batch_tensors(handle, False)
        return handle.value

    def set_ensemble_graph(self, uint64_t model, str name, list outputs, list steps,
                           cbool decoupled=False):
        """The graph ensemble `model` runs its requests by (csrc/core/ensemble_graph.h):
        `steps` [(core handle, ModelSpec, [(model input, tensor)], [(model output,
        tensor)])], `outputs` the ensemble's output names in config order; `decoupled`:
        its requests stream a response per set of outputs. False when the handle is
        stale."""
        cdef vector[EnsembleStep] c_steps
        cdef EnsembleStep step
        cdef vector[string] c_outputs
        cdef ModelSpec spec
        cdef ModelHandle handle_value
        for output in outputs:
            c_outputs.push_back(output.encode())
        for handle, spec, inputs, step_outputs in steps:
            step.model.value = handle
            step.spec = spec.spec
            step.inputs.clear()
            step.outputs.clear()
            for model_input, tensor in inputs:
                step.inputs.push_back(pair[string, string](model_input.encode(), tensor.encode()))
            for model_output, tensor in step_outputs:
                step.outputs.push_back(pair[string, string](model_output.encode(),
                                                            tensor.encode()))
            c_steps.push_back(step)
        handle_value.value = model
        return naiad_set_ensemble_graph(self._core, handle_value, name.encode(), c_outputs,
                                        c_steps, decoupled)

    def remove_model(self, uint64_t model):
        """Removes the model: its submits answer SUBMIT_MODEL_GONE, its queued requests
        complete with COMPLETION_MODEL_GONE (through poll), its batches in flight finish,
        its instances stop and are freed once their workers are gone (instance_down).
        False: already removed."""
        return self._core.remove_model(_handle(model))

    def configure_rate_limiter(self, bint execution_count, list resources):
        """tritonserver's --rate-limit (execution_count or off) and --rate-limit-resource:
        `resources` holds objects with `name`, `count` and `device` (None: every device),
        as cli.RateLimitResource. Before any instance is added."""
        cdef RateLimiterConfig config
        cdef ServerResource given
        config.execution_count = execution_count
        for resource in resources:
            given.name = resource.name.encode()
            given.count = resource.count
            given.device = kEveryDevice if resource.device is None else resource.device
            config.resources.push_back(given)
        self._core.configure_rate_limiter(config)

    def add_instance(self, uint64_t model, int device=0, rate_limiter=None):
        """Returns (instance_id, channel_offset, wake_fd). `rate_limiter` is the instance
        group's ModelRateLimiter message (None: none); when rate limiting is on and its
        resources cannot be met, raises ValueError with Triton's message."""
        cdef InstanceRateLimit limits
        cdef RateLimitResource needed
        limits.device = device
        if rate_limiter is not None:
            limits.priority = rate_limiter.priority
            for resource in rate_limiter.resources:
                needed.name = resource.name.encode()
                needed.is_global = getattr(resource, "global")
                needed.count = resource.count
                limits.resources.push_back(needed)
        cdef uint32_t instance_id = self._core.add_instance(_handle(model), limits)
        cdef InstanceEndpoint ep = self._core.endpoint(instance_id)
        return instance_id, ep.channel_offset, ep.wake_fd

    def submit(self, uint64_t model, uint64_t request_id, bytes metadata, list inputs,
               uint32_t batch_size, uint32_t priority=0, uint64_t timeout_us=0,
               uint64_t shape_key=0, uint64_t input_order=0):
        """Queues a request on the model whose handle is `model`: `metadata` is the
        worker's view of it (ipc_schema.h), `inputs` one buffer per metadata input, in
        order. The core lays the block out and copies each input once.

        Returns SUBMIT_OK, SUBMIT_ARENA_FULL, SUBMIT_QUEUE_FULL, SUBMIT_MODEL_GONE or
        SUBMIT_UNSUPPORTED_INPUT.
        """
        cdef SubmitRequest request
        cdef InputSource source
        cdef const uint8_t[::1] view
        cdef list keep = []
        request.request_id = request_id
        request.metadata = string_view(PyBytes_AS_STRING(metadata), PyBytes_GET_SIZE(metadata))
        request.inputs.reserve(len(inputs))
        for data in inputs:
            view = memoryview(data).cast("B")
            keep.append(view)
            source.size = view.shape[0]
            source.data = <const void*>&view[0] if view.shape[0] > 0 else NULL
            request.inputs.push_back(source)
        request.options.batch_size = batch_size
        request.options.priority = priority
        request.options.timeout_us = timeout_us
        request.options.shape_key = shape_key
        request.options.input_order = input_order
        cdef SubmitResult result
        cdef ModelHandle handle = _handle(model)
        with nogil:
            result = self._core.submit(handle, request)
        return <int>result

    def flush(self, bint arrivals_possible=True):
        """Dispatches queued requests to idle instances (once per event-loop turn).

        `arrivals_possible` False: no client can send before the queue delay ends, so
        held batches leave now."""
        with nogil:
            self._core.flush(arrivals_possible)

    def poll(self, bint arrivals_possible=True):
        """[(batch_id, status, instance_id, result_offset, result_size, dispatch_ns, [request_ids])]"""
        cdef vector[Completion] done
        with nogil:
            done = self._core.poll(arrivals_possible)
        return _completions(done)

    def instance_starting(self, uint32_t instance_id):
        """A worker process is being started on the instance: the core keeps its channel
        until instance_down reports the process gone."""
        self._core.instance_starting(instance_id)

    def instance_down(self, uint32_t instance_id):
        cdef vector[Completion] done
        with nogil:
            done = self._core.instance_down(instance_id)
        return _completions(done)

    def instance_up(self, uint32_t instance_id):
        with nogil:
            self._core.instance_up(instance_id)

    def stop_instance(self, uint32_t instance_id):
        with nogil:
            self._core.stop_instance(instance_id)

    def reply_control(self, uint32_t instance_id, uint64_t tag, bytes json):
        """Answers a worker's control request (a COMPLETION_CONTROL completion) with
        `json`; False when the worker is gone or the arena has no room."""
        cdef string_view text = string_view(PyBytes_AS_STRING(json), PyBytes_GET_SIZE(json))
        cdef cbool sent
        with nogil:
            sent = self._core.reply_control(instance_id, tag, text)
        return sent

    def read_control_block(self, uint64_t offset, uint64_t size):
        """(JSON bytes, [file bytes]) of a control block (csrc/ipc/ipc_schema.h
        ControlHeader) of `size` bytes at `offset`; None when its sizes do not add up."""
        cdef const uint8_t* base = self._core.arena().base() + offset
        cdef ControlHeader header
        if size < sizeof(ControlHeader):
            return None
        memcpy(&header, base, sizeof(ControlHeader))
        if header.magic != kControlMagic or header.n_files > size // 8:
            return None
        cdef uint64_t at = control_json_offset(header.n_files)
        if at > size or header.json_size > size - at:
            return None
        cdef list sizes = []
        cdef uint64_t file_size
        cdef uint64_t total = at + header.json_size
        cdef uint32_t i
        for i in range(header.n_files):
            memcpy(&file_size, base + sizeof(ControlHeader) + 8 * i, 8)
            if file_size > size - total:
                return None
            total += file_size
            sizes.append(file_size)
        json = PyBytes_FromStringAndSize(<const char*>(base + at), header.json_size)
        at += header.json_size
        cdef list files = []
        for file_size in sizes:
            files.append(PyBytes_FromStringAndSize(<const char*>(base + at), file_size))
            at += file_size
        return json, files

    def free(self, uint64_t offset):
        self._core.arena().free(offset)

    def responses(self, uint64_t offset, uint64_t size):
        """The response block (csrc/ipc/ipc_schema.h) a completion carries, as
        read_response_block reads it, or None when the block is not readable."""
        return read_response_block(self.arena, offset, size)

    def in_flight(self):
        return self._core.in_flight()

    def pending_requests(self, uint64_t model):
        """Requests of the model accepted and not yet executing: queued in its scheduler
        or in a batch waiting for the rate limiter (Triton's pending-request gauge)."""
        return self._core.pending_requests(_handle(model))

    def running_since(self, uint32_t instance_id):
        """now_ns() when the oldest batch the instance runs was dispatched; 0: none."""
        with nogil:
            since = self._core.running_since(instance_id)
        return since

    def cancel(self, uint64_t request_id):
        """The client went away: a queued request is dropped (it completes with
        COMPLETION_CANCELLED through poll), a running one is flagged for its worker
        (request.is_cancelled()). Returns CANCEL_UNKNOWN, CANCEL_DROPPED or CANCEL_FLAGGED."""
        cdef CancelResult result
        with nogil:
            result = self._core.cancel(request_id)
        return <int>result

    def take_trace_stamps(self, uint64_t request_id):
        """The TraceTimes of traced request `request_id`, once; None when it has none
        (tracing/tracer.py)."""
        cdef TraceStamps stamps
        cdef cbool found
        with nogil:
            found = self._core.take_trace_stamps(request_id, &stamps)
        if not found:
            return None
        return TraceTimes(stamps.request_start_ns, stamps.queue_start_ns,
                          _span_ids(stamps.span))

    def take_trace_children(self, uint64_t root):
        """The finished child traces of traced request `root` (csrc/core/core.h ChildTrace),
        once, as ChildTraceRecords (tracing/tracer.py)."""
        cdef vector[ChildTrace] children
        with nogil:
            children = self._core.take_trace_children(root)
        return [
            ChildTraceRecord(
                c.request_id, c.parent, c.model, c.id.decode("utf-8", "replace"),
                c.request_start_ns, c.queue_start_ns,
                (c.timings[0], c.timings[1], c.timings[2], c.timings[3]), c.request_end_ns,
                [(tensor_activity_name(t.first).decode(), t.second) for t in c.tensors],
                _span_ids(c.span))
            for c in children
        ]

    def set_span_ids(self, bint on):
        """Trace mode opentelemetry: traced requests and their child traces get their
        model spans' ids from the core (csrc/core/trace_context.h), which their models see
        as request.trace().get_context(). Set once, before serving."""
        self._core.set_span_ids(on)

    def arena_stats(self):
        cdef ArenaStats s = self._core.arena().stats()
        return {"bytes_in_use": s.bytes_in_use, "blocks_in_use": s.blocks_in_use,
                "largest_free": s.largest_free}


def read_response_block(buffer, uint64_t offset, uint64_t size):
    """The response block (csrc/ipc/ipc_schema.h) at `offset` of `buffer` (the arena):
    (timings, [(request_index, flags, error_code, json bytes, ((buffer offset, size) of
    each output, ...)), ...]), or None when the block is not readable (every offset and
    size is checked against it)."""
    cdef const uint8_t[::1] memory = buffer
    cdef uint64_t total = memory.shape[0]
    if offset == 0 or offset > total or size > total - offset:
        return None
    cdef const uint8_t* block = &memory[0] + offset
    cdef ResponseBlockView view
    if not view_response_block(block, size, &view):
        return None
    cdef list out = []
    cdef uint32_t r, o
    cdef const ResponseRecordC* record
    for r in range(view.header.n_responses):
        record = &view.records[r]
        out.append((
            record.request_index, record.flags, record.error_code,
            PyBytes_FromStringAndSize(<const char*>(block + record.json_offset),
                                      record.json_size),
            tuple([(offset + view.outputs[record.first_output + o].offset,
                    view.outputs[record.first_output + o].size)
                   for o in range(record.n_outputs)])))
    timings = [view.header.timings[0], view.header.timings[1], view.header.timings[2],
               view.header.timings[3]]
    return timings, out


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


# -- the fields of pb_utils' Tensor, InferenceRequest and InferenceResponse ---------------

# What pb_utils hands over once, when it is imported (bind_pb_utils): its Tensor,
# InferenceRequest and InferenceResponse classes, and numpy dtype -> TRITONSERVER_DataType
# of the plain numeric dtypes, its own table. Until then the constructors below take
# nothing themselves (everything goes to the checked path).
cdef dict _TRITON_TYPE_OF_DTYPE = {}
cdef type _PB_TENSOR = None
cdef type _PB_REQUEST = None
cdef type _PB_RESPONSE = None


def bind_pb_utils(type tensor_type, type request_type, type response_type,
                  dict triton_type_of_dtype):
    """pb_utils' classes (subclasses of TensorFields, RequestFields and ResponseFields)
    and its dtype table, which the functions below make and recognize."""
    global _TRITON_TYPE_OF_DTYPE, _PB_TENSOR, _PB_REQUEST, _PB_RESPONSE
    if not (
        issubclass(tensor_type, TensorFields)
        and issubclass(request_type, RequestFields)
        and issubclass(response_type, ResponseFields)
    ):
        raise TypeError(f"{tensor_type!r}, {request_type!r}, {response_type!r}: not "
                        "TensorFields, RequestFields, ResponseFields")
    _TRITON_TYPE_OF_DTYPE = triton_type_of_dtype
    _PB_TENSOR = tensor_type
    _PB_REQUEST = request_type
    _PB_RESPONSE = response_type


cdef _check_bound():
    if _PB_TENSOR is None:
        raise RuntimeError("naiad.triton_python_backend_utils is not imported (bind_pb_utils)")


cdef class TensorFields:
    """The fields of a pb_utils.Tensor (triton_python_backend_utils.Tensor subclasses this
    and holds the API): a model makes two or more per request and the worker reads them
    for every output, so they live in C.

    `Tensor(name, array)` with a str name and an exact C-contiguous ndarray of a numeric
    dtype is taken here; any other argument goes to the subclass's `_init_checked`,
    which holds the conversions, the checks and their messages."""

    cdef public object _name
    cdef public object _array
    cdef public object _triton_dtype
    cdef public object _device_tensor
    cdef public object _device_id

    def __init__(self, name, numpy_array):
        if (
            type(name) is str
            and PyUnicode_GET_LENGTH(name) > 0
            and cnp.PyArray_CheckExact(numpy_array)
            and cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>numpy_array)
        ):
            triton_dtype = _TRITON_TYPE_OF_DTYPE.get(
                <object>cnp.PyArray_DESCR(<cnp.ndarray>numpy_array)
            )
            if triton_dtype is not None:
                self._name = name
                self._array = numpy_array
                self._triton_dtype = triton_dtype
                self._device_id = 0
                return
        self._init_checked(name, numpy_array)

    # The accessors a model calls for every tensor, in C: a Python method would read the
    # fields through their descriptors.
    def name(self):
        return self._name

    def as_numpy(self):
        """The numpy array itself (not a copy)."""
        if self._device_tensor is not None:
            self._not_on_host()  # raises the subclass's error
        return self._array


cdef class ResponseFields:
    """The fields of a pb_utils.InferenceResponse (triton_python_backend_utils'
    InferenceResponse subclasses this and holds the API): a model makes one per request.

    InferenceResponse(output_tensors) with a list of pb_utils Tensors, no error and no
    parameters is taken here; anything else goes to the subclass's `_init_checked`, which
    holds the conversions, the checks and their messages."""

    cdef public object _output_tensors
    cdef public object _error
    cdef public object _parameters  # the JSON text parameters() returns
    cdef public object _parameters_dict  # what the client gets; None when nothing

    def __init__(self, output_tensors=None, error=None, parameters=None):
        cdef Py_ssize_t index
        cdef bint plain = error is None and parameters is None and type(output_tensors) is list
        if plain:
            for index in range(len(<list>output_tensors)):
                if type((<list>output_tensors)[index]) is not _PB_TENSOR:
                    plain = False
                    break
        if plain:
            self._output_tensors = list(output_tensors)
            self._error = None
            self._parameters = "{}"
            self._parameters_dict = None
            return
        self._init_checked(output_tensors, error, parameters)


cdef extern from "numpy/arrayobject.h":
    # Not in numpy's .pxd: a view over `data` (the dtype's reference is stolen).
    PyTypeObject _ndarray_type "PyArray_Type"
    object _NewFromDescr "PyArray_NewFromDescr" (
        PyTypeObject* subtype, cnp.PyArray_Descr* descr, int nd, cnp.npy_intp* dims,
        cnp.npy_intp* strides, void* data, int flags, PyObject* obj)


def layouts_of(list blocks, layout):
    """[layout(metadata) for metadata, _slots in blocks], with `layout` called once per
    run of requests whose metadata is one object (WorkerEndpoint gives the requests of
    one client's same request one bytes object): no Python call per request."""
    cdef list layouts = []
    cdef object last = None
    cdef object made = None
    for block in blocks:
        metadata = block[0]
        if metadata is not last:
            made = layout(metadata)
            last = metadata
        layouts.append(made)
    return layouts


def rows_by_request(list columns, Py_ssize_t count):
    """[[column[i] for column in columns] for i in range(count)]: the inputs of a batch's
    `count` requests, per request, from its columns: each a list of one input per
    request, or an ndarray of two dimensions or more whose first is the request (its
    row i is the view `column[i]` gives, made through numpy's C API: no Python
    iteration per row)."""
    cdef Py_ssize_t n = len(columns)
    cdef Py_ssize_t i, k
    cdef list rows = [None] * count
    cdef cnp.ndarray whole
    cdef cnp.PyArray_Descr* descr
    cdef char* data
    cdef int flags
    for k in range(n):
        column = columns[k]
        if type(column) is list:
            if len(<list>column) != count:
                raise ValueError(f"column {k} holds {len(<list>column)} inputs, not {count}")
        elif not cnp.PyArray_CheckExact(column) or cnp.PyArray_NDIM(<cnp.ndarray>column) < 2 \
                or cnp.PyArray_DIM(<cnp.ndarray>column, 0) != count:
            raise ValueError(f"column {k} is not an ndarray of {count} rows of 1 dimension or more")
    for i in range(count):
        rows[i] = [None] * n
    for k in range(n):
        column = columns[k]
        if type(column) is list:
            for i in range(count):
                (<list>rows[i])[k] = (<list>column)[i]
            continue
        whole = <cnp.ndarray>column
        descr = cnp.PyArray_DESCR(whole)
        data = cnp.PyArray_BYTES(whole)
        flags = cnp.PyArray_FLAGS(whole) & cnp.NPY_ARRAY_WRITEABLE
        for i in range(count):
            # NewFromDescr steals a reference to the dtype; the view holds `whole`.
            Py_INCREF(<object>descr)
            view = _NewFromDescr(
                &_ndarray_type, descr, cnp.PyArray_NDIM(whole) - 1,
                cnp.PyArray_DIMS(whole) + 1, cnp.PyArray_STRIDES(whole) + 1,
                data + i * cnp.PyArray_STRIDE(whole, 0), flags, NULL)
            Py_INCREF(whole)
            cnp.PyArray_SetBaseObject(<cnp.ndarray>view, whole)
            (<list>rows[i])[k] = view
    return rows


def get_input_tensor_by_name(inference_request, name):
    """The request's input Tensor called `name`, or None: pb_utils'
    get_input_tensor_by_name itself (a model calls it for every input of every request,
    so no Python frame): a pb_utils.InferenceRequest's inputs and TensorFields' names
    are read in C; any other request's through its inputs()."""
    if type(inference_request) is _PB_REQUEST:
        tensors = (<RequestFields>inference_request)._inputs
    else:
        tensors = inference_request.inputs()
    for tensor in tensors:
        if isinstance(tensor, TensorFields):
            if (<TensorFields>tensor)._name == name:
                return tensor
        elif tensor.name() == name:
            return tensor
    return None


cdef list _server_tensors(tuple names, arrays, tuple triton_dtypes):
    """The pb_utils Tensors of a request the frontend validated: names[i] over arrays[i]
    (no copy, no checks), as pb_utils.Tensor._from_server makes one."""
    cdef Py_ssize_t index
    cdef Py_ssize_t count = len(names)
    cdef TensorFields tensor
    cdef list tensors = []
    if len(arrays) != count or len(triton_dtypes) != count:
        raise ValueError(f"{count} names, {len(arrays)} arrays, {len(triton_dtypes)} types")
    for index in range(count):
        tensor = TensorFields.__new__(_PB_TENSOR)
        tensor._name = names[index]
        tensor._array = arrays[index]
        tensor._triton_dtype = triton_dtypes[index]
        tensor._device_id = 0
        tensors.append(tensor)
    return tensors


cdef class RequestFields:
    """The fields of a pb_utils.InferenceRequest that a model's execute() reads
    (triton_python_backend_utils' InferenceRequest subclasses this and holds the API and
    its constructor): the worker makes one per request (server_requests)."""

    cdef public object _inputs
    cdef public object _request_id
    cdef public object _correlation_id
    cdef public object _requested_output_names
    cdef public object _model_name
    cdef public object _model_version
    cdef public object _flags
    cdef public object _timeout
    cdef public object _parameters  # the JSON text parameters() returns
    cdef public object _release_flags


cdef class RequestPlan:
    """What every request of one header gets (PythonModelBackend._header_plan): its
    input names and their TRITONSERVER_DataTypes, and the request's fields as
    InferenceRequest holds them (`parameters` the JSON text, `timeout` in µs, `flags` the
    TRITONSERVER_REQUEST_FLAG_SEQUENCE_* bits)."""

    cdef readonly tuple input_names
    cdef readonly tuple input_dtypes
    cdef readonly object request_id
    cdef readonly object correlation_id
    cdef readonly object requested_output_names
    cdef readonly object model_name
    cdef readonly object model_version
    cdef readonly object parameters
    cdef readonly object timeout
    cdef readonly object flags

    def __init__(self, *, tuple input_names, tuple input_dtypes, request_id, correlation_id,
                 requested_output_names, model_name, model_version, parameters, timeout,
                 flags):
        if len(input_names) != len(input_dtypes):
            raise ValueError(f"{len(input_names)} input names, {len(input_dtypes)} types")
        self.input_names = input_names
        self.input_dtypes = input_dtypes
        self.request_id = request_id
        self.correlation_id = correlation_id
        self.requested_output_names = requested_output_names
        self.model_name = model_name
        self.model_version = model_version
        self.parameters = parameters
        self.timeout = timeout
        self.flags = flags


def server_requests(list headers, list arrays, dict plans, plan_of, release_all):
    """The pb_utils InferenceRequests of a batch the frontend validated, in C: request i
    from its header's RequestPlan (`plans[headers[i]]`, or `plan_of(header)`, which
    makes and keeps one) with input Tensors over arrays[i] (no copy), released with
    `release_all`."""
    cdef Py_ssize_t index
    cdef Py_ssize_t count = len(headers)
    cdef RequestFields request
    cdef RequestPlan plan
    cdef list requests = []
    _check_bound()
    if len(arrays) != count:
        raise ValueError(f"{count} headers, {len(arrays)} requests' arrays")
    for index in range(count):
        header = headers[index]
        found = plans.get(header)
        plan = plan_of(header) if found is None else found
        request = RequestFields.__new__(_PB_REQUEST)
        request._inputs = _server_tensors(plan.input_names, arrays[index], plan.input_dtypes)
        request._request_id = plan.request_id
        request._correlation_id = plan.correlation_id
        request._requested_output_names = plan.requested_output_names
        request._model_name = plan.model_name
        request._model_version = plan.model_version
        request._flags = plan.flags
        request._timeout = plan.timeout
        request._parameters = plan.parameters
        request._release_flags = release_all
        requests.append(request)
    return requests


cdef class Response:
    """A request's success: `outputs` as [(name, numpy array), ...] (the wire datatype
    follows from the array's dtype; BYTES are object arrays of bytes or str) and the
    response parameters (str -> bool/int/str) the client gets, if any.

    A backend answers every successful request with one: an extension type, so that
    making one and reading it back (_ResultEntries) costs no Python frame."""

    cdef public object outputs
    cdef public object parameters

    def __init__(self, outputs, parameters=None):
        self.outputs = outputs
        self.parameters = parameters

    def __reduce__(self):
        return Response, (self.outputs, self.parameters)


# The most outputs plain_python_results compares pairwise for duplicates; a response with
# more takes the general path.
cdef enum:
    PLAIN_MAX_OUTPUTS = 16


cdef bint _names_are(list pairs, object requested):
    """Whether the (name, array) `pairs`, of distinct names, are named exactly by the
    str `requested` (_result's test: as many names, each requested one among them)."""
    cdef Py_ssize_t k, count = len(pairs)
    if len(requested) != count:
        return False
    for wanted in requested:
        if type(wanted) is not str:
            return False
        for k in range(count):
            if (<tuple>pairs[k])[0] == wanted:
                break
        else:
            return False
    return True


def plain_python_results(list requests, list returned, object release_all):
    """The Response of each plain answer a Python model's execute() returned, in C: per
    request i, Response([(name, array), ...], parameters) of `returned[i]` when it is
    exactly a pb_utils.InferenceResponse without an error, whose request was released
    with `release_all`, whose outputs are host pb_utils.Tensors of distinct names, and
    are exactly the outputs the request asked for if it asked for some (a list or tuple
    of str: what tritonclient and perf_analyzer send); else None, and
    PythonModelBackend._result answers that request (it holds every check and message:
    this only recognizes the answers none of them concerns)."""
    cdef Py_ssize_t count = len(returned)
    cdef Py_ssize_t index, k
    cdef list results = [None] * count
    cdef list pairs
    cdef bint plain
    cdef TensorFields fields
    if len(requests) != count:
        raise ValueError(f"{len(requests)} requests, {count} responses")
    _check_bound()
    for index in range(count):
        response = returned[index]
        if type(response) is not _PB_RESPONSE or (<ResponseFields>response)._error is not None:
            continue
        request = requests[index]
        if request._release_flags != release_all:
            continue
        requested = request._requested_output_names
        if requested and type(requested) is not tuple and type(requested) is not list:
            continue
        outputs = (<ResponseFields>response)._output_tensors
        if type(outputs) is not list or len(outputs) > PLAIN_MAX_OUTPUTS:
            continue
        pairs = []
        plain = True
        for tensor in outputs:
            if type(tensor) is not _PB_TENSOR:
                plain = False
                break
            fields = <TensorFields>tensor
            if fields._device_tensor is not None:
                plain = False
                break
            name = fields._name
            for k in range(len(pairs)):
                if (<tuple>pairs[k])[0] == name:
                    plain = False
                    break
            if not plain:
                break
            pairs.append((name, fields._array))
        if plain and requested:
            plain = _names_are(pairs, requested)
        if plain:
            results[index] = Response(pairs, (<ResponseFields>response)._parameters_dict)
    return results


cdef class _ResultEntries:
    """A worker's response entries built straight from a backend's results (the
    worker's hot path, see WorkerEndpoint.respond_results): result i answers request i
    with one final response. A Response without parameters whose outputs are all arrays
    of a dtype in `wire_of` (dtype -> wire datatype bytes) that are C-contiguous (an
    exact ndarray read through numpy's C API, another array through its buffer) is
    described here, its JSON written in C++ and its outputs held until this object
    goes; any other result goes through `fallback(result)` -> (flags, error_code, json
    bytes, [output buffers]), the general conversion."""

    cdef vector[ResponseEntry] entries
    # Every fast entry's JSON, one after the other: one allocation per batch, not one
    # per response. Its entries' views are set once it is complete (it may move while
    # it grows); `starts` holds each entry's start in it, -1 for a fallback's JSON.
    cdef string text
    cdef vector[Py_ssize_t] starts
    # Buffers taken of outputs that are not exact ndarrays, allocated at the first
    # (most batches have none): `capacity` of them, `held` taken.
    cdef Py_buffer* buffers
    cdef Py_ssize_t capacity
    cdef Py_ssize_t held
    cdef list keep
    cdef uint64_t timings[4]

    def __cinit__(self, list results, list timings, dict wire_of, dict names,
                  object fallback):
        cdef Py_ssize_t n = len(results)
        cdef Py_ssize_t index, mark, kept, start, end
        cdef ResponseEntry entry
        cdef OutputBytes output
        cdef const unsigned char[::1] view
        cdef bint fast
        cdef Py_buffer* taken
        cdef int ndim, dim
        cdef const Py_ssize_t* shape
        cdef bytes escaped
        self.keep = []
        for index in range(4):
            self.timings[index] = timings[index]
        self.entries.reserve(n)
        self.starts.reserve(n)
        # About 100 bytes per response of two outputs ([name, datatype, shape] each).
        self.text.reserve(16 + 100 * n)
        for index in range(n):
            result = results[index]
            entry.request_index = <uint32_t>index
            entry.error_code = 0
            entry.flags = kResponseFinal
            entry.outputs.clear()
            fast = type(result) is Response and not (<Response>result).parameters
            if fast:
                mark = self.held
                kept = len(self.keep)
                start = self.text.size()
                self.text.append(b'{"outputs":[')
                outputs = (<Response>result).outputs
                entry.outputs.reserve(len(outputs))
                for name, array in outputs:
                    if type(name) is not str:
                        fast = False
                        break
                    if cnp.PyArray_CheckExact(array):
                        # An ndarray is read through numpy's C API: no buffer export
                        # (which allocates the array's buffer info) per output.
                        datatype = wire_of.get(<object>cnp.PyArray_DESCR(<cnp.ndarray>array))
                        if datatype is None or not cnp.PyArray_IS_C_CONTIGUOUS(
                            <cnp.ndarray>array
                        ):
                            fast = False
                            break
                        self.keep.append(array)
                        ndim = cnp.PyArray_NDIM(<cnp.ndarray>array)
                        shape = <Py_ssize_t*>cnp.PyArray_DIMS(<cnp.ndarray>array)
                        output.size = cnp.PyArray_NBYTES(<cnp.ndarray>array)
                        output.data = cnp.PyArray_DATA(<cnp.ndarray>array)
                    else:
                        datatype = wire_of.get(getattr(array, "dtype", None))
                        if datatype is None:
                            fast = False
                            break
                        taken = self._next_buffer(results)
                        try:
                            PyObject_GetBuffer(array, taken, PyBUF_C_CONTIGUOUS)
                        except (BufferError, ValueError):  # not C-contiguous
                            fast = False
                            break
                        self.held += 1
                        # The shape from the buffer just taken (PyBUF_C_CONTIGUOUS fills
                        # it), not array.shape: no tuple of ints per output.
                        ndim = taken.ndim
                        shape = taken.shape
                        output.size = taken.len
                        output.data = taken.buf
                    if not output.size:
                        output.data = NULL
                    # `,["name","datatype",[d0,d1]]`: the name's escaped form from
                    # `names` (made once per name), appended straight from the bytes
                    # objects (no std::string made of each).
                    if entry.outputs.size():
                        self.text.push_back(b',')
                    escaped = names.get(name)
                    if escaped is None:
                        escaped = names[name] = json_view_text(_utf8_view(name))
                    self.text.append(b'["')
                    self.text.append(PyBytes_AS_STRING(escaped), PyBytes_GET_SIZE(escaped))
                    self.text.append(b'","')
                    self.text.append(PyBytes_AS_STRING(datatype), PyBytes_GET_SIZE(datatype))
                    self.text.append(b'",[')
                    for dim in range(ndim):
                        if dim:
                            self.text.push_back(b',')
                        # to_chars, not snprintf: its format parsing was a visible share
                        # of the worker's time.
                        StringSink(&self.text).number(<uint64_t>shape[dim])
                    self.text.append(b']]')
                    entry.outputs.push_back(output)
                if fast:
                    self.text.append(b']}')
                    self.starts.push_back(start)
                    self.entries.push_back(move(entry))
                    continue
                # Not for the fast form after all: undo, then the general conversion.
                while self.held > mark:
                    self.held -= 1
                    PyBuffer_Release(&self.buffers[self.held])
                del self.keep[kept:]
                self.text.resize(start)
                entry.outputs.clear()
            flags, error_code, json, buffers = fallback(result)
            entry.flags = flags
            entry.error_code = error_code
            self.keep.append(json)
            entry.json = string_view(PyBytes_AS_STRING(json), PyBytes_GET_SIZE(json))
            for data in buffers:
                view = memoryview(data).cast("B")
                self.keep.append(view)
                output.size = view.shape[0]
                output.data = <const void*>&view[0] if view.shape[0] > 0 else NULL
                entry.outputs.push_back(output)
            self.starts.push_back(-1)
            self.entries.push_back(move(entry))
        # The text is complete: each fast entry's view of its JSON, which ends where
        # the next fast entry's starts.
        end = self.text.size()
        for index in range(n - 1, -1, -1):
            start = self.starts[index]
            if start >= 0:
                self.entries[index].json = string_view(self.text.data() + start, end - start)
                end = start

    cdef Py_buffer* _next_buffer(self, list results) except NULL:
        """Room for one more buffer taken: the first call allocates one per output of
        every Response in `results`, the most there can be."""
        cdef Py_ssize_t count = 0
        if self.buffers == NULL:
            for result in results:
                if type(result) is Response:
                    count += len((<Response>result).outputs)
            self.buffers = <Py_buffer*>PyMem_Malloc(max(count, 1) * sizeof(Py_buffer))
            if self.buffers == NULL:
                raise MemoryError()
            self.capacity = max(count, 1)
        if self.held >= self.capacity:
            raise RuntimeError("a response's outputs changed while it was read")
        return &self.buffers[self.held]

    def __dealloc__(self):
        cdef Py_ssize_t i
        if self.buffers != NULL:
            for i in range(self.held):
                PyBuffer_Release(&self.buffers[i])
            PyMem_Free(self.buffers)


def encode_results_block(list results, list timings, dict wire_of, dict names, fallback):
    """The response block WorkerEndpoint.respond_results writes for `results`, as bytes
    (tests)."""
    cdef _ResultEntries built = _ResultEntries(results, timings, wire_of, names, fallback)
    cdef bytes block = PyBytes_FromStringAndSize(NULL, response_block_size(built.entries))
    write_response_block(<uint8_t*>PyBytes_AS_STRING(block), built.entries, built.timings)
    return block


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


cdef inline tuple _slot_tuple(uint64_t offset, uint64_t size, uint64_t region,
                              uint64_t region_offset):
    """(arena offset, size), or (offset in the region, size, region id) for bytes a
    worker reads in place from a client's system-shm region (ipc_schema.h InputSlot)."""
    if region == 0:
        return (offset, size)
    return (region_offset, size, region)


cdef tuple _request_view(const uint8_t* base, uint64_t offset, bytes previous=None):
    """(metadata bytes, (slot, ...)) of the request block at `offset`, each slot as
    _slot_tuple gives it. The metadata is `previous` itself when its bytes are the
    same (a batch of one client's same request shares one object: see layouts_of)."""
    cdef const RequestHeader* header = <const RequestHeader*>(base + offset)
    if header.magic != kRequestMagic:
        raise ValueError(f"no request block at arena offset {offset}")
    cdef const InputSlot* slots = <const InputSlot*>(base + offset + sizeof(RequestHeader))
    cdef uint64_t start = offset + request_metadata_offset(header.n_inputs)
    if (previous is not None and <uint64_t>PyBytes_GET_SIZE(previous) == header.metadata_size
            and memcmp(PyBytes_AS_STRING(previous), base + start, header.metadata_size) == 0):
        metadata = previous
    else:
        metadata = PyBytes_FromStringAndSize(<const char*>(base + start), header.metadata_size)
    cdef uint32_t i
    return metadata, tuple([
        _slot_tuple(slots[i].offset, slots[i].size, slots[i].region, slots[i].region_offset)
        for i in range(header.n_inputs)])


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


def http_request_size(data, size_t offset, size_t max_body):
    """The size of the plain HTTP request that starts at `offset` of received bytes when
    its head has arrived and the rest of its body has not, else 0 (csrc/http1/http_scan.h)."""
    cdef const uint8_t[::1] view = data
    if offset >= <size_t>view.shape[0]:
        return 0
    return incomplete_request_size(<const char*>&view[offset], view.shape[0] - offset,
                                   max_body)


RESPONSE_IDENTITY = 0
RESPONSE_GZIP = 1
RESPONSE_DEFLATE = 2


cdef inline ResponseEncoding _encoding(int encoding) except *:
    if encoding == <int>ResponseEncoding.kGzip:
        return ResponseEncoding.kGzip
    if encoding == <int>ResponseEncoding.kDeflate:
        return ResponseEncoding.kDeflate
    if encoding == <int>ResponseEncoding.kIdentity:
        return ResponseEncoding.kIdentity
    raise ValueError(f"no response encoding {encoding}")


def content_encoding_line(int encoding):
    """The Content-Encoding header line (bytes, with CRLF) of an answer compressed
    with `encoding` (csrc/codec/http_compress.h); b"" for identity."""
    return _view_bytes(c_content_encoding_line(_encoding(encoding)))


def compress_body(parts, int encoding):
    """The body made of `parts` (bytes-like, in order) compressed with `encoding`
    (RESPONSE_GZIP or RESPONSE_DEFLATE) by the fast lane's compressor
    (csrc/codec/http_compress.h), as bytes; None when nothing is compressed (an empty body,
    or identity)."""
    cdef ResponseEncoding c_encoding = _encoding(encoding)
    cdef Py_ssize_t n = len(parts)
    cdef Py_buffer* buffers = <Py_buffer*>PyMem_Malloc(max(n, 1) * sizeof(Py_buffer))
    if buffers == NULL:
        raise MemoryError()
    cdef vector[string_view] views
    cdef Py_ssize_t held = 0, i
    cdef string out
    cdef cbool compressed
    try:
        for part in parts:
            PyObject_GetBuffer(part, &buffers[held], PyBUF_SIMPLE)
            held += 1
            views.push_back(string_view(<const char*>buffers[held - 1].buf,
                                        buffers[held - 1].len))
        with nogil:
            compressed = c_compress_body(c_encoding, views.data(), views.size(), &out)
    finally:
        for i in range(held):
            PyBuffer_Release(&buffers[i])
        PyMem_Free(buffers)
    if not compressed:
        return None
    return PyBytes_FromStringAndSize(out.data(), out.size())


INFLATE_GZIP = <int>StreamFormat.kGzip
INFLATE_ZLIB = <int>StreamFormat.kZlib
INFLATE_RAW_DEFLATE = <int>StreamFormat.kRawDeflate
INFLATED = <int>Inflated.kDone
INFLATED_TOO_LARGE = <int>Inflated.kTooLarge
INFLATED_DAMAGED = <int>Inflated.kDamaged


def inflate(data, int stream_format, size_t limit, str content_encoding=None):
    """The one inflater (csrc/codec/http_compress.h), GIL released: (INFLATED, the bytes
    as a bytearray), (INFLATED_TOO_LARGE, None) past `limit` bytes, or
    (INFLATED_DAMAGED, zlib's complaint). `stream_format`: INFLATE_*; with
    `content_encoding` ("gzip" or "deflate", an HTTP body's) that names the format
    instead, as HTTP reads it (deflate: the zlib format, else raw)."""
    cdef const uint8_t[::1] view = data
    cdef string_view c_data
    if view.shape[0] != 0:
        c_data = string_view(<const char*>&view[0], view.shape[0])
    cdef InflatedBytes out
    cdef string error
    cdef Inflated result
    cdef StreamFormat c_format
    cdef ContentEncoding c_content = ContentEncoding.kIdentity
    if content_encoding is not None:
        c_content = ContentEncoding.kGzip if content_encoding == "gzip" else ContentEncoding.kDeflate
    elif stream_format == <int>StreamFormat.kGzip:
        c_format = StreamFormat.kGzip
    elif stream_format == <int>StreamFormat.kZlib:
        c_format = StreamFormat.kZlib
    elif stream_format == <int>StreamFormat.kRawDeflate:
        c_format = StreamFormat.kRawDeflate
    else:
        raise ValueError(f"no stream format {stream_format}")
    with nogil:
        if c_content != ContentEncoding.kIdentity:
            result = c_inflate_body(c_content, c_data, limit, &out, &error)
        else:
            result = c_inflate_stream(c_format, c_data, limit, &out, &error)
    if result == Inflated.kDone:
        return INFLATED, PyByteArray_FromStringAndSize(out.data(), out.size())
    if result == Inflated.kTooLarge:
        return INFLATED_TOO_LARGE, None
    return INFLATED_DAMAGED, error.decode("utf-8", "replace")


def body_too_large_message(size, size_t limit, str body="request body"):
    """What a 413 says (csrc/http1/http_framer.h body_too_large_message): the body's
    size (or "more than N"), the limit, and which body."""
    cdef bytes c_size = str(size).encode()
    cdef bytes c_body = body.encode()
    return c_body_too_large_message(
        string_view(PyBytes_AS_STRING(c_size), PyBytes_GET_SIZE(c_size)), limit,
        string_view(PyBytes_AS_STRING(c_body), PyBytes_GET_SIZE(c_body))).decode()


def response_encoding(str accept_encoding):
    """The response encoding Triton picks for an Accept-Encoding value (csrc/http1/http_scan.h):
    RESPONSE_IDENTITY, RESPONSE_GZIP or RESPONSE_DEFLATE."""
    cdef bytes value = accept_encoding.encode("latin-1", "replace")
    return <int>c_response_encoding(string_view(PyBytes_AS_STRING(value), PyBytes_GET_SIZE(value)))


def classify(str datatype, data, list shape, cbool batching, uint64_t count, labels):
    """Triton's classification of an output (csrc/codec/classification.h): (BYTES tensor bytes,
    shape). `labels`: the output's label lines, as bytes. ValueError with Triton's
    message for a datatype without an order."""
    raw = memoryview(data).cast("B")
    cdef size_t size = raw.nbytes
    cdef const uint8_t[::1] view = raw if size else memoryview(b"\0")  # never empty
    cdef vector[int64_t] dims = shape
    cdef vector[string] names
    for label in labels:  # bytes: the label file's lines
        names.push_back(label)
    cdef bytes wire = datatype.encode()
    cdef Classification out
    cdef string error
    if not c_classify(string_view(PyBytes_AS_STRING(wire), PyBytes_GET_SIZE(wire)), &view[0],
                      size, dims, batching, count, names, &out, &error):
        raise ValueError(error.decode("utf-8", "replace"))
    return PyBytes_FromStringAndSize(out.data.data(), out.data.size()), list(out.shape)


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


cdef tuple _taken(HttpTaken& taken):
    reply = None
    if taken.reply.size():
        reply = PyBytes_FromStringAndSize(taken.reply.data(), taken.reply.size())
    return taken.model, taken.request_id, taken.batch_size, reply


cdef inline bytes _view_bytes(string_view text):
    return PyBytes_FromStringAndSize(text.data(), text.size())


cdef inline string_view _utf8_view(str text) except *:
    """A view of `text`'s UTF-8 form, cached in the str object itself (no copy)."""
    cdef Py_ssize_t size
    cdef const char* data = PyUnicode_AsUTF8AndSize(text, &size)
    return string_view(data, size)


cdef class FastLane:
    """The infer fast lane over a Core: the HTTP/1.1 framer and the KServe codec
    (csrc/codec/framer.h, http_framer.h, kserve_codec.h).

    `take_http` and `submit_to` take HTTP infer requests the lane can handle and queue
    them; anything else goes the general way. `complete` turns the lane's requests in a
    completed batch into their full HTTP responses."""

    cdef HttpLane* _lane
    cdef Core _core
    cdef const uint8_t* _base
    cdef uint64_t _arena_size
    cdef ResponseCache* _cache
    cdef bint _cache_remote  # the Redis cache: no capacity, entries or evictions of its own

    def __cinit__(self, Core core):
        self._core = core
        self._lane = new HttpLane(core._core[0])
        self._base = core._core.arena().base()
        self._arena_size = core._core.arena().size()

    def __dealloc__(self):
        del self._lane
        del self._cache

    def add_model(self, uint64_t core_model, ModelSpec spec, bint response_cache=False):
        """Serves `spec` (queued on the core's model `core_model`, a handle); returns the
        lane id. `response_cache`: its requests use the response cache (enable_cache)."""
        cdef CModelSpec model = spec.spec
        model.core_model_id = _handle(core_model)
        model.response_cache = response_cache and self._cache != NULL
        return self._lane.codec().add_model(model)

    # -- the response cache (csrc/core/response_cache.h), one for every path and model ---
    def enable_cache(self, uint64_t capacity):
        """Creates the response cache of `capacity` bytes (--cache-config local,size=N),
        before any model is added."""
        if self._cache == NULL:
            self._cache = new LocalCache(capacity)
            self._lane.codec().set_cache(self._cache)

    def enable_redis_cache(self, str host, int port, str user, str password, int db,
                           uint32_t connect_timeout_ms, uint32_t socket_timeout_ms):
        """Creates the Redis response cache (--cache-config redis,...), before any model
        is added, once Redis answers a PING; ConnectionError naming why when it does not."""
        if self._cache != NULL:
            return
        cdef RedisOptions options
        options.host = host.encode()
        options.port = port
        options.user = user.encode()
        options.password = password.encode()
        options.db = db
        options.connect_timeout_ms = connect_timeout_ms
        options.socket_timeout_ms = socket_timeout_ms
        cdef RedisCache* cache = new RedisCache(options)
        cdef string error
        cdef cbool opened
        with nogil:
            opened = cache.open(&error)
        if not opened:
            del cache
            raise ConnectionError(error.decode("utf-8", "replace"))
        self._cache = cache
        self._cache_remote = True
        self._lane.codec().set_cache(self._cache)

    @property
    def cache_enabled(self):
        return self._cache != NULL

    def cache_totals(self):
        """The cache as Triton's local cache reports it (nv_cache_* gauges), or None."""
        if self._cache == NULL:
            return None
        cdef CacheTotals t = self._cache.totals()
        return {"capacity": t.capacity, "used": t.used, "entries": t.entries,
                "lookups": t.lookups, "hits": t.hits, "misses": t.misses,
                "evictions": t.evictions, "lookup_ns": t.lookup_ns, "insert_ns": t.insert_ns,
                "errors": t.errors, "remote": bool(self._cache_remote)}

    def cache_counters(self, uint32_t lane_model):
        """(hits, hit_ns, hit_request_ns, hit_queue_ns, misses, miss_ns) of lane model
        `lane_model` (Triton's cache statistics of that model version)."""
        if self._cache == NULL:
            return (0, 0, 0, 0, 0, 0)
        cdef CacheModelCounters c = self._cache.counters(lane_model)
        return (c.hits, c.hit_ns, c.hit_request_ns, c.hit_queue_ns, c.misses, c.miss_ns)

    def drop_cached(self, uint32_t lane_model):
        """The model version is unloaded: its cache entries go."""
        if self._cache != NULL:
            self._cache.drop_owner(lane_model)

    def cache_lookup(self, uint32_t lane_model, str request_id, list inputs, outputs,
                     uint64_t submit_ns):
        """The general path's lookup, after the one validator: a request (as
        ModelSpec.submit takes it) of lane model `lane_model` that arrived at
        `submit_ns`. Returns Triton's message (str) when it is invalid, None when the
        model does not cache, (True, outcome JSON bytes, [output bytes]) on a hit (the
        JSON as a worker's response: {"outputs": [[name, datatype, shape]],
        "parameters": {...}}; counted in C++), or (False, key, lookup_ns) on a miss:
        what cache_insert takes once it is answered."""
        cdef _RequestView view = _RequestView(request_id, inputs, outputs)
        cdef string error
        cdef string key
        cdef uint64_t lookup_ns = 0
        cdef CachedAnswer cached
        cdef cbool hit
        cdef const CModelSpec* spec = &self._lane.codec().model(lane_model)
        with nogil:
            if not validate_request(spec[0], &view.request, &error):
                hit = False
                key.clear()
            else:
                error.clear()
                hit = self._lane.codec().lookup_cached(lane_model, view.request, submit_ns,
                                                       &cached, &key, &lookup_ns)
        if error.size():
            return error.decode("utf-8", "replace")
        if not hit:
            if key.size() == 0:
                return None
            return False, PyBytes_FromStringAndSize(key.data(), key.size()), lookup_ns
        cdef list parts = []
        cdef list tensors = []
        cdef size_t i
        cdef const ResponseOutput* o
        for i in range(cached.response.outputs.size()):
            o = &cached.response.outputs[i]
            parts.append(b'["' + _view_bytes(o.name) + b'","' + _view_bytes(o.datatype) +
                         b'",' + _view_bytes(o.shape) + b']')
            tensors.append(PyBytes_FromStringAndSize(<const char*>o.data, o.size))
        parameters = _view_bytes(cached.response.parameters)
        json = b'{"outputs":[' + b",".join(parts) + b'],"parameters":' + \
            (parameters if parameters else b"{}") + b"}"
        return True, json, tensors

    def cache_insert(self, uint32_t lane_model, bytes key, uint64_t lookup_ns, uint64_t offset,
                     uint64_t size, uint32_t request_index):
        """Keeps the result of a general-path miss (cache_lookup's key and cost): the
        final response of request `request_index` in the response block at `offset`."""
        if offset == 0 or offset > self._arena_size or size > self._arena_size - offset:
            return False
        cdef string c_key = key
        cdef cbool read
        with nogil:
            read = self._lane.codec().insert_cached(lane_model, c_key, lookup_ns,
                                                    self._base + offset, size, request_index)
        return read

    def add_route(self, str target, uint32_t lane_model):
        """Infer requests for URL `target` (as sent) go to `lane_model` in take_http."""
        self._lane.add_route(target.encode(), lane_model)

    def set_accepting(self, uint32_t lane_model, bint accepting):
        """A model that is not ready takes nothing through the lane."""
        self._lane.codec().set_accepting(lane_model, accepting)

    def remove_model(self, uint32_t lane_model):
        """The model is gone: its routes are dropped and the lane takes nothing for it."""
        self._lane.remove_model(lane_model)

    def take_http(self, data, size_t max_body, uint64_t now_ns, size_t max_requests=<size_t>-1):
        """Takes the complete plain infer requests at the start of received HTTP bytes
        (bytes or bytearray): (bytes taken, [(lane_model, request_id, batch_size, reply)]
        in order). `reply` is None for a queued request, or the complete HTTP response
        of one the validator refused (request_id 0). The rest of `data` is for the full
        HTTP parser."""
        cdef const uint8_t[::1] view
        cdef const uint8_t* start
        cdef size_t size
        if type(data) is bytes:  # one read: the common case, without a buffer request
            start = <const uint8_t*>PyBytes_AS_STRING(data)
            size = PyBytes_GET_SIZE(data)
        else:
            view = data
            size = view.shape[0]
            if size == 0:
                return 0, []
            start = &view[0]
        cdef vector[HttpTaken] taken
        cdef size_t consumed
        with nogil:
            consumed = self._lane.take_http(start, size, max_body, now_ns, &taken, max_requests)
        cdef list out = []
        cdef size_t i
        for i in range(taken.size()):
            out.append(_taken(taken[i]))
        return consumed, out

    def submit_to(self, bytes target, bytes body, header_size, uint64_t now_ns,
                  int encoding=0, str content_encoding=None, max_body=None):
        """Queues an infer body the HTTP parser put together, sent to URL `target`, if
        that is a lane route and the lane takes the body: (lane_model, request_id,
        batch_size, reply) as in take_http, or None for the general path (also when the
        core refused it: the general path reports that the usual way). `header_size`:
        Inference-Header-Content-Length, None without one. `encoding`:
        response_encoding() of the request's Accept-Encoding; its answer is compressed
        so. `content_encoding`: the body's Content-Encoding, inflated by the lane to at
        most `max_body` bytes (None: no limit)."""
        cdef string_view c_target = string_view(PyBytes_AS_STRING(target),
                                                PyBytes_GET_SIZE(target))
        cdef const uint8_t* data = <const uint8_t*>PyBytes_AS_STRING(body)
        cdef size_t size = PyBytes_GET_SIZE(body)
        cdef size_t c_header_size = <size_t>-1 if header_size is None else header_size
        cdef size_t c_max_body = <size_t>-1 if max_body is None else max_body
        cdef HttpTaken taken
        cdef cbool queued
        cdef ResponseEncoding c_encoding = _encoding(encoding)
        cdef ContentEncoding c_content = ContentEncoding.kIdentity
        cdef bytes content
        if content_encoding is not None:
            content = content_encoding.encode("latin-1", "replace")
            c_content = c_content_encoding(string_view(PyBytes_AS_STRING(content),
                                                       PyBytes_GET_SIZE(content)))
        with nogil:
            queued = self._lane.submit_to(c_target, data, size, c_header_size, now_ns, &taken,
                                          c_encoding, c_content, c_max_body)
        if not queued:
            return None
        return _taken(taken)

    def complete(self, uint64_t offset, uint64_t size, list request_ids, uint64_t dispatch_ns,
                 uint64_t end_ns):
        """The lane's requests among a completed batch's `request_ids`, answered from
        the response block (csrc/ipc/ipc_schema.h) at `offset`: (timings, [(request_id, status
        (REPLY_*: how the statistics count it), batch_size, request_ns, queue_ns, http
        bytes)], finals), or None when the block
        could not be read. A request is answered by its final response; `finals` lists
        the ids of the batch's requests that have one in this block (the others get
        theirs in a later block, or fail when the batch ends).

        Each response is sized first and written straight into its bytes object: the
        output tensors are copied once, from the result block to what goes to the socket."""
        if offset == 0 or offset > self._arena_size or size > self._arena_size - offset:
            return None
        cdef vector[uint64_t] ids = request_ids
        cdef vector[Answer] answers
        cdef uint64_t timings[4]
        cdef cbool readable
        with nogil:
            readable = self._lane.codec().complete(self._base + offset, size, ids, dispatch_ns,
                                                   end_ns, &answers, timings)
        if not readable:
            return None
        cdef ResponseBlockView view
        cdef list finals = []
        cdef uint32_t r
        if view_response_block(self._base + offset, size, &view):
            for r in range(view.header.n_responses):
                if view.records[r].flags & kResponseFinal:
                    finals.append(ids[view.records[r].request_index])
        cdef const HttpResponseWriter* writer = &self._lane.writer()
        cdef list payloads = []
        cdef size_t i
        cdef bytes http
        cdef ResponseEncoding coding
        for i in range(answers.size()):
            coding = self._lane.take_encoding(answers[i].response.request_id)
            http = PyBytes_FromStringAndSize(NULL, writer.size(answers[i].response, coding))
            writer.write(answers[i].response, coding, PyBytes_AS_STRING(http))
            payloads.append(http)
        # The answers are made: the requests end here (extend_to_answered).
        cdef uint64_t late = extend_to_answered(end_ns, monotonic_ns(), timings)
        cdef list out = []
        for i in range(answers.size()):
            out.append((answers[i].response.request_id, _reply_status(answers[i]),
                        answers[i].batch_size, answers[i].request_ns + late,
                        answers[i].queue_ns, payloads[i]))
        return [timings[0], timings[1], timings[2], timings[3]], out, finals

    def forget(self, uint64_t request_id):
        """The request was answered another way (failed batch, shutdown)."""
        self._lane.forget(request_id)

    def set_trace_rate(self, uint32_t lane_model, uint32_t rate, uint32_t sampler=0):
        """Traces 1 in `rate` requests of the lane's model (0: none), counted with the
        other requests of models under the same `sampler` (their trace setting's:
        csrc/codec/kserve_codec.h set_trace_rate); a sampler not seen before counts from 0."""
        self._lane.codec().set_trace_rate(lane_model, rate, sampler)

    def sample_trace(self, uint32_t lane_model):
        """The lane's sampler, for a request of the model the general path takes."""
        return self._lane.codec().sample_trace(lane_model)

    def take_traced(self):
        """The ids of the traced requests the lanes queued since the last call."""
        return self._lane.codec().take_traced()

    def set_trace_tensors(self, uint32_t lane_model, cbool on):
        """Trace level TENSORS for the lane's model: its traced requests keep their tensors."""
        self._lane.codec().set_trace_tensors(lane_model, on)

    def take_trace_tensors(self, uint64_t request_id):
        """[(activity name, tensor text)] of lane request `request_id`, once (tracing/)."""
        cdef vector[pair[TensorActivity, string]] taken = (
            self._lane.codec().take_trace_tensors(request_id))
        return [(tensor_activity_name(item.first).decode(), item.second) for item in taken]

    def client_id(self, uint64_t request_id):
        """The client's id of lane request `request_id` in flight ('' when unknown);
        for traced requests only (tracing/)."""
        return self._lane.codec().client_id(request_id).decode("utf-8", "replace")

    def in_flight(self):
        return self._lane.codec().in_flight()

    def in_flight_of(self, uint32_t lane_model):
        """The lane's requests of `lane_model` queued or running, whoever reads their
        answers (Python or the HTTP I/O loop). The event loop's thread only: the codec
        has no lock."""
        return self._lane.codec().in_flight_of(lane_model)


cdef str _trace_context(const uint8_t* base, uint64_t offset, const RequestHeader* request):
    """The trace context of a request traced in mode opentelemetry, with the client's
    tracestate when its block carries one (csrc/core/trace_context.h)."""
    cdef string_view metadata = string_view(
        <const char*>(base + offset + request_metadata_offset(request.n_inputs)),
        request.metadata_size)
    cdef string trace_state = request_trace_state(metadata)
    return trace_context_json(request.span,
                              string_view(trace_state.data(), trace_state.size())).decode()


cdef class WorkerEndpoint:
    """A worker's end of its instance channel, over the inherited descriptors."""

    cdef CWorkerEndpoint* _endpoint
    cdef readonly object arena
    # The descriptor of the batch next() or wait() returned last (decoupled models read
    # its request blocks: request_blocks()).
    cdef readonly uint64_t batch_desc
    # The same, for sequence_words() (which clears it: once per batch).
    cdef uint64_t _batch_desc
    # The trace contexts of that batch's requests traced in mode opentelemetry, by
    # index in the batch (csrc/ipc/ipc_schema.h RequestHeader.span): None when it has none.
    cdef readonly object trace_contexts

    def __cinit__(self, int arena_fd, uint64_t channel_offset, int wake_fd, int notify_fd):
        self._endpoint = new CWorkerEndpoint(arena_fd, channel_offset, wake_fd, notify_fd)
        self.arena = _arena_view(self._endpoint.arena())

    def __dealloc__(self):
        del self._endpoint

    def next(self):
        """Blocks, GIL released, for the next message: (is_stop, batch_id, requests,
        tensors). A request is (metadata bytes, ((arena offset, size) of each input,
        ...)); `tensors` are the batch-major [N, ...] tensors, (arena offset, size) per
        input, that the requests' inputs lie in row after row (empty when the
        requests' inputs differ, csrc/ipc/ipc_schema.h)."""
        cdef BatchMessage message
        while True:
            with nogil:
                message = self._endpoint.next()
            if message.kind == MessageKind.kStop:
                return True, message.batch_id, [], []
            if message.kind == MessageKind.kBatch:
                break
            # A response to a request this worker submitted (BLS): a worker waiting
            # for one reads its channel with wait(), so none is awaited here; its
            # block is ours to free.
            if (message.kind == MessageKind.kResponse
                    or message.kind == MessageKind.kControlReply) and message.desc_offset != 0:
                self._endpoint.arena().free(message.desc_offset)
        requests, tensors = self._take_batch(message.desc_offset)
        return False, message.batch_id, requests, tensors

    def wait(self, bint block=True):
        """The next message of any kind (BLS: a worker waiting for its own requests'
        responses keeps reading its channel), or None when `block` is False and there
        is none:
          (MESSAGE_BATCH, batch_id, requests, tensors)  as next() gives a batch
          (MESSAGE_STOP, 0, None, None)
          (MESSAGE_RESPONSE, tag, block offset, block size)  a response block of one
              response to the request submitted as `tag`, ours to free
          (MESSAGE_REFUSED, tag, status, None)  it failed without a final response:
              a SUBMIT_* result, or REFUSED_QUEUED | a COMPLETION_* status
          (MESSAGE_CONTROL_REPLY, tag, block offset, block size)  the answer (JSON) to
              the control request sent as `tag` (offset 0: the core could not read
              it), ours to free"""
        cdef BatchMessage message
        cdef cbool got = True
        if block:
            with nogil:
                message = self._endpoint.next()
        else:
            got = self._endpoint.try_next(&message)
            if not got:
                return None
        if message.kind == MessageKind.kStop:
            return MESSAGE_STOP, 0, None, None
        if message.kind == MessageKind.kResponse:
            return MESSAGE_RESPONSE, message.batch_id, message.desc_offset, message.size
        if message.kind == MessageKind.kRefused:
            return MESSAGE_REFUSED, message.batch_id, message.n_requests, None
        if message.kind == MessageKind.kControlReply:
            return MESSAGE_CONTROL_REPLY, message.batch_id, message.desc_offset, message.size
        requests, tensors = self._take_batch(message.desc_offset)
        return MESSAGE_BATCH, message.batch_id, requests, tensors

    cdef tuple _take_batch(self, uint64_t desc_offset):
        """The batch whose descriptor is at `desc_offset`, as next() and wait() give it:
        (requests, tensors); remembered for request_blocks() and sequence_words()."""
        self.batch_desc = desc_offset
        self._batch_desc = desc_offset
        cdef const uint8_t* base = self._endpoint.arena().base()
        cdef const BatchHeader* header = <const BatchHeader*>(base + desc_offset)
        cdef const BatchRequest* records = <const BatchRequest*>(
            base + desc_offset + batch_requests_offset())
        cdef const BatchTensor* tensors = <const BatchTensor*>(
            base + desc_offset + batch_tensors_offset(header.n_requests))
        cdef list requests = []
        cdef uint32_t i
        cdef const RequestHeader* request
        cdef bytes previous = None
        contexts = None
        for i in range(header.n_requests):
            view = _request_view(base, records[i].block_offset, previous)
            previous = (<tuple>view)[0]
            requests.append(view)
            request = <const RequestHeader*>(base + records[i].block_offset)
            if request.span.span_id != 0:
                if contexts is None:
                    contexts = {}
                contexts[i] = _trace_context(base, records[i].block_offset, request)
        self.trace_contexts = contexts
        return requests, [
            _slot_tuple(tensors[i].offset, tensors[i].size, tensors[i].region,
                        tensors[i].region_offset)
            for i in range(header.n_tensors)]

    def submit(self, uint64_t model, uint64_t tag, ModelSpec spec, str request_id,
               list inputs, outputs, bytes parameters, uint32_t priority=0,
               uint64_t timeout_us=0, bint wake=True, tuple sequence=None,
               uint64_t trace_batch=0, uint32_t trace_index=0, bytes trace_state=None):
        """A request of this worker's own (BLS, an ensemble step) for the model whose
        core handle is `model`, named `tag`: validated against `spec` by the one
        validator, laid out as the frontend lays requests out (layout_request_block)
        and handed to the core on the channel; its responses come back from wait().
        `inputs` are InputTensor-like records (name, datatype, shape, data: a buffer,
        an arena slice included). Returns a SUBMIT_* result, or Triton's message (str)
        when the request is invalid (nothing sent). `wake` False: the frontend is woken
        by a later wake() (submits sent together are taken together). `sequence`:
        (correlation id int, correlation id str as UTF-8 bytes or b"", START|END
        flags), for the target's sequence batcher (or an ensemble's sequence steps).
        `trace_batch`, `trace_index`: a call made with trace=request.trace() names the
        batch and 1 + the index of that request in it (0: none), for a child trace;
        `trace_state`: that request's client tracestate (a JSON string literal), which
        the call's model gets in its context too."""
        cdef _RequestView view = _RequestView(request_id, inputs, outputs)
        cdef string error
        if not validate_request(spec.spec, &view.request, &error):
            return error.decode("utf-8", "replace")
        cdef string id_json = json_view_text(view.request.id)
        view.request.id = string_view(id_json.data(), id_json.size())
        view.request.parameters = string_view(PyBytes_AS_STRING(parameters),
                                              PyBytes_GET_SIZE(parameters))
        if trace_state is not None and trace_batch != 0:
            view.request.trace_state = string_view(PyBytes_AS_STRING(trace_state),
                                                   PyBytes_GET_SIZE(trace_state))
        cdef RequestBlock block
        cdef SubmitRequest request
        cdef SubmitResult result
        # Kept alive here: the options view its bytes until the submit returns.
        cdef bytes sequence_key = _set_sequence(&request.options, sequence)
        with nogil:
            layout_request_block(spec.spec, view.request, &block)
            request.metadata = string_view(block.metadata.data(), block.metadata.size())
            request.inputs = block.inputs
            request.options.batch_size = view.request.batch_size
            request.options.priority = priority
            request.options.timeout_us = timeout_us
            request.options.shape_key = view.request.shape_key
            request.options.input_order = block.input_order
            result = self._endpoint.submit(model, tag, request, wake, trace_batch, trace_index)
        return <int>result

    def cancel(self, uint64_t tag):
        """Cancels this worker's request `tag` (ResponseIterator.cancel()): the core
        drops it while queued (its submitter gets it refused as COMPLETION_CANCELLED)
        or flags it for request.is_cancelled() while it runs."""
        with nogil:
            self._endpoint.cancel(tag)

    def control(self, uint64_t tag, bytes json, list files):
        """Sends a model-control request named `tag` (pb_utils.load_model,
        unload_model): `json` and the bytes of `files` in a control block
        (csrc/ipc/ipc_schema.h ControlHeader). Its answer comes back from wait() as
        MESSAGE_CONTROL_REPLY. False when the arena has no room (nothing sent)."""
        cdef vector[string_view] views
        cdef bytes file
        for file in files:
            views.push_back(string_view(PyBytes_AS_STRING(file), PyBytes_GET_SIZE(file)))
        cdef string_view text = string_view(PyBytes_AS_STRING(json), PyBytes_GET_SIZE(json))
        cdef cbool sent
        with nogil:
            sent = self._endpoint.control(tag, text, views)
        return sent

    def wake(self):
        """Wakes the frontend for the submits sent with wake=False."""
        self._endpoint.wake()

    def free(self, uint64_t offset):
        """Frees a block of the arena (a response block wait() handed over)."""
        self._endpoint.arena().free(offset)

    def sequence_words(self):
        """For each request of the batch next() returned last, what the sequence batcher
        set in its block (csrc/ipc/ipc_schema.h RequestHeader.sequence): 0, or bit 63 with
        the sequence's slot in bits 0-31 and START / END in bits 32 / 33. Once per
        batch: a second call (or one before any batch) returns []."""
        if self._batch_desc == 0:
            return []
        cdef const uint8_t* base = self._endpoint.arena().base()
        cdef const BatchHeader* header = <const BatchHeader*>(base + self._batch_desc)
        cdef const BatchRequest* records = <const BatchRequest*>(
            base + self._batch_desc + batch_requests_offset())
        cdef uint32_t i
        self._batch_desc = 0
        return [naiad_request_sequence(base, records[i].block_offset)
                for i in range(header.n_requests)]

    def alloc(self, uint64_t size, uint64_t tag):
        """Offset of a new block in the arena, 0 when there is no room."""
        cdef uint64_t offset
        with nogil:
            offset = self._endpoint.arena().alloc(size, tag)
        return offset

    def complete(self, uint64_t batch_id, uint64_t result_offset, uint64_t result_size,
                 int32_t status):
        """Ends the batch: a response block already written (0: none) and its status."""
        with nogil:
            self._endpoint.complete(batch_id, result_offset, result_size, status)

    def respond(self, uint64_t batch_id, list responses, list timings, bint batch_done):
        """Posts `responses` [(request_index, flags, error_code, json bytes, [output
        buffers in wire layout])] in one response block (csrc/ipc/ipc_schema.h), the
        outputs copied in with the GIL released; `batch_done` also ends the batch.
        False when the arena has no room (nothing posted)."""
        cdef vector[ResponseEntry] entries
        cdef uint64_t c_timings[4]
        cdef list keep = _response_entries(responses, timings, &entries, c_timings)
        cdef cbool posted
        with nogil:
            posted = self._endpoint.respond(batch_id, entries, c_timings, batch_done)
        return posted

    # -- decoupled models: responses at any time, from any thread (csrc/ipc/channel.h
    # kPostKeepOpen); posts are serialized in C++.
    def respond_open(self, uint64_t batch_id, list responses, list timings, bint batch_done,
                     bint keep_open):
        """As respond(); with `batch_done`, `keep_open` keeps the batch's requests
        without a final response open for responses posted later."""
        cdef vector[ResponseEntry] entries
        cdef uint64_t c_timings[4]
        cdef list keep = _response_entries(responses, timings, &entries, c_timings)
        cdef cbool posted
        with nogil:
            posted = self._endpoint.respond_open(batch_id, entries, c_timings, batch_done,
                                                 keep_open)
        return posted

    def yield_to_frontend(self):
        """After a streamed response: gives up the CPU when the frontend has a wake-up
        it has not taken yet (csrc/ipc/worker_endpoint.h); True when it did."""
        cdef cbool yielded
        with nogil:
            yielded = self._endpoint.yield_to_frontend()
        return yielded

    def end_batch(self, uint64_t batch_id, bint keep_open):
        """Ends the batch without a response block (the instance takes its next one);
        `keep_open`: its unanswered requests stay open, else they fail."""
        with nogil:
            self._endpoint.end_batch(batch_id, keep_open)

    def request_blocks(self, uint64_t desc_offset):
        """The arena offsets of the request blocks of the batch whose descriptor is at
        `desc_offset` (batch_desc), in batch order."""
        cdef const uint8_t* base = self._endpoint.arena().base()
        cdef const BatchHeader* header = <const BatchHeader*>(base + desc_offset)
        cdef const BatchRequest* records = <const BatchRequest*>(
            base + desc_offset + batch_requests_offset())
        cdef uint32_t i
        return [records[i].block_offset for i in range(header.n_requests)]

    def request_cancelled(self, uint64_t block_offset):
        """Whether the core flagged the request whose block is at `block_offset` as
        cancelled by its client (Core.cancel). Valid while the request is open."""
        cdef const RequestHeader* header = <const RequestHeader*>(
            self._endpoint.arena().base() + block_offset)
        return request_cancelled(header)

    def respond_results(self, uint64_t batch_id, list results, list timings, bint batch_done,
                        dict wire_of, dict names, fallback):
        """respond() from a backend's results directly, one final response per request
        (see _ResultEntries): the common result's JSON is written in C++ and its outputs
        copied from the arrays' own buffers, with no Python objects per output."""
        cdef _ResultEntries built = _ResultEntries(results, timings, wire_of, names, fallback)
        cdef cbool posted
        with nogil:
            posted = self._endpoint.respond(batch_id, built.entries, built.timings, batch_done)
        return posted

    def reserve_response(self, uint64_t batch_id, list outputs, list rows):
        """A response block for the batch laid out before the model runs, so that the
        model writes its outputs straight into it (csrc/ipc/response_block.h, output-major):
        one final response per request, request i with `rows[i]` rows of every output;
        `outputs` [(name, wire datatype, row dims, bytes per row), ...] in response
        order. Output j of the whole batch is one [sum(rows), *row dims] run of bytes at
        arena offset `runs[j]` of the ReservedResponse returned (None when the arena has
        no room); post() it once written, or discard() it."""
        cdef vector[ResponseEntry] entries
        cdef vector[string] texts
        cdef ResponseEntry entry
        cdef OutputBytes output
        cdef string text
        cdef Py_ssize_t n = len(rows)
        cdef Py_ssize_t index
        cdef vector[uint64_t] runs
        cdef uint64_t size = 0
        cdef uint64_t offset
        cdef int64_t count
        heads = [b'["' + json_view_text(_utf8_view(name)) + b'","' + datatype.encode() + b'",['
                 for name, datatype, _dims, _row_bytes in outputs]
        tails = [b"".join(b"," + str(int(d)).encode() for d in dims) + b"]]"
                 for _name, _datatype, dims, _row_bytes in outputs]
        texts.reserve(n)  # the entries' JSON views point into these strings
        entries.reserve(n)
        runs.resize(max(len(outputs), 1))
        for index in range(n):
            count = rows[index]
            text = b'{"outputs":['
            entry.outputs.clear()
            for j in range(len(outputs)):
                if j:
                    text.push_back(b',')
                text.append(<string>heads[j])
                text.append(<string>str(count).encode())
                text.append(<string>tails[j])
                output.data = NULL
                output.size = <uint64_t>count * <uint64_t>outputs[j][3]
                entry.outputs.push_back(output)
            text.append(b']}')
            texts.push_back(text)
            entry.request_index = <uint32_t>index
            entry.flags = kResponseFinal
            entry.error_code = 0
            entry.json = string_view(texts.back().data(), texts.back().size())
            entries.push_back(entry)
        with nogil:
            offset = self._endpoint.reserve_output_major(batch_id, entries, runs.data(), &size)
        if offset == 0:
            return None
        return ReservedResponse(self, batch_id, offset, size,
                                [runs[j] for j in range(len(outputs))])

    cdef void _post_block(self, uint64_t batch_id, uint64_t offset, uint64_t size,
                          const uint64_t* timings, cbool batch_done):
        with nogil:
            self._endpoint.post_block(batch_id, offset, size, timings, batch_done)


cdef class ReservedResponse:
    """A batch's response block that the model writes its outputs into
    (WorkerEndpoint.reserve_response): `runs` are the arena offsets of the outputs'
    batch-major runs, `arena` the arena they lie in. Either post() or discard() it."""

    cdef WorkerEndpoint _endpoint
    cdef readonly uint64_t batch_id, offset, size
    cdef readonly list runs
    cdef bint _done

    def __cinit__(self, WorkerEndpoint endpoint, uint64_t batch_id, uint64_t offset,
                  uint64_t size, list runs):
        self._endpoint = endpoint
        self.batch_id = batch_id
        self.offset = offset
        self.size = size
        self.runs = runs

    @property
    def arena(self):
        return self._endpoint.arena

    def post(self, list timings, bint batch_done):
        """Posts the block (its outputs written) with the batch's timings; `batch_done`
        also ends the batch, as respond()."""
        cdef uint64_t c_timings[4]
        cdef int i
        if self._done:
            raise RuntimeError("this response block was already posted or discarded")
        for i in range(4):
            c_timings[i] = timings[i]
        self._done = True
        self._endpoint._post_block(self.batch_id, self.offset, self.size, c_timings,
                                   batch_done)

    def discard(self):
        """Frees the block unposted (the model failed; its requests are answered
        another way)."""
        if not self._done:
            self._done = True
            self._endpoint._endpoint.arena().free(self.offset)


# --- gRPC over HTTP/2 (csrc/http2/grpc_connection.h): one object per client connection ---

# Trace mode opentelemetry: calls report their `traceparent` metadata (tracing/otel.py).
cdef bint _read_traceparent = False


def read_grpc_traceparent(bint on):
    global _read_traceparent
    _read_traceparent = on


cdef object _traceparent(const vector[HpackHeader]& metadata):
    """The call's W3C context: (traceparent, tracestate or None), or None without a
    traceparent."""
    cdef size_t i
    traceparent = tracestate = None
    for i in range(metadata.size()):
        if metadata[i].name == b"traceparent":
            traceparent = metadata[i].value.decode("ascii", "replace")
        elif metadata[i].name == b"tracestate":
            tracestate = metadata[i].value.decode("ascii", "replace")
    return None if traceparent is None else (traceparent, tracestate)


cdef class OwnedBytes:
    """Bytes that C++ produced, handed to Python without a copy (the buffer protocol,
    read-only): a received gRPC message, or output for the socket. bytes(o) copies."""

    cdef string data

    def __getbuffer__(self, Py_buffer* buffer, int flags):
        PyBuffer_FillInfo(buffer, self, <void*>self.data.data(), self.data.size(), 1, flags)

    def __releasebuffer__(self, Py_buffer* buffer):
        pass

    def __len__(self):
        return self.data.size()

    def __bytes__(self):
        return PyBytes_FromStringAndSize(self.data.data(), self.data.size())


# Output at least this large goes to the socket as a view of the C++ buffer (no copy);
# smaller output is cheaper as a bytes object.
cdef size_t _OUTPUT_VIEW_MIN = 65536


cdef extern from "<malloc.h>" nogil:
    int mallopt(int param, int value)
    int M_MMAP_THRESHOLD
    int M_TRIM_THRESHOLD


def keep_large_blocks():
    """Makes glibc's malloc keep freed blocks of up to 32 MiB for reuse instead of
    returning them to the kernel. Without it, each large message (a 602 KB tensor's
    request, answer and frames) lands on fresh pages, and the page faults cost more than
    the copies themselves (measured: ~430 faults per identity_fp32 request and about a
    quarter of the throughput; with it, fewer than 1). Returns True when glibc took both."""
    return bool(mallopt(M_MMAP_THRESHOLD, 32 << 20)) and bool(mallopt(M_TRIM_THRESHOLD, 64 << 20))


# Kinds of a gRPC call's events, as the I/O loop hands them to Python (IO_GRPC_CALL).
GRPC_CALL = 0
GRPC_MESSAGE = 1
GRPC_HALF_CLOSE = 2
GRPC_CANCEL = 3


cdef object _h2_event(H2Event* e, cbool want_metadata):
    """An h2::GrpcConnection event as a tuple: (GRPC_CALL, stream, path, timeout_us or -1,
    grpc-encoding str, traceparent str or None[, metadata: ((name, value) str pairs) when
    `want_metadata`]), (GRPC_MESSAGE, stream, message as OwnedBytes, compressed),
    (GRPC_HALF_CLOSE, stream) or (GRPC_CANCEL, stream, code). A message's bytes are moved
    out of `e`, not copied."""
    cdef OwnedBytes message
    if e.kind == H2EventKind.kMessage:
        message = OwnedBytes.__new__(OwnedBytes)
        message.data.swap(e.message)
        return (GRPC_MESSAGE, e.stream_id, message, e.compressed)
    if e.kind == H2EventKind.kCall:
        # The call's metadata stays in C++, but for a traceparent in trace mode
        # opentelemetry (read_grpc_traceparent) and, when `want_metadata`
        # (restrictions, header forwarding), all of it as a 7th item.
        traceparent = _traceparent(e.metadata) if _read_traceparent else None
        if want_metadata:
            return (GRPC_CALL, e.stream_id, e.path.decode("utf-8", "replace"),
                    e.timeout_us, e.encoding.decode("ascii", "replace"), traceparent,
                    tuple([(h.name.decode("latin-1"), h.value.decode("latin-1"))
                           for h in e.metadata]))
        return (GRPC_CALL, e.stream_id, e.path.decode("utf-8", "replace"),
                e.timeout_us, e.encoding.decode("ascii", "replace"), traceparent)
    if e.kind == H2EventKind.kHalfClose:
        return (GRPC_HALF_CLOSE, e.stream_id)
    return (GRPC_CANCEL, e.stream_id, e.error_code)


def parse_model_version(str text):
    """The version number a request's version string names, read as Triton reads it
    (csrc/codec/model_lookup.h; -1 for ""), or the str of Triton's INVALID_ARGUMENT
    message when it names none."""
    cdef bytes encoded = text.encode("utf-8", "surrogateescape")
    cdef int64_t version = 0
    cdef string error
    if c_parse_model_version(string_view(<const char*>encoded, len(encoded)), &version, &error):
        return version
    return error.decode("utf-8", "replace")


cdef class GrpcLane:
    """The gRPC infer fast path (csrc/http2/grpc_lane.h) over the HTTP lane's codec: the same
    codec, validator and core, so both protocols share models and request ids."""

    cdef CGrpcLane* _lane
    cdef FastLane _http
    cdef GrpcResponseWriter _writer
    # The answers of the block complete() read last, for the GrpcAnswer objects it
    # returned; `_generation` changes when they are released (before the block is freed).
    cdef vector[Answer] _answers
    cdef uint64_t _generation

    def __cinit__(self, FastLane http):
        self._http = http
        self._lane = new CGrpcLane(http._lane.codec())

    def __dealloc__(self):
        del self._lane

    def set_models(self, dict models):
        """What the lane knows of the models, replacing what it knew: name ->
        [(version, ready, lane_model or None)] for every version the control plane knows
        (ready or not). A ready version with a lane model is the lane's; the lane answers
        an unknown model or version, or one not ready, with Triton's status and message
        (csrc/codec/model_lookup.h)."""
        cdef vector[ModelVersionState] versions
        cdef ModelVersionState state
        self._lane.clear_models()
        for name, known in models.items():
            versions.clear()
            for version, ready, lane_model in known:
                state.version = version
                state.ready = ready
                state.lane_model = kNoLaneModel if lane_model is None else lane_model
                versions.push_back(state)
            self._lane.set_model(name.encode(), versions)

    def remove_model(self, uint32_t lane_model):
        self._lane.remove_model(lane_model)

    def submit(self, message, uint64_t now_ns, bint stream=False):
        """Queues a serialized ModelInferRequest (bytes, the OwnedBytes an I/O loop
        connection received, or any other buffer: an inflated message) if the fast path takes it:
        (lane_model, request_id, batch_size, None), or (lane_model, 0, 0, (error kind,
        message)) when it was refused at once (Triton's status and message), or
        (lane_model, 0, batch_size, response bytes) for a response cache hit (a
        ModelStreamInferResponse with `stream`); None: the general path's."""
        cdef string_view view
        cdef const unsigned char[:] buffer
        if type(message) is OwnedBytes:
            view = string_view((<OwnedBytes>message).data.data(),
                               (<OwnedBytes>message).data.size())
        elif type(message) is bytes:
            view = string_view(PyBytes_AS_STRING(message), PyBytes_GET_SIZE(message))
        else:
            buffer = message
            if buffer.shape[0] != 0:
                view = string_view(<const char*>&buffer[0], buffer.shape[0])
        cdef GrpcTaken taken
        cdef cbool took
        with nogil:
            took = self._lane.submit(view, now_ns, &taken)
        if not took:
            return None
        cdef bytes payload
        if taken.cached.entry:
            if stream:
                payload = PyBytes_FromStringAndSize(
                    NULL, self._writer.stream_size(taken.cached.response))
                self._writer.stream_write(taken.cached.response, PyBytes_AS_STRING(payload))
            else:
                payload = PyBytes_FromStringAndSize(NULL, self._writer.size(taken.cached.response))
                self._writer.write(taken.cached.response, PyBytes_AS_STRING(payload))
            return taken.model, 0, taken.batch_size, payload
        if taken.request_id == 0:
            return taken.model, 0, 0, (<uint8_t>taken.error_kind,
                                       taken.error.decode("utf-8", "replace"))
        return taken.model, taken.request_id, taken.batch_size, None

    def complete(self, uint64_t offset, uint64_t size, list request_ids, set grpc_ids,
                 uint64_t dispatch_ns, uint64_t end_ns, set streamed=None):
        """As FastLane.complete (`request_ids`: the whole batch, in order), for a batch
        with gRPC requests among the lane's: those in `grpc_ids` are answered with the
        ModelInferResponse (ModelStreamInferResponse for those in `streamed`): bytes, or
        for a large one a GrpcAnswer that GrpcAnswer.send writes straight from the result
        block, valid until release_answers(); or (error kind, message) when they failed.
        The others get their HTTP response bytes, as FastLane.complete does; `finals` as
        there. With `streamed`, the block is read record by record: a streamed request's
        responses before its final one (kResponseFinal unset: a decoupled model's) come
        in a fourth list, `partials`, of (request_id, ok, answer), in block order."""
        if offset == 0 or offset > self._http._arena_size or \
                size > self._http._arena_size - offset:
            return None
        self.release_answers()
        cdef vector[uint64_t] ids = request_ids
        cdef uint64_t timings[4]
        cdef cbool readable
        cdef cbool partial = streamed is not None
        with nogil:
            readable = self._http._lane.codec().complete_partial(
                self._http._base + offset, size, ids, dispatch_ns, end_ns, &self._answers,
                timings, partial)
        if not readable:
            self._answers.clear()
            return None
        # Which requests got their final response in this block, as FastLane.complete.
        cdef ResponseBlockView view
        cdef list finals = []
        cdef uint32_t r
        if view_response_block(self._http._base + offset, size, &view):
            for r in range(view.header.n_responses):
                if view.records[r].flags & kResponseFinal:
                    finals.append(ids[view.records[r].request_index])
        cdef const HttpResponseWriter* http = &self._http._lane.writer()
        cdef list out = []
        cdef list partials = []
        cdef size_t i, n
        cdef bytes payload
        cdef cbool ok, in_stream
        cdef ResponseEncoding coding
        cdef GrpcAnswer large
        cdef Answer* a
        for i in range(self._answers.size()):
            a = &self._answers[i]
            ok = a.response.error == ErrorKind.kNone
            in_stream = partial and a.response.request_id in streamed
            if not a.final and not in_stream:
                continue  # one answer per request: the final one
            if a.response.request_id not in grpc_ids:
                coding = self._http._lane.take_encoding(a.response.request_id)
                payload = PyBytes_FromStringAndSize(NULL, http.size(a.response, coding))
                http.write(a.response, coding, PyBytes_AS_STRING(payload))
                answer = payload
            elif ok:
                n = self._writer.stream_size(a.response) if in_stream else \
                    self._writer.size(a.response)
                if n >= _OUTPUT_VIEW_MIN:
                    large = GrpcAnswer.__new__(GrpcAnswer)
                    large.lane = self
                    large.index = i
                    large.generation = self._generation
                    large.streamed = in_stream
                    answer = large
                else:
                    payload = PyBytes_FromStringAndSize(NULL, n)
                    if in_stream:
                        self._writer.stream_write(a.response, PyBytes_AS_STRING(payload))
                    else:
                        self._writer.write(a.response, PyBytes_AS_STRING(payload))
                    answer = payload
            else:
                answer = (<int>a.response.error,
                          grpc_error_message(a.response).decode("utf-8", "replace"))
            if not a.final:
                partials.append((a.response.request_id, ok, answer))
                continue
            out.append((a.response.request_id, _reply_status(a[0]), a.batch_size,
                        a.request_ns, a.queue_ns, answer))
        # The answers are made: the requests end here (extend_to_answered). A large one
        # is written to its stream from the block when sent (GrpcAnswer.send).
        cdef uint64_t late = extend_to_answered(end_ns, monotonic_ns(), timings)
        if late:
            out = [(reply[0], reply[1], reply[2], reply[3] + late, reply[4], reply[5])
                   for reply in out]
        if partial:
            return [timings[0], timings[1], timings[2], timings[3]], out, finals, partials
        return [timings[0], timings[1], timings[2], timings[3]], out, finals

    def release_answers(self):
        """Ends the GrpcAnswers of the last complete(): call before its block is freed."""
        self._answers.clear()
        self._generation += 1


def grpc_request_id(message):
    """The id of a serialized ModelInferRequest (bytes or OwnedBytes); "" when none."""
    cdef const unsigned char[:] view = message
    if view.shape[0] == 0:
        return ""
    return c_grpc_request_id(string_view(<const char*>&view[0], view.shape[0])).decode(
        "utf-8", "replace")


cdef class GrpcAnswer:
    """A large gRPC answer still in its result block (GrpcLane.complete)."""

    cdef GrpcLane lane
    cdef size_t index
    cdef uint64_t generation
    cdef cbool streamed

    def send(self, conn, uint32_t stream_id):
        """Queues the answer on `stream_id` of `conn` (an I/O loop connection's
        GrpcStreams), copied once from the result block into the connection's frames;
        False when the stream is gone."""
        cdef CGrpcConnection* target = (<GrpcStreams?>conn)._conn()
        if target == NULL:
            return False
        (<GrpcStreams>conn)._wrote()
        cdef GrpcLane lane = self.lane
        if lane._generation != self.generation or self.index >= lane._answers.size():
            raise RuntimeError("a gRPC answer sent after its result block was released")
        cdef string scratch
        cdef vector[string_view] parts
        cdef cbool sent
        with nogil:
            lane._writer.parts(lane._answers[self.index].response, self.streamed, &scratch,
                               &parts)
            sent = target.send_parts(stream_id, parts.data(), parts.size())
        return sent

# --- TLS of the I/O loop's listeners (csrc/tls/tls_stream.h) ---


cdef class TlsContext:
    """One listener's TLS settings (csrc/tls/tls_stream.h), loaded from PEM files:
    ValueError naming the file that cannot be used. `mutual`: clients must present a
    certificate that chains to `root`; `alpn`: the protocol selected ("h2", "http/1.1")."""

    cdef shared_ptr[CTlsContext] _context

    def __cinit__(self, str cert, str key, str root="", bint mutual=False, str alpn=""):
        self._context.reset(new CTlsContext(
            cert.encode(), key.encode(), root.encode(), mutual, alpn.encode()))


# --- the C++ I/O loop (csrc/http1/http_io.h): HTTP/1.1 and gRPC connections ---


# The internal route of the endpoints' own answers and the header carrying the body
# (http/endpoint_routes.py serves it).
ENDPOINT_REPLY_PATH = kEndpointReplyPath.data()[:kEndpointReplyPath.size()].decode()
ENDPOINT_BODY_HEADER = kEndpointBodyHeader.data()[:kEndpointBodyHeader.size()].decode()


# HttpIo events (csrc/http1/http_io.h EventKind).
IO_ACCEPTED = <int>IoEventKind.kAccepted
IO_DATA = <int>IoEventKind.kData
IO_HAND_OVER = <int>IoEventKind.kHandOver
IO_EOF = <int>IoEventKind.kEof
IO_CLOSED = <int>IoEventKind.kClosed
IO_PAUSE_WRITING = <int>IoEventKind.kPauseWriting
IO_RESUME_WRITING = <int>IoEventKind.kResumeWriting
IO_GRPC_ACCEPTED = <int>IoEventKind.kGrpcAccepted
IO_GRPC_CALL = <int>IoEventKind.kGrpcCall  # data: the call's event (_h2_event's tuple)
IO_GRPC_PINGS = <int>IoEventKind.kGrpcPings  # data: (PINGs received, answered since)
IO_TLS_FAILED = <int>IoEventKind.kTlsFailed  # data: "peer: why" (a close follows)


IoAnswered_ = namedtuple(
    "IoAnswered",
    "lane_model instance_id timings successes inferences request_ns queue_ns failed_ns each "
    "batch_sizes lost")
cdef class IoTurnResult:
    """What a turn of the HTTP I/O loop hands Python: its events [(kind, connection,
    data bytes or None)], the completions for Python (as Core.poll gives them), one
    IoAnswered statistics record per completion the loop answered, and how many lane
    requests the turn queued (the caller of take_back flushes them). HttpIo counts the
    requests each turn queued, answered from the cache or refused (requests_queued...)."""

    cdef readonly list events
    cdef readonly list completions
    cdef readonly list answered
    cdef readonly uint32_t queued


cdef class HttpIo:
    """The front end's C++ I/O loop (csrc/http1/http_io.h) over a FastLane and its Core,
    for HTTP/1.1 and gRPC connections: plain infer requests and lane ModelInfer calls are
    taken, answered and written in C++; the rest of each connection is handed to Python
    as events (naiad/io_engine.py). `listen_fd`: HTTP's listening socket, or -1."""

    cdef CHttpIo* _io
    cdef FastLane _lane
    cdef GrpcLane _grpc_lane
    cdef readonly int epoll_fd
    # gRPC calls handed to Python carry all their metadata (restrictions, forwarding).
    cdef public cbool grpc_metadata
    # Lane requests the turns queued, answered from the response cache, refused (the
    # validator's error), since the loop began: the manager's lane_stats.
    cdef readonly uint64_t requests_queued
    cdef readonly uint64_t requests_cached
    cdef readonly uint64_t requests_refused

    def __cinit__(self, FastLane lane, int listen_fd):
        self._lane = lane
        self._io = new CHttpIo(lane._lane[0], lane._core._core[0], listen_fd)
        self.epoll_fd = self._io.epoll_fd()

    def __dealloc__(self):
        del self._io

    cdef object _result(self, IoTurn& turn, bint always):
        """The turn's IoTurnResult; None when it holds nothing for Python (no events,
        completions nor answered completions) unless `always`: most turns, which only
        took requests, cost Python no object."""
        self.requests_queued += turn.queued
        self.requests_cached += turn.cached
        self.requests_refused += turn.refused
        if (not always and turn.events.empty() and turn.completions.empty()
                and turn.answered.empty()):
            return None
        cdef IoTurnResult result = IoTurnResult.__new__(IoTurnResult)
        cdef list events = []
        cdef size_t i
        for i in range(turn.events.size()):
            if (turn.events[i].kind == IoEventKind.kData
                    or turn.events[i].kind == IoEventKind.kHandOver
                    or turn.events[i].kind == IoEventKind.kTlsFailed):
                data = PyBytes_FromStringAndSize(turn.events[i].data.data(),
                                                 turn.events[i].data.size())
            elif turn.events[i].kind == IoEventKind.kGrpcCall:
                data = _h2_event(&turn.events[i].grpc, self.grpc_metadata)
            elif turn.events[i].kind == IoEventKind.kGrpcPings:
                data = (turn.events[i].count, turn.events[i].flag)
            else:
                data = None
            events.append((<int>turn.events[i].kind, turn.events[i].connection, data))
        cdef list answered = []
        cdef IoAnswered* a
        for i in range(turn.answered.size()):
            a = &turn.answered[i]
            answered.append(IoAnswered_(
                a.lane_model, a.instance_id,
                [a.timings[0], a.timings[1], a.timings[2], a.timings[3]],
                a.successes, a.inferences, a.request_ns, a.queue_ns, a.failed_ns,
                a.each if a.each.size() else None, a.batch_sizes, a.lost))
        result.events = events
        result.completions = (
            _completions(turn.completions) if turn.completions.size() else [])
        result.answered = answered
        result.queued = turn.queued
        return result

    def set_taking(self, bint taking):
        self._io.set_taking(taking)

    def set_max_body(self, size_t max_body):
        self._io.set_max_body(max_body)

    def set_each(self, bint each):
        self._io.set_each(each)

    def listen_http(self, int listen_fd):
        """Accepts HTTP/1.1 connections on `listen_fd` (a loop made with -1)."""
        self._io.listen_http(listen_fd)

    def set_tls(self, bint grpc, TlsContext context):
        """TLS with `context` on the connections the HTTP (`grpc` False) or gRPC
        listener accepts from now on; None: plaintext."""
        cdef shared_ptr[CTlsContext] held
        if context is not None:
            held = context._context
        self._io.set_tls(grpc, held)

    def listen_endpoint(self, int listen_fd, str kind, str model, str ping_mode="ready",
                        str predict_route="", str health_route=""):
        """Accepts the connections of a SageMaker (`kind` "sagemaker") or Vertex AI
        ("vertex_ai") endpoint on `listen_fd` (csrc/http1/endpoint_routes.h)."""
        cdef EndpointRoutes routes
        if kind == "sagemaker":
            routes.kind = EndpointKind.kSageMaker
        elif kind == "vertex_ai":
            routes.kind = EndpointKind.kVertexAi
        else:
            raise ValueError(f"unknown endpoint kind '{kind}'")
        routes.model = model.encode()
        routes.ping_mode = ping_mode.encode()
        routes.predict_route = predict_route.encode()
        routes.health_route = health_route.encode()
        self._io.listen_endpoint(listen_fd, routes)

    def stop_listening(self):
        """No new connections on the HTTP listener and the endpoints'."""
        self._io.stop_listening()

    def run(self, uint32_t python_open, uint32_t python_waiting):
        """One turn (HttpIo::run): an IoTurnResult, or None when nothing is for Python."""
        cdef IoTurn turn
        with nogil:
            self._io.run(python_open, python_waiting, &turn)
        return self._result(turn, False)

    def poll(self, uint32_t python_open, uint32_t python_waiting):
        """The core notified (HttpIo::poll): an IoTurnResult, or None when nothing is
        for Python."""
        cdef IoTurn turn
        with nogil:
            self._io.poll(python_open, python_waiting, &turn)
        return self._result(turn, False)

    @property
    def pending_events(self):
        return self._io.pending_events()

    def write(self, uint64_t connection, data):
        cdef const uint8_t[::1] view
        if type(data) is bytes:
            self._io.write(connection, PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))
            return
        view = memoryview(data).cast("B")
        if view.shape[0]:
            self._io.write(connection, <const char*>&view[0], view.shape[0])

    def close(self, uint64_t connection, bint abort=False):
        """True when closed now (the caller reports it); else once its bytes are sent."""
        return self._io.close(connection, abort)

    def write_eof(self, uint64_t connection):
        self._io.write_eof(connection)

    def pause_reading(self, uint64_t connection):
        self._io.pause_reading(connection)

    def resume_reading(self, uint64_t connection):
        self._io.resume_reading(connection)

    def unsent(self, uint64_t connection):
        return self._io.unsent(connection)

    def is_open(self, uint64_t connection):
        return self._io.is_open(connection)

    def in_lane_mode(self, uint64_t connection):
        return self._io.in_lane_mode(connection)

    def take_back(self, uint64_t connection, bytes data):
        """The connection's protocol is idle: back to lane mode with `data`; the
        turn's IoTurnResult (always one: its caller flushes what it queued)."""
        cdef IoTurn turn
        cdef const char* start = PyBytes_AS_STRING(data)
        cdef size_t size = PyBytes_GET_SIZE(data)
        with nogil:
            self._io.take_back(connection, start, size, &turn)
        return self._result(turn, True)

    def owned(self, uint64_t request_id):
        """(lane_model, batch_size, submit_ns, connection, stream) of this loop's request
        in flight, or None; `stream` 0 for an HTTP request, else the gRPC call's stream
        on `connection` (0 when its client is gone)."""
        cdef IoOwned owned
        if not self._io.owned(request_id, &owned):
            return None
        return (owned.lane_model, owned.batch_size, owned.submit_ns, owned.connection,
                owned.stream)

    def release_grpc(self, uint64_t request_id):
        """A gRPC request of this loop that Python answers from now on (through
        grpc_streams); False when it was not this loop's."""
        return self._io.release_grpc(request_id)

    # -- gRPC (csrc/http2/grpc_io.cc) -------------------------------------------------
    def listen_grpc(self, GrpcLane lane, int listen_fd, uint64_t max_message_size=0x7fffffff,
                    int response_compression=0):
        """Accepts gRPC connections on `listen_fd`; `lane` takes their ModelInfer calls.
        response_compression: --grpc-infer-response-compression-level, 0 (none) to 3."""
        cdef H2Limits limits
        limits.max_message_size = max_message_size
        limits.response_compression = response_compression
        self._grpc_lane = lane
        self._io.listen_grpc(listen_fd, lane._lane[0], limits)

    def stop_listening_grpc(self):
        self._io.stop_listening_grpc()

    def set_grpc_taking(self, bint taking):
        self._io.set_grpc_taking(taking)

    def set_grpc_watch_pings(self, bint watch):
        self._io.set_grpc_watch_pings(watch)

    def grpc_streams(self, uint64_t connection):
        """The gRPC connection's calls, for Python's answers (GrpcStreams)."""
        cdef GrpcStreams streams = GrpcStreams.__new__(GrpcStreams)
        streams.io = self
        streams.connection = connection
        return streams

    def answer(self, uint64_t request_id, bytes http):
        """Python's whole answer to this loop's request; False when no longer owed."""
        return self._io.answer(request_id, PyBytes_AS_STRING(http), PyBytes_GET_SIZE(http))

    def flush_writes(self):
        with nogil:
            self._io.flush_writes()

    @property
    def open_count(self):
        return self._io.open_count()

    @property
    def waiting_count(self):
        return self._io.waiting_count()

    @property
    def in_flight(self):
        return self._io.in_flight()

    def owned_ids(self):
        return self._io.owned_ids()

    def sweep(self, uint64_t before_ns, uint64_t idle_before_ns):
        """(lane-mode connections holding part of a request since before `before_ns`,
        idle ones since before `idle_before_ns`)."""
        cdef vector[uint64_t] timed_out
        cdef vector[uint64_t] idle
        self._io.sweep(before_ns, idle_before_ns, &timed_out, &idle)
        return timed_out, idle

    def hand_over(self, uint64_t connection):
        self._io.hand_over(connection)


cdef class GrpcStreams:
    """A gRPC connection of the I/O loop, its answering side: what Python sends on its
    calls goes to the loop's h2::GrpcConnection, written at the loop's next flush_writes().
    Once the connection is gone, sends return False and the state reads as closed."""

    cdef HttpIo io
    cdef readonly uint64_t connection

    cdef CGrpcConnection* _conn(self):
        return self.io._io.grpc(self.connection)

    cdef void _wrote(self):
        self.io._io.grpc_wrote(self.connection)

    def send_message(self, uint32_t stream_id, payload):
        """Queues one response message; False when the call is gone."""
        cdef CGrpcConnection* conn = self._conn()
        if conn == NULL:
            return False
        cdef const unsigned char[:] view = payload
        cdef string_view sv
        if view.shape[0] == 0:
            sv = string_view(b"", 0)
        else:
            sv = string_view(<const char*>&view[0], view.shape[0])
        self._wrote()
        return conn.send_message(stream_id, sv)

    def finish(self, uint32_t stream_id, int status, str message=""):
        """Ends a call with grpc-status `status` and grpc-message `message`."""
        cdef CGrpcConnection* conn = self._conn()
        if conn == NULL:
            return False
        cdef bytes encoded = message.encode()
        self._wrote()
        return conn.finish(stream_id, status,
                           string_view(PyBytes_AS_STRING(encoded), PyBytes_GET_SIZE(encoded)))

    def reset(self, uint32_t stream_id, uint32_t code):
        cdef CGrpcConnection* conn = self._conn()
        if conn != NULL:
            conn.reset(stream_id, code)
            self._wrote()

    def shutdown(self):
        """GOAWAY: open calls are answered, new ones refused; closes once all are done."""
        cdef CGrpcConnection* conn = self._conn()
        if conn != NULL:
            conn.shutdown()
            self._wrote()

    def ping(self):
        cdef CGrpcConnection* conn = self._conn()
        if conn != NULL:
            conn.ping()
            self._wrote()

    def too_many_pings(self):
        cdef CGrpcConnection* conn = self._conn()
        if conn != NULL:
            conn.too_many_pings()
            self._wrote()

    @property
    def pings_unacked(self):
        cdef CGrpcConnection* conn = self._conn()
        return 0 if conn == NULL else conn.pings_unacked()

    @property
    def open_streams(self):
        cdef CGrpcConnection* conn = self._conn()
        return 0 if conn == NULL else conn.open_streams()

    @property
    def activity(self):
        """gRPC events seen on the connection so far (its calls are active)."""
        return self.io._io.grpc_activity(self.connection)

    @property
    def closed(self):
        return self._conn() == NULL


# --- shared-memory regions (csrc/shm/shm_registry.h): Triton's system and CUDA shm ---

from cpython.buffer cimport PyBUF_FORMAT, PyBUF_WRITABLE


SHM_SYSTEM = <int>InputKind.kSystemShm
SHM_CUDA = <int>InputKind.kCudaIpc
CUDA_IPC_HANDLE_BYTES = kCudaIpcHandleBytes
SHM_DEFAULT_MAX_REGIONS = kDefaultMaxRegions


cdef inline string_view _bytes_view(bytes data):
    return string_view(PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))


cdef class ShmRegistry:
    """The region registry of `core` (csrc/shm/shm_registry.h); the core reads system-shm
    inputs through it. Methods return (error kind, message) on failure, None on success
    (errors.py turns kinds into exceptions)."""

    cdef CShmRegistry* _registry
    cdef Core _core  # the core holds a pointer to us: we outlive it only through this
    cdef list _lanes  # FastLanes whose codec resolves shm tensors through us

    def __cinit__(self, Core core, uint32_t max_regions=kDefaultMaxRegions):
        if max_regions == 0:
            raise ValueError("max_regions must be at least 1")
        self._registry = new CShmRegistry(&core._core.arena(), max_regions)
        self._core = core
        attach_registry(core._core[0], self._registry)

    def __dealloc__(self):
        cdef FastLane lane
        if self._lanes:
            for lane in self._lanes:
                (<KServeCodecShm*>&lane._lane.codec()).set_regions(NULL)
        if self._core is not None and self._core._core != NULL:
            attach_registry(self._core._core[0], NULL)
        del self._registry

    def attach_lane(self, FastLane lane):
        """The lane's codec (HTTP and gRPC lanes share it) takes requests whose tensors
        are in system shm regions (kserve_codec.h)."""
        if self._lanes is None:
            self._lanes = []
        self._lanes.append(lane)
        (<KServeCodecShm*>&lane._lane.codec()).set_regions(self._registry)

    @property
    def table_offset(self):
        """Arena offset of the live-region table the workers read."""
        return self._registry.table_offset()

    def mapped(self):
        """Regions whose mapping is held (registered, or unregistered but in use)."""
        return self._registry.mapped()

    def stats(self):
        """Copy counters: inputs the core copied out of regions (one copy each, into
        the batch), bytes the assembler gathered into batch tensors (any input), and the
        outputs of workers' response blocks that the model wrote in place or that the
        worker copied in."""
        return {
            "regions_mapped": self._registry.mapped(),
            "input_copies": self._registry.copies(),
            "input_bytes": self._registry.copied_bytes(),
            "gathered_bytes": gathered_bytes(self._core._core[0]),
            "inputs_in_place": in_place_inputs(self._core._core[0]),
            "outputs_in_place": self._core._core[0].outputs_in_place(),
            "outputs_copied": self._core._core[0].outputs_copied(),
        }

    def register_system(self, str name, str key, uint64_t offset, uint64_t byte_size):
        cdef string error
        cdef bytes n = name.encode(), k = key.encode()
        cdef ErrorKind kind = self._registry.register_system(
            _bytes_view(n), _bytes_view(k), offset, byte_size, &error)
        return None if kind == ErrorKind.kNone else (<int>kind, error.decode("utf-8", "replace"))

    def register_cuda(self, str name, bytes raw_handle, int64_t device_id, uint64_t byte_size):
        cdef string error
        cdef bytes n = name.encode()
        cdef ErrorKind kind = self._registry.register_cuda(
            _bytes_view(n), _bytes_view(raw_handle), device_id, byte_size, &error)
        return None if kind == ErrorKind.kNone else (<int>kind, error.decode("utf-8", "replace"))

    def unregister(self, int kind, str name):
        cdef string error
        cdef bytes n = name.encode()
        cdef ErrorKind result = self._registry.unregister(<InputKind>kind, _bytes_view(n), &error)
        return None if result == ErrorKind.kNone else (<int>result, error.decode("utf-8", "replace"))

    def status(self, int kind, str name):
        """[(name, key, offset, byte_size, device_id, raw_handle)] or (kind, message)."""
        cdef string error
        cdef vector[RegionStatus] out
        cdef bytes n = name.encode()
        cdef ErrorKind result = self._registry.status(<InputKind>kind, _bytes_view(n), &out, &error)
        if result != ErrorKind.kNone:
            return (<int>result, error.decode("utf-8", "replace"))
        return [(s.name.decode("utf-8", "replace"), s.key.decode("utf-8", "replace"), s.offset,
                 s.byte_size, s.device_id, <bytes>s.raw_handle) for s in out]

    def resolve(self, str name, uint64_t offset, uint64_t size):
        """A RegionRef over [offset, offset + size) of region `name`, holding a reference
        on the region until it goes; or (kind, message)."""
        cdef string error
        cdef bytes n = name.encode()
        ref = RegionRef.__new__(RegionRef)
        cdef ErrorKind result = self._registry.resolve(_bytes_view(n), offset, size,
                                                       &(<RegionRef>ref).ref, &error)
        if result != ErrorKind.kNone:
            return (<int>result, error.decode("utf-8", "replace"))
        (<RegionRef>ref).registry = self
        return ref


cdef class RegionRef:
    """A tensor's bytes in a registered region, pinned: the region stays mapped while
    this object lives (ShmRegistry.release at its end). System regions expose the bytes
    through the buffer protocol (read-only): the core copies them once, into the batch."""

    cdef CRegionRef ref
    cdef ShmRegistry registry

    def __dealloc__(self):
        if self.registry is not None:
            self.registry._registry.release(self.ref.id)
            self.registry = None

    def __getbuffer__(self, Py_buffer* buffer, int flags):
        if self.ref.kind != InputKind.kSystemShm:
            raise BufferError("a CUDA shared-memory region has no host bytes")
        if flags & PyBUF_WRITABLE:
            raise BufferError("a shared-memory input is read-only")
        buffer.buf = <void*>self.ref.data if self.ref.data != NULL else <void*>&_EMPTY_BYTE
        buffer.len = self.ref.size
        buffer.readonly = 1
        buffer.itemsize = 1
        if flags & PyBUF_FORMAT:
            buffer.format = b"B"
        else:
            buffer.format = NULL
        buffer.ndim = 1
        buffer.shape = NULL
        buffer.strides = NULL
        buffer.suboffsets = NULL
        buffer.internal = NULL
        buffer.obj = self

    def __releasebuffer__(self, Py_buffer* buffer):
        pass

    def __len__(self):
        return self.ref.size

    def write_output(self, str output_name, const uint8_t[::1] data):
        """Writes `data` at this tensor's place in its system region: an output whose
        bytes came back to the frontend (an ensemble's answer; a worker writes its own).
        None on success, else the error the answer carries (ShmRegistry::write_output:
        Triton's output-too-small message, the lanes' too)."""
        cdef uint64_t n = data.shape[0]
        cdef const uint8_t* start = &data[0] if n else NULL
        cdef bytes name = output_name.encode()
        cdef string_view name_view = string_view(PyBytes_AS_STRING(name), len(name))
        cdef string error
        if self.registry is None:
            raise ValueError("write_output on a released region reference")
        with nogil:
            error = self.registry._registry.write_output(
                self.ref.id, self.ref.object_offset - self.ref.region_offset, self.ref.size,
                name_view, start, n)
        return error.decode() if error.size() else None

    def truncated(self):
        """The request's error when its region was truncated while the request held this
        reference (a fault absorbed in the frontend's mapping: ShmRegistry::truncated),
        else None; asked when the request is answered."""
        cdef vector[uint64_t] ids
        cdef string message
        if self.registry is None:
            return None
        ids.push_back(self.ref.id)
        message = self.registry._registry.truncated(ids)
        return message.decode("utf-8", "replace") if message.size() else None

    @property
    def id(self):
        return self.ref.id

    @property
    def kind(self):
        return <int>self.ref.kind

    @property
    def size(self):
        return self.ref.size

    @property
    def fd(self):
        return self.ref.fd

    @property
    def object_offset(self):
        return self.ref.object_offset

    @property
    def region_offset(self):
        return self.ref.region_offset

    @property
    def region_size(self):
        return self.ref.region_size

    @property
    def device_id(self):
        return self.ref.device_id

    @property
    def raw_handle(self):
        return <bytes>self.ref.raw_handle


cdef uint8_t _EMPTY_BYTE = 0


cdef const RegionTable* _region_table_at(arena, uint64_t offset) except? NULL:
    cdef const uint8_t[::1] view = arena
    if offset == 0 or offset + sizeof(RegionTable) > <uint64_t>view.shape[0]:
        return NULL
    cdef const RegionTable* table = <const RegionTable*>(&view[0] + offset)
    if offset + region_table_bytes(table.slots) > <uint64_t>view.shape[0]:
        return NULL
    return table


def region_table(arena, uint64_t offset):
    """(epoch, set of live region ids) from the RegionTable at `offset` of `arena` (a
    worker's view, csrc/shm/shm_registry.h)."""
    cdef const RegionTable* table = _region_table_at(arena, offset)
    if table == NULL:
        return 0, set()
    cdef uint64_t epoch = region_table_epoch_of(table)
    cdef set live = set()
    cdef uint64_t id
    cdef uint64_t i
    for i in range(table.slots):
        id = region_table_id(table, i)
        if id != 0:
            live.add(id)
    return epoch, live


def region_table_entry(arena, uint64_t offset, uint64_t region_id):
    """Where a worker maps live system region `region_id`: (path of the frontend's fd of
    the object, the region's offset in it, its byte size); None when the id is not in
    the table (gone) or has no host mapping (CUDA)."""
    cdef const RegionTable* table = _region_table_at(arena, offset)
    if table == NULL or region_id == 0:
        return None
    cdef uint64_t i
    cdef int64_t fd
    cdef uint64_t object_offset, byte_size
    for i in range(table.slots):
        if region_table_id(table, i) != region_id:
            continue
        fd = region_table_slot(table, i).fd
        object_offset = region_table_slot(table, i).object_offset
        byte_size = region_table_slot(table, i).byte_size
        # The fields were written before the id; a slot reused meanwhile changes its id.
        if region_table_id(table, i) != region_id or fd < 0:
            return None
        return f"/proc/{table.frontend_pid}/fd/{fd}", object_offset, byte_size
    return None


def shm_guard_watch_mapping(mapping, bint writable):
    """Watches a worker's mmap of a client's object (csrc/shm/shm_fault_guard.h): a SIGBUS
    in it (the client shrank the object) then costs zero pages, not the process. A
    handle for shm_guard_faults / shm_guard_unwatch (-1: not watched)."""
    cdef const uint8_t[::1] view = mapping
    if view.shape[0] == 0:
        return -1
    return shm_guard_watch(<void*>&view[0], view.shape[0], writable)


def shm_guard_unwatch_mapping(int handle):
    """Stops watching (before the mapping is closed)."""
    shm_guard_unwatch(handle)


def shm_guard_fault_count(int handle):
    """Faults the guard absorbed in a watched mapping."""
    return shm_guard_faults(handle)


def region_table_epoch(arena, uint64_t offset):
    cdef const RegionTable* table = _region_table_at(arena, offset)
    if table == NULL:
        return 0
    return region_table_epoch_of(table)


def check_bytes_input(str model_name, str request_id, str input_name, tuple shape,
                      bint batching, buffer, uint64_t offset, uint64_t size):
    """The validator's BYTES check (csrc/codec/request_validator.h check_bytes_input) over
    `size` bytes at `offset` of `buffer`: None, or Triton's message. For an input the
    worker copied to the host from a client's CUDA region."""
    cdef const uint8_t[::1] view = buffer
    if offset + size > <uint64_t>view.shape[0]:
        raise ValueError(f"{size} bytes at {offset} past a buffer of {view.shape[0]}")
    cdef vector[int64_t] dims = [int(d) for d in shape]
    cdef string_view model = _utf8_view(model_name)
    cdef string_view rid = _utf8_view(request_id)
    cdef string_view name = _utf8_view(input_name)
    cdef string error
    cdef const uint8_t* data = &view[0] + offset if view.shape[0] else NULL
    cdef cbool ok
    with nogil:
        ok = c_check_bytes_input(model, rid, name, dims.data(), dims.size(), batching, data,
                                 size, &error)
    return None if ok else error.decode("utf-8", "replace")


def shm_truncated_message(str region_name):
    """The error of a request during which region `region_name` was truncated
    (csrc/shm/shm_registry.h truncated_in_use_message, the frontend's too)."""
    cdef bytes name = region_name.encode()
    return truncated_in_use_message(
        string_view(PyBytes_AS_STRING(name), len(name))).decode("utf-8", "replace")


def shm_output_too_small(str output_name, uint64_t region_size, uint64_t needed):
    """Triton's message when an output does not fit its shm region
    (csrc/shm/shm_registry.h output_too_small_message, the lanes' too)."""
    cdef bytes name = output_name.encode()
    return output_too_small_message(string_view(PyBytes_AS_STRING(name), len(name)),
                                    region_size, needed).decode()
