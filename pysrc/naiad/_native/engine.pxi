# The lanes and the I/O engine: FastLane (HTTP infer in C++), GrpcLane, GrpcAnswer,
# GrpcStreams, TlsContext and HttpIo (the epoll loop), the HTTP body codecs they answer with,
# and the named types they hand Python (LaneTaken, LaneCompletion, LaneReply, CacheLookup,
# CacheCounters).
# Part of the extension naiad._core: pysrc/naiad/_core.pyx includes it.


HTTP_MAX_HEAD = kHttpMaxHead  # csrc/http1/http_scan.h
HTTP_MAX_PIPELINE = kHttpMaxPipeline


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


cdef extern from "http2/grpc_inflate.h" namespace "naiad::grpc":
    cdef cppclass GrpcInflation "naiad::grpc::Inflation":
        GrpcInflation(string compressed, string_view encoding, uint64_t max_message_size) except +
        cbool step(size_t budget) except + nogil
        int status()
        const string& error()
        string_view message()


def grpc_inflate(data, str encoding, uint64_t max_message_size):
    """A compressed gRPC message inflated whole as the I/O loop inflates it
    (csrc/http2/grpc_inflate.h), GIL released: (0, the bytes as a bytearray), or (Triton's
    gRPC status, its message)."""
    cdef const uint8_t[::1] view = data
    cdef string compressed
    if view.shape[0] != 0:
        compressed.assign(<const char*>&view[0], view.shape[0])
    cdef bytes c_encoding = encoding.encode()
    cdef GrpcInflation* inflation = new GrpcInflation(
        move(compressed), string_view(c_encoding, len(c_encoding)), max_message_size)
    cdef string_view inflated
    try:
        with nogil:
            inflation.step(<size_t>-1)
        if inflation.status() != 0:
            return inflation.status(), inflation.error().decode("utf-8", "replace")
        inflated = inflation.message()
        return 0, PyByteArray_FromStringAndSize(inflated.data(), inflated.size())
    finally:
        del inflation


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


def json_tensor_data(bytes text, str datatype, str name, uint64_t count):
    """An input's JSON `data` (`text`: that value's JSON) in wire bytes, read as Triton 2.51
    reads it (csrc/codec/kserve_json.h read_tensor_data): (bytes, 0, None), or
    (None, error kind, Triton's message) when refused, or (None, 0, None) when the
    reader cannot read it (arrays nested past its depth)."""
    cdef bytes wire = datatype.encode()
    cdef bytes input_name = name.encode()
    cdef vector[uint8_t] out
    cdef Refusal refusal
    cdef string_view c_text = string_view(PyBytes_AS_STRING(text), PyBytes_GET_SIZE(text))
    cdef string_view c_wire = string_view(PyBytes_AS_STRING(wire), PyBytes_GET_SIZE(wire))
    cdef string_view c_name = string_view(PyBytes_AS_STRING(input_name),
                                          PyBytes_GET_SIZE(input_name))
    cdef DataRead read
    with nogil:
        read = c_read_tensor_data_text(c_text, c_wire, c_name, count, &out, &refusal)
    if read == DataRead.kConverted:
        return PyBytes_FromStringAndSize(<const char*>out.data(), out.size()), 0, None
    if read == DataRead.kRefused:
        return None, <int>refusal.kind, refusal.message.decode("utf-8", "replace")
    return None, 0, None


def json_syntax_error(data):
    """Triton's message when an inference header (bytes-like) is no JSON document to its
    parser (csrc/codec/json_syntax.h), or None when its parser takes it."""
    cdef const unsigned char[::1] view = memoryview(data).cast("B") if len(data) else b"\0"
    cdef size_t size = len(data)
    cdef JsonSyntaxError error
    cdef cbool ok
    with nogil:
        ok = c_json_syntax_ok(<const char*>&view[0], size, &error)
    return None if ok else c_json_syntax_message(error).decode()


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


