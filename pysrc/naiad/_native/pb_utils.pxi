# pb_utils' internals: the fields of Tensor, InferenceRequest and InferenceResponse
# (TensorFields, RequestFields, ResponseFields), request plans and result blocks.
# Part of the extension naiad._core: pysrc/naiad/_core.pyx includes it.


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
