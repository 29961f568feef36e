#include "http1/endpoint_routes.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace naiad {

namespace {

constexpr std::string_view kCrlf = "\r\n";
constexpr std::string_view kHeadEnd = "\r\n\r\n";
constexpr std::string_view kMethodNotAllowed = "{\"error\":\"Method Not Allowed\"}";

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

struct Header {
  std::string_view name, value, line;
};

// The head's first line and its header lines (`head` ends with the blank line).
std::string_view split_head(std::string_view head, std::vector<Header>* headers) {
  size_t end = head.find(kCrlf);
  const std::string_view first = head.substr(0, end);
  size_t at = end + kCrlf.size();
  while (at < head.size()) {
    end = head.find(kCrlf, at);
    if (end == std::string_view::npos || end == at) break;
    const std::string_view line = head.substr(at, end - at);
    const size_t colon = line.find(':');
    if (colon != std::string_view::npos) {
      headers->push_back({trim(line.substr(0, colon)), trim(line.substr(colon + 1)), line});
    }
    at = end + kCrlf.size();
  }
  return first;
}

const Header* find_header(const std::vector<Header>& headers, std::string_view name) {
  for (const Header& h : headers) {
    if (iequals(h.name, name)) return &h;
  }
  return nullptr;
}

bool is_chunked(const std::vector<Header>& headers) {
  const Header* te = find_header(headers, "Transfer-Encoding");
  if (te == nullptr) return false;
  std::string lower(te->value);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return lower.find("chunked") != std::string::npos;
}

uint64_t content_length(const std::vector<Header>& headers) {
  const Header* cl = find_header(headers, "Content-Length");
  return cl == nullptr ? 0 : std::strtoull(std::string(cl->value).c_str(), nullptr, 10);
}

// Where Triton's endpoint server sends a request: a KServe route (`method` `target`,
// `infer`: its body is an infer request's for `model` `version`) or an answer of its
// own (`status` != 0).
struct Route {
  std::string method, target;
  bool infer = false;
  std::string model, version;
  int status = 0;
  std::string body;
  std::string extra;  // a header line (without CRLF) the rewritten head gains
  // A multi-model invoke: Triton answers each of its errors 400 (507: out of memory).
  bool errors_as_400 = false;
};

Route reply(int status, std::string_view body = {}) {
  Route r;
  r.status = status;
  r.body = std::string(body);
  return r;
}

Route to(std::string method, std::string target) {
  Route r;
  r.method = std::move(method);
  r.target = std::move(target);
  return r;
}

Route to_infer(std::string method, std::string_view model, std::string_view version = {}) {
  Route r = to(std::move(method), "/v2/models/" + std::string(model) +
                                      (version.empty() ? "" : "/versions/" + std::string(version)) +
                                      "/infer");
  r.infer = true;
  r.model = std::string(model);
  r.version = std::string(version);
  return r;
}

std::vector<std::string_view> segments(std::string_view path) {
  std::vector<std::string_view> parts;
  size_t at = 1;
  while (at <= path.size()) {
    size_t end = path.find('/', at);
    if (end == std::string_view::npos) end = path.size();
    parts.push_back(path.substr(at, end - at));
    at = end + 1;
  }
  return parts;
}

bool all_digits(std::string_view s) {
  return !s.empty() &&
         std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

// The multi-model routes, as Triton's RE2 pattern /models(?:/)?([^/]+)?(/invoke)? reads
// `rest`, what follows "/models": false where it does not match.
bool sagemaker_models_path(std::string_view rest, std::string_view* name, bool* invoke) {
  if (!rest.empty() && rest.front() == '/') rest.remove_prefix(1);
  const size_t slash = rest.find('/');
  *name = rest.substr(0, slash);
  const std::string_view action = slash == std::string_view::npos ? "" : rest.substr(slash);
  *invoke = action == "/invoke";
  return action.empty() || *invoke;
}

// sagemaker_server.cc's routes: /ping, /invocations and the multi-model endpoint's
// /models[/<name>[/invoke]]. Listing, describing, loading and unloading go to the
// control plane (kSageMakerModelsPath); an invoke of a loaded name is an infer.
Route sagemaker_route(const EndpointRoutes& routes, std::string_view method, std::string_view path,
                      const std::vector<Header>& headers) {
  const bool head = method == "HEAD";
  if (path == "/ping") {
    return head ? reply(405, kMethodNotAllowed)
                : to(std::string(method), "/v2/health/" + routes.ping_mode);
  }
  if (path == "/invocations") {
    return head ? reply(405, kMethodNotAllowed) : to_infer(std::string(method), routes.model);
  }
  std::string_view name;
  bool invoke = false;
  if (path.substr(0, 7) != "/models" || !sagemaker_models_path(path.substr(7), &name, &invoke)) {
    return reply(400);
  }
  Route control = to(std::string(method), std::string(kSageMakerModelsPath));
  if (!name.empty()) control.extra = std::string(kEndpointNameHeader) + ": " + std::string(name);
  if (method == "GET") {  // the list, or one model (an "/invoke" after it is ignored)
    return control;
  }
  if (method == "DELETE") return name.empty() ? reply(404) : control;
  if (method != "POST") return reply(400);
  if (!invoke) {  // a load: the name is the body's, not the path's
    control.extra.clear();
    return control;
  }
  if (routes.sagemaker_models == nullptr || !routes.sagemaker_models->contains(name)) {
    return reply(404);
  }
  const Header* target = find_header(headers, kSageMakerTargetHeader);
  Route infer = to_infer("POST", target != nullptr ? target->value : name);
  infer.errors_as_400 = true;
  return infer;
}

// vertex_ai_server.cc's redirection: the X-Vertex-Ai-Triton-Redirect header names the
// KServe route a POST to the predict route goes to, with the method that route takes.
Route vertex_redirect(std::string_view redirect) {
  const std::string target = "/" + std::string(redirect);
  const std::vector<std::string_view> p = segments(target);
  if (target == "/metrics") return to("GET", std::string(kEndpointMetricsPath));
  if (target == "/v2" || target == "/v2/models/stats") return to("GET", target);
  if (p.size() == 3 && p[0] == "v2" && p[1] == "health" && (p[2] == "live" || p[2] == "ready")) {
    return to("GET", target);
  }
  if (p.size() >= 3 && p[0] == "v2" && p[1] == "models" && !p[2].empty()) {
    size_t at = 3;
    if (p.size() >= 5 && p[3] == "versions" && all_digits(p[4])) at = 5;
    if (p.size() == at) return to("GET", target);  // metadata
    if (p.size() == at + 1) {
      if (p[at] == "infer") return to_infer("POST", p[2], at == 5 ? p[4] : std::string_view());
      if (p[at] == "ready" || p[at] == "config" || p[at] == "stats") return to("GET", target);
    }
  }
  if (p.size() >= 3 && p[0] == "v2" &&
      (p[1] == "systemsharedmemory" || p[1] == "cudasharedmemory")) {
    const bool region = p.size() == 5 && p[2] == "region" && !p[3].empty();
    const std::string_view action = p.back();
    if ((p.size() == 3 || region) &&
        (action == "status" || action == "register" || action == "unregister")) {
      return to(action == "status" ? "GET" : "POST", target);
    }
  }
  if (p.size() >= 3 && p[0] == "v2" && p[1] == "repository") {
    const size_t at = p[2] == "index" || p[2] == "models" ? 2 : 3;  // an optional repository
    if (p.size() == at + 1 && p[at] == "index") return to("POST", target);
    if (p.size() == at + 3 && p[at] == "models" && !p[at + 1].empty() &&
        (p[at + 2] == "load" || p[at + 2] == "unload")) {
      return to("POST", target);
    }
  }
  return reply(400);
}

bool full_match(const std::shared_ptr<const std::regex>& pattern, std::string_view path) {
  return pattern != nullptr && std::regex_match(path.begin(), path.end(), *pattern);
}

Route vertex_route(const EndpointRoutes& routes, std::string_view method, std::string_view path,
                   const std::vector<Header>& headers) {
  const bool head = method == "HEAD";
  if (full_match(routes.health_regex, path)) {
    return head ? reply(405, kMethodNotAllowed) : to(std::string(method), "/v2/health/ready");
  }
  if (full_match(routes.predict_regex, path)) {
    const Header* redirect = find_header(headers, "X-Vertex-Ai-Triton-Redirect");
    if (redirect == nullptr) {
      return head ? reply(405, kMethodNotAllowed) : to_infer(std::string(method), routes.model);
    }
    if (method != "POST") return reply(405);
    return vertex_redirect(redirect->value);
  }
  return reply(400);
}

// The JSON string of `text` (the endpoint's error bodies quote the client's header).
std::string json_string(std::string_view text) {
  std::string out = "\"";
  for (char ch : text) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out + "\"";
}

// GetInferenceHeaderLength of the endpoint servers: the binary Content-Type gives the
// JSON header's size (atoi's reading of what follows the prefix), which becomes the
// KServe Inference-Header-Content-Length; an error is their 400 answer.
bool binary_header_length(EndpointRoutes::Kind kind, const std::vector<Header>& headers,
                          bool chunked, std::string* length, Route* error) {
  const Header* type = find_header(headers, "Content-Type");
  const std::string_view prefix = endpoint_binary_type(kind);
  if (type == nullptr) return true;
  const size_t pos = type->value.find(prefix);
  if (pos == std::string_view::npos) return true;
  if (pos != 0) {
    *error =
        reply(400, "{\"error\":" +
                       json_string("expect MIME type for binary data starts with '" +
                                   std::string(prefix) + "', got: " + std::string(type->value)) +
                       "}");
    return false;
  }
  const std::string given(type->value.substr(prefix.size()));
  const long parsed = std::atol(given.c_str());
  const uint64_t total = content_length(headers);
  // A chunked body's size is not known yet: the KServe reader checks the size against it.
  if (parsed < 0 || (!chunked && static_cast<uint64_t>(parsed) > total)) {
    *error = reply(400, "{\"error\":" +
                            json_string("inference header size should be in range (0, " +
                                        std::to_string(total) + "), got: " + given) +
                            "}");
    return false;
  }
  *length = std::to_string(parsed);
  return true;
}

// The headers this stream sets on the heads it writes; a client's are dropped.
bool internal_header(std::string_view name) {
  constexpr std::string_view kPrefix = "Naiad-Endpoint-";
  return name.size() >= kPrefix.size() && iequals(name.substr(0, kPrefix.size()), kPrefix);
}

std::shared_ptr<const std::regex> compile_route(const std::string& pattern, const char* variable) {
  try {
    return std::make_shared<const std::regex>(pattern, std::regex::ECMAScript);
  } catch (const std::regex_error& error) {
    throw std::invalid_argument(std::string(variable) + " '" + pattern +
                                "' is not a regular expression: " + error.what());
  }
}

}  // namespace

void SageMakerModelNames::add(const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  names_.insert(name);
}

void SageMakerModelNames::remove(const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  names_.erase(name);
}

bool SageMakerModelNames::contains(std::string_view name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return names_.count(std::string(name)) != 0;
}

void compile_endpoint_routes(EndpointRoutes* routes) {
  if (routes->kind != EndpointRoutes::Kind::kVertexAi) return;
  routes->predict_regex = compile_route(routes->predict_route, "AIP_PREDICT_ROUTE");
  routes->health_regex = compile_route(routes->health_route, "AIP_HEALTH_ROUTE");
}

std::string_view endpoint_binary_type(EndpointRoutes::Kind kind) {
  return kind == EndpointRoutes::Kind::kSageMaker
             ? "application/vnd.sagemaker-triton.binary+json;json-header-size="
             : "application/vnd.vertex-ai-triton.binary+json;json-header-size=";
}

std::string rewrite_endpoint_head(const EndpointRoutes& routes, std::string_view head,
                                  bool* errors_as_400) {
  std::vector<Header> headers;
  const std::string_view first = split_head(head, &headers);
  const size_t sp1 = first.find(' ');
  const size_t sp2 = first.rfind(' ');
  Route route;
  std::string_view method, target, version = "HTTP/1.1";
  if (sp1 == std::string_view::npos || sp2 == sp1) {
    route = reply(400);
  } else {
    method = first.substr(0, sp1);
    target = first.substr(sp1 + 1, sp2 - sp1 - 1);
    version = first.substr(sp2 + 1);
    const std::string_view path = target.substr(0, target.find('?'));
    route = routes.kind == EndpointRoutes::Kind::kSageMaker
                ? sagemaker_route(routes, method, path, headers)
                : vertex_route(routes, method, path, headers);
  }
  const bool infer = route.infer;
  if (errors_as_400 != nullptr) *errors_as_400 = route.errors_as_400;
  std::string length;
  std::string out;
  if (infer) {
    Route refused;
    if (!binary_header_length(routes.kind, headers, is_chunked(headers), &length, &refused)) {
      // Triton looks the model up first: the reply route does too, with these headers.
      out = std::string(kEndpointModelHeader) + ": " + route.model + "\r\n";
      if (!route.version.empty()) {
        out += std::string(kEndpointVersionHeader) + ": " + route.version + "\r\n";
      }
      route = std::move(refused);
    }
  }
  if (route.status != 0) {
    // The body, if any, still follows and is read (and ignored) by the reply route.
    std::string line = "GET " + std::string(kEndpointReplyPath) + std::to_string(route.status) +
                       " " + std::string(version) + "\r\n";
    if (!route.body.empty()) {
      line += std::string(kEndpointBodyHeader) + ": " + route.body + "\r\n";
    }
    out.insert(0, line);
  } else {
    const size_t query = target.find('?');
    out = route.method + " " + route.target +
          (query == std::string_view::npos ? "" : std::string(target.substr(query))) + " " +
          std::string(version) + "\r\n";
    if (!length.empty()) out += "Inference-Header-Content-Length: " + length + "\r\n";
    if (!route.extra.empty()) out += route.extra + "\r\n";
  }
  for (const Header& h : headers) {
    if (internal_header(h.name)) continue;  // only this stream sets them
    // Triton's endpoints read infer bodies as the Content-Type says, uncompressed, and
    // answer uncompressed.
    if (infer && (iequals(h.name, "Inference-Header-Content-Length") ||
                  iequals(h.name, "Content-Encoding") || iequals(h.name, "Accept-Encoding"))) {
      continue;
    }
    out.append(h.line.data(), h.line.size());
    out += kCrlf;
  }
  out += kCrlf;
  return out;
}

std::string rewrite_endpoint_answer_head(EndpointRoutes::Kind kind, std::string_view head,
                                         bool errors_as_400) {
  std::vector<Header> headers;
  std::string_view first = split_head(head, &headers);
  const Header* length = kind == EndpointRoutes::Kind::kSageMaker
                             ? find_header(headers, "Inference-Header-Content-Length")
                             : nullptr;
  const std::string_view status = first.size() >= 12 ? first.substr(9, 3) : std::string_view();
  const Header* type = find_header(headers, "Content-Type");
  const bool error = !status.empty() && status[0] >= '4';
  // A multi-model invoke's error is a 400 in JSON (a 507 stays); the endpoints' other
  // 404 and 405 errors come as libevhtp's default type, text/plain.
  std::string_view new_type;
  if (error && errors_as_400) {
    if (status != "507") first = "HTTP/1.1 400 Bad Request";
    new_type = "application/json";
  } else if (error && (status == "404" || status == "405") && type != nullptr &&
             iequals(type->value, "application/json")) {
    new_type = "text/plain";
  }
  if (length == nullptr && new_type.empty()) return std::string(head);
  std::string out(first);
  out += kCrlf;
  for (const Header& h : headers) {
    if (&h == length || &h == type) continue;
    out.append(h.line.data(), h.line.size());
    out += kCrlf;
  }
  if (length != nullptr) {
    out += "Content-Type: " + std::string(endpoint_binary_type(kind)) + std::string(length->value);
  } else if (!new_type.empty()) {
    out += "Content-Type: " + std::string(new_type);
  } else if (type != nullptr) {
    out += "Content-Type: " + std::string(type->value);
  }
  out += kHeadEnd;
  return out;
}

void EndpointStream::chunked_body(const char** data, size_t* size, std::string* out) {
  // Lines longer than this are no chunk size or trailer the KServe reader takes either.
  constexpr size_t kMaxLine = 8 * 1024;
  while (*size != 0) {
    if (chunked_ == Chunked::kData) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(chunk_left_, *size));
      out->append(*data, n);
      chunk_left_ -= n;
      *data += n;
      *size -= n;
      if (chunk_left_ == 0) chunked_ = Chunked::kSize;
      continue;
    }
    // A chunk-size line ("<hex>[;extensions]\r\n") or a trailer line.
    const char* end = static_cast<const char*>(std::memchr(*data, '\n', *size));
    const size_t n = end == nullptr ? *size : static_cast<size_t>(end - *data) + 1;
    out->append(*data, n);
    chunk_line_.append(*data, std::min(n, kMaxLine + 1));
    *data += n;
    *size -= n;
    if (end == nullptr) {
      if (chunk_line_.size() <= kMaxLine) continue;
      discarding_ = true;  // malformed: the reader refuses it, and nothing after it is read
      return;
    }
    const std::string line = std::move(chunk_line_);
    chunk_line_.clear();
    if (line.size() < 2 || line[line.size() - 2] != '\r') {
      discarding_ = true;
      return;
    }
    if (chunked_ == Chunked::kTrailer) {
      if (line.size() == 2) {  // the blank line: the body ends
        chunked_ = Chunked::kNone;
        return;
      }
      continue;
    }
    size_t digits = 0;
    uint64_t chunk = 0;
    while (digits < line.size() && std::isxdigit(static_cast<unsigned char>(line[digits]))) {
      const char ch = static_cast<char>(std::tolower(static_cast<unsigned char>(line[digits])));
      chunk = chunk * 16 + static_cast<uint64_t>(ch <= '9' ? ch - '0' : ch - 'a' + 10);
      ++digits;
    }
    const char after = line[digits];
    if (digits == 0 || digits > 15 ||
        (after != ';' && after != '\r' && after != ' ' && after != '\t')) {
      discarding_ = true;
      return;
    }
    if (chunk == 0) {
      chunked_ = Chunked::kTrailer;
    } else {
      chunked_ = Chunked::kData;
      chunk_left_ = chunk + 2;  // its data and CRLF
    }
  }
}