cdef LaneTaken _taken(HttpTaken& taken):
    cdef LaneTaken out = LaneTaken.__new__(LaneTaken)
    out.lane_model = taken.model
    out.request_id = taken.request_id
    out.batch_size = taken.batch_size
    if taken.reply.size():
        out.reply = PyBytes_FromStringAndSize(taken.reply.data(), taken.reply.size())
    return out


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
    # The lanes of the other I/O loops (add_mirror), and the IoLoops that runs them, which
    # pauses a mirror's loop while its lane changes (None until the loops start).
    cdef readonly list mirrors
    cdef public object loops

    def __cinit__(self, Core core):
        self.mirrors = []
        self._core = core
        self._lane = new HttpLane(core._core[0])
        self._base = core._core.arena().base()
        self._arena_size = core._core.arena().size()

    def __dealloc__(self):
        cdef FastLane mirror
        if self.mirrors is not None:  # None once the collector cleared it
            for mirror in self.mirrors:  # the cache is ours
                mirror._lane.codec().set_cache(NULL)
        del self._lane
        del self._cache

    def add_mirror(self):
        """A lane for another I/O loop (IoLoops) serving what this one serves: the models,
        routes and readiness this lane is given from now on, and its response cache. Before
        any model is added, so that both number the models alike."""
        if self._lane.codec().model_count():
            raise RuntimeError("a lane's mirrors are made before any model is added")
        cdef FastLane mirror = FastLane(self._core)
        mirror._lane.codec().set_cache(self._cache)
        self.mirrors.append(mirror)
        return mirror

    def _to_mirrors(self, str method, *args):
        """Calls `method` on each mirror while its loop is paused."""
        for index, mirror in enumerate(self.mirrors):
            if self.loops is not None:
                self.loops.pause(index + 1)
            try:
                getattr(mirror, method)(*args)
            finally:
                if self.loops is not None:
                    self.loops.resume(index + 1)

    def _add_spec(self, ModelSpec spec):
        return self._lane.codec().add_model(spec.spec)

    def add_model(self, uint64_t core_model, ModelSpec spec, bint response_cache=False):
        """Serves `spec` (queued on the core's model `core_model`, a handle); returns the
        lane id. `response_cache`: its requests use the response cache (enable_cache)."""
        cdef CModelSpec model = spec.spec
        cdef ModelSpec mirrored
        model.core_model_id = _handle(core_model)
        model.response_cache = response_cache and self._cache != NULL
        if self.mirrors:
            mirrored = ModelSpec.__new__(ModelSpec)
            mirrored.spec = model
            self._to_mirrors("_add_spec", mirrored)
        return self._lane.codec().add_model(model)

    # -- the response cache (csrc/core/response_cache.h), one for every path and model ---
    def enable_cache(self, uint64_t capacity):
        """Creates the response cache of `capacity` bytes (--cache-config local,size=N),
        before any model is added."""
        if self._cache == NULL:
            self._cache = new LocalCache(capacity)
            self._lane.codec().set_cache(self._cache)

    def enable_redis_cache(self, str host, int port, str user, str password, int db,
                           uint32_t connect_timeout_ms, uint32_t socket_timeout_ms,
                           tls=None):
        """Creates the Redis response cache (--cache-config redis,...), before any model
        is added, once Redis answers a PING; ConnectionError naming why when it does not.
        `tls`: None, or a dict of RedisOptions' tls_* files ("cert", "key", "cacert",
        "cacert_dir", "sni"); ValueError naming a file that cannot be used."""
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
        if tls is not None:
            options.tls = True
            options.tls_cert = tls.get("cert", "").encode()
            options.tls_key = tls.get("key", "").encode()
            options.tls_cacert = tls.get("cacert", "").encode()
            options.tls_cacert_dir = tls.get("cacert_dir", "").encode()
            options.tls_sni = tls.get("sni", "").encode()
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
        """The CacheCounters of lane model `lane_model` (Triton's cache statistics of that
        model version); zeros without a cache."""
        cdef CacheCounters out = CacheCounters.__new__(CacheCounters)
        if self._cache != NULL:
            out.c = self._cache.counters(lane_model)
        return out

    def drop_cached(self, uint32_t lane_model):
        """The model version is unloaded: its cache entries go."""
        if self._cache != NULL:
            self._cache.drop_owner(lane_model)

    def cache_lookup(self, uint32_t lane_model, str request_id, list inputs, outputs,
                     uint64_t submit_ns):
        """The general path's lookup, after the one validator: a request (as
        ModelSpec.submit takes it) of lane model `lane_model` that arrived at
        `submit_ns`: a CacheLookup."""
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
        cdef CacheLookup out = CacheLookup.__new__(CacheLookup)
        if error.size():
            out.error = error.decode("utf-8", "replace")
            return out
        if not hit:
            if key.size():
                out.looked_up = True
                out.key = PyBytes_FromStringAndSize(key.data(), key.size())
                out.lookup_ns = lookup_ns
            return out
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
        out.looked_up = out.hit = True
        out.outcome = b'{"outputs":[' + b",".join(parts) + b'],"parameters":' + \
            (parameters if parameters else b"{}") + b"}"
        out.tensors = tensors
        return out

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
        self._to_mirrors("add_route", target, lane_model)

    def set_accepting(self, uint32_t lane_model, bint accepting):
        """A model that is not ready takes nothing through the lane."""
        self._lane.codec().set_accepting(lane_model, accepting)
        self._to_mirrors("set_accepting", lane_model, accepting)

    def remove_model(self, uint32_t lane_model):
        """The model is gone: its routes are dropped and the lane takes nothing for it."""
        self._lane.remove_model(lane_model)
        self._to_mirrors("remove_model", lane_model)

    def take_http(self, data, size_t max_body, uint64_t now_ns, size_t max_requests=<size_t>-1):
        """Takes the complete plain infer requests at the start of received HTTP bytes
        (bytes or bytearray): (bytes taken, [LaneTaken] in order). The rest of `data` is for
        the full HTTP parser."""
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
        the response block (csrc/ipc/ipc_schema.h) at `offset`: a LaneCompletion whose
        replies carry the HTTP responses, or None when the block could not be read.

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
        cdef LaneReply reply
        for i in range(answers.size()):
            reply = _lane_reply(answers[i], late)
            reply.payload = payloads[i]
            out.append(reply)
        return _lane_completion(timings, out, finals, None)

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


