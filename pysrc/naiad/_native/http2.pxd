# Declarations of csrc/http2/hpack.h, csrc/http2/grpc_connection.h, csrc/http2/grpc_lane.h,
# csrc/http2/grpc_wire.h: HTTP/2 and gRPC, HPACK headers, connection events, the gRPC lane,
# the gRPC status codes.
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from libcpp cimport bool as cbool
from libcpp.string cimport string
from libcpp.string_view cimport string_view
from libcpp.vector cimport vector
from naiad._native.request cimport *
from naiad._native.codec cimport *


cdef extern from "http2/hpack.h" namespace "naiad::hpack":
    cdef cppclass HpackHeader "naiad::hpack::Header":
        string name
        string value


cdef extern from "http2/grpc_connection.h" namespace "naiad::h2":
    cdef enum class H2EventKind "naiad::h2::EventKind"(uint8_t):
        kCall
        kMessage
        kHalfClose
        kCancel

    cdef cppclass H2Event "naiad::h2::Event":
        H2EventKind kind
        uint32_t stream_id
        string path
        vector[HpackHeader] metadata
        int64_t timeout_us
        string encoding
        string message
        cbool compressed
        uint32_t error_code

    cdef cppclass H2Limits "naiad::h2::Limits":
        uint32_t max_concurrent_streams
        uint32_t max_header_list_size
        uint64_t max_message_size
        int response_compression

    cdef cppclass CGrpcConnection "naiad::h2::GrpcConnection":
        CGrpcConnection(const H2Limits& limits) except +
        cbool send_message(uint32_t stream_id, string_view payload) except +
        cbool send_parts "send_message"(uint32_t stream_id, const string_view* parts,
                                        size_t n_parts) except + nogil
        cbool finish(uint32_t stream_id, int status, string_view message) except +
        void reset(uint32_t stream_id, uint32_t code) except +
        void shutdown() except +
        void ping() except +
        uint32_t pings_unacked()
        void too_many_pings() except +
        size_t open_streams()


cdef extern from "http2/grpc_lane.h" namespace "naiad":
    cdef cppclass GrpcResponseWriter:
        size_t size(const InferResponse& response) nogil
        void write(const InferResponse& response, char* out) nogil
        size_t stream_size(const InferResponse& response) nogil
        void stream_write(const InferResponse& response, char* out) nogil
        void parts(const InferResponse& response, cbool streamed, string* scratch,
                   vector[string_view]* parts) except + nogil

    string grpc_error_message(const InferResponse& response) except +
    string c_grpc_request_id "naiad::grpc_request_id"(string_view message) except +

    cdef cppclass GrpcTaken "naiad::GrpcLane::Taken":
        uint32_t model
        uint64_t request_id
        uint32_t batch_size
        string error
        ErrorKind error_kind
        CachedAnswer cached

    cdef cppclass CGrpcLane "naiad::GrpcLane":
        CGrpcLane(KServeCodec& codec)
        void set_model(const string& name, vector[ModelVersionState] versions) except +
        void clear_models()
        void remove_model(uint32_t model) except +
        cbool submit(string_view message, uint64_t now_ns, GrpcTaken* taken,
                     cbool classifies) except + nogil

cdef extern from "http2/grpc_wire.h" namespace "naiad::grpc":
    cdef enum GrpcStatus "naiad::grpc::Status":
        kGrpcOk "naiad::grpc::kOk"
        kGrpcCancelled "naiad::grpc::kCancelled"
        kGrpcUnknown "naiad::grpc::kUnknown"
        kGrpcInvalidArgument "naiad::grpc::kInvalidArgument"
        kGrpcDeadlineExceeded "naiad::grpc::kDeadlineExceeded"
        kGrpcNotFound "naiad::grpc::kNotFound"
        kGrpcAlreadyExists "naiad::grpc::kAlreadyExists"
        kGrpcResourceExhausted "naiad::grpc::kResourceExhausted"
        kGrpcFailedPrecondition "naiad::grpc::kFailedPrecondition"
        kGrpcUnimplemented "naiad::grpc::kUnimplemented"
        kGrpcInternal "naiad::grpc::kInternal"
        kGrpcUnavailable "naiad::grpc::kUnavailable"
