// The KServe codec: the protocol-neutral middle of the request path. A framer (HTTP/1.1
// or gRPC over HTTP/2; see framer.h) reads a request from its wire bytes into a
// ParsedRequest and hands it here; the codec validates it against the model
// (request_validator.h), lays out the worker's request block (request_block.h), queues
// it on the core and keeps what it needs to answer. When the batch completes, it reads
// the worker's response block (ipc_schema.h, read by result_block.h) into one InferResponse per
// request, which the framer serializes. It knows nothing of HTTP, JSON text aside: the result
// block's strings are JSON text, and InferResponse passes them on as such.
//
// Threads and locks: one thread at a time. The front end's event loop is the only
// caller (through _core.pyx, with the GIL released inside submit() and complete()),
// so calls never overlap and no member needs a lock: `models_` and `accepting_` change
// only between requests (load, ready, unload), `in_flight_` in submit(), complete()
// and forget(). Request ids come from the core (Core::new_request_id, atomic), shared
// with the general path.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "codec/classification.h"
#include "codec/infer_types.h"
#include "codec/model_lookup.h"
#include "codec/trace_tensor.h"
#include "core/core.h"
#include "core/response_cache.h"
#include "ipc/request_block.h"
#include "ipc/result_block.h"
#include "shm/shm_registry.h"
#include "util/spare_nodes.h"

namespace naiad {

enum class SubmitOutcome {
  kQueued,    // on the core: the answer comes from complete()
  kInvalid,   // the validator refused it: `error` holds Triton's message (HTTP 400)
  kFallback,  // not taken (model not ready, core full): the general path answers it
  kCached,    // answered from the response cache (response_cache.h): see CachedAnswer
  kRefused,   // a tensor's shm region refused (unknown, out of bounds): `error` holds
              // Triton's message, `*shm_refusal` its kind (only when asked for)
  kPlaced,    // place(): laid out in the arena, its inputs to be filled, not queued yet
};

// A request answered from the response cache: `response`'s views point into `entry`
// (and the codec's model table), which this keeps alive until it is serialized.
struct CachedAnswer {
  std::shared_ptr<const CacheEntry> entry;
  InferResponse response;
  uint32_t batch_size = 1;
};

// Triton ends a request's duration, and its backend's compute_output, once the backend
// has sent its responses (TRITONBACKEND_ResponseSend: the frontend makes the client's
// answer in it): here when a block's answers are written for their clients,
// `written_ns`, past `end_ns`, when the block was read. Sets the batch's compute_output
// (timings[3]) to end there and returns what each request's duration, measured to
// `end_ns`, gains. A block without the batch's timings (timings[0] == 0) keeps them.
inline uint64_t extend_to_answered(uint64_t end_ns, uint64_t written_ns, uint64_t timings[4]) {
  if (written_ns <= end_ns) return 0;
  const uint64_t output_start = timings[0] + timings[1] + timings[2];
  if (timings[0] != 0 && written_ns > output_start) timings[3] = written_ns - output_start;
  return written_ns - end_ns;
}

class KServeCodec {
 public:
  explicit KServeCodec(Core& core) : core_(core) {}
  KServeCodec(const KServeCodec&) = delete;
  KServeCodec& operator=(const KServeCodec&) = delete;

  // The model's index here, which the lanes and Python call `lane_model`; the methods
  // below that take a `model` number take that index.
  uint32_t add_model(ModelSpec model);
  // A model that is not ready takes nothing: its requests go the general way, which
  // reports why.
  void set_accepting(uint32_t model, bool accepting);
  size_t model_count() const { return models_.size(); }
  const ModelSpec& model(uint32_t model) const { return models_[model]; }
  // Every model name and version the control plane knows, for both lanes: what a
  // request names is looked up here (model_lookup.h) before its body is read.
  ModelLookup& models() { return known_; }
  const ModelLookup& models() const { return known_; }

  // Client shm regions (Triton's extension): tensors a reader marked `in_shm` are
  // resolved here; null: such requests go to the general path. Must outlive the codec.
  void set_regions(ShmRegistry* regions) { regions_ = regions; }

  // The response cache the models with `ModelSpec::response_cache` use (null: none).
  // Must outlive the codec. See lookup_cached() and insert_cached().
  void set_cache(ResponseCache* cache) { cache_ = cache; }
  ResponseCache* cache() const { return cache_; }

