"""Traces of sampled requests, in trace mode `triton` (Triton 2.51's JSON records).

Sampling: the lanes' codec samples 1 in trace_rate requests of each trace setting in
C++ (KServeCodec::set_trace_rate; the general path asks the same sampler): as in Triton
2.51, one count per setting, so the requests of every model without a setting of its own
count together under the global setting's, and an update (a new setting) starts it over.
With tracing off the data path pays one predictable branch per request and nothing in
Python.
trace_count is applied here, to the requests the sampler picked (Tracer.admit).

A trace is written when its request is answered. Its timestamps are taken where each
event happened, on CLOCK_MONOTONIC as Triton's steady clock:

- HTTP_RECV_START, GRPC_WAITREAD_START/END: when the front end read the request's
  bytes (the time handed to the lane with them);
- HTTP_RECV_END and REQUEST_START: when the core's submit began (the request was
  parsed and validated); QUEUE_START: when the core put it in its model's queue, under
  its lock (Core::take_trace_stamps);
- COMPUTE_START, COMPUTE_INPUT_END, COMPUTE_OUTPUT_START, COMPUTE_END: the worker's own
  clock readings for the batch, carried in the response block (ipc_schema.h
  ResponseHeader timings: start and the three phase durations);
- REQUEST_END, INFER_RESPONSE_COMPLETE: when the response reached the front end;
- HTTP_SEND_START/END, GRPC_SEND_START/END: around handing the response bytes to the
  connection.

Child traces, as Triton 2.51 writes them: each step of a traced ensemble request and
each BLS call a traced request's model makes with trace=request.trace() is a trace of
its own (its model, the request id it was sent with, parent_id: its parent's trace id;
REQUEST_START, QUEUE_START, COMPUTE_* of its batch, REQUEST_END; an ensemble's own trace
has no COMPUTE_*). The core records them (csrc/core/core.h ChildTrace) as they start, queue
and finish; they are written with their root's trace, in Triton's order
(csrc/core/trace_tree.h). At level TENSORS the core also keeps their tensors, as Triton
writes them for a child: its inputs as queued and its responses' outputs.

At level TENSORS a trace also holds its request's input tensors (TENSOR_QUEUE_INPUT)
and its response's outputs (TENSOR_BACKEND_OUTPUT), each as Triton's text for it
(csrc/codec/trace_tensor.h): the lanes' codec keeps them for its traced requests, the general
path makes them through _core.trace_tensor. Without TIMESTAMPS a trace is its tensor
records alone, as in Triton.
"""

from __future__ import annotations

import itertools

import orjson

from naiad import _core
from naiad.tracing.settings import (
    LEVEL_OFF,
    LEVEL_TENSORS,
    LEVEL_TIMESTAMPS,
    MODE_OPENTELEMETRY,
    TraceSettings,
)

HTTP = 1
GRPC = 2


class Trace:
    __slots__ = (
        "id",
        "setting",
        "model",
        "version",
        "request_id",
        "protocol",
        "read_ns",
        "request_start_ns",
        "queue_start_ns",
        "parent",
        "tensors",
        "parent_id",
        "span",
    )

    def __init__(self, trace_id, setting, model, version, request_id, protocol, read_ns, stamps):
        self.id = trace_id
        self.setting = setting
        self.model = model
        self.version = version
        self.request_id = request_id
        self.protocol = protocol  # HTTP, GRPC, or 0: the general path (no front-end times)
        self.read_ns = read_ns
        self.request_start_ns = self.queue_start_ns = read_ns  # where the core has none
        self.span = None  # mode opentelemetry: its model span's _core.SpanIds
        if stamps is not None:
            self.take_stamps(stamps)
        self.parent = None  # (trace id, span id, flags) of the client's span (otel.py)
        self.tensors = []  # [(activity name, tensor text)] at level TENSORS
        self.parent_id = 0  # the trace id of the request that made this one (0: none)

    def take_stamps(self, stamps) -> None:
        """What the core kept of the request (_core.TraceTimes)."""
        self.request_start_ns = stamps.request_start_ns
        self.queue_start_ns = stamps.queue_start_ns
        self.span = stamps.span

    @property
    def keeps_tensors(self) -> bool:
        return bool(self.setting.level & LEVEL_TENSORS)


