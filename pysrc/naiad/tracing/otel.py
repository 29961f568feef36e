"""Trace mode `opentelemetry`: a sampled request's trace as OpenTelemetry spans, exported
over OTLP/HTTP (protobuf) by the OpenTelemetry SDK's batch span processor (the optional
`tracing` extra: opentelemetry-sdk, opentelemetry-exporter-otlp-proto-http).

The spans are Triton 2.51's (src/tracer.cc), all of kind SERVER, from tracer
"triton-server", with resource service.name=triton-inference-server plus each
`--trace-config opentelemetry,resource=KEY=VALUE`:

- "InferRequest": the request in the front end, a child of the client's span when the
  request carried a W3C `traceparent` (HTTP header or gRPC metadata); events
  HTTP_RECV_START/END or GRPC_WAITREAD_START/END, INFER_RESPONSE_COMPLETE and the
  *_SEND_START/END pair;
- "<model name>": its child, from REQUEST_START to REQUEST_END, with attributes
  triton.model_name, triton.model_version, triton.trace_id, triton.trace_parent_id and
  triton.request_id (when the request has an id), events REQUEST_START, QUEUE_START,
  REQUEST_END; a child trace (an ensemble's step, a BLS call made with
  trace=request.trace()) has its model span under its parent trace's model span;
- "compute": the model span's child, from COMPUTE_START to COMPUTE_END, with the four
  COMPUTE_* events.

The timestamps are the same monotonic readings as the trace file's (tracer.py), moved
to the wall clock by the offset between the two clocks when the trace is exported, as
Triton moves its steady-clock readings.

A model span is exported under the ids the core drew for it when it traced the request
(csrc/core/trace_context.h, Trace.span), the ids its model was given as
request.trace().get_context() while it ran: the SDK makes spans only here, at export,
so its id generator hands those ids out (_PresetIds).
"""

from __future__ import annotations

import re
import time

import orjson

_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


def parse_traceparent(value: str | None):
    """The (trace id, span id, flags) of a valid W3C traceparent, else None."""
    if not value:
        return None
    match = _TRACEPARENT.match(value.strip())
    if match is None:
        return None
    trace_id, span_id, flags = (int(group, 16) for group in match.groups())
    if trace_id == 0 or span_id == 0:
        return None
    return trace_id, span_id, flags


# W3C Trace Context, tracestate list members: a key (simple or tenant@system) and a value
# of printable characters, no ',' or '=' in it, not ending in a space.
_TRACESTATE_MEMBER = re.compile(
    r"^(?:[a-z][a-z0-9_\-*/]{0,255}|[a-z0-9][a-z0-9_\-*/]{0,240}@[a-z][a-z0-9_\-*/]{0,13})"
    r"=[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]$"
)
_TRACESTATE_MEMBERS = 32


def tracestate_text(value: str | None, exact: bool = False) -> str | None:
    """A client's W3C tracestate as Triton 2.51 gives it to a model (probed), or None:
    absent, or invalid (a malformed member, more than 32), which OpenTelemetry's
    propagator drops whole. Members are joined with ',' without the spaces around them
    and the empty ones; `exact` (gRPC metadata, where Triton drops such a tracestate):
    a value with any of those is dropped too."""
    if not value:
        return None
    members = [member.strip(" \t") for member in value.split(",")]
    members = [member for member in members if member]
    if not members or len(members) > _TRACESTATE_MEMBERS:
        return None
    if not all(_TRACESTATE_MEMBER.match(member) for member in members):
        return None
    text = ",".join(members)
    return None if exact and text != value else text


def tracestate_literal(value: str | None) -> bytes | None:
    """tracestate_text of a request's tracestate as the JSON string literal its request
    block carries to its models' trace contexts (csrc/core/trace_context.h), or None."""
    text = tracestate_text(value)
    return None if text is None else orjson.dumps(text)


def _preset_ids():
    """An SDK id generator that gives the ids it is told to give next, once each, and
    random ones otherwise (the InferRequest and compute spans' span ids). Used from
    the event loop's thread only (export())."""
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    class _PresetIds(RandomIdGenerator):
        def __init__(self):
            self.trace_id = 0  # the next new trace's id (0: a random one)
            self.span_id = 0  # the next span's id (0: a random one)

        def generate_trace_id(self) -> int:
            preset, self.trace_id = self.trace_id, 0
            return preset or super().generate_trace_id()

        def generate_span_id(self) -> int:
            preset, self.span_id = self.span_id, 0
            return preset or super().generate_span_id()

    return _PresetIds()