  // Trace extension: 1 in `rate` requests of `model` is traced (0: none), counted as
  // Triton 2.51's sampler counts them: one count per trace setting (`sampler`), of
  // every request offered to any model that setting applies to (the global setting's
  // count takes the requests of all models without a setting of their own), whichever
  // path or protocol takes them. A sampler id not seen before starts its count at 0
  // (Triton makes a new setting, with a new count, on every update); one no model
  // names any more is forgotten. sample_trace() is that sampler, for the general
  // path; the lane's own sampled and queued requests wait in take_traced().
  void set_trace_rate(uint32_t model, uint32_t rate, uint32_t sampler = 0);
  bool sample_trace(uint32_t model);
  std::vector<uint64_t> take_traced() {
    std::vector<uint64_t> taken;
    taken.swap(traced_);
    return taken;
  }
  // Trace level TENSORS for `model`: its traced requests keep their input tensors at
  // submit and their outputs at complete (trace_tensor.h), until take_trace_tensors().
  // Only traced requests pay for it.
  void set_trace_tensors(uint32_t model, bool on);
  using TensorRecords = naiad::TensorRecords;
  TensorRecords take_trace_tensors(uint64_t request_id);

  Core& core() { return core_; }
  // Request ids for the core, unique across every framer and the general path, tagged
  // with the I/O loop this codec serves (set_id_owner; Core::new_request_id).
  uint64_t new_request_id() { return core_.new_request_id(id_owner_); }
  // The I/O loop (Core::new_request_id's owner) whose framers use this codec: set
  // before it takes requests.
  void set_id_owner(uint32_t owner) { id_owner_ = owner; }

  // Validates `request` for `model` and queues it under `request_id`. Nothing is kept
  // unless kQueued. `request`'s views must stay valid for the call only. With `cached`
  // (a framer that can answer at once), a request of a model with the response cache
  // is looked up first: a hit is kCached, answered in `*cached` without queueing, and
  // a miss queued as usual, its result kept in the cache by complete(). Requests with
  // outputs in client shm regions are neither looked up nor kept (the worker writes
  // those tensors into the client's region, not the result block).
  // With `shm_refusal`, a shm region the registry refuses is kRefused (else the
  // general path's, kFallback).
  SubmitOutcome submit(uint32_t model, ParsedRequest& request, uint64_t request_id, uint64_t now_ns,
                       std::string* error, CachedAnswer* cached = nullptr,
                       ErrorKind* shm_refusal = nullptr);

  // submit() in two steps (Core::place), for a framer that receives the request's
  // tensors straight into the arena: place() validates and lays it out as submit()
  // does, without reading its inputs' bytes, and keeps room for them (kPlaced);
  // `placed` says where each goes. kInvalid as submit(); kFallback when it is not for
  // this (tensors in client regions, a model with the response cache, tracing on, a
  // sequence request, no room): the caller submits it whole once its bytes are in.
  // Then, the bytes in, queue_placed() queues it (kQueued; kFallback when the core
  // refuses it, the model gone or its queue full: still placed), or abandon_placed()
  // gives it up (its client went away, or the core refused it).
  struct Placed {
    ModelHandle handle;
    uint64_t offset = 0;  // the request block
    SubmitOptions options;
    struct Input {
      const uint8_t* source;  // where submit() would have read it (`request`'s view)
      uint64_t size;
      uint64_t offset;  // where its bytes go in the arena
    };
    std::vector<Input> inputs;  // in block order
  };
  SubmitOutcome place(uint32_t model, ParsedRequest& request, uint64_t request_id, uint64_t now_ns,
                      std::string* error, Placed* placed);
  SubmitOutcome queue_placed(uint64_t request_id, const Placed& placed);
  void abandon_placed(uint64_t request_id, const Placed& placed);

