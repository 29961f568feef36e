// The SageMaker and Vertex AI endpoints that Triton serves on ports of their own
// (--allow-sagemaker, --allow-vertex-ai), as routes into Naiad's one HTTP front end.
//
// A connection accepted on such a port reads its bytes through an EndpointStream: each
// request head is rewritten to the KServe route that Triton's endpoint server hands the
// request to (POST /invocations -> POST /v2/models/<model>/infer, GET /ping ->
// GET /v2/health/ready ...), its binary-body Content-Type turned into
// Inference-Header-Content-Length, and the rest of the bytes passed on as they are. So an
// infer is read by the same KServe reader as on the HTTP port (the lane's, or Python's
// general path), and the control routes reach the Python control plane. What Triton's
// endpoint answers by itself (an unknown route: 400, a wrong method: 405, a bad binary
// Content-Type) goes to the internal route kEndpointReplyPath, which replies with the
// status and body the rewritten head carries. SageMaker's answers pass through the same
// stream: a binary infer answer's Inference-Header-Content-Length becomes its
// Content-Type (Vertex AI answers as the HTTP port does).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <regex>
#include <string>
#include <string_view>
#include <unordered_set>

namespace naiad {

// The names the SageMaker multi-model endpoint loaded (POST /models): written by the
// control plane (http/sagemaker_models.py), read by the I/O thread's route rewrite of
// POST /models/<name>/invoke, which answers 404 for a name not in it.
class SageMakerModelNames {
 public:
  void add(const std::string& name);
  void remove(const std::string& name);
  bool contains(std::string_view name) const;

 private:
  mutable std::mutex mutex_;
  std::unordered_set<std::string> names_;
};

struct EndpointRoutes {
  enum class Kind : uint8_t { kSageMaker, kVertexAi };
  Kind kind = Kind::kSageMaker;
  // The model that /invocations (SageMaker) and the predict route (Vertex AI) infer.
  std::string model;
  // SageMaker: "ready" or "live" (SAGEMAKER_TRITON_PING_MODE), what /ping checks.
  std::string ping_mode = "ready";
  // Vertex AI: AIP_PREDICT_ROUTE and AIP_HEALTH_ROUTE, regular expressions a request's
  // whole path must match (Triton's RE2::FullMatch), compiled by compile_endpoint_routes.
  std::string predict_route;
  std::string health_route;
  std::shared_ptr<const std::regex> predict_regex;
  std::shared_ptr<const std::regex> health_regex;
  // SageMaker: the multi-model endpoint's loaded names (null: none can be loaded).
  std::shared_ptr<const SageMakerModelNames> sagemaker_models;
};

// Compiles the Vertex AI routes' regular expressions; std::invalid_argument naming the
// environment variable whose pattern is not one.
void compile_endpoint_routes(EndpointRoutes* routes);

// The internal route of the endpoints' own answers: the status is the last segment, the
// body (sent as text/plain, as Triton's endpoint servers do) the kEndpointBodyHeader.
inline constexpr std::string_view kEndpointReplyPath = "/v2/naiad/endpoint_reply/";
inline constexpr std::string_view kEndpointBodyHeader = "Naiad-Endpoint-Body";
// On a reply to an infer route (a malformed binary Content-Type): the model and version
// the request named, looked up first, so an unknown model gets its 404 as from Triton.
inline constexpr std::string_view kEndpointModelHeader = "Naiad-Endpoint-Model";
inline constexpr std::string_view kEndpointVersionHeader = "Naiad-Endpoint-Version";
// The SageMaker multi-model endpoint's list, describe, load and unload (GET, GET, POST,
// DELETE /models[/<name>]), served by the control plane; kEndpointNameHeader carries
// the <name> of the path as it came.
inline constexpr std::string_view kSageMakerModelsPath = "/v2/naiad/sagemaker_models";
inline constexpr std::string_view kEndpointNameHeader = "Naiad-Endpoint-Name";
// The model a multi-model invoke infers: this header's, else the path's <name> (Triton's).
inline constexpr std::string_view kSageMakerTargetHeader = "X-Amzn-SageMaker-Target-Model";
// The Vertex AI redirect to "metrics": the metrics page (text/plain), served there.
inline constexpr std::string_view kEndpointMetricsPath = "/v2/naiad/endpoint_metrics";

// The binary-body Content-Type prefix of an endpoint (json-header-size=<n> follows).
std::string_view endpoint_binary_type(EndpointRoutes::Kind kind);

// One request head (through "\r\n\r\n") rewritten for `routes`: the request line and
// headers, through the blank line. `errors_as_400`: set to whether the answer's errors
// become 400s (a multi-model invoke, whose errors Triton answers so).
std::string rewrite_endpoint_head(const EndpointRoutes& routes, std::string_view head,
                                  bool* errors_as_400 = nullptr);

// An answer head on an endpoint's connection: on SageMaker's, Inference-Header-Content-
// Length: <n> and the octet-stream Content-Type become its binary Content-Type (Vertex
// AI's binary answers are the HTTP port's, as in Triton 2.51); on both, a 404 or 405 in
// JSON says text/plain, as Triton's endpoints do.
// `errors_as_400`: the request's (rewrite_endpoint_head): an error answer becomes a
// 400 (a 507 stays), in application/json, as Triton's multi-model invoke answers.
std::string rewrite_endpoint_answer_head(EndpointRoutes::Kind kind, std::string_view head,
                                         bool errors_as_400 = false);

// The request and answer byte streams of one endpoint connection.
class EndpointStream {
 public:
  explicit EndpointStream(const EndpointRoutes& routes) : routes_(routes) {}

  // Received bytes: appends to `out` what goes on (rewritten heads, bodies as they are);
  // an unfinished head is held.
  void requests(const char* data, size_t size, std::string* out);

  // The answer bytes of `out` from `from` on: rewrites the heads among them.
  // Returns the end of what may be sent (an unfinished head waits for the rest).
  size_t answers(std::string* out, size_t from);

  static constexpr size_t kMaxHead = 64 * 1024;

 private:
  const EndpointRoutes& routes_;
  // Passes on a chunked body's bytes, up to where it ends (after its trailer). Framing
  // the reader refuses is passed too, and what follows it dropped.
  void chunked_body(const char** data, size_t* size, std::string* out);

  // Requests: the head being collected, and the bytes left of the body being passed on.
  std::string head_;
  uint64_t body_left_ = 0;
  bool discarding_ = false;
  // A chunked body: its framing is followed (not changed) to find the next head. A
  // chunk-size or trailer line is collected in `chunk_line_`; `chunk_left_` counts the
  // bytes left of the chunk's data and its CRLF.
  enum class Chunked : uint8_t { kNone, kSize, kData, kTrailer } chunked_ = Chunked::kNone;
  std::string chunk_line_;
  uint64_t chunk_left_ = 0;
  // Answers: the bytes left of the body being passed; passing: heads are no longer
  // looked for (an answer without a Content-Length, which only a stream would send).
  uint64_t answer_left_ = 0;
  bool passing_ = false;
  // Per request read and not answered yet, in order: whether its errors become 400s.
  std::deque<bool> answer_kinds_;
};

}  // namespace naiad
