// The infer fast lane: an HTTP infer request of the common kind goes from its body
// to a queued request block, and from its batch's result block to the complete HTTP
// response, without Python. The common kind is what perf_analyzer and tritonclient
// send by default: binary inputs after a JSON header, binary outputs.
//
// The lane only says yes or no. A body it does not take (JSON `data`, shared memory,
// classification, request parameters other than `binary_data_output`, anything
// malformed or invalid for the model) goes the general way, through the Python
// parser and validator, which answer with Triton's exact errors. So everything the
// lane takes it must take exactly as the general path would: the same checks, the
// same block for the worker, the same response bytes.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core.h"

namespace naiad {

struct FastInput {
  std::string name;
  std::string datatype;       // wire name: "FP32", "BYTES", ...
  std::vector<int64_t> dims;  // from the config, -1 for any size
  uint32_t element_size = 0;  // bytes per element, 0 for BYTES
  bool optional = false;
  // Variable dims and not ragged: requests of different shapes never share a batch.
  bool shape_keyed = false;
};

struct FastModel {
  uint32_t core_model_id = 0;
  std::string name;     // as it appears in a JSON string (escaped)
  std::string version;  // "1"
  int64_t max_batch_size = 0;
  std::vector<FastInput> inputs;
  std::vector<std::string> outputs;
};

struct FastInputRef {
  uint32_t spec = 0;  // index into FastModel::inputs
  std::string_view datatype;
  uint64_t body_offset = 0;
  uint64_t size = 0;
  std::vector<int64_t> shape;
};

struct FastRequest {
  std::string_view id;
  std::vector<FastInputRef> inputs;  // in request order
  bool outputs_listed = false;       // else every output is returned
  std::vector<uint32_t> outputs;     // indices into FastModel::outputs, when listed
  std::string_view parameters;       // the raw parameters object, empty when absent
  uint32_t batch_size = 1;
  uint64_t shape_key = 0;
};

// Parses `body` (a JSON header of `header_size` bytes, then the binary inputs) and
// checks it against `model` as RequestValidator does. True: the lane takes it.
bool parse_fast_request(const FastModel& model, const uint8_t* body, size_t body_size,
                        size_t header_size, FastRequest* out);

// FNV-1a over (config index, rank, dims) of shape-keyed inputs, in config order. The
// general path computes the same key (Core.shape_key), so both batch together.
class ShapeKey {
 public:
  void add(uint32_t index, const int64_t* dims, size_t rank);
  uint64_t value() const { return hash_; }

 private:
  void mix(uint64_t word);
  uint64_t hash_ = 1469598103934665603ULL;
};

// The request as the core takes it: the worker's metadata (ipc_schema.h) and where
// each input's bytes are in the body; the core lays the block out.
struct RequestBlock {
  std::string metadata;
  std::vector<InputSource> inputs;  // into the body, in metadata order
  uint64_t input_order = 0;         // input_order_key of the inputs' config indices
};
void layout_request_block(const FastModel& model, const FastRequest& request, const uint8_t* body,
                          RequestBlock* out);

// A worker's response block (ipc_schema.h), read in place.
struct ResultOutput {
  std::string_view name;      // raw JSON string text
  std::string_view datatype;  // raw JSON string text
  std::string_view shape;     // the raw JSON array
  uint64_t size = 0;
  uint64_t offset = 0;  // from the block start
};
struct ResultOutcome {
  uint32_t request_index = 0;  // which request of the batch it answers
  bool final = true;           // the request's last response
  bool error = false;
  std::string_view message;  // raw JSON string text
  int64_t code = 1;
  size_t first_output = 0;
  size_t output_count = 0;
};
struct ResultBlock {
  std::vector<ResultOutcome> outcomes;
  std::vector<ResultOutput> outputs;
  uint64_t timings[4] = {0, 0, 0, 0};
};
bool parse_result_block(const uint8_t* block, uint64_t block_size, ResultBlock* out);

// How to answer one request of the lane.
struct FastRecipe {
  uint32_t model = 0;  // lane model index
  std::string id;
  bool outputs_listed = false;
  std::vector<uint32_t> outputs;
  uint32_t batch_size = 1;
  uint64_t submit_ns = 0;
};

// The complete HTTP/1.1 keep-alive response for outcome `index` of `result`.
// Returns false when the outcome is an error (the response is then Triton's error).
bool encode_fast_reply(const FastModel& model, const FastRecipe& recipe, const ResultBlock& result,
                       size_t index, const uint8_t* block, std::string* out);

class FastLane {
 public:
  static constexpr int kFallback = -1;

  explicit FastLane(Core& core) : core_(core) {}

  uint32_t add_model(FastModel model);
  // Requests for `target` (an infer URL as sent) go to `lane_model` in take_http().
  void add_route(const std::string& target, uint32_t lane_model);
  // A model that is not ready takes nothing: its requests go the general way, which
  // reports why.
  void set_accepting(uint32_t lane_model, bool accepting);
  // Request ids for the core, unique across the lane and the general path.
  uint64_t new_request_id() { return next_request_id_++; }

  // Takes the body into the lane and queues it on the core: a SubmitResult as int, or
  // kFallback when the general path must handle it. Nothing is kept unless kOk.
  int submit(uint32_t lane_model, uint64_t request_id, const uint8_t* body, size_t body_size,
             size_t header_size, uint64_t now_ns, uint32_t* batch_size);

  struct Taken {
    uint32_t lane_model;
    uint64_t request_id;
    uint32_t batch_size;
  };
  // Takes an infer body sent to URL `target` (as sent) if it is a lane route and the
  // lane takes the body; it gets the next request id. False: the general path's.
  bool submit_to(std::string_view target, const uint8_t* body, size_t body_size, size_t header_size,
                 uint64_t now_ns, Taken* taken);
  // Takes the complete plain infer requests at the start of received HTTP bytes
  // (http_scan.h), in order, up to the first it does not take. Returns how many bytes
  // they took; the rest is for the front end's full parser.
  size_t take_http(const uint8_t* data, size_t size, size_t max_body, uint64_t now_ns,
                   std::vector<Taken>* taken);

  struct Reply {
    uint64_t request_id = 0;
    bool ok = false;
    uint32_t batch_size = 1;
    uint64_t request_ns = 0;  // submit to end
    uint64_t queue_ns = 0;    // submit to dispatch
    std::string http;
  };
  // Builds the replies of the lane's requests among `request_ids`, the requests of a
  // batch, from the response block at `block`: one reply per final response (HTTP
  // answers once; a non-final response of a decoupled model has no HTTP form yet).
  // False: the block could not be read (the caller fails the requests, see forget()).
  bool complete(const uint8_t* block, uint64_t block_size, const std::vector<uint64_t>& request_ids,
                uint64_t dispatch_ns, uint64_t end_ns, std::vector<Reply>* replies,
                uint64_t timings[4]);

  bool owns(uint64_t request_id) const { return recipes_.count(request_id) != 0; }
  // The request was answered another way (failed batch, shutdown).
  void forget(uint64_t request_id) { recipes_.erase(request_id); }
  size_t in_flight() const { return recipes_.size(); }

 private:
  Core& core_;
  std::vector<FastModel> models_;
  std::vector<bool> accepting_;
  std::deque<std::string> targets_;  // the route keys point into these
  std::unordered_map<std::string_view, uint32_t> routes_;
  std::unordered_map<uint64_t, FastRecipe> recipes_;
  uint64_t next_request_id_ = 1;
};

}  // namespace naiad