void EndpointStream::requests(const char* data, size_t size, std::string* out) {
  while (size != 0 && !discarding_) {
    if (chunked_ != Chunked::kNone) {
      chunked_body(&data, &size, out);
      continue;
    }
    if (body_left_ != 0) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(body_left_, size));
      out->append(data, n);
      body_left_ -= n;
      data += n;
      size -= n;
      continue;
    }
    // Collecting a head: the blank line may straddle what was held and this read.
    const size_t held = head_.size();
    const size_t look_from = held >= 3 ? held - 3 : 0;
    head_.append(data, std::min(size, kMaxHead + 4 - held));
    const size_t end = head_.find(kHeadEnd, look_from);
    if (end == std::string::npos) {
      if (head_.size() <= kMaxHead) return;  // the rest of the head is still to come
      // Triton's server refuses such a head too; the connection ends with the answer.
      out->append("GET " + std::string(kEndpointReplyPath) +
                  "400 HTTP/1.1\r\nConnection: close\r\n\r\n");
      discarding_ = true;
      return;
    }
    const size_t head_size = end + kHeadEnd.size();
    const size_t used = head_size - held;  // of this read
    const std::string_view head(head_.data(), head_size);
    bool errors_as_400 = false;
    out->append(rewrite_endpoint_head(routes_, head, &errors_as_400));
    answer_kinds_.push_back(errors_as_400);
    // The body is framed as the KServe reader frames it: chunked wins over a length.
    std::vector<Header> headers;
    split_head(head, &headers);
    if (is_chunked(headers)) {
      chunked_ = Chunked::kSize;
    } else {
      body_left_ = content_length(headers);
    }
    head_.clear();
    data += used;
    size -= used;
  }
}