class Tracer:
    """Applies the settings to sampled requests and writes their traces. `active` is
    False while no setting can sample anything: the front ends then check only that."""

    def __init__(self, settings: TraceSettings):
        self.settings = settings
        self._ids = itertools.count(1)
        self.active = False
        # The mode is fixed at start (Triton takes no trace_mode update).
        self.opentelemetry = settings.global_setting.mode == MODE_OPENTELEMETRY
        self.exporter = None
        if self.opentelemetry:
            from naiad.tracing.otel import OtelExporter

            self.exporter = OtelExporter(settings.global_setting.config)
        self.on_change = None  # the manager's: pushes each model's rate to the sampler
        settings._on_change = self._changed
        self._changed()

    def _changed(self) -> None:
        self.active = self.settings.any_active
        if self.on_change is not None:
            self.on_change()

    def tensors_for(self, model: str) -> bool:
        """Whether `model`'s traced requests keep their tensors (level TENSORS; Triton's
        mode opentelemetry writes none)."""
        setting = self.settings.get(model)
        return setting.active and bool(setting.level & LEVEL_TENSORS) and not self.opentelemetry

    def rate_for(self, model: str) -> tuple[int, int]:
        """The sampler's (rate, sampler id) for `model`: rate 0 while its setting traces
        nothing. Models under one setting share its sampler id, so their requests are
        counted together, as Triton counts them."""
        setting = self.settings.get(model)
        return (setting.rate if setting.active else 0), setting.sampler

    def admit(self, model: str):
        """The setting a request the sampler picked is traced with (trace_count
        applied), or None."""
        setting = self.settings.get(model)
        if not setting.admit():
            return None
        if not setting.active:  # its count ran out: the sampler stops for it
            self._changed()
        return setting

    def forced(self, model: str):
        """The setting a request with a valid traceparent is traced with in mode
        opentelemetry whatever the rate says (Triton's force_sample), or None."""
        setting = self.settings.get(model)
        return setting if self.opentelemetry and setting.level != LEVEL_OFF else None

    def sample(self, model: str):
        """The Python sampler, for a request of a model the lanes do not serve."""
        setting = self.settings.get(model)
        if not setting.sample():
            return None
        if not setting.active:
            self._changed()
        return setting

    def start(
        self,
        setting,
        model: str,
        version: int,
        request_id: str,
        protocol: int,
        read_ns: int,
        stamps=None,
    ):
        """A Trace for a request admitted under `setting`."""
        trace_id = next(self._ids)
        return Trace(trace_id, setting, model, version, request_id, protocol, read_ns, stamps)

    def finish(
        self, trace: Trace, timings, end_ns: int, sent=None, request_id=0, children=(), models=None
    ) -> None:
        """Writes the trace: `timings` the batch's worker timings (None when it never
        ran), `sent` (start, end) of writing the response, None when not known.
        `children`: the core's child traces of the request (`request_id`, the core's id;
        _core.Core.take_trace_children), `models`: loaded models by core handle, to
        name theirs. The request and its child traces are one trace of the file (one
        for log_frequency and trace_count), as Triton writes a tree."""
        tree = self._children(trace, request_id, children, models) if children else []
        if self.exporter is not None:
            self.exporter.export(trace, timings, end_ns, sent, tree)
            return
        if not tree:
            trace.setting.write(records(trace, timings, end_ns, sent))
            return
        parts = {trace.id: records(trace, timings, end_ns, sent)}
        for child, child_timings, child_end in tree:
            parts[child.id] = records(child, child_timings, child_end, None)
        order = _core.trace_tree_order([trace.id] + [child.id for child, _t, _e in tree])
        trace.setting.write(b",".join(parts[i] for i in order if parts[i]))

    def _children(self, root: Trace, request_id: int, children, models) -> list:
        """[(Trace, timings or None, end ns)] of the core's child traces, in the order
        they started, each with the next trace id (Triton numbers a child when it is
        made) and its parent's as parent_id."""
        ids = {request_id: root.id}
        tree = []
        for child in sorted(children, key=lambda c: c.request_start_ns):
            model = (models or {}).get(child.model)
            if model is None or child.parent not in ids:  # unloaded since, or its parent was
                continue
            trace = Trace(
                next(self._ids),
                root.setting,
                model.name,
                model.version,
                orjson.loads(f'"{child.id_text}"'),
                0,
                child.request_start_ns,
                child,  # its request and queue start, its span's ids
            )
            trace.parent_id = ids[child.parent]
            trace.tensors = child.tensors  # at level TENSORS (the core kept them), else []
            ids[child.request_id] = trace.id
            tree.append((trace, child.timings if child.timings[0] else None, child.end_ns))
        return tree

    def close(self) -> None:
        """The server stops: files are completed, queued spans exported."""
        self.settings.close()
        if self.exporter is not None:
            self.exporter.close()


