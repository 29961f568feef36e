# A worker's side of one instance channel: WorkerEndpoint, ReservedResponse, and the
# frontend's region table as a worker reads it.
# Part of the extension naiad._core: pysrc/naiad/_core.pyx includes it.


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


cdef str _trace_context(const uint8_t* base, uint64_t offset, const RequestHeader* request):
    """The trace context of a request traced in mode opentelemetry, with the client's
    tracestate when its block carries one (csrc/core/trace_context.h)."""
    cdef string_view metadata = string_view(
        <const char*>(base + offset + request_metadata_offset(request.n_inputs)),
        request.metadata_size)
    cdef string trace_state = request_trace_state(metadata)
    return trace_context_json(request.span,
                              string_view(trace_state.data(), trace_state.size())).decode()


cdef class ChannelMessage:
    """One message a worker reads from its channel (WorkerEndpoint.next and wait).
    `kind` is a MESSAGE_* constant; what else it holds depends on it:
      MESSAGE_BATCH          `tag` is the batch id; `requests` are (metadata bytes,
                             (input slot, ...)) per request; `tensors` the batch-major
                             [N, ...] input tensors the requests' inputs lie in row after
                             row, a slot each (empty when the requests' inputs differ).
                             A slot is (arena offset, size), or (offset in the region,
                             size, region id) for bytes read in place from a client's
                             system-shm region (csrc/ipc/ipc_schema.h InputSlot).
      MESSAGE_STOP           nothing else.
      MESSAGE_RESPONSE       `tag` is the submitted request's; `offset`/`size` its
                             response block of one response, ours to free.
      MESSAGE_REFUSED        `tag` as above; `status` a SUBMIT_* result, or
                             REFUSED_QUEUED | a COMPLETION_* status: it failed without a
                             final response.
      MESSAGE_CONTROL_REPLY  `tag` is the control request's; `offset`/`size` its answer
                             (JSON), ours to free (offset 0: the core could not read it)."""

    cdef readonly int kind
    cdef readonly uint64_t tag
    cdef readonly list requests
    cdef readonly list tensors
    cdef readonly uint64_t offset
    cdef readonly uint64_t size
    cdef readonly uint32_t status


cdef ChannelMessage _channel_message(int kind, uint64_t tag):
    cdef ChannelMessage message = ChannelMessage.__new__(ChannelMessage)
    message.kind = kind
    message.tag = tag
    return message


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
        """Blocks, GIL released, for the next batch or stop: a ChannelMessage of kind
        MESSAGE_BATCH or MESSAGE_STOP. Responses to this worker's own requests (BLS)
        that arrive meanwhile are freed: a worker waiting for one reads with wait()."""
        cdef BatchMessage message
        while True:
            with nogil:
                message = self._endpoint.next()
            if message.kind == MessageKind.kStop:
                return _channel_message(MESSAGE_STOP, 0)
            if message.kind == MessageKind.kBatch:
                break
            if (message.kind == MessageKind.kResponse
                    or message.kind == MessageKind.kControlReply) and message.desc_offset != 0:
                self._endpoint.arena().free(message.desc_offset)
        return self._take_batch(message.batch_id, message.desc_offset)

    def wait(self, bint block=True):
        """The next ChannelMessage of any kind (BLS: a worker waiting for its own
        requests' responses keeps reading its channel), or None when `block` is False
        and there is none."""
        cdef BatchMessage message
        cdef cbool got = True
        if block:
            with nogil:
                message = self._endpoint.next()
        else:
            got = self._endpoint.try_next(&message)
            if not got:
                return None
        cdef ChannelMessage out
        if message.kind == MessageKind.kStop:
            return _channel_message(MESSAGE_STOP, 0)
        if message.kind == MessageKind.kBatch:
            return self._take_batch(message.batch_id, message.desc_offset)
        if message.kind == MessageKind.kRefused:
            out = _channel_message(MESSAGE_REFUSED, message.batch_id)
            out.status = message.n_requests
            return out
        out = _channel_message(
            MESSAGE_RESPONSE if message.kind == MessageKind.kResponse else MESSAGE_CONTROL_REPLY,
            message.batch_id)
        out.offset = message.desc_offset
        out.size = message.size
        return out

    cdef ChannelMessage _take_batch(self, uint64_t batch_id, uint64_t desc_offset):
        """The batch whose descriptor is at `desc_offset`, as next() and wait() give it;
        remembered for request_blocks() and sequence_words()."""
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
        cdef ChannelMessage batch = _channel_message(MESSAGE_BATCH, batch_id)
        batch.requests = requests
        batch.tensors = [
            _slot_tuple(tensors[i].offset, tensors[i].size, tensors[i].region,
                        tensors[i].region_offset)
            for i in range(header.n_tensors)]
        return batch

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
