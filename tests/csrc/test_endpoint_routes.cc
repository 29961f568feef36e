// The SageMaker and Vertex AI endpoints' route mapping (endpoint_routes.h): each request
// head to the KServe route or reply Triton 2.51's endpoint servers give it, and the
// request and answer streams cut into heads and bodies.
#include <string>
#include <utility>

#include "http1/endpoint_routes.h"
#include "testing.h"

using namespace naiad;

namespace {

EndpointRoutes sagemaker() {
  EndpointRoutes routes;
  routes.kind = EndpointRoutes::Kind::kSageMaker;
  routes.model = "add_sub";
  return routes;
}

EndpointRoutes vertex() {
  EndpointRoutes routes;
  routes.kind = EndpointRoutes::Kind::kVertexAi;
  routes.model = "simple";
  routes.predict_route = "/predict";
  routes.health_route = "/health";
  return routes;
}

std::string rewrite(const EndpointRoutes& routes, const std::string& head) {
  return rewrite_endpoint_head(routes, head).head;
}

}  // namespace

TEST(sagemaker_ping_and_invocations_go_to_kserve_routes) {
  const EndpointRoutes routes = sagemaker();
  CHECK(rewrite(routes, "GET /ping HTTP/1.1\r\nHost: x\r\n\r\n") ==
        "GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n");
  EndpointRoutes live = routes;
  live.ping_mode = "live";
  CHECK(rewrite(live, "GET /ping HTTP/1.1\r\n\r\n") == "GET /v2/health/live HTTP/1.1\r\n\r\n");
  // The method stays: the KServe route answers a wrong one as Triton's endpoint does.
  CHECK(rewrite(routes, "POST /ping HTTP/1.1\r\n\r\n") == "POST /v2/health/ready HTTP/1.1\r\n\r\n");
  CHECK(rewrite(routes, "POST /invocations?a=1 HTTP/1.1\r\nContent-Length: 2\r\n\r\n") ==
        "POST /v2/models/add_sub/infer?a=1 HTTP/1.1\r\nContent-Length: 2\r\n\r\n");
}

TEST(sagemaker_binary_content_type_becomes_the_kserve_header) {
  const EndpointRoutes routes = sagemaker();
  CHECK(
      rewrite(routes,
              "POST /invocations HTTP/1.1\r\nContent-Length: 300\r\n"
              "Content-Type: application/vnd.sagemaker-triton.binary+json;json-header-size=279\r\n"
              "Inference-Header-Content-Length: 5\r\nAccept-Encoding: gzip\r\n\r\n") ==
      "POST /v2/models/add_sub/infer HTTP/1.1\r\nInference-Header-Content-Length: 279\r\n"
      "Content-Length: 300\r\n"
      "Content-Type: application/vnd.sagemaker-triton.binary+json;json-header-size=279\r\n\r\n");
  // Out of range, and the type not at the start: Triton's 400 answers.
  CHECK(rewrite(routes,
                "POST /invocations HTTP/1.1\r\nContent-Length: 10\r\n"
                "Content-Type: "
                "application/vnd.sagemaker-triton.binary+json;json-header-size=99\r\n\r\n") ==
        "GET /v2/naiad/endpoint_reply/400 HTTP/1.1\r\nNaiad-Endpoint-Body: {\"error\":\"inference "
        "header size should be in range (0, 10), got: 99\"}\r\nContent-Length: 10\r\n"
        "Content-Type: application/vnd.sagemaker-triton.binary+json;json-header-size=99\r\n\r\n");
  const std::string misplaced =
      rewrite(routes,
              "POST /invocations HTTP/1.1\r\n"
              "Content-Type: text/x; "
              "application/vnd.sagemaker-triton.binary+json;json-header-size=5\r\n\r\n");
  CHECK(misplaced.find("GET /v2/naiad/endpoint_reply/400 ") == 0);
  CHECK(misplaced.find("expect MIME type for binary data starts with "
                       "'application/vnd.sagemaker-triton.binary+json;json-header-size=', got: "
                       "text/x; ") != std::string::npos);
}

