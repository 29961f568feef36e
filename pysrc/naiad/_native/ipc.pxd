# Declarations of csrc/ipc/arena.h, csrc/ipc/channel.h, csrc/ipc/ipc_schema.h,
# csrc/ipc/response_block.h, csrc/ipc/request_block.h, csrc/ipc/worker_endpoint.h: the arena, and
# the blocks and messages the frontend and the workers exchange through it.
from libc.stdint cimport int32_t, uint8_t, uint32_t, uint64_t
from libcpp cimport bool as cbool
from libcpp.string cimport string
from libcpp.string_view cimport string_view
from libcpp.vector cimport vector
from naiad._native.request cimport *


cdef extern from "ipc/arena.h" namespace "naiad":
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


cdef extern from "ipc/channel.h" namespace "naiad":
    cdef enum class MessageKind(uint32_t):
        kBatch
        kStop
        kResponse
        kRefused
        kControlReply

    cdef struct BatchMessage:
        uint64_t batch_id
        uint64_t desc_offset
        uint32_t n_requests
        MessageKind kind
        uint64_t size


cdef extern from "ipc/ipc_schema.h" namespace "naiad":
    uint32_t kRequestMagic
    uint32_t kControlMagic

    cdef struct ControlHeader:
        uint32_t magic
        uint32_t n_files
        uint64_t json_size

    uint64_t control_json_offset(uint32_t n_files)

    cdef struct SpanContext:
        uint64_t trace_id_high
        uint64_t trace_id_low
        uint64_t span_id
        uint64_t trace_flags

    cdef struct RequestHeader:
        uint32_t magic
        uint32_t n_inputs
        uint32_t metadata_size
        SpanContext span

    cdef struct InputSlot:
        uint64_t offset
        uint64_t size
        uint64_t region
        uint64_t region_offset

    uint64_t request_metadata_offset(uint32_t n_inputs)
    cbool request_cancelled(const RequestHeader* header) nogil

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
        uint64_t region
        uint64_t region_offset

    uint64_t batch_requests_offset()
    uint64_t batch_tensors_offset(uint32_t n_requests)

    uint32_t kResponseFinal
    uint32_t kResponseError
    uint32_t kResponseModelError
    cbool c_response_counts_as_failure "naiad::response_counts_as_failure"(uint32_t flags)


cdef extern from "ipc/response_block.h" namespace "naiad":
    cdef cppclass OutputBytes:
        const void* data
        uint64_t size

    cdef cppclass ResponseEntry:
        uint32_t request_index
        uint32_t flags
        int32_t error_code
        string_view json
        vector[OutputBytes] outputs

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
        const uint8_t* started
        uint64_t started_ns(uint32_t r)

    cbool view_response_block(const uint8_t* block, uint64_t size, ResponseBlockView* out)
    uint64_t response_block_size(const vector[ResponseEntry]& entries) except +
    void write_response_block(uint8_t* block, const vector[ResponseEntry]& entries,
                              const uint64_t* timings) except +


cdef extern from "ipc/request_block.h" namespace "naiad":
    cdef cppclass RequestBlock:
        string metadata
        vector[InputSource] inputs
        uint64_t input_order

    void layout_request_block(const CModelSpec& model, const ParsedRequest& request,
                              RequestBlock* out) except + nogil
    string request_trace_state(string_view metadata) except +


cdef extern from "ipc/worker_endpoint.h" namespace "naiad":
    cdef cppclass CWorkerEndpoint "naiad::WorkerEndpoint":
        CWorkerEndpoint(int arena_fd, uint64_t channel_offset, int wake_fd, int notify_fd) except +
        BatchMessage next() nogil
        cbool try_next(BatchMessage* message) nogil
        SubmitResult submit(uint64_t model, uint64_t tag, const SubmitRequest& request,
                            cbool wake, uint64_t trace_batch, uint32_t trace_index) except + nogil
        void cancel(uint64_t tag) nogil
        cbool control(uint64_t tag, string_view json, const vector[string_view]& files) except + nogil
        void wake() nogil
        void complete(uint64_t batch_id, uint64_t result_offset, uint64_t result_size,
                      int32_t status) nogil
        cbool respond(uint64_t batch_id, const vector[ResponseEntry]& responses,
                      const uint64_t* timings, cbool batch_done) except + nogil
        cbool respond_open "respond"(uint64_t batch_id, const vector[ResponseEntry]& responses,
                                     const uint64_t* timings, cbool batch_done,
                                     cbool keep_open) except + nogil
        void end_batch(uint64_t batch_id, cbool keep_open) nogil
        cbool yield_to_frontend() nogil
        uint64_t reserve_output_major(uint64_t batch_id, const vector[ResponseEntry]& responses,
                                      uint64_t* runs, uint64_t* size) except + nogil
        void post_block(uint64_t batch_id, uint64_t offset, uint64_t size,
                        const uint64_t* timings, cbool batch_done) nogil
        Arena& arena() nogil
