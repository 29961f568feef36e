# The frontend's side: Core (queues, batches, completions, traces) and the shared-memory
# registry (ShmRegistry, RegionRef) it resolves regions through.
# Part of the extension naiad._core: pysrc/naiad/_core.pyx includes it.


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


cdef class CoreCompletion:
    """What the core finished (Core.poll, Core.instance_down, an I/O turn's completions):
    a batch's result block (`result_offset`, `result_size`: the caller frees it) for
    `request_ids`, or requests that never ran, with `status` (COMPLETION_*); for
    COMPLETION_ROUTED, COMPLETION_ROUTED_REFUSED and COMPLETION_CONTROL the fields carry
    what core.h says of those kinds."""

    cdef readonly uint64_t batch_id
    cdef readonly int32_t status
    cdef readonly uint32_t instance_id
    cdef readonly uint64_t result_offset
    cdef readonly uint64_t result_size
    cdef readonly uint64_t dispatch_ns
    cdef readonly list request_ids

    def __init__(self, uint64_t batch_id, int32_t status, uint32_t instance_id,
                 uint64_t result_offset, uint64_t result_size, uint64_t dispatch_ns,
                 list request_ids):
        self.batch_id = batch_id
        self.status = status
        self.instance_id = instance_id
        self.result_offset = result_offset
        self.result_size = result_size
        self.dispatch_ns = dispatch_ns
        self.request_ids = request_ids


cdef list _completions(vector[Completion]& done):
    cdef list out = []
    cdef size_t i
    cdef CoreCompletion completion
    for i in range(done.size()):
        completion = CoreCompletion.__new__(CoreCompletion)
        completion.batch_id = done[i].batch_id
        completion.status = done[i].status
        completion.instance_id = done[i].instance_id
        completion.result_offset = done[i].result_offset
        completion.result_size = done[i].result_size
        completion.dispatch_ns = done[i].dispatch_ns
        completion.request_ids = list(done[i].request_ids)
        out.append(completion)
    return out


cdef class InstanceChannel:
    """A model instance the core created (Core.add_instance): its id, and what its worker
    process is started with: its channel's offset in the arena and the eventfd the
    worker blocks on (the core's; the caller dups it for the worker)."""

    cdef readonly uint32_t instance_id
    cdef readonly uint64_t channel_offset
    cdef readonly int wake_fd


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
        """Returns the instance's InstanceChannel. `rate_limiter` is the instance
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
        cdef InstanceChannel channel = InstanceChannel.__new__(InstanceChannel)
        channel.instance_id = instance_id
        channel.channel_offset = ep.channel_offset
        channel.wake_fd = ep.wake_fd
        return channel

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


# --- shared-memory regions (csrc/shm/shm_registry.h): Triton's system and CUDA shm ---

from cpython.buffer cimport PyBUF_FORMAT, PyBUF_WRITABLE


SHM_SYSTEM = <int>InputKind.kSystemShm
SHM_CUDA = <int>InputKind.kCudaIpc
CUDA_IPC_HANDLE_BYTES = kCudaIpcHandleBytes
SHM_DEFAULT_MAX_REGIONS = kDefaultMaxRegions


cdef inline string_view _bytes_view(bytes data):
    return string_view(PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))


class ShmRegistryError(Exception):
    """A ShmRegistry call refused: `kind` (ERROR_*) and Triton's message. memory/shm.py
    raises the frontend's error of that kind in its place."""

    def __init__(self, int kind, str message):
        super().__init__(message)
        self.kind = kind
        self.message = message


cdef _shm_refused(ErrorKind kind, const string& error):
    raise ShmRegistryError(<int>kind, error.decode("utf-8", "replace"))


cdef class ShmRegionStatus:
    """One registered region as ShmRegistry.status lists it. `key` and `offset` are a
    system region's; `device_id` and `raw_handle` a CUDA region's."""

    cdef readonly str name
    cdef readonly str key
    cdef readonly uint64_t offset
    cdef readonly uint64_t byte_size
    cdef readonly int64_t device_id
    cdef readonly bytes raw_handle


cdef class ShmRegistry:
    """The region registry of `core` (csrc/shm/shm_registry.h); the core reads system-shm
    inputs through it. A refused call raises ShmRegistryError (its error kind and
    message; memory/shm.py raises the frontend's error of that kind)."""

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
        cdef FastLane each
        for each in [lane] + lane.mirrors:
            self._lanes.append(each)
            (<KServeCodecShm*>&each._lane.codec()).set_regions(self._registry)

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
        if kind != ErrorKind.kNone:
            _shm_refused(kind, error)

    def register_cuda(self, str name, bytes raw_handle, int64_t device_id, uint64_t byte_size):
        cdef string error
        cdef bytes n = name.encode()
        cdef ErrorKind kind = self._registry.register_cuda(
            _bytes_view(n), _bytes_view(raw_handle), device_id, byte_size, &error)
        if kind != ErrorKind.kNone:
            _shm_refused(kind, error)

    def unregister(self, int kind, str name):
        cdef string error
        cdef bytes n = name.encode()
        cdef ErrorKind result = self._registry.unregister(<InputKind>kind, _bytes_view(n), &error)
        if result != ErrorKind.kNone:
            _shm_refused(result, error)

    def status(self, int kind, str name):
        """The regions of `kind` (all, or the one named): [ShmRegionStatus]."""
        cdef string error
        cdef vector[RegionStatus] out
        cdef bytes n = name.encode()
        cdef ErrorKind result = self._registry.status(<InputKind>kind, _bytes_view(n), &out, &error)
        if result != ErrorKind.kNone:
            _shm_refused(result, error)
        cdef list listed = []
        cdef ShmRegionStatus entry
        for s in out:
            entry = ShmRegionStatus.__new__(ShmRegionStatus)
            entry.name = s.name.decode("utf-8", "replace")
            entry.key = s.key.decode("utf-8", "replace")
            entry.offset = s.offset
            entry.byte_size = s.byte_size
            entry.device_id = s.device_id
            entry.raw_handle = <bytes>s.raw_handle
            listed.append(entry)
        return listed

    def resolve(self, str name, uint64_t offset, uint64_t size):
        """A RegionRef over [offset, offset + size) of region `name`, holding a reference
        on the region until it goes."""
        cdef string error
        cdef bytes n = name.encode()
        ref = RegionRef.__new__(RegionRef)
        cdef ErrorKind result = self._registry.resolve(_bytes_view(n), offset, size,
                                                       &(<RegionRef>ref).ref, &error)
        if result != ErrorKind.kNone:
            _shm_refused(result, error)
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