  // The cache's part of a validated request of `model` submitted at `now_ns`, for
  // every path (submit() and the Python general path): true on a hit, `*cached` filled
  // and the hit counted (Triton's success, queue and cache_hit statistics); false on a
  // miss, with `*key` the key to keep its result under and `*lookup_ns` what looking
  // cost (both for insert_cached). `*key` is left empty when the model does not cache.
  bool lookup_cached(uint32_t model, const ParsedRequest& request, uint64_t now_ns,
                     CachedAnswer* cached, std::string* key, uint64_t* lookup_ns);
  // Keeps the result of a missed request: response `request_index`'s final response
  // in the response block at `block`, if it succeeded, and counts the miss (lookup +
  // insert, as Triton). False when the block cannot be read.
  bool insert_cached(uint32_t model, std::string key, uint64_t lookup_ns, const uint8_t* block,
                     uint64_t block_size, uint32_t request_index);

  struct Answer {
    uint32_t batch_size = 1;
    uint64_t request_ns = 0;  // submit to end
    uint64_t queue_ns = 0;    // submit to the backend's start (the worker's, else dispatch)
    InferResponse response;   // views into the result block: serialize before it is freed
    bool final = true;        // the request's last response (kResponseFinal)
    // The statistics count it a failure (an error response the model sent is a success:
    // response_counts_as_failure).
    bool counted_failure = false;
  };
  // Answers the codec's requests among `request_ids`, the requests of a batch, from
  // the response block (ipc_schema.h) at `block`: one answer per final response, by
  // its request_index (HTTP answers once; a non-final response of a decoupled model
  // has no HTTP form yet). False: the block could not be read (the caller fails the
  // requests, see forget()). With `partial` (a framer that streams, gRPC's
  // ModelStreamInfer), non-final responses are answered too, in block order, with
  // `final` false; the request stays the codec's until its final one.
  bool complete(const uint8_t* block, uint64_t block_size, const std::vector<uint64_t>& request_ids,
                uint64_t dispatch_ns, uint64_t end_ns, std::vector<Answer>* answers,
                uint64_t timings[4], bool partial = false);
  // An answer's outputs list, once its response is written (the caller's answers are
  // then cleared): kept for the next answers, its room with it.
  void give_back(InferResponse& response) {
    if (response.outputs.capacity() == 0 || spare_outputs_.size() >= kSpareOutputs) return;
    response.outputs.clear();
    spare_outputs_.push_back(std::move(response.outputs));
  }

  bool owns(uint64_t request_id) const { return in_flight_.count(request_id) != 0; }
  // The client's id ("id" of the request) of a request in flight, empty when unknown:
  // read only for requests being traced (tracing/), never on the untraced path.
  std::string client_id(uint64_t request_id) const {
    auto found = in_flight_.find(request_id);
    return found == in_flight_.end() ? std::string() : found->second.id;
  }
  // The request was answered another way (failed batch, shutdown).
  void forget(uint64_t request_id);
  size_t in_flight() const { return in_flight_.size(); }
  // Those of model `model` alone (a scan: for a reload's drain, not per request).
  size_t in_flight_of(uint32_t model) const;

 private:
  // What answering one queued request takes.
  struct Recipe {
    uint32_t model = 0;
    std::string id;
    std::vector<uint32_t> outputs;  // indices into ModelSpec::outputs; empty: all
    // JSON outputs (ParsedRequest::output_json, json_unlisted), in the same order.
    std::vector<uint8_t> json;
    bool json_all = false;
    std::vector<ClassifiedOutput> classify;  // ParsedRequest::output_classes, by index
    uint32_t batch_size = 1;
    uint64_t submit_ns = 0;
    // Outputs the worker writes into client shm regions (indices into
    // ModelSpec::outputs) and the regions pinned until the answer (ShmRegistry).
    std::vector<uint32_t> shm_outputs;
    // Where each of shm_outputs goes, for an answer whose bytes reach the frontend (an
    // ensemble's, which no worker writes): region id, offset in it, room.
    struct ShmPlace {
      uint64_t region = 0;
      uint64_t offset = 0;
      uint64_t size = 0;
    };
    std::vector<ShmPlace> shm_places;
    std::vector<uint64_t> pins;
    // A miss of the response cache: the key its result is kept under, and the lookup's
    // cost (empty key: not cached).
    std::string cache_key;
    uint64_t lookup_ns = 0;

