# cython: language_level=3, boundscheck=False, wraparound=False
"""The only place Python touches the C++ core (csrc/).

`Core` is the frontend's side: it queues requests, forms batches and collects
completions. `FastLane` takes the common HTTP infer request from body to queued block
and from result block to response bytes. `WorkerEndpoint` is a worker's side of one
instance channel. Every call that copies tensor data or may block releases the GIL.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.memoryview cimport PyMemoryView_FromMemory
from cpython.buffer cimport PyBUF_WRITE
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libcpp cimport bool as cbool
from libcpp.string cimport string
from libcpp.string_view cimport string_view
from libcpp.vector cimport vector


cdef extern from "arena.h" namespace "naiad":
    cdef cppclass ArenaStats:
        uint64_t bytes_in_use
        uint64_t blocks_in_use
        uint64_t largest_free

    cdef cppclass Arena:
        uint64_t alloc(uint64_t size, uint64_t tag) except + nogil
        void free(uint64_t offset) except + nogil
        ArenaStats stats() except + nogil
        uint8_t* base() nogil
        uint64_t size() nogil
        int fd() nogil


cdef extern from "channel.h" namespace "naiad":
    cdef enum class MessageKind(uint32_t):
        kBatch
        kStop
        kResponse
        kRefused

    cdef struct BatchMessage:
        uint64_t batch_id
        uint64_t desc_offset
        uint32_t n_requests
        MessageKind kind


cdef extern from "dynamic_batcher.h" namespace "naiad":
    cdef enum class TimeoutAction(uint32_t):
        kReject
        kDelay

    cdef cppclass QueuePolicy:
        TimeoutAction timeout_action
        uint64_t default_timeout_us
        cbool allow_timeout_override
        uint32_t max_queue_size

    cdef cppclass BatcherConfig:
        cbool dynamic_batching
        uint32_t max_batch_size
        vector[uint32_t] preferred_batch_sizes
        uint64_t max_queue_delay_us
        cbool preserve_ordering
        uint32_t priority_levels
        uint32_t default_priority_level
        QueuePolicy default_policy
        vector[QueuePolicy] level_policies
        vector[cbool] level_has_policy


cdef extern from "ipc_schema.h" namespace "naiad":
    uint32_t kRequestMagic

    cdef struct RequestHeader:
        uint32_t magic
        uint32_t n_inputs
        uint32_t metadata_size

    cdef struct InputSlot:
        uint64_t offset
        uint64_t size

    uint64_t request_metadata_offset(uint32_t n_inputs)

    cdef struct BatchHeader:
        uint32_t n_requests
        uint32_t n_tensors
        uint32_t rows
        uint32_t gathered

    cdef struct BatchRequest:
        uint64_t request_id
        uint64_t block_offset
        uint32_t batch_size
        uint32_t first_row

    cdef struct BatchTensor:
        uint64_t offset
        uint64_t size

    uint64_t batch_requests_offset()
    uint64_t batch_tensors_offset(uint32_t n_requests)

    uint32_t kResponseFinal
    uint32_t kResponseError


cdef extern from "response_block.h" namespace "naiad":
    cdef cppclass ResponseOutput:
        const void* data
        uint64_t size

    cdef cppclass ResponseEntry:
        uint32_t request_index
        uint32_t flags
        int32_t error_code
        string_view json
        vector[ResponseOutput] outputs

    cdef cppclass ResponseRecordC "naiad::ResponseRecord":
        uint32_t request_index
        uint32_t flags
        int32_t error_code
        uint32_t n_outputs
        uint32_t first_output
        uint32_t json_size
        uint64_t json_offset

    cdef cppclass OutputSlotC "naiad::OutputSlot":
        uint64_t offset
        uint64_t size

    cdef cppclass ResponseHeaderC "naiad::ResponseHeader":
        uint32_t n_responses
        uint32_t n_outputs
        uint64_t timings[4]

    cdef cppclass ResponseBlockView:
        const ResponseHeaderC* header
        const ResponseRecordC* records
        const OutputSlotC* outputs

    cbool view_response_block(const uint8_t* block, uint64_t size, ResponseBlockView* out)


cdef extern from "input_regions.h" namespace "naiad":
    cdef enum class InputKind(uint32_t):
        kInline
        kSystemShm
        kCudaIpc


cdef extern from "core.h" namespace "naiad":
    uint64_t monotonic_ns() nogil
    int32_t kCompletionTimedOut

    cdef cppclass InputSource:
        InputKind kind
        const void* data
        uint64_t region
        uint64_t offset
        uint64_t size

    cdef cppclass SubmitOptions:
        uint32_t batch_size
        uint32_t priority
        uint64_t timeout_us
        uint64_t shape_key
        uint64_t input_order

    cdef cppclass SubmitRequest:
        uint64_t request_id
        string_view metadata
        vector[InputSource] inputs
        SubmitOptions options

    uint64_t c_input_order_key "naiad::input_order_key"(const uint32_t* indices, size_t n)

    cdef enum class SubmitResult(int):
        kOk
        kArenaFull
        kQueueFull
        kUnsupportedInput

    cdef cppclass Completion:
        uint64_t batch_id
        int32_t status
        uint32_t instance_id
        uint64_t result_offset
        uint64_t result_size
        uint64_t dispatch_ns
        vector[uint64_t] request_ids

    cdef struct InstanceEndpoint:
        uint64_t channel_offset
        int wake_fd

    cdef cppclass CCore "naiad::Core":
        CCore(uint64_t arena_bytes) except +
        Arena& arena() nogil
        int notify_fd()
        uint32_t add_model(const BatcherConfig& config) except +
        uint32_t add_instance(uint32_t model_id) except +
        InstanceEndpoint endpoint(uint32_t instance_id) except +
        SubmitResult submit(uint32_t model_id, const SubmitRequest& request) except + nogil
        void flush(cbool arrivals_possible) except + nogil
        vector[Completion] poll(cbool arrivals_possible) except + nogil
        vector[Completion] instance_down(uint32_t instance_id) except + nogil
        void instance_up(uint32_t instance_id) except + nogil
        void stop_instance(uint32_t instance_id) except + nogil
        size_t queued(uint32_t model_id) except + nogil
        size_t in_flight() except + nogil


cdef extern from "fast_lane.h" namespace "naiad":
    cdef cppclass FastInput:
        string name
        string datatype
        vector[int64_t] dims
        uint32_t element_size
        cbool optional
        cbool shape_keyed

    cdef cppclass FastModel:
        uint32_t core_model_id
        string name
        string version
        int64_t max_batch_size
        vector[FastInput] inputs
        vector[string] outputs

    cdef cppclass ShapeKey:
        void add(uint32_t index, const int64_t* dims, size_t rank)
        uint64_t value()

    cdef cppclass FastReply "naiad::FastLane::Reply":
        uint64_t request_id
        cbool ok
        uint32_t batch_size
        uint64_t request_ns
        uint64_t queue_ns
        string http

    cdef cppclass FastTaken "naiad::FastLane::Taken":
        uint32_t lane_model
        uint64_t request_id
        uint32_t batch_size

    cdef cppclass CFastLane "naiad::FastLane":
        CFastLane(CCore& core)
        uint32_t add_model(FastModel model) except +
        void add_route(const string& target, uint32_t lane_model) except +
        void set_accepting(uint32_t lane_model, cbool accepting)
        uint64_t new_request_id()
        size_t take_http(const uint8_t* data, size_t size, size_t max_body, uint64_t now_ns,
                         vector[FastTaken]* taken) except + nogil
        cbool submit_to(string_view target, const uint8_t* body, size_t body_size,
                        size_t header_size, uint64_t now_ns, FastTaken* taken) except + nogil
        cbool complete(const uint8_t* block, uint64_t block_size,
                       const vector[uint64_t]& request_ids, uint64_t dispatch_ns,
                       uint64_t end_ns, vector[FastReply]* replies,
                       uint64_t* timings) except + nogil
        void forget(uint64_t request_id)
        size_t in_flight()


cdef extern from "worker_endpoint.h" namespace "naiad":
    cdef cppclass CWorkerEndpoint "naiad::WorkerEndpoint":
        CWorkerEndpoint(int arena_fd, uint64_t channel_offset, int wake_fd, int notify_fd) except +
        BatchMessage next() nogil
        void complete(uint64_t batch_id, uint64_t result_offset, uint64_t result_size,
                      int32_t status) nogil
        cbool respond(uint64_t batch_id, const vector[ResponseEntry]& responses,
                      const uint64_t* timings, cbool batch_done) except + nogil
        Arena& arena() nogil


# Completion statuses (channel.h CompletionStatus).
COMPLETION_OK = 0
COMPLETION_WORKER_FAILED = 1
COMPLETION_INSTANCE_DIED = 2
COMPLETION_TIMED_OUT = kCompletionTimedOut

# Core.submit results.
SUBMIT_OK = 0
SUBMIT_ARENA_FULL = 1
SUBMIT_QUEUE_FULL = 2
SUBMIT_UNSUPPORTED_INPUT = 3

# Response flags (csrc/ipc_schema.h ResponseRecord.flags).
RESPONSE_FINAL = kResponseFinal
RESPONSE_ERROR = kResponseError


cdef QueuePolicy _queue_policy(dict policy):
    cdef QueuePolicy out
    out.timeout_action = TimeoutAction.kDelay if policy.get("timeout_action") == "DELAY" \
        else TimeoutAction.kReject
    out.default_timeout_us = policy.get("default_timeout_microseconds", 0)
    out.allow_timeout_override = policy.get("allow_timeout_override", False)
    out.max_queue_size = policy.get("max_queue_size", 0)
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

    def add_model(self, dict config):
        """Registers a model's scheduling policy; `config` keys follow model_config.proto:
        dynamic_batching (bool), max_batch_size, preferred_batch_size (list),
        max_queue_delay_microseconds, preserve_ordering, priority_levels,
        default_priority_level, default_queue_policy (dict), priority_queue_policy
        ({level: dict}). Returns the model id."""
        cdef BatcherConfig c
        c.dynamic_batching = config.get("dynamic_batching", False)
        c.max_batch_size = config.get("max_batch_size", 0)
        for size in config.get("preferred_batch_size", ()):
            c.preferred_batch_sizes.push_back(size)
        c.max_queue_delay_us = config.get("max_queue_delay_microseconds", 0)
        c.preserve_ordering = config.get("preserve_ordering", False)
        c.priority_levels = config.get("priority_levels", 0)
        c.default_priority_level = config.get("default_priority_level", 0)
        c.default_policy = _queue_policy(config.get("default_queue_policy", {}))
        per_level = config.get("priority_queue_policy", {})
        cdef uint32_t level
        for level in range(1, c.priority_levels + 1):
            if level in per_level:
                c.level_policies.push_back(_queue_policy(per_level[level]))
                c.level_has_policy.push_back(True)
            else:
                c.level_policies.push_back(c.default_policy)
                c.level_has_policy.push_back(False)
        return self._core.add_model(c)

    def add_instance(self, uint32_t model_id):
        """Returns (instance_id, channel_offset, wake_fd)."""
        cdef uint32_t instance_id = self._core.add_instance(model_id)
        cdef InstanceEndpoint ep = self._core.endpoint(instance_id)
        return instance_id, ep.channel_offset, ep.wake_fd

    def submit(self, uint32_t model_id, uint64_t request_id, bytes metadata, list inputs,
               uint32_t batch_size, uint32_t priority=0, uint64_t timeout_us=0,
               uint64_t shape_key=0, uint64_t input_order=0):
        """Queues a request: `metadata` is the worker's view of it (ipc_schema.h, from
        `request_metadata`), `inputs` one buffer per metadata input, in order. The core
        lays the block out and copies each input once.

        Returns SUBMIT_OK, SUBMIT_ARENA_FULL or SUBMIT_QUEUE_FULL.
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
        with nogil:
            result = self._core.submit(model_id, request)
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

    def free(self, uint64_t offset):
        self._core.arena().free(offset)

    def responses(self, uint64_t offset, uint64_t size):
        """The response block (csrc/ipc_schema.h) a completion carries: (timings,
        [(request_index, flags, error_code, json bytes, ((arena offset, size) of each
        output, ...)), ...]), or None when the block is not readable."""
        cdef Arena* arena = &self._core.arena()
        if offset == 0 or offset > arena.size() or size > arena.size() - offset:
            return None
        cdef const uint8_t* block = arena.base() + offset
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

    def queued(self, uint32_t model_id):
        return self._core.queued(model_id)

    def in_flight(self):
        return self._core.in_flight()

    def arena_stats(self):
        cdef ArenaStats s = self._core.arena().stats()
        return {"bytes_in_use": s.bytes_in_use, "blocks_in_use": s.blocks_in_use,
                "largest_free": s.largest_free}


