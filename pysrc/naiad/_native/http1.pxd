# Declarations of csrc/http1/http_scan.h, csrc/codec/http_compress.h, csrc/http1/http_framer.h,
# csrc/http1/endpoint_routes.h, csrc/http1/http_io.h: HTTP/1.1 scanning, compression, the fast
# lane, the endpoints, the I/O loop.
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libcpp cimport bool as cbool
from libcpp.memory cimport shared_ptr
from libcpp.pair cimport pair
from libcpp.string cimport string
from libcpp.string_view cimport string_view
from libcpp.vector cimport vector
from naiad._native.request cimport *
from naiad._native.core cimport *
from naiad._native.codec cimport *
from naiad._native.http2 cimport *
from naiad._native.tls cimport *


cdef extern from "http1/http_scan.h" namespace "naiad":
    size_t incomplete_request_size(const char* data, size_t size, size_t max_body) nogil
    cdef enum class ResponseEncoding "naiad::ResponseEncoding":
        kIdentity
        kGzip
        kDeflate
    ResponseEncoding c_response_encoding "naiad::response_encoding"(string_view value) nogil
    cdef enum class ContentEncoding "naiad::ContentEncoding":
        kIdentity
        kGzip
        kDeflate
        kUnsupported
    ContentEncoding c_content_encoding "naiad::content_encoding"(string_view value) nogil
    size_t kHttpMaxHead
    size_t kHttpMaxPipeline


cdef extern from "codec/http_compress.h" namespace "naiad":
    string_view c_content_encoding_line "naiad::content_encoding_line"(
        ResponseEncoding encoding) nogil
    cbool c_compress_body "naiad::compress_body"(
        ResponseEncoding encoding, const string_view* parts, size_t count,
        string* out) except + nogil
    cdef enum class StreamFormat "naiad::StreamFormat":
        kGzip
        kZlib
        kRawDeflate
    cdef cppclass InflatedBytes "naiad::InflatedBytes":
        const char* data()
        size_t size()
    cdef enum class Inflated "naiad::Inflated":
        kDone
        kTooLarge
        kDamaged
    Inflated c_inflate_stream "naiad::inflate_stream"(
        StreamFormat format, string_view data, size_t limit, InflatedBytes* out,
        string* error) except + nogil
    Inflated c_inflate_body "naiad::inflate_body"(
        ContentEncoding encoding, string_view body, size_t limit, InflatedBytes* out,
        string* error) except + nogil


cdef extern from "http1/http_framer.h" namespace "naiad":
    string c_body_too_large_message "naiad::body_too_large_message"(
        string_view size, size_t limit, string_view body) except +
    cdef cppclass HttpResponseWriter:
        size_t size(const InferResponse& response) nogil
        void write(const InferResponse& response, char* out) nogil
        size_t size(const InferResponse& response, ResponseEncoding encoding) nogil
        void write(const InferResponse& response, ResponseEncoding encoding, char* out) nogil

    cdef cppclass HttpTaken "naiad::HttpLane::Taken":
        uint32_t model
        uint64_t request_id
        uint32_t batch_size
        string reply

    cdef cppclass HttpLane:
        HttpLane(CCore& core)
        KServeCodec& codec() nogil
        const HttpResponseWriter& writer() nogil
        void add_route(const string& target, uint32_t model) except +
        void remove_model(uint32_t model) except +
        size_t take_http(const uint8_t* data, size_t size, size_t max_body, uint64_t now_ns,
                         vector[HttpTaken]* taken, size_t max_requests) except + nogil
        cbool submit_to(string_view target, const uint8_t* body, size_t body_size,
                        size_t header_size, uint64_t now_ns, HttpTaken* taken,
                        ResponseEncoding encoding, ContentEncoding content,
                        size_t max_body) except + nogil
        ResponseEncoding take_encoding(uint64_t request_id) nogil
        void forget(uint64_t request_id) nogil


cdef extern from "http1/endpoint_routes.h" namespace "naiad":
    cdef enum class EndpointKind "naiad::EndpointRoutes::Kind"(uint8_t):
        kSageMaker "naiad::EndpointRoutes::Kind::kSageMaker"
        kVertexAi "naiad::EndpointRoutes::Kind::kVertexAi"

    cdef cppclass SageMakerModelNames "naiad::SageMakerModelNames":
        void add(const string& name) except +
        void remove(const string& name)
        cbool contains(string_view name)

    cdef cppclass EndpointRoutes "naiad::EndpointRoutes":
        EndpointKind kind
        string model
        string ping_mode
        string predict_route
        string health_route
        shared_ptr[SageMakerModelNames] sagemaker_models  # const in C++: converts

    string_view kEndpointReplyPath
    string_view kEndpointBodyHeader
    string_view kEndpointModelHeader
    string_view kEndpointVersionHeader
    string_view kEndpointMetricsPath
    string_view kSageMakerModelsPath
    string_view kEndpointNameHeader
    string_view kSageMakerTargetHeader