    // What a validated request asks of its answer: its outputs, which as JSON data,
    // which classified (their room kept).
    void ask(const ParsedRequest& request);
    // Every field as a new Recipe has it, the strings and vectors keeping their room
    // (a recycled recipe, see spare_recipes_).
    void clear() {
      model = 0;
      id.clear();
      outputs.clear();
      json.clear();
      json_all = false;
      classify.clear();
      batch_size = 1;
      submit_ns = 0;
      shm_outputs.clear();
      shm_places.clear();
      pins.clear();
      cache_key.clear();
      lookup_ns = 0;
    }
  };
  // Fills `response`'s outputs and parameters from a result's `outputs` (offsets from
  // `base`): those `recipe` asks for, binary or JSON and classified as it asks. An
  // output that cannot go back as JSON or be classified makes the response that error.
  void answer_outputs(const ModelSpec& model, const Recipe& recipe, const ResultOutput* outputs,
                      size_t count, const uint8_t* base, std::string_view parameters,
                      InferResponse* response);
  // Writes an output answered with its bytes into the client region `place` (an
  // ensemble's answer); false: it does not fit or cannot be written, and `response` is
  // that error, in Triton's words.
  bool write_shm_output(const Recipe::ShmPlace& place, const ResponseOutput& output,
                        InferResponse* response) const;
  // Makes `response` the error of a request during which one of its regions was
  // truncated (ShmRegistry::truncated), if one was (true): its bytes may be the guard's
  // zeros.
  bool refuse_truncated(const Recipe& recipe, InferResponse* response) const;
  // The request block of a validated request (its id escaped for the block's JSON).
  void lay_out(const ModelSpec& model, ParsedRequest& request, RequestBlock* block);
  // The recipe of a request queued (or placed) under `request_id`.
  Recipe& keep_recipe(uint32_t lane_model, const ParsedRequest& request, uint64_t request_id,
                      uint64_t now_ns);
  void keep_result(uint32_t model, Recipe& recipe, const ResultBlock& result,
                   const ResultOutcome& outcome, const uint8_t* block);
  // Resolves and pins the request's shm tensors (inputs: `data` points into the
  // registry's mapping; outputs: `regions_json` for the worker), in request order (the
  // inputs', then the outputs'). False, nothing pinned: the general path answers (CUDA,
  // no registry: `*refused` kNone), or the registry refuses a region (unknown, out of
  // bounds) with `*refused` and Triton's message in `error`.
  bool resolve_shm(const ModelSpec& model, ParsedRequest& request, std::vector<uint64_t>* pins,
                   std::vector<RegionRef>* inputs, ErrorKind* refused, std::string* error);
  void unpin(const std::vector<uint64_t>& pins);
  // A traced request's TENSOR_BACKEND_OUTPUT records, if it keeps tensors.
  void record_outputs(const InferResponse& response);

  Core& core_;
  uint32_t id_owner_ = 0;
  ShmRegistry* regions_ = nullptr;
  ResponseCache* cache_ = nullptr;
  std::vector<ModelSpec> models_;
  ModelLookup known_;
  std::vector<bool> accepting_;
  std::unordered_map<uint64_t, Recipe> in_flight_;
  // Answered requests' nodes, recipe cleared, for the next ones: their vectors keep
  // their room too.
  SpareNodes<std::unordered_map<uint64_t, Recipe>> spare_recipes_{1024};
  // submit()'s request block and SubmitRequest, reused from request to request (their
  // strings and vectors keep their room); the core copies what it needs in submit.
  RequestBlock block_;
  SubmitRequest submit_;
  // complete()'s reading of a block, reused likewise; and answers' outputs lists
  // given back (give_back), at most kSpareOutputs.
  ResultBlock result_;
  static constexpr size_t kSpareOutputs = 1024;
  std::vector<std::vector<ResponseOutput>> spare_outputs_;
  // Tracing, per model: the sampling rate (0: off) and its setting's sampler; each
  // sampler's count of requests offered; and the ids of traced requests queued since
  // the last take_traced().
  std::vector<uint32_t> trace_rate_;
  std::vector<uint32_t> trace_sampler_;
  std::unordered_map<uint32_t, uint32_t> trace_seen_;
  std::vector<uint64_t> traced_;
  std::vector<uint8_t> trace_tensors_;  // per model: its traced requests keep tensors
  std::unordered_map<uint64_t, TensorRecords> tensor_records_;
};

}  // namespace naiad
