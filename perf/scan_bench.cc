// The HTTP scanner's cost per request (csrc/http1/http_scan.h) on perf_analyzer's add_sub
// request, single thread: the work the lane does on every request's head before it
// parses the body. Built against two versions of http_scan.cc it shows what a change
// to the scanner costs (an Accept-Encoding check: see the README's Performance notes).
// Run: c++ -std=c++17 -O2 -Icsrc csrc/http1/http_scan.cc perf/scan_bench.cc -o build/scan_bench
#include <chrono>
#include <cstdio>
#include <string>

#include "http1/http_scan.h"

int main(int argc, char** argv) {
  const std::string body(390, '\x01');
  const std::string request =
      "POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: 127.0.0.1:8000\r\n"
      "User-Agent: libcurl-agent/1.0\r\nAccept: */*\r\nInference-Header-Content-Length: 262"
      "\r\nContent-Type: application/octet-stream\r\nContent-Length: 390\r\n\r\n" +
      body;
  const long rounds = argc > 1 ? std::atol(argv[1]) : 5000000;
  size_t total = 0;
  auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < rounds; ++i) {
    naiad::ScannedRequest out;
    naiad::scan_request(request.data(), request.size(), 1 << 20, &out);
    total += out.total;
  }
  double ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  std::printf("%.1f ns per request (%zu)\n", ns / rounds, total / rounds);
  return 0;
}