# --- gRPC over HTTP/2 (csrc/http2/grpc_connection.h): one object per client connection ---

# Trace mode opentelemetry: calls report their `traceparent` metadata (tracing/otel.py).
cdef bint _read_traceparent = False


def read_grpc_traceparent(bint on):
    global _read_traceparent
    _read_traceparent = on


cdef tuple _traceparent(const vector[HpackHeader]& metadata):
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


cdef class GrpcEvent:
    """One event of a gRPC call, as the I/O loop hands it to Python (IO_GRPC_CALL): `kind`
    (GRPC_*) on stream `stream_id`. GRPC_CALL: `path`, `timeout_us` (-1: none), `encoding`
    (grpc-encoding), `trace_context` (with read_grpc_traceparent: (traceparent, tracestate
    or None) when the call has a traceparent, else None) and, when the
    loop was asked for it (restrictions, header forwarding), `metadata`: ((name, value) str
    pairs), else None. GRPC_MESSAGE: `message` (OwnedBytes) and `compressed`. GRPC_CANCEL:
    the RST_STREAM `code`."""

    cdef readonly int kind
    cdef readonly uint32_t stream_id
    cdef readonly str path
    cdef readonly int64_t timeout_us
    cdef readonly str encoding
    cdef readonly tuple trace_context
    cdef readonly tuple metadata
    cdef readonly OwnedBytes message
    cdef readonly bint compressed
    cdef readonly uint32_t code


