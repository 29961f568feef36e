# Declarations of csrc/core/dynamic_batcher.h, csrc/core/rate_limiter.h, csrc/core/trace_table.h,
# csrc/core/core.h, csrc/core/sequence_batch_scheduler.h, csrc/core/ensemble_graph.h, csrc/core/trace_tree.h,
# csrc/core/trace_context.h, csrc/core/response_cache.h, csrc/core/redis_cache.h: the Core and its
# batchers, rate limiter, caches and traces.
from libc.stdint cimport int32_t, uint8_t, uint32_t, uint64_t
from libcpp cimport bool as cbool
from libcpp.pair cimport pair
from libcpp.string cimport string
from libcpp.string_view cimport string_view
from libcpp.vector cimport vector
from naiad._native.request cimport *
from naiad._native.ipc cimport *


cdef extern from "core/dynamic_batcher.h" namespace "naiad":
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


cdef extern from "core/rate_limiter.h" namespace "naiad":
    cdef int32_t kEveryDevice

    cdef cppclass RateLimitResource:
        string name
        cbool is_global "global"
        uint32_t count

    cdef cppclass InstanceRateLimit:
        int32_t device
        uint32_t priority
        vector[RateLimitResource] resources

    cdef cppclass ServerResource:
        string name
        uint32_t count
        int32_t device

    cdef cppclass RateLimiterConfig:
        cbool execution_count
        vector[ServerResource] resources


cdef extern from "core/trace_table.h" namespace "naiad":
    cdef cppclass TraceStamps "naiad::TraceStamps":
        uint64_t request_start_ns
        uint64_t queue_start_ns
        SpanContext span

    cdef cppclass ChildTrace "naiad::ChildTrace":
        uint64_t request_id
        uint64_t parent
        uint64_t model
        string id
        uint64_t request_start_ns
        uint64_t queue_start_ns
        uint64_t timings[4]
        uint64_t request_end_ns
        vector[pair[TensorActivity, string]] tensors
        SpanContext span


cdef extern from "core/core.h" namespace "naiad":
    uint64_t monotonic_ns() nogil
    int32_t kCompletionTimedOut
    int32_t kCompletionModelGone
    int32_t kCompletionCancelled
    int32_t kCompletionSequenceTimedOut
    int32_t kCompletionArenaFull  # channel.h, through core.h

    cdef enum class CancelResult(int32_t):
        kUnknown
        kDropped
        kFlagged
    int32_t kCompletionRouted
    int32_t kCompletionRoutedRefused
    uint32_t kNoInstance
    int32_t kCompletionControl

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
        uint64_t new_request_id() nogil
        uint64_t outputs_in_place()
        uint64_t outputs_copied()
        ModelHandle add_model(const BatcherConfig& config) except +
        void set_batch_tensors(ModelHandle model, cbool batch_tensors)
        ModelHandle add_ensemble() except +
        cbool remove_model(ModelHandle model) except +
        void configure_rate_limiter(const RateLimiterConfig& config) except +
        uint32_t add_instance(ModelHandle model, const InstanceRateLimit& limits) except +
        InstanceEndpoint endpoint(uint32_t instance_id) except +
        SubmitResult submit(ModelHandle model, const SubmitRequest& request) except + nogil
        void flush(cbool arrivals_possible) except + nogil
        vector[Completion] poll(cbool arrivals_possible) except + nogil
        void instance_starting(uint32_t instance_id) except + nogil
        vector[Completion] instance_down(uint32_t instance_id) except + nogil
        void instance_up(uint32_t instance_id) except + nogil
        void stop_instance(uint32_t instance_id) except + nogil
        cbool reply_control(uint32_t instance_id, uint64_t tag, string_view json) except + nogil
        size_t in_flight() except + nogil
        size_t pending_requests(ModelHandle model) except + nogil
        uint64_t running_since(uint32_t instance_id) except + nogil
        CancelResult cancel(uint64_t request_id) except + nogil
        cbool take_trace_stamps(uint64_t request_id, TraceStamps* stamps) except + nogil
        vector[ChildTrace] take_trace_children(uint64_t root) except + nogil
        void set_span_ids(cbool on)


