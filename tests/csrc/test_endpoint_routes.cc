// The SageMaker and Vertex AI endpoints' route mapping (endpoint_routes.h): each request
// head to the KServe route or reply Triton 2.51's endpoint servers give it, and the
// request and answer streams cut into heads and bodies.
#include <memory>
#include <stdexcept>
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
  compile_endpoint_routes(&routes);
  return routes;
}

std::string rewrite(const EndpointRoutes& routes, const std::string& head) {
  return rewrite_endpoint_head(routes, head);
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

TEST(sagemaker_multi_model_control_goes_to_the_control_plane) {
  const EndpointRoutes routes = sagemaker();
  // The path's name as Triton's pattern /models(?:/)?([^/]+)?(/invoke)? reads it.
  const std::pair<const char*, const char*> named[] = {
      {"GET /models", "GET /v2/naiad/sagemaker_models HTTP/1.1\r\n"},
      {"GET /models/", "GET /v2/naiad/sagemaker_models HTTP/1.1\r\n"},
      {"GET /models/m1", "GET /v2/naiad/sagemaker_models HTTP/1.1\r\nNaiad-Endpoint-Name: m1\r\n"},
      {"GET /modelsX", "GET /v2/naiad/sagemaker_models HTTP/1.1\r\nNaiad-Endpoint-Name: X\r\n"},
      {"GET /models/m1/invoke?q",
       "GET /v2/naiad/sagemaker_models?q HTTP/1.1\r\nNaiad-Endpoint-Name: m1\r\n"},
      {"GET /models/invoke",
       "GET /v2/naiad/sagemaker_models HTTP/1.1\r\nNaiad-Endpoint-Name: invoke\r\n"},
      {"DELETE /models/m1",
       "DELETE /v2/naiad/sagemaker_models HTTP/1.1\r\nNaiad-Endpoint-Name: m1\r\n"},
      // A load names its model in the body; a name in the path is ignored, as by Triton.
      {"POST /models", "POST /v2/naiad/sagemaker_models HTTP/1.1\r\n"},
      {"POST /models/m1", "POST /v2/naiad/sagemaker_models HTTP/1.1\r\n"},
  };
  for (const auto& [line, head] : named) {
    CHECK(rewrite(routes, std::string(line) + " HTTP/1.1\r\n\r\n") == std::string(head) + "\r\n");
  }
  // A client's own Naiad-Endpoint-Name is dropped.
  CHECK(rewrite(routes, "GET /models HTTP/1.1\r\nNaiad-Endpoint-Name: m2\r\n\r\n") ==
        "GET /v2/naiad/sagemaker_models HTTP/1.1\r\n\r\n");
}

TEST(sagemaker_invoke_infers_only_a_loaded_name) {
  EndpointRoutes routes = sagemaker();
  auto names = std::make_shared<SageMakerModelNames>();
  routes.sagemaker_models = names;
  const std::string invoke = "POST /models/h1/invoke HTTP/1.1\r\nContent-Length: 2\r\n";
  CHECK(rewrite(routes, invoke + "\r\n") ==
        "GET /v2/naiad/endpoint_reply/404 HTTP/1.1\r\nContent-Length: 2\r\n\r\n");
  names->add("h1");
  CHECK(rewrite(routes, invoke + "\r\n") ==
        "POST /v2/models/h1/infer HTTP/1.1\r\nContent-Length: 2\r\n\r\n");
  // The target model header names the model, as in Triton.
  CHECK(rewrite(routes, invoke + "X-Amzn-SageMaker-Target-Model: ens\r\n\r\n") ==
        "POST /v2/models/ens/infer HTTP/1.1\r\nContent-Length: 2\r\n"
        "X-Amzn-SageMaker-Target-Model: ens\r\n\r\n");
  CHECK(rewrite(routes, "GET /models/h1/invoke HTTP/1.1\r\n\r\n")
            .find("GET /v2/naiad/sagemaker_models ") == 0);
  CHECK(rewrite(routes, "PUT /models/h1/invoke HTTP/1.1\r\n\r\n") ==
        "GET /v2/naiad/endpoint_reply/400 HTTP/1.1\r\n\r\n");
  names->remove("h1");
  CHECK(rewrite(routes, invoke + "\r\n").find("GET /v2/naiad/endpoint_reply/404 ") == 0);
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
        "header size should be in range (0, 10), got: 99\"}\r\nNaiad-Endpoint-Model: "
        "add_sub\r\nContent-Length: 10\r\n"
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
  // Triton's empty answers, by status.
  const std::pair<const char*, int> empty[] = {
      {"POST /models/m/invoke", 404}, {"DELETE /models", 404},       {"DELETE /models/", 404},
      {"PUT /models", 400},           {"GET /v2/health/ready", 400}, {"POST /invocations/", 400},
      {"GET /models/m/x/y", 400},     {"GET /models/m/", 400},       {"HEAD /models", 400},
      {"POST /models/m/invoke/", 400}};
  for (const auto& [line, status] : empty) {
    CHECK(rewrite(routes, std::string(line) + " HTTP/1.1\r\n\r\n") ==
          "GET /v2/naiad/endpoint_reply/" + std::to_string(status) + " HTTP/1.1\r\n\r\n");
  }
  CHECK(rewrite(routes, "HEAD /ping HTTP/1.1\r\n\r\n") ==
        "GET /v2/naiad/endpoint_reply/405 HTTP/1.1\r\nNaiad-Endpoint-Body: {\"error\":\"Method Not "
        "Allowed\"}\r\n\r\n");
  // A client cannot set the reply's body.
  CHECK(rewrite(routes,
                "GET /nothing HTTP/1.1\r\nNaiad-Endpoint-Body: x\r\nnaiad-endpoint-model: m\r\n"
                "\r\n") == "GET /v2/naiad/endpoint_reply/400 HTTP/1.1\r\n\r\n");
  // A chunked infer goes on as it is.
  CHECK(rewrite(routes, "POST /invocations HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n") ==
        "POST /v2/models/add_sub/infer HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
}

TEST(a_bad_binary_content_type_names_the_model_for_its_lookup_first) {
  const std::string refused = rewrite(
      sagemaker(),
      "POST /invocations HTTP/1.1\r\nContent-Length: 1\r\n"
      "Content-Type: application/vnd.sagemaker-triton.binary+json;json-header-size=9\r\n\r\n");
  CHECK(refused.find("GET /v2/naiad/endpoint_reply/400 HTTP/1.1\r\n") == 0);
  CHECK(refused.find("\r\nNaiad-Endpoint-Model: add_sub\r\n") != std::string::npos);
  CHECK(refused.find("Naiad-Endpoint-Version") == std::string::npos);
  const std::string redirected =
      rewrite(vertex(),
              "POST /predict HTTP/1.1\r\nContent-Length: 1\r\n"
              "X-Vertex-Ai-Triton-Redirect: v2/models/other/versions/3/infer\r\n"
              "Content-Type: x/y;application/vnd.vertex-ai-triton.binary+json;json-header-size=0"
              "\r\n\r\n");
  CHECK(redirected.find("GET /v2/naiad/endpoint_reply/400 ") == 0);
  CHECK(redirected.find("\r\nNaiad-Endpoint-Model: other\r\n") != std::string::npos);
  CHECK(redirected.find("\r\nNaiad-Endpoint-Version: 3\r\n") != std::string::npos);
  // A chunked body's size is not known: the KServe reader checks the JSON size.
  const std::string chunked = rewrite(
      sagemaker(),
      "POST /invocations HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
      "Content-Type: application/vnd.sagemaker-triton.binary+json;json-header-size=9\r\n\r\n");
  CHECK(chunked.find("POST /v2/models/add_sub/infer HTTP/1.1\r\n"
                     "Inference-Header-Content-Length: 9\r\n") == 0);
}

TEST(vertex_routes_are_regular_expressions_the_whole_path_matches) {
  EndpointRoutes routes = vertex();
  routes.predict_route = "/v1/endpoints/[0-9]+/deployedModels/[0-9]+:predict";
  routes.health_route = "/v1/endpoints/.*/health";
  compile_endpoint_routes(&routes);
  CHECK(rewrite(routes, "POST /v1/endpoints/12/deployedModels/34:predict?x HTTP/1.1\r\n\r\n") ==
        "POST /v2/models/simple/infer?x HTTP/1.1\r\n\r\n");
  CHECK(rewrite(routes, "GET /v1/endpoints/a/b/health HTTP/1.1\r\n\r\n") ==
        "GET /v2/health/ready HTTP/1.1\r\n\r\n");
  // Not the whole path, or not matching: Triton's 400.
  for (const char* path :
       {"/v1/endpoints/x/deployedModels/34:predict",
        "/v1/endpoints/12/deployedModels/34:predict/more", "/x/v1/endpoints/a/health"}) {
    CHECK(rewrite(routes, "POST " + std::string(path) + " HTTP/1.1\r\n\r\n")
              .find("GET /v2/naiad/endpoint_reply/400 ") == 0);
  }
  routes.predict_route = "/predict(";
  bool refused = false;
  try {
    compile_endpoint_routes(&routes);
  } catch (const std::invalid_argument& e) {
    refused = std::string(e.what()).find(
                  "AIP_PREDICT_ROUTE '/predict(' is not a regular "
                  "expression") == 0;
  }
  CHECK(refused);
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
  CHECK(rewrite(routes, redirect + "metrics\r\n\r\n").find("GET /v2/naiad/endpoint_metrics ") == 0);
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
}

TEST(endpoint_stream_follows_chunked_bodies_to_the_next_head) {
  const EndpointRoutes routes = sagemaker();
  // Chunk sizes in hex with extensions, a chunk that looks like a head, a trailer.
  const std::string body =
      "1a;name=value\r\nGET /ping HTTP/1.1\r\n\r\n{}{}\r\n2\r\n{}\r\n0\r\nX-Trailer: 1\r\n\r\n";
  const std::string input = "POST /invocations HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" +
                            body + "GET /ping HTTP/1.1\r\n\r\n";
  const std::string expected =
      "POST /v2/models/add_sub/infer HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + body +
      "GET /v2/health/ready HTTP/1.1\r\n\r\n";
  EndpointStream whole(routes);
  std::string out;
  whole.requests(input.data(), input.size(), &out);
  CHECK(out == expected);
  EndpointStream bytewise(routes);
  out.clear();
  for (char ch : input) bytewise.requests(&ch, 1, &out);  // one byte a read
  CHECK(out == expected);
  // Framing the reader refuses is passed on (it answers 400 and closes); nothing after
  // it is read, so no request reaches a KServe route unrewritten.
  const std::string refused[] = {"zz\r\n", "5\n", "123456789abcdef01\r\n", std::string(9000, '1')};
  for (const std::string& bad : refused) {
    EndpointStream stream(routes);
    out.clear();
    const std::string smuggled =
        "POST /invocations HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + bad +
        "\r\nPOST /v2/repository/models/x/unload HTTP/1.1\r\n\r\n";
    stream.requests(smuggled.data(), smuggled.size(), &out);
    CHECK(out.find("/v2/repository") == std::string::npos);
    CHECK(out.find("POST /v2/models/add_sub/infer ") == 0);
  }
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

TEST(endpoint_404_and_405_answers_say_text_plain) {
  for (const EndpointRoutes& routes : {sagemaker(), vertex()}) {
    EndpointStream stream(routes);
    const std::string body = "{\"error\":\"x\"}";
    const std::string length = std::to_string(body.size());
    std::string out;
    for (const char* status : {"404 Not Found", "405 Method Not Allowed", "400 Bad Request"}) {
      out += std::string("HTTP/1.1 ") + status + "\r\nContent-Type: application/json\r\n" +
             "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    }
    CHECK(stream.answers(&out, 0) == out.size());
    CHECK(out == "HTTP/1.1 404 Not Found\r\nContent-Length: " + length +
                     "\r\nContent-Type: text/plain\r\n\r\n" + body +
                     "HTTP/1.1 405 Method Not Allowed\r\nContent-Length: " + length +
                     "\r\n"
                     "Content-Type: text/plain\r\n\r\n" +
                     body +
                     "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"
                     "Content-Length: " +
                     length + "\r\n\r\n" + body);
  }
}

TEST(multi_model_invoke_errors_are_400s) {
  EndpointRoutes routes = sagemaker();
  auto names = std::make_shared<SageMakerModelNames>();
  names->add("h1");
  routes.sagemaker_models = names;
  EndpointStream stream(routes);
  const std::string requests =
      "POST /models/h1/invoke HTTP/1.1\r\nContent-Length: 0\r\n\r\n"
      "POST /invocations HTTP/1.1\r\nContent-Length: 0\r\n\r\n"
      "POST /models/h1/invoke HTTP/1.1\r\nContent-Length: 0\r\n\r\n";
  std::string rewritten;
  stream.requests(requests.data(), requests.size(), &rewritten);
  const std::string body = "{\"error\":\"x\"}";
  const std::string not_found =
      "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  // The invoke's 404 (a target model that is not loaded) is Triton's 400; the
  // /invocations' stays; an interim answer belongs to no request; a 507 stays.
  std::string out = "HTTP/1.1 100 Continue\r\n\r\n" + not_found + not_found +
                    "HTTP/1.1 507 Insufficient Storage\r\nContent-Length: 0\r\n\r\n";
  CHECK(stream.answers(&out, 0) == out.size());
  // (The 507, with no Content-Type, gains application/json.)
  const std::string length = "Content-Length: " + std::to_string(body.size()) + "\r\n";
  CHECK(out ==
        "HTTP/1.1 100 Continue\r\n\r\n"
        "HTTP/1.1 400 Bad Request\r\n" +
            length + "Content-Type: application/json\r\n\r\n" + body +
            "HTTP/1.1 404 Not Found\r\n" + length + "Content-Type: text/plain\r\n\r\n" + body +
            "HTTP/1.1 507 Insufficient Storage\r\nContent-Length: 0\r\n"
            "Content-Type: application/json\r\n\r\n");
}