cdef extern from "http1/http_io.h" namespace "naiad":
    cdef enum class IoEventKind "naiad::HttpIo::EventKind"(uint8_t):
        kAccepted "naiad::HttpIo::EventKind::kAccepted"
        kData "naiad::HttpIo::EventKind::kData"
        kHandOver "naiad::HttpIo::EventKind::kHandOver"
        kEof "naiad::HttpIo::EventKind::kEof"
        kClosed "naiad::HttpIo::EventKind::kClosed"
        kPauseWriting "naiad::HttpIo::EventKind::kPauseWriting"
        kResumeWriting "naiad::HttpIo::EventKind::kResumeWriting"
        kGrpcAccepted "naiad::HttpIo::EventKind::kGrpcAccepted"
        kGrpcCall "naiad::HttpIo::EventKind::kGrpcCall"
        kGrpcPings "naiad::HttpIo::EventKind::kGrpcPings"
        kTlsFailed "naiad::HttpIo::EventKind::kTlsFailed"

    cdef cppclass IoEvent "naiad::HttpIo::Event":
        IoEventKind kind
        uint64_t connection
        string data
        H2Event grpc
        uint64_t count
        cbool flag

    cdef cppclass IoAnswered "naiad::HttpIo::Answered":
        uint32_t lane_model
        uint32_t instance_id
        uint64_t timings[4]
        uint32_t successes
        uint32_t inferences
        uint64_t request_ns
        uint64_t queue_ns
        vector[uint64_t] failed_ns
        vector[pair[uint64_t, uint64_t]] each
        vector[uint32_t] batch_sizes
        vector[uint64_t] lost

    cdef cppclass IoTensorBytes "naiad::HttpIo::TensorBytes":
        uint64_t out_in_place
        uint64_t out_copied
        uint64_t in_in_place
        uint64_t in_copied

    cdef cppclass IoTurn "naiad::HttpIo::Turn":
        vector[IoEvent] events
        vector[Completion] completions
        vector[IoAnswered] answered
        uint32_t queued
        uint32_t cached
        uint32_t refused
        IoTensorBytes tensor_bytes

    cdef cppclass IoOwned "naiad::HttpIo::Owned":
        uint32_t lane_model
        uint32_t batch_size
        uint64_t submit_ns
        uint64_t connection
        uint32_t stream

    cdef cppclass CHttpIo "naiad::HttpIo":
        CHttpIo(HttpLane& lane, CCore& core, int listen_fd) except +
        int epoll_fd()
        void set_taking(cbool taking)
        void set_max_body(size_t max_body)
        void set_each(cbool each)
        void listen_http(int listen_fd)
        void listen_endpoint(int listen_fd, const EndpointRoutes& routes) except +
        # Takes shared_ptr<const TlsContext>: C++ converts.
        void set_tls(cbool grpc, shared_ptr[CTlsContext] context)
        void stop_listening()
        void run(uint32_t python_open, uint32_t python_waiting, IoTurn* turn) except + nogil
        void poll(uint32_t python_open, uint32_t python_waiting, IoTurn* turn) except + nogil
        size_t pending_events()
        void write(uint64_t connection, const char* data, size_t size) nogil
        cbool close(uint64_t connection, cbool abort) nogil
        void write_eof(uint64_t connection)
        void pause_reading(uint64_t connection)
        void resume_reading(uint64_t connection)
        size_t unsent(uint64_t connection)
        cbool is_open(uint64_t connection)
        cbool in_lane_mode(uint64_t connection)
        void take_back(uint64_t connection, const char* data, size_t size,
                       IoTurn* turn) except + nogil
        cbool owned(uint64_t request_id, IoOwned* out)
        cbool answer(uint64_t request_id, const char* http, size_t size)
        void flush_writes() nogil
        uint32_t open_count()
        uint32_t waiting_count()
        size_t in_flight()
        vector[uint64_t] owned_ids()
        void sweep(uint64_t before_ns, uint64_t idle_before_ns, vector[uint64_t]* timed_out,
                   vector[uint64_t]* idle)
        void hand_over(uint64_t connection)
        void listen_grpc(int listen_fd, CGrpcLane& lane, const H2Limits& limits) except +
        void stop_listening_grpc()
        void set_grpc_taking(cbool taking)
        void set_grpc_inference_rule(string key, string value, string denial)
        void set_grpc_watch_pings(cbool watch)
        CGrpcConnection* grpc(uint64_t connection)
        void grpc_wrote(uint64_t connection)
        uint64_t grpc_activity(uint64_t connection)
        cbool release_grpc(uint64_t request_id)
        void set_keep_grpc(cbool keep)
        void close_all()
        void relay_to(CHttpIo* target)
        uint64_t connections_served()
        uint64_t connections_moved()


cdef extern from "http1/io_group.h" namespace "naiad":
    cdef cppclass CIoGroup "naiad::IoGroup":
        CIoGroup()
        void add(CHttpIo& io) except +
        int owner_of(uint64_t request_id)


cdef extern from "http1/io_thread.h" namespace "naiad":
    cdef cppclass IoHand "naiad::IoThread::Hand":
        IoHand()

    cdef cppclass CIoThread "naiad::IoThread":
        CIoThread(CHttpIo& io, CCore& core, IoHand hand) except +
        void pause() nogil
        void resume() nogil