size_t EndpointStream::answers(std::string* out, size_t from) {
  size_t at = from;
  while (at < out->size() && !passing_) {
    if (answer_left_ != 0) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(answer_left_, out->size() - at));
      answer_left_ -= n;
      at += n;
      continue;
    }
    const size_t end = out->find(kHeadEnd, at);
    if (end == std::string::npos) return at;  // the rest of the head is still to come
    const std::string_view head(out->data() + at, end + kHeadEnd.size() - at);
    std::vector<Header> headers;
    const std::string_view first = split_head(head, &headers);
    const int status = first.size() > 12 ? std::atoi(std::string(first.substr(9, 3)).c_str()) : 0;
    const bool bodiless = (status >= 100 && status < 200) || status == 204 || status == 304;
    if (!bodiless && find_header(headers, "Content-Length") == nullptr) passing_ = true;
    answer_left_ = bodiless ? 0 : content_length(headers);
    // A final answer is the next request's (an interim 1xx is not).
    bool errors_as_400 = false;
    if (status >= 200 && !answer_kinds_.empty()) {
      errors_as_400 = answer_kinds_.front();
      answer_kinds_.pop_front();
    }
    const std::string rewritten = rewrite_endpoint_answer_head(routes_.kind, head, errors_as_400);
    out->replace(at, head.size(), rewritten);
    at += rewritten.size();
  }
  return out->size();
}

}  // namespace naiad
