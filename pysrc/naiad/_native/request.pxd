# Declarations of csrc/core/input_regions.h, csrc/core/submit_request.h, csrc/codec/infer_types.h,
# csrc/codec/trace_tensor.h, csrc/codec/error_status.h, csrc/codec/datatype.h,
# csrc/util/byte_sink.h: the request and answer shapes every side shares.
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libcpp cimport bool as cbool
from libcpp.string cimport string
from libcpp.string_view cimport string_view
from libcpp.vector cimport vector


cdef extern from "core/input_regions.h" namespace "naiad":
    cdef enum class InputKind(uint32_t):
        kInline
        kSystemShm
        kCudaIpc


cdef extern from "core/submit_request.h" namespace "naiad":
    cdef cppclass ModelHandle:
        uint64_t value

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
        uint64_t sequence_id
        string_view sequence_key
        uint32_t sequence_flags
        cbool traced
        cbool trace_tensors
        uint64_t trace_id_high
        uint64_t trace_id_low
        uint64_t trace_flags

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
        kModelGone
        kUnsupportedInput
        kSequenceBatchSize
        kNoSequenceId
        kSequenceNotStarted


cdef extern from "codec/infer_types.h" namespace "naiad":
    cdef cppclass InputSpec:
        string name
        string name_json
        string datatype
        vector[int64_t] dims
        uint32_t element_size
        cbool optional
        cbool shape_tensor
        cbool shape_keyed

    cdef cppclass CModelSpec "naiad::ModelSpec":
        ModelHandle core_model_id
        string name
        string name_json
        string version
        int64_t max_batch_size
        vector[InputSpec] inputs
        vector[string] outputs
        vector[string] outputs_json
        vector[vector[string]] output_labels
        cbool response_cache

    cdef cppclass RequestInput:
        string_view name
        string_view datatype
        vector[int64_t] shape
        const uint8_t* data
        uint64_t size
        cbool on_device

    cdef cppclass ParsedRequest:
        string_view id
        vector[RequestInput] inputs
        vector[string_view] output_names
        string_view parameters
        string_view output_regions
        string_view trace_state
        uint32_t priority
        uint64_t timeout_us
        uint32_t batch_size
        uint64_t shape_key

    cdef enum class ErrorKind(uint8_t):
        kNone
        kUnknown
        kInternal
        kNotFound
        kInvalidArgument
        kUnavailable
        kUnsupported
        kAlreadyExists

    cdef cppclass ResponseOutput:
        string_view name
        string_view datatype
        string_view shape
        const uint8_t* data
        uint64_t size

    cdef cppclass InferResponse:
        uint64_t request_id
        ErrorKind error
        string_view parameters
        vector[ResponseOutput] outputs

    int http_status_of(ErrorKind kind)


cdef extern from "codec/trace_tensor.h" namespace "naiad":
    cdef enum class TensorActivity "naiad::TensorActivity":
        kQueueInput
        kBackendOutput
    const char* tensor_activity_name(TensorActivity activity)
    void append_trace_tensor(string* out, string_view name, string_view datatype,
                             const int64_t* shape, size_t dims, const uint8_t* data,
                             uint64_t size)


cdef extern from "codec/error_status.h" namespace "naiad":
    cdef cppclass ErrorStatus:
        ErrorKind kind
        int http_status
        int grpc_code

    const ErrorStatus& error_status_of(ErrorKind kind)

    cdef enum class TritonCode(int32_t):
        kInternal

    cdef cppclass TritonCodeRow:
        TritonCode code
        string_view name
        ErrorKind kind

    const TritonCodeRow kTritonCodes[]
    const size_t kTritonCodeCount
    ErrorKind error_kind_of_triton_code(int64_t code)


cdef extern from "codec/datatype.h" namespace "naiad":
    cdef enum class ElementKind(uint8_t):
        kBytes

    cdef cppclass Datatype:
        string_view name
        string_view config_name
        uint8_t triton_type
        uint32_t size
        ElementKind kind

    const Datatype kDatatypes[]
    const size_t kDatatypeCount
    string_view element_kind_name(ElementKind kind)


cdef extern from "util/byte_sink.h" namespace "naiad":
    cdef cppclass StringSink:
        StringSink(string* out)
        void number(uint64_t value)