TEST(sagemaker_answers_of_its_own) {
  const EndpointRoutes routes = sagemaker();
  CHECK(
      rewrite(routes, "GET /models HTTP/1.1\r\n\r\n") ==
      "GET /v2/naiad/endpoint_reply/200 HTTP/1.1\r\nNaiad-Endpoint-Body: {\"models\":[]}\r\n\r\n");
  // Triton's empty answers, by status.
  const std::pair<const char*, int> empty[] = {
      {"GET /models/m", 404},     {"POST /models/m/invoke", 404}, {"DELETE /models/m", 404},
      {"PUT /models", 400},       {"GET /v2/health/ready", 400},  {"POST /invocations/", 400},
      {"GET /models/m/x/y", 400},
  };
  for (const auto& [line, status] : empty) {
    CHECK(rewrite(routes, std::string(line) + " HTTP/1.1\r\n\r\n") ==
          "GET /v2/naiad/endpoint_reply/" + std::to_string(status) + " HTTP/1.1\r\n\r\n");
  }
  CHECK(rewrite(routes, "HEAD /ping HTTP/1.1\r\n\r\n") ==
        "GET /v2/naiad/endpoint_reply/405 HTTP/1.1\r\nNaiad-Endpoint-Body: {\"error\":\"Method Not "
        "Allowed\"}\r\n\r\n");
  // A client cannot set the reply's body.
  CHECK(rewrite(routes, "GET /nothing HTTP/1.1\r\nNaiad-Endpoint-Body: x\r\n\r\n") ==
        "GET /v2/naiad/endpoint_reply/400 HTTP/1.1\r\n\r\n");
  const RewrittenHead chunked = rewrite_endpoint_head(
      routes, "POST /invocations HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
  CHECK(chunked.discard_rest);
  CHECK(chunked.head.find("GET /v2/naiad/endpoint_reply/411 ") == 0);
  CHECK(chunked.head.find("Transfer-Encoding") == std::string::npos);
  CHECK(chunked.head.find("Connection: close\r\n\r\n") != std::string::npos);
}

TEST(vertex_routes_and_redirection) {
  const EndpointRoutes routes = vertex();
  CHECK(rewrite(routes, "GET /health HTTP/1.1\r\n\r\n") == "GET /v2/health/ready HTTP/1.1\r\n\r\n");
  CHECK(rewrite(routes, "POST /predict HTTP/1.1\r\n\r\n") ==
        "POST /v2/models/simple/infer HTTP/1.1\r\n\r\n");
  const std::string redirect = "POST /predict HTTP/1.1\r\nX-Vertex-Ai-Triton-Redirect: ";
  CHECK(rewrite(routes, redirect + "v2/models/other/infer\r\n\r\n") ==
        "POST /v2/models/other/infer HTTP/1.1\r\nX-Vertex-Ai-Triton-Redirect: "
        "v2/models/other/infer\r\n\r\n");
  CHECK(rewrite(routes, redirect + "v2/models/other/versions/2/ready\r\n\r\n")
            .find("GET /v2/models/other/versions/2/ready ") == 0);
  CHECK(rewrite(routes, redirect + "v2/models/other\r\n\r\n").find("GET /v2/models/other ") == 0);
  CHECK(rewrite(routes, redirect + "v2\r\n\r\n").find("GET /v2 ") == 0);
  CHECK(rewrite(routes, redirect + "v2/health/live\r\n\r\n").find("GET /v2/health/live ") == 0);
  CHECK(rewrite(routes, redirect + "v2/repository/index\r\n\r\n")
            .find("POST /v2/repository/index ") == 0);
  CHECK(rewrite(routes, redirect + "v2/repository/models/m/load\r\n\r\n")
            .find("POST /v2/repository/models/m/load ") == 0);
  CHECK(rewrite(routes, redirect + "v2/systemsharedmemory/status\r\n\r\n")
            .find("GET /v2/systemsharedmemory/status ") == 0);
  CHECK(rewrite(routes, redirect + "v2/systemsharedmemory/region/r/register\r\n\r\n")
            .find("POST /v2/systemsharedmemory/region/r/register ") == 0);
  CHECK(rewrite(routes, redirect + "v2/models/m/nothing\r\n\r\n")
            .find("GET /v2/naiad/endpoint_reply/400 ") == 0);
  CHECK(rewrite(routes, "GET /predict HTTP/1.1\r\nX-Vertex-Ai-Triton-Redirect: v2\r\n\r\n")
            .find("GET /v2/naiad/endpoint_reply/405 ") == 0);
  CHECK(rewrite(routes, "GET /v2/health/ready HTTP/1.1\r\n\r\n")
            .find("GET /v2/naiad/endpoint_reply/400 ") == 0);
  const std::string binary = rewrite(
      routes,
      "POST /predict HTTP/1.1\r\nContent-Length: 9\r\n"
      "Content-Type: application/vnd.vertex-ai-triton.binary+json;json-header-size=4\r\n\r\n");
  CHECK(binary.find("Inference-Header-Content-Length: 4\r\n") != std::string::npos);
}

TEST(endpoint_stream_rewrites_heads_split_across_reads) {
  const EndpointRoutes routes = sagemaker();
  EndpointStream stream(routes);
  const std::string input =
      "POST /invocations HTTP/1.1\r\nContent-Length: 4\r\n\r\n{}\r\n"
      "GET /ping HTTP/1.1\r\n\r\n";
  std::string out;
  for (char ch : input) stream.requests(&ch, 1, &out);  // one byte a read
  CHECK(out ==
        "POST /v2/models/add_sub/infer HTTP/1.1\r\nContent-Length: 4\r\n\r\n{}\r\n"
        "GET /v2/health/ready HTTP/1.1\r\n\r\n");
  // A body that looks like a head is passed as it is.
  EndpointStream second(routes);
  out.clear();
  const std::string body = "GET /ping HTTP/1.1\r\n\r\n";
  const std::string request =
      "POST /invocations HTTP/1.1\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" +
      body;
  second.requests(request.data(), request.size(), &out);
  CHECK(out.find("\r\n\r\nGET /ping HTTP/1.1\r\n\r\n") != std::string::npos);
  // After a chunked request the rest is dropped.
  EndpointStream third(routes);
  out.clear();
  const std::string chunked =
      "POST /invocations HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
      "POST /v2/repository/models/x/unload HTTP/1.1\r\n\r\n";
  third.requests(chunked.data(), chunked.size(), &out);
  CHECK(out.find("/v2/repository") == std::string::npos);
  CHECK(out.find("endpoint_reply/411") != std::string::npos);
}

TEST(endpoint_stream_rewrites_binary_answers) {
  const EndpointRoutes routes = sagemaker();
  EndpointStream stream(routes);
  std::string out =
      "HTTP/1.1 100 Continue\r\n\r\n"
      "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
      "Inference-Header-Content-Length: 2\r\nContent-Length: 6\r\n\r\n{}\r\n\r\n"
      "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
      "HTTP/1.1 200 OK\r\nContent-";  // a head not whole yet
  const size_t ready = stream.answers(&out, 0);
  CHECK(out.substr(0, ready) ==
        "HTTP/1.1 100 Continue\r\n\r\n"
        "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n"
        "Content-Type: application/vnd.sagemaker-triton.binary+json;json-header-size=2\r\n\r\n"
        "{}\r\n\r\n"
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}");
  CHECK(out.substr(ready) == "HTTP/1.1 200 OK\r\nContent-");
  out += "Length: 0\r\n\r\n";
  CHECK(stream.answers(&out, ready) == out.size());
}

TEST(vertex_answers_are_the_http_ports) {
  const EndpointRoutes routes = vertex();
  EndpointStream stream(routes);
  std::string out =
      "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
      "Inference-Header-Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}";
  const std::string before = out;
  CHECK(stream.answers(&out, 0) == out.size());
  CHECK(out == before);
}
