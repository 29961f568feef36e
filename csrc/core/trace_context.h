// Trace mode opentelemetry: the ids of a traced request's model span, drawn by the core
// when it traces the request (Core::submit for a client's, Core's child traces for an
// ensemble step or a BLS call made with trace=request.trace()), so that the model can
// be given the span's context while it runs: Triton 2.51 sets the trace's context to
// the model span's W3C `traceparent` when that span starts (server src/tracer.cc,
// PrepareTraceContext), and its Python backend hands it to the model as
// request.trace().get_context(). The frontend later exports the span under the same
// ids (pysrc/naiad/tracing/otel.py).
#pragma once

#include <atomic>
#include <cstdint>
#include <random>
#include <string>

#include "ipc/ipc_schema.h"

namespace naiad {

// Random 64-bit ids, never 0 (W3C: an all-zero id is invalid), from any thread without
// a lock: splitmix64 over an atomic counter seeded from the OS, so that two servers (or
// two runs) draw different ids, as the OpenTelemetry SDKs' random generators do.
class SpanIdSource {
 public:
  SpanIdSource() : state_(seed()) {}

  uint64_t next() {
    for (;;) {
      uint64_t z = state_.fetch_add(0x9E3779B97F4A7C15ULL, std::memory_order_relaxed) +
                   0x9E3779B97F4A7C15ULL;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
      z ^= z >> 31;
      if (z != 0) return z;
    }
  }

 private:
  static uint64_t seed() {
    std::random_device device;
    return (uint64_t{device()} << 32) ^ device();
  }

  std::atomic<uint64_t> state_;
};

// The context of a new span: in the trace `trace_id_high`/`trace_id_low` (a client's
// traceparent's, or the root's for a child), sampled as `trace_flags` says, or in a new
// trace when that id is 0. Only the sampled bit carries over, as a span's own flags are
// its sampling decision (the SDKs' ParentBased sampler follows the parent's).
inline SpanContext new_span_context(SpanIdSource& ids, uint64_t trace_id_high,
                                    uint64_t trace_id_low, uint64_t trace_flags) {
  SpanContext span{trace_id_high, trace_id_low, 0, trace_flags & 1};
  if (trace_id_high == 0 && trace_id_low == 0) {
    span.trace_id_high = ids.next();
    span.trace_id_low = ids.next();
    span.trace_flags = 1;  // a trace of its own is sampled (the SDK samples every root)
  }
  span.span_id = ids.next();
  return span;
}

// The trace context a model is given, as Triton writes it: a JSON object with the
// span's `traceparent` ("00-<32 hex trace id>-<16 hex span id>-<2 hex flags>", lower
// case); "" for no context.
// `trace_state`: the client's tracestate as a JSON string literal (request_block.h
// request_trace_state), or empty: Triton 2.51 adds it to the context of the request's
// models, its BLS calls' and its ensemble steps' (probed over HTTP and gRPC).
inline std::string trace_context_json(const SpanContext& span, std::string_view trace_state = {}) {
  if (span.span_id == 0) return std::string();
  static const char kHex[] = "0123456789abcdef";
  std::string out = "{\"traceparent\":\"00-";
  auto hex = [&](uint64_t value, int digits) {
    for (int shift = (digits - 1) * 4; shift >= 0; shift -= 4) out += kHex[(value >> shift) & 0xF];
  };
  hex(span.trace_id_high, 16);
  hex(span.trace_id_low, 16);
  out += '-';
  hex(span.span_id, 16);
  out += '-';
  hex(span.trace_flags & 0xFF, 2);
  out += '"';
  if (!trace_state.empty()) {
    out += ",\"tracestate\":";
    out += trace_state;
  }
  out += '}';
  return out;
}

}  // namespace naiad
