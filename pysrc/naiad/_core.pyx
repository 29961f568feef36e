# cython: language_level=3, boundscheck=False, wraparound=False
"""The only place Python touches the C++ core (csrc/): one extension, its code in a file per
side under _native/, the C++ declarations in a .pxd per header group beside them.

- shared.pxi: the constants, error kinds, datatypes and response-block codec every side
  uses, and `ModelSpec`, the one request validator.
- frontend.pxi: `Core` (queues requests, forms batches, collects completions) and the
  shared-memory registry (`ShmRegistry`, `RegionRef`).
- engine.pxi: the lanes and the I/O loop: `FastLane` (HTTP infer from body to queued block
  and from result block to response bytes), `GrpcLane`, `GrpcAnswer`, `GrpcStreams`,
  `TlsContext`, `HttpIo`, and the HTTP body codecs.
- worker.pxi: `WorkerEndpoint`, a worker's side of one instance channel, and
  `ReservedResponse`.
- pb_utils.pxi: the fields of pb_utils' Tensor, InferenceRequest and InferenceResponse.

Every call that copies tensor data or may block releases the GIL.
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


include "_native/shared.pxi"
include "_native/frontend.pxi"
include "_native/engine.pxi"
include "_native/io_loops.pxi"
include "_native/worker.pxi"
include "_native/pb_utils.pxi"