cdef GrpcEvent _h2_event(H2Event* e, cbool want_metadata):
    """An h2::GrpcConnection event as a GrpcEvent; a message's bytes are moved out of `e`,
    not copied."""
    cdef GrpcEvent out = GrpcEvent.__new__(GrpcEvent)
    out.stream_id = e.stream_id
    if e.kind == H2EventKind.kMessage:
        out.kind = GRPC_MESSAGE
        out.message = OwnedBytes.__new__(OwnedBytes)
        out.message.data.swap(e.message)
        out.compressed = e.compressed
    elif e.kind == H2EventKind.kCall:
        out.kind = GRPC_CALL
        out.path = e.path.decode("utf-8", "replace")
        out.timeout_us = e.timeout_us
        out.encoding = e.encoding.decode("ascii", "replace")
        # The call's metadata stays in C++, but for a traceparent in trace mode
        # opentelemetry and, when `want_metadata` (restrictions, header forwarding), all.
        if _read_traceparent:
            out.trace_context = _traceparent(e.metadata)
        if want_metadata:
            out.metadata = tuple([(h.name.decode("latin-1"), h.value.decode("latin-1"))
                                  for h in e.metadata])
    elif e.kind == H2EventKind.kHalfClose:
        out.kind = GRPC_HALF_CLOSE
    else:
        out.kind = GRPC_CANCEL
        out.code = e.error_code
    return out


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
        a LaneTaken, whose `reply` for a response cache hit is a ModelStreamInferResponse
        with `stream`; None: the general path's."""
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
            # Classification stays the general path's here: these answers are
            # written by Python (the I/O loop classifies its own).
            took = self._lane.submit(view, now_ns, &taken, False)
        if not took:
            return None
        cdef bytes payload
        cdef LaneTaken out = LaneTaken.__new__(LaneTaken)
        out.lane_model = taken.model
        if taken.cached.entry:
            if stream:
                payload = PyBytes_FromStringAndSize(
                    NULL, self._writer.stream_size(taken.cached.response))
                self._writer.stream_write(taken.cached.response, PyBytes_AS_STRING(payload))
            else:
                payload = PyBytes_FromStringAndSize(NULL, self._writer.size(taken.cached.response))
                self._writer.write(taken.cached.response, PyBytes_AS_STRING(payload))
            out.batch_size = taken.batch_size
            out.reply = payload
        elif taken.request_id == 0:
            out.error_kind = <uint8_t>taken.error_kind
            out.error_message = taken.error.decode("utf-8", "replace")
        else:
            out.request_id = taken.request_id
            out.batch_size = taken.batch_size
        return out

    def complete(self, uint64_t offset, uint64_t size, list request_ids, set grpc_ids,
                 uint64_t dispatch_ns, uint64_t end_ns, set streamed=None):
        """As FastLane.complete (`request_ids`: the whole batch, in order), for a batch
        with gRPC requests among the lane's: those in `grpc_ids` are answered with the
        ModelInferResponse (ModelStreamInferResponse for those in `streamed`) in their
        LaneReply: `payload`, or for a large one `view`, valid until release_answers(); or
        the error kind and message when they failed. The others get their HTTP response
        bytes, as FastLane.complete does. With `streamed`, the block is read record by
        record: a streamed request's responses before its final one (kResponseFinal unset:
        a decoupled model's) come in the LaneCompletion's `partials`, in block order."""
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
        cdef LaneReply reply
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
            reply = _lane_reply(a[0], 0)
            if a.response.request_id not in grpc_ids:
                coding = self._http._lane.take_encoding(a.response.request_id)
                payload = PyBytes_FromStringAndSize(NULL, http.size(a.response, coding))
                http.write(a.response, coding, PyBytes_AS_STRING(payload))
                reply.payload = payload
            elif ok:
                n = self._writer.stream_size(a.response) if in_stream else \
                    self._writer.size(a.response)
                if n >= _OUTPUT_VIEW_MIN:
                    large = GrpcAnswer.__new__(GrpcAnswer)
                    large.lane = self
                    large.index = i
                    large.generation = self._generation
                    large.streamed = in_stream
                    reply.view = large
                else:
                    payload = PyBytes_FromStringAndSize(NULL, n)
                    if in_stream:
                        self._writer.stream_write(a.response, PyBytes_AS_STRING(payload))
                    else:
                        self._writer.write(a.response, PyBytes_AS_STRING(payload))
                    reply.payload = payload
            else:
                reply.error_kind = <uint8_t>a.response.error
                reply.error_message = grpc_error_message(a.response).decode("utf-8", "replace")
            (out if a.final else partials).append(reply)
        # The answers are made: the requests end here (extend_to_answered). A large one
        # is written to its stream from the block when sent (GrpcAnswer.send).
        cdef uint64_t late = extend_to_answered(end_ns, monotonic_ns(), timings)
        if late:
            for reply in out:
                reply.request_ns += late
        return _lane_completion(timings, out, finals, partials)

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


# --- what the lanes hand Python: named types, not positional tuples ---

cdef class LaneTaken:
    """A request a lane took (FastLane.take_http and submit_to, GrpcLane.submit), in its
    lane model `lane_model`. Queued when `request_id` is set (the core's id). Otherwise
    answered at once: `reply` is the whole answer (HTTP: the response of a refusal or of a
    response cache hit; gRPC: a cache hit's message), or, for a gRPC refusal, `error_kind`
    (ERROR_*) and `error_message` are Triton's status. `batch_size` is 0 for a refusal."""

    cdef readonly uint32_t lane_model
    cdef readonly uint64_t request_id
    cdef readonly uint32_t batch_size
    cdef readonly bytes reply
    cdef readonly uint8_t error_kind
    cdef readonly str error_message