cdef extern from "core/sequence_batch_scheduler.h" namespace "naiad":
    cdef cppclass SequenceConfig:
        cbool oldest
        uint32_t max_batch_size
        uint64_t max_sequence_idle_us
        uint64_t max_queue_delay_us
        float minimum_slot_utilization
        uint32_t max_candidate_sequences
        vector[uint32_t] preferred_batch_sizes
        cbool preserve_ordering
        cbool iterative


cdef extern from "core/ensemble_graph.h" namespace "naiad":
    cdef cppclass EnsembleStep:
        ModelHandle model
        CModelSpec spec
        vector[pair[string, string]] inputs
        vector[pair[string, string]] outputs


cdef extern from "core/trace_tree.h" namespace "naiad":
    vector[uint64_t] c_trace_tree_order "naiad::trace_tree_order"(const vector[uint64_t]& ids)


cdef extern from "core/trace_context.h" namespace "naiad":
    string trace_context_json(const SpanContext& span, string_view trace_state)


cdef extern from "core/response_cache.h" namespace "naiad":
    cdef cppclass CacheEntry:
        pass

    cdef cppclass CacheModelCounters:
        uint64_t hits
        uint64_t hit_ns
        uint64_t hit_request_ns
        uint64_t hit_queue_ns
        uint64_t misses
        uint64_t miss_ns

    cdef cppclass CacheTotals:
        uint64_t capacity
        uint64_t used
        uint64_t entries
        uint64_t lookups
        uint64_t hits
        uint64_t misses
        uint64_t evictions
        uint64_t lookup_ns
        uint64_t insert_ns
        uint64_t errors

    cdef cppclass ResponseCache:
        void drop_owner(uint32_t owner) except +
        CacheModelCounters counters(uint32_t owner)
        CacheTotals totals()

    cdef cppclass LocalCache(ResponseCache):
        LocalCache(uint64_t capacity) except +


cdef extern from "core/redis_cache.h" namespace "naiad":
    cdef cppclass RedisOptions:
        string host
        int port
        string user
        string password
        int db
        uint32_t connect_timeout_ms
        uint32_t socket_timeout_ms
        cbool tls
        string tls_cert, tls_key, tls_cacert, tls_cacert_dir, tls_sni

    cdef cppclass RedisCache(ResponseCache):
        RedisCache(RedisOptions options) except +
        cbool open(string* error) except + nogil


cdef extern from *:
    """
    #include <memory>
    static naiad::ModelHandle naiad_add_sequence_model(naiad::Core* core,
                                                       const naiad::SequenceConfig& config) {
      return core->add_model(std::make_unique<naiad::SequenceBatchScheduler>(config));
    }
    static uint64_t naiad_request_sequence(const uint8_t* base, uint64_t block) {
      return reinterpret_cast<const naiad::RequestHeader*>(base + block)->sequence;
    }
    """
    ModelHandle naiad_add_sequence_model(CCore* core, const SequenceConfig& config) except +
    uint64_t naiad_request_sequence(const uint8_t* base, uint64_t block) nogil


cdef extern from *:
    """
    #include <memory>
    #include "core/ensemble_graph.h"
    static bool naiad_set_ensemble_graph(naiad::Core* core, naiad::ModelHandle model,
                                         const std::string& name,
                                         const std::vector<std::string>& outputs,
                                         const std::vector<naiad::EnsembleStep>& steps,
                                         bool decoupled) {
      auto graph = std::make_shared<naiad::EnsembleGraph>();
      graph->name = name;
      graph->outputs = outputs;
      graph->steps = steps;
      graph->decoupled = decoupled;
      return core->set_ensemble_graph(model, std::move(graph));
    }
    """
    cbool naiad_set_ensemble_graph(CCore* core, ModelHandle model, const string& name,
                                   const vector[string]& outputs,
                                   const vector[EnsembleStep]& steps,
                                   cbool decoupled) except +