def input_order_key(list indices):
    """The core's input_order of a request whose inputs are the config inputs
    `indices`, in request order (the fast lane computes the same)."""
    cdef vector[uint32_t] c_indices = indices
    return c_input_order_key(c_indices.data(), c_indices.size())


cdef tuple _request_view(const uint8_t* base, uint64_t offset):
    """(metadata bytes, ((input offset, size), ...)) of the request block at `offset`."""
    cdef const RequestHeader* header = <const RequestHeader*>(base + offset)
    if header.magic != kRequestMagic:
        raise ValueError(f"no request block at arena offset {offset}")
    cdef const InputSlot* slots = <const InputSlot*>(base + offset + sizeof(RequestHeader))
    cdef uint64_t start = offset + request_metadata_offset(header.n_inputs)
    metadata = PyBytes_FromStringAndSize(<const char*>(base + start), header.metadata_size)
    cdef uint32_t i
    return metadata, tuple([(slots[i].offset, slots[i].size) for i in range(header.n_inputs)])


def shape_key(list keyed):
    """The batching key of a request's variable shapes: `keyed` lists (config input
    index, shape without the batch dim) in config order, for inputs whose dims vary.
    Requests with different keys never share a batch; the fast lane computes the same."""
    cdef ShapeKey key
    cdef vector[int64_t] dims
    for index, shape in keyed:
        dims = shape
        key.add(index, dims.data(), dims.size())
    return key.value()