cdef class LaneReply:
    """One request's answer in a lane's LaneCompletion: its core request id, `status`
    (REPLY_*: how the statistics count it), batch size, request and queue ns, and the
    answer: `payload` (the HTTP response, or the gRPC message), or `view` (a large gRPC
    message, written straight from the result block by GrpcAnswer.send), or for a gRPC
    failure `error_kind` (ERROR_*, never 0) and `error_message`."""

    cdef readonly uint64_t request_id
    cdef readonly int status
    cdef readonly uint32_t batch_size
    cdef readonly uint64_t request_ns
    cdef readonly uint64_t queue_ns
    cdef readonly bytes payload
    cdef readonly GrpcAnswer view
    cdef readonly uint8_t error_kind
    cdef readonly str error_message


cdef LaneReply _lane_reply(const Answer& answer, uint64_t late):
    cdef LaneReply out = LaneReply.__new__(LaneReply)
    out.request_id = answer.response.request_id
    out.status = _reply_status(answer)
    out.batch_size = answer.batch_size
    out.request_ns = answer.request_ns + late
    out.queue_ns = answer.queue_ns
    return out


cdef class LaneCompletion:
    """A lane's answers from one response block (FastLane.complete, GrpcLane.complete):
    the batch's `timings` [start, compute_input, compute_infer, compute_output ns];
    `replies`, a LaneReply per request answered by its final response; `finals`, the ids
    of the batch's requests whose final response is in this block (the others get theirs
    in a later block, or fail when the batch ends); `partials`, the LaneReply of streamed
    gRPC requests' responses before their final one, in block order."""

    cdef readonly list timings
    cdef readonly list replies
    cdef readonly list finals
    cdef readonly list partials


cdef LaneCompletion _lane_completion(const uint64_t* timings, list replies, list finals,
                                     list partials):
    cdef LaneCompletion out = LaneCompletion.__new__(LaneCompletion)
    out.timings = [timings[0], timings[1], timings[2], timings[3]]
    out.replies = replies
    out.finals = finals
    out.partials = [] if partials is None else partials
    return out


cdef class CacheCounters:
    """A lane model's response cache counters (FastLane.cache_counters), Triton's cache
    statistics of that model version: hits and misses, and the ns they took."""

    cdef CacheModelCounters c

    @property
    def hits(self):
        return self.c.hits

    @property
    def hit_ns(self):
        return self.c.hit_ns

    @property
    def hit_request_ns(self):
        return self.c.hit_request_ns

    @property
    def hit_queue_ns(self):
        return self.c.hit_queue_ns

    @property
    def misses(self):
        return self.c.misses

    @property
    def miss_ns(self):
        return self.c.miss_ns


cdef class CacheLookup:
    """FastLane.cache_lookup's answer for a general-path request. `error`: Triton's message
    when the request is invalid (None when valid). `looked_up`: False when the request is
    invalid or its model does not cache. A hit (`hit`): `outcome`, the JSON as a worker's
    response ({"outputs": [[name, datatype, shape]], "parameters": {...}}), and `tensors`,
    the output bytes; counted in C++. A miss: `key` and `lookup_ns`, what cache_insert
    takes once it is answered."""

    cdef readonly str error
    cdef readonly bint looked_up
    cdef readonly bint hit
    cdef readonly bytes outcome
    cdef readonly list tensors
    cdef readonly bytes key
    cdef readonly uint64_t lookup_ns


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
ENDPOINT_MODEL_HEADER = kEndpointModelHeader.data()[:kEndpointModelHeader.size()].decode()
ENDPOINT_VERSION_HEADER = kEndpointVersionHeader.data()[:kEndpointVersionHeader.size()].decode()
ENDPOINT_METRICS_PATH = kEndpointMetricsPath.data()[:kEndpointMetricsPath.size()].decode()
SAGEMAKER_MODELS_PATH = kSageMakerModelsPath.data()[:kSageMakerModelsPath.size()].decode()
ENDPOINT_NAME_HEADER = kEndpointNameHeader.data()[:kEndpointNameHeader.size()].decode()
SAGEMAKER_TARGET_HEADER = kSageMakerTargetHeader.data()[:kSageMakerTargetHeader.size()].decode()