def tensor_texts(activity: str, tensors) -> list:
    """[(activity, Triton's text of the tensor)] for the general path's tensors (each
    with name, datatype, shape and wire-layout data)."""
    return [(activity, _core.trace_tensor(t.name, t.datatype, t.shape, t.data)) for t in tensors]


def records(trace: Trace, timings, end_ns: int, sent) -> bytes:
    """The trace's records, comma-separated, as Triton writes them for one request."""
    out = []
    timestamps = bool(trace.setting.level & LEVEL_TIMESTAMPS)

    def stamp(name: str, ns: int) -> None:
        if timestamps:
            out.append({"id": trace.id, "timestamps": [{"name": name, "ns": int(ns)}]})

    if trace.protocol == HTTP:
        stamp("HTTP_RECV_START", trace.read_ns)
        stamp("HTTP_RECV_END", trace.request_start_ns)
    if timestamps:  # Triton writes it with the REQUEST_START timestamp
        record = {"id": trace.id, "model_name": trace.model, "model_version": trace.version}
        if trace.request_id:  # as Triton: no field for an empty id
            record["request_id"] = trace.request_id
        if trace.parent_id:
            record["parent_id"] = trace.parent_id
        out.append(record)
    stamp("REQUEST_START", trace.request_start_ns)
    stamp("QUEUE_START", trace.queue_start_ns)
    for activity, text in trace.tensors:
        out.append(b'{"id":%d,"activity":"%s","tensor":%s}' % (trace.id, activity.encode(), text))
    if timings is not None and timings[0]:
        start, compute_input, compute_infer, compute_output = timings[:4]
        stamp("COMPUTE_START", start)
        stamp("COMPUTE_INPUT_END", start + compute_input)
        stamp("COMPUTE_OUTPUT_START", start + compute_input + compute_infer)
        stamp("COMPUTE_END", start + compute_input + compute_infer + compute_output)
    stamp("REQUEST_END", end_ns)
    if trace.protocol == GRPC:
        stamp("GRPC_WAITREAD_START", trace.read_ns)
        stamp("GRPC_WAITREAD_END", trace.read_ns)
    if trace.protocol:
        stamp("INFER_RESPONSE_COMPLETE", end_ns)
    if sent is not None:
        prefix = "HTTP" if trace.protocol == HTTP else "GRPC"
        stamp(f"{prefix}_SEND_START", sent[0])
        stamp(f"{prefix}_SEND_END", sent[1])
    # A tensor's text is Triton's, not always valid JSON (BYTES elements are not
    # escaped): kept as bytes.
    return b",".join(r if type(r) is bytes else orjson.dumps(r) for r in out)