cdef class FastLane:
    """The infer fast lane (csrc/fast_lane.h) over a Core.

    `submit` takes an HTTP infer body the lane can handle and queues it; anything else
    (0 returned) goes the general way. `complete` turns the lane's requests in a
    completed batch into their full HTTP responses."""

    cdef CFastLane* _lane
    cdef Core _core
    cdef const uint8_t* _base
    cdef uint64_t _arena_size

    def __cinit__(self, Core core):
        self._core = core
        self._lane = new CFastLane(core._core[0])
        self._base = core._core.arena().base()
        self._arena_size = core._core.arena().size()

    def __dealloc__(self):
        del self._lane

    def add_model(self, uint32_t core_model_id, str name_json, str version,
                  int64_t max_batch_size, list inputs, list outputs):
        """`inputs`: [(name, wire datatype, dims, element size (0: BYTES), optional,
        shape_keyed)] in config order; `outputs`: output names. Returns the lane id."""
        cdef FastModel model
        cdef FastInput spec
        model.core_model_id = core_model_id
        model.name = name_json.encode()
        model.version = version.encode()
        model.max_batch_size = max_batch_size
        for name, datatype, dims, element_size, optional, shape_keyed in inputs:
            spec.name = name.encode()
            spec.datatype = datatype.encode()
            spec.dims = dims
            spec.element_size = element_size
            spec.optional = optional
            spec.shape_keyed = shape_keyed
            model.inputs.push_back(spec)
        for name in outputs:
            model.outputs.push_back(name.encode())
        return self._lane.add_model(model)

    def add_route(self, str target, uint32_t lane_model):
        """Infer requests for URL `target` (as sent) go to `lane_model` in take_http."""
        self._lane.add_route(target.encode(), lane_model)

    def set_accepting(self, uint32_t lane_model, bint accepting):
        """A model that is not ready takes nothing through the lane."""
        self._lane.set_accepting(lane_model, accepting)

    def new_request_id(self):
        """A request id for the core, unique across the lane and the general path."""
        return self._lane.new_request_id()

    def take_http(self, bytes data, size_t max_body, uint64_t now_ns):
        """Takes the complete plain infer requests at the start of received HTTP bytes:
        (bytes taken, [(lane_model, request_id, batch_size)] in order). The rest of
        `data` is for the full HTTP parser."""
        cdef const uint8_t* start = <const uint8_t*>PyBytes_AS_STRING(data)
        cdef size_t size = PyBytes_GET_SIZE(data)
        cdef vector[FastTaken] taken
        cdef size_t consumed
        with nogil:
            consumed = self._lane.take_http(start, size, max_body, now_ns, &taken)
        cdef list out = []
        cdef size_t i
        for i in range(taken.size()):
            out.append((taken[i].lane_model, taken[i].request_id, taken[i].batch_size))
        return consumed, out

    def submit_to(self, bytes target, bytes body, size_t header_size, uint64_t now_ns):
        """Queues an infer body the HTTP parser put together, sent to URL `target`, if
        that is a lane route and the lane takes the body: (lane_model, request_id,
        batch_size), or None for the general path (also when the core refused it: the
        general path reports that the usual way)."""
        cdef string_view c_target = string_view(PyBytes_AS_STRING(target),
                                                PyBytes_GET_SIZE(target))
        cdef const uint8_t* data = <const uint8_t*>PyBytes_AS_STRING(body)
        cdef size_t size = PyBytes_GET_SIZE(body)
        cdef FastTaken taken
        cdef cbool queued
        with nogil:
            queued = self._lane.submit_to(c_target, data, size, header_size, now_ns, &taken)
        if not queued:
            return None
        return taken.lane_model, taken.request_id, taken.batch_size

    def complete(self, uint64_t offset, uint64_t size, list request_ids, uint64_t dispatch_ns,
                 uint64_t end_ns):
        """The lane's requests among a completed batch's `request_ids`:
        (timings, [(request_id, ok, batch_size, request_ns, queue_ns, http bytes)]), or
        None when the result block could not be read."""
        if offset == 0 or offset > self._arena_size or size > self._arena_size - offset:
            return None
        cdef vector[uint64_t] ids = request_ids
        cdef vector[FastReply] replies
        cdef uint64_t timings[4]
        cdef cbool readable
        with nogil:
            readable = self._lane.complete(self._base + offset, size, ids, dispatch_ns, end_ns,
                                           &replies, timings)
        if not readable:
            return None
        cdef list out = []
        cdef size_t i
        for i in range(replies.size()):
            out.append((replies[i].request_id, replies[i].ok, replies[i].batch_size,
                        replies[i].request_ns, replies[i].queue_ns,
                        PyBytes_FromStringAndSize(replies[i].http.data(),
                                                  replies[i].http.size())))
        return [timings[0], timings[1], timings[2], timings[3]], out

    def forget(self, uint64_t request_id):
        """The request was answered another way (failed batch, shutdown)."""
        self._lane.forget(request_id)

    def in_flight(self):
        return self._lane.in_flight()