class OtelExporter:
    """The SDK's provider and batch exporter for the mode's --trace-config options."""

    def __init__(self, config: list):
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError as exc:
            raise ValueError(
                "trace mode opentelemetry needs the OpenTelemetry SDK: pip install "
                f"'naiad[tracing]' ({exc})"
            ) from None
        from opentelemetry import trace as trace_api

        self._api = trace_api
        url = "http://localhost:4318/v1/traces"  # the OTLP/HTTP default, as Triton's
        attributes = {"service.name": "triton-inference-server"}
        batch = {}
        for key, value in config:
            if key == "url":
                url = str(value)
            elif key == "resource":
                name, _, text = str(value).partition("=")
                attributes[name] = text
            elif key == "bsp_max_queue_size":
                batch["max_queue_size"] = int(value)
            elif key == "bsp_schedule_delay":
                batch["schedule_delay_millis"] = int(value)
            elif key == "bsp_max_export_batch_size":
                batch["max_export_batch_size"] = int(value)
        if "max_export_batch_size" in batch and "max_queue_size" in batch:
            batch["max_export_batch_size"] = min(
                batch["max_export_batch_size"], batch["max_queue_size"]
            )
        self._ids = _preset_ids()
        self.provider = TracerProvider(resource=Resource.create(attributes), id_generator=self._ids)
        self.provider.add_span_processor(
            BatchSpanProcessor(OTLPSpanExporter(endpoint=url), **batch)
        )
        self._tracer = self.provider.get_tracer("triton-server")

    def export(self, trace, timings, end_ns: int, sent, children=()) -> None:
        """`children`: the trace's child traces [(Trace, timings, end ns)], parents
        before their children (tracer.py)."""
        api = self._api
        offset = self._offset = time.time_ns() - time.monotonic_ns()

        def wall(ns: int) -> int:
            return int(ns) + offset

        server = api.SpanKind.SERVER
        parent_context = None
        if trace.parent is not None:
            trace_id, span_id, flags = trace.parent
            remote = api.SpanContext(
                trace_id, span_id, is_remote=True, trace_flags=api.TraceFlags(flags)
            )
            parent_context = api.set_span_in_context(api.NonRecordingSpan(remote))
        elif trace.span is not None:  # the trace the core drew for it
            self._ids.trace_id = trace.span.trace_id
        root = self._tracer.start_span(
            "InferRequest", context=parent_context, kind=server, start_time=wall(trace.read_ns)
        )
        self._ids.trace_id = 0  # unused if the SDK made no span
        if trace.protocol == 1:  # HTTP (tracer.HTTP)
            root.add_event("HTTP_RECV_START", timestamp=wall(trace.read_ns))
            root.add_event("HTTP_RECV_END", timestamp=wall(trace.request_start_ns))
        spans = {trace.id: self._model_span(trace, timings, end_ns, root)}
        for child, child_timings, child_end in children:  # each under its parent's span
            parent = spans.get(child.parent_id)
            if parent is not None:
                spans[child.id] = self._model_span(child, child_timings, child_end, parent)
        if trace.protocol == 2:  # gRPC (tracer.GRPC)
            root.add_event("GRPC_WAITREAD_START", timestamp=wall(trace.read_ns))
            root.add_event("GRPC_WAITREAD_END", timestamp=wall(trace.read_ns))
        if trace.protocol:
            root.add_event("INFER_RESPONSE_COMPLETE", timestamp=wall(end_ns))
        finished = end_ns
        if sent is not None:
            prefix = "HTTP" if trace.protocol == 1 else "GRPC"
            root.add_event(f"{prefix}_SEND_START", timestamp=wall(sent[0]))
            root.add_event(f"{prefix}_SEND_END", timestamp=wall(sent[1]))
            finished = sent[1]
        root.end(end_time=wall(finished))

    def _model_span(self, trace, timings, end_ns: int, parent):
        """The span of `trace`'s model (and its compute span) under span `parent`: the
        InferRequest span for a request's own trace, its parent trace's model span for a
        child trace (an ensemble step, a BLS call made with trace=), as Triton nests
        them."""
        api = self._api
        offset = self._offset
        server = api.SpanKind.SERVER
        attributes = {
            "triton.model_name": trace.model,
            "triton.model_version": int(trace.version),
            "triton.trace_id": trace.id,
            "triton.trace_parent_id": trace.parent_id,
        }
        if trace.request_id:
            attributes["triton.request_id"] = trace.request_id
        if trace.span is not None:  # the span its model was given the context of
            self._ids.span_id = trace.span.span_id
        model_span = self._tracer.start_span(
            trace.model,
            context=api.set_span_in_context(parent),
            kind=server,
            start_time=trace.request_start_ns + offset,
            attributes=attributes,
        )
        self._ids.span_id = 0
        model_span.add_event("REQUEST_START", timestamp=trace.request_start_ns + offset)
        model_span.add_event("QUEUE_START", timestamp=trace.queue_start_ns + offset)
        if timings is not None and timings[0]:
            start, compute_input, compute_infer, compute_output = timings[:4]
            stamps = (
                ("COMPUTE_START", start),
                ("COMPUTE_INPUT_END", start + compute_input),
                ("COMPUTE_OUTPUT_START", start + compute_input + compute_infer),
                ("COMPUTE_END", start + compute_input + compute_infer + compute_output),
            )
            compute = self._tracer.start_span(
                "compute",
                context=api.set_span_in_context(model_span),
                kind=server,
                start_time=int(start) + offset,
            )
            for name, ns in stamps:
                compute.add_event(name, timestamp=int(ns) + offset)
            compute.end(end_time=int(stamps[-1][1]) + offset)
        model_span.add_event("REQUEST_END", timestamp=int(end_ns) + offset)
        model_span.end(end_time=int(end_ns) + offset)
        return model_span

    def close(self) -> None:
        """Exports what is still queued (the server stops)."""
        self.provider.shutdown()
