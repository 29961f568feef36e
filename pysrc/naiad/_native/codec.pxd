# Declarations of csrc/codec/request_validator.h, csrc/codec/kserve_json.h,
# csrc/codec/json_syntax.h, csrc/codec/classification.h, csrc/codec/model_lookup.h, csrc/codec/kserve_codec.h: the KServe
# codec and its validators.
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from libcpp cimport bool as cbool
from libcpp.memory cimport shared_ptr
from libcpp.pair cimport pair
from libcpp.string cimport string
from libcpp.string_view cimport string_view
from libcpp.vector cimport vector
from naiad._native.request cimport *
from naiad._native.ipc cimport *
from naiad._native.core cimport *


cdef extern from "codec/request_validator.h" namespace "naiad":
    cbool validate_request(const CModelSpec& model, ParsedRequest* request,
                           string* error) except + nogil
    string c_log_prefix "naiad::log_prefix"(string_view request_id) except +
    cbool c_check_bytes_input "naiad::check_bytes_input"(
        string_view model_name, string_view request_id, string_view input_name,
        const int64_t* shape, size_t rank, cbool batching, const uint8_t* data, uint64_t size,
        string* error) except + nogil


cdef extern from "codec/kserve_json.h" namespace "naiad":
    # One C++ function (string_view), declared for both argument types Cython passes.
    string json_string_text(const string& text) except +
    string json_view_text "naiad::json_string_text"(string_view text) except +

    cdef cppclass Refusal "naiad::Refusal":
        ErrorKind kind
        string message

    cdef enum class DataRead "naiad::DataRead":
        kConverted
        kRefused
        kNotRead

    DataRead c_read_tensor_data_text "naiad::read_tensor_data_text"(
        string_view json, string_view datatype, string_view name, uint64_t count,
        vector[uint8_t]* out, Refusal* refusal) except + nogil


cdef extern from "codec/json_syntax.h" namespace "naiad":
    cdef cppclass JsonSyntaxError "naiad::JsonSyntaxError":
        const char* what
        size_t offset
    cbool c_json_syntax_ok "naiad::json_syntax_ok"(
        const char* text, size_t size, JsonSyntaxError* error) nogil
    string c_json_syntax_message "naiad::json_syntax_message"(
        const JsonSyntaxError& error) except +


cdef extern from "codec/classification.h" namespace "naiad":
    cdef cppclass Classification "naiad::Classification":
        string data
        vector[int64_t] shape
    cbool c_classify "naiad::classify"(
        string_view datatype, const uint8_t* data, size_t size, const vector[int64_t]& shape,
        cbool batching, uint64_t count, const vector[string]& labels, Classification* out,
        string* error) except +


cdef extern from "codec/model_lookup.h" namespace "naiad":
    cdef uint32_t kNoLaneModel
    cdef cppclass ModelVersionState:
        int64_t version
        cbool ready
        uint32_t lane_model

    cbool c_parse_model_version "naiad::parse_model_version"(
        string_view text, int64_t* version, string* error) except +


cdef extern from "codec/kserve_codec.h" namespace "naiad":
    uint64_t extend_to_answered(uint64_t end_ns, uint64_t written_ns, uint64_t* timings) nogil

    cdef cppclass CachedAnswer:
        shared_ptr[const CacheEntry] entry
        InferResponse response
        uint32_t batch_size

    cdef cppclass Answer "naiad::KServeCodec::Answer":
        uint32_t batch_size
        uint64_t request_ns
        uint64_t queue_ns
        InferResponse response
        cbool final
        cbool counted_failure

    cdef cppclass KServeCodec:
        uint32_t add_model(CModelSpec model) except +
        void set_accepting(uint32_t model, cbool accepting)
        size_t model_count()
        uint64_t new_request_id()
        cbool complete(const uint8_t* block, uint64_t block_size,
                       const vector[uint64_t]& request_ids, uint64_t dispatch_ns,
                       uint64_t end_ns, vector[Answer]* answers,
                       uint64_t* timings) except + nogil
        cbool complete_partial "complete"(
            const uint8_t* block, uint64_t block_size, const vector[uint64_t]& request_ids,
            uint64_t dispatch_ns, uint64_t end_ns, vector[Answer]* answers,
            uint64_t* timings, cbool partial) except + nogil
        void forget(uint64_t request_id)
        size_t in_flight()
        size_t in_flight_of(uint32_t model)
        void set_cache(ResponseCache* cache)
        const CModelSpec& model(uint32_t model)
        cbool lookup_cached(uint32_t model, const ParsedRequest& request, uint64_t now_ns,
                            CachedAnswer* cached, string* key, uint64_t* lookup_ns) except + nogil
        cbool insert_cached(uint32_t model, string key, uint64_t lookup_ns, const uint8_t* block,
                            uint64_t block_size, uint32_t request_index) except + nogil
        string client_id(uint64_t request_id)
        void set_trace_rate(uint32_t model, uint32_t rate, uint32_t sampler)
        cbool sample_trace(uint32_t model)
        vector[uint64_t] take_traced()
        void set_trace_tensors(uint32_t model, cbool on)
        vector[pair[TensorActivity, string]] take_trace_tensors(uint64_t request_id)