cdef class WorkerEndpoint:
    """A worker's end of its instance channel, over the inherited descriptors."""

    cdef CWorkerEndpoint* _endpoint
    cdef readonly object arena

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
        requests' inputs differ, csrc/ipc_schema.h)."""
        cdef BatchMessage message
        while True:
            with nogil:
                message = self._endpoint.next()
            if message.kind == MessageKind.kStop:
                return True, message.batch_id, [], []
            if message.kind == MessageKind.kBatch:
                break
            # A response to a request this worker submitted (BLS): Python models do
            # not submit requests yet, so none is awaited; its block is ours to free.
            if message.kind == MessageKind.kResponse and message.desc_offset != 0:
                self._endpoint.arena().free(message.desc_offset)
        cdef const uint8_t* base = self._endpoint.arena().base()
        cdef const BatchHeader* header = <const BatchHeader*>(base + message.desc_offset)
        cdef const BatchRequest* records = <const BatchRequest*>(
            base + message.desc_offset + batch_requests_offset())
        cdef const BatchTensor* tensors = <const BatchTensor*>(
            base + message.desc_offset + batch_tensors_offset(header.n_requests))
        cdef list requests = []
        cdef uint32_t i
        for i in range(header.n_requests):
            requests.append(_request_view(base, records[i].block_offset))
        cdef list batch_tensors = [(tensors[i].offset, tensors[i].size)
                                   for i in range(header.n_tensors)]
        return False, message.batch_id, requests, batch_tensors

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
        buffers in wire layout])] in one response block (csrc/ipc_schema.h), the
        outputs copied in with the GIL released; `batch_done` also ends the batch.
        False when the arena has no room (nothing posted)."""
        cdef vector[ResponseEntry] entries
        cdef ResponseEntry entry
        cdef ResponseOutput output
        cdef const uint8_t[::1] view
        cdef list keep = []
        cdef uint64_t c_timings[4]
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
        cdef cbool posted
        with nogil:
            posted = self._endpoint.respond(batch_id, entries, c_timings, batch_done)
        return posted