cdef class SageMakerNames:
    """The names the SageMaker multi-model endpoint loaded, which its route rewrite of
    POST /models/<name>/invoke reads on the I/O thread (csrc/http1/endpoint_routes.h)."""
    cdef shared_ptr[SageMakerModelNames] _names

    def __cinit__(self):
        self._names.reset(new SageMakerModelNames())

    def add(self, str name):
        self._names.get().add(name.encode())

    def remove(self, str name):
        self._names.get().remove(name.encode())

    def __contains__(self, str name):
        cdef string held = name.encode()
        return self._names.get().contains(string_view(held.data(), held.size()))


# HttpIo events (csrc/http1/http_io.h EventKind).
IO_ACCEPTED = <int>IoEventKind.kAccepted
IO_DATA = <int>IoEventKind.kData
IO_HAND_OVER = <int>IoEventKind.kHandOver
IO_EOF = <int>IoEventKind.kEof
IO_CLOSED = <int>IoEventKind.kClosed
IO_PAUSE_WRITING = <int>IoEventKind.kPauseWriting
IO_RESUME_WRITING = <int>IoEventKind.kResumeWriting
IO_GRPC_ACCEPTED = <int>IoEventKind.kGrpcAccepted
IO_GRPC_CALL = <int>IoEventKind.kGrpcCall  # data: the call's GrpcEvent
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
    # Binary tensor bytes of the answers the loop wrote, sent from their response block
    # or copied into the connection's output (HttpIo::TensorBytes): the manager's
    # lane_stats.
    cdef readonly uint64_t out_tensor_bytes_in_place
    cdef readonly uint64_t out_tensor_bytes_copied
    # Binary tensor bytes of the HTTP requests the loop queued, received straight into
    # the arena or copied there from the bytes it read (HttpIo::TensorBytes).
    cdef readonly uint64_t in_tensor_bytes_in_place
    cdef readonly uint64_t in_tensor_bytes_copied

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
        self.out_tensor_bytes_in_place += turn.tensor_bytes.out_in_place
        self.out_tensor_bytes_copied += turn.tensor_bytes.out_copied
        self.in_tensor_bytes_in_place += turn.tensor_bytes.in_in_place
        self.in_tensor_bytes_copied += turn.tensor_bytes.in_copied
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
                        str predict_route="", str health_route="",
                        SageMakerNames sagemaker_names=None):
        """Accepts the connections of a SageMaker (`kind` "sagemaker") or Vertex AI
        ("vertex_ai") endpoint on `listen_fd` (csrc/http1/endpoint_routes.h);
        `sagemaker_names`: the multi-model endpoint's loaded names."""
        cdef EndpointRoutes routes
        if sagemaker_names is not None:
            routes.sagemaker_models = sagemaker_names._names
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

    def set_grpc_inference_rule(self, str key, str value, str denial):
        """--grpc-restricted-protocol's rule for ModelInfer calls the lane takes (key "":
        none): refused in C++ with `denial` (UNAVAILABLE)."""
        self._io.set_grpc_inference_rule(key.encode(), value.encode(), denial.encode())

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

    def connections(self):
        """(connections served, moved to the relay target) since the loop began."""
        return self._io.connections_served(), self._io.connections_moved()


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


# gRPC's status codes, from the one enum the C++ lane answers with (csrc/http2/grpc_wire.h).
GRPC_OK = kGrpcOk
GRPC_CANCELLED = kGrpcCancelled
GRPC_UNKNOWN = kGrpcUnknown
GRPC_INVALID_ARGUMENT = kGrpcInvalidArgument
GRPC_DEADLINE_EXCEEDED = kGrpcDeadlineExceeded
GRPC_NOT_FOUND = kGrpcNotFound
GRPC_ALREADY_EXISTS = kGrpcAlreadyExists
GRPC_RESOURCE_EXHAUSTED = kGrpcResourceExhausted
GRPC_FAILED_PRECONDITION = kGrpcFailedPrecondition
GRPC_UNIMPLEMENTED = kGrpcUnimplemented
GRPC_INTERNAL = kGrpcInternal
GRPC_UNAVAILABLE = kGrpcUnavailable
