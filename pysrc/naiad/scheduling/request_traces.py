"""The trace extension's requests in flight: sampling at submit, each trace's start and end.

Owns the tracer the server set, the open traces of sampled requests by request id, and
the lanes' sampler rates (the sampler itself is the codec's, in C++). Called only on the
event loop (submits, completions, settings changes), so it has no lock. With no sampling
setting active the data path checks only `tracer.active` per loop turn and
`open_traces` per batch.
"""

from __future__ import annotations

from naiad import _core
from naiad.tracing.otel import parse_traceparent, tracestate_literal
from naiad.tracing.settings import LEVEL_TENSORS
from naiad.tracing.tracer import tensor_texts


class GeneralSample:
    """A general-path request the tracer sampled: what its submit tells the core."""

    __slots__ = ("setting", "parent", "tensors", "state")

    def __init__(self, setting, parent, tensors: bool, state):
        self.setting = setting
        self.parent = parent  # the OpenTelemetry traceparent it continues, or None
        self.tensors = tensors  # the core keeps its tensors (level TENSORS, not OpenTelemetry)
        self.state = state  # its tracestate, as the core writes it, or None


class RequestTraces:
    def __init__(self, core, lane, in_flight, table):
        self.core = core
        self.lane = lane  # _core.FastLane: the lanes' sampler and their traced tensors
        self.in_flight = in_flight  # scheduling/in_flight.py: a lane request's model
        self.table = table  # scheduling/model_table.py: each lane_model's model, ensembles
        self.tracer = None  # tracing/tracer.py's Tracer, once the server sets one
        self.open_traces: dict = {}  # request id -> its trace, until it is answered
        self.on_activity = None  # called after each settings change (the I/O loop's taking)

    def set_tracer(self, tracer) -> None:
        self.tracer = tracer
        tracer.on_change = self.apply_settings
        _core.read_grpc_traceparent(tracer.opentelemetry)
        self.core.set_span_ids(tracer.opentelemetry)  # for request.trace().get_context()
        self.apply_settings()

    @property
    def active(self) -> bool:
        """Whether any setting samples anything now."""
        return self.tracer is not None and self.tracer.active

    def apply_settings(self) -> None:
        """Gives the lanes' sampler each model's rate (0 while tracing is off for it)."""
        for lane_model, model in self.table.lane_models.items():
            self.lane_model_added(model, lane_model)
        if not self.tracer.active:
            self.start_lane_traces(0, 0)  # sampled before the change: nothing left behind
        if self.on_activity is not None:
            self.on_activity()

    def lane_model_added(self, model, lane_model: int) -> None:
        """The lanes' sampler rate for `model`'s `lane_model`, once a tracer is set."""
        if self.tracer is not None:
            self.lane.set_trace_rate(lane_model, *self.tracer.rate_for(model.name))
            self.lane.set_trace_tensors(lane_model, self.tracer.tensors_for(model.name))

    def sample_general(self, model, request) -> GeneralSample | None:
        """Whether the tracer samples a general-path request of `model` (one with a lane
        id counts in the lanes' sampler), or continues the client's OpenTelemetry trace."""
        tracer = self.tracer
        if tracer is None or not tracer.active:
            return None
        setting = parent = None
        if model.lane_model is None:
            setting = tracer.sample(model.name)
        elif self.lane.sample_trace(model.lane_model):
            setting = tracer.admit(model.name)
        if tracer.opentelemetry:
            parent = parse_traceparent(request.traceparent)
            if setting is None and parent is not None:
                setting = tracer.forced(model.name)
        if setting is None:
            return None
        tensors = bool(setting.level & LEVEL_TENSORS) and not tracer.opentelemetry
        state = tracestate_literal(request.tracestate) if parent is not None else None
        return GeneralSample(setting, parent, tensors, state)

    def start_general(self, sample: GeneralSample, model, request, request_id, submit_ns):
        """Opens the trace of a general-path request the core queued."""
        tracer = self.tracer
        trace = tracer.start(sample.setting, model.name, model.version, request.id, 0, submit_ns)
        trace.parent = sample.parent
        if trace.keeps_tensors and not tracer.opentelemetry:
            trace.tensors = tensor_texts(_core.TENSOR_QUEUE_INPUT, request.inputs)
        self.open_traces[request_id] = trace

    def start_lane_traces(self, read_ns: int, protocol: int) -> None:
        """Starts the traces of the requests the lanes' sampler picked since last time."""
        tracer = self.tracer
        for request_id in self.lane.take_traced():
            stamps = self.core.take_trace_stamps(request_id)
            pending = self.in_flight.get(request_id)
            setting = tracer.admit(pending.model.name) if pending is not None else None
            if setting is None:  # not traced after all: dropped, in the core too
                self.lane.take_trace_tensors(request_id)
                self.core.take_trace_children(request_id)
                continue
            model = pending.model
            client_id = self.lane.client_id(request_id)
            self.open_traces[request_id] = tracer.start(
                setting, model.name, model.version, client_id, protocol, read_ns, stamps
            )

    def finish_with_outputs(self, request_id: int, outputs, timings, end_ns: int) -> None:
        """Ends a general-path request's trace with its response's `outputs`."""
        trace = self.open_traces.get(request_id)
        if trace is not None and trace.keeps_tensors and not self.tracer.opentelemetry:
            trace.tensors += tensor_texts(_core.TENSOR_BACKEND_OUTPUT, outputs)
        self.finish(request_id, timings, end_ns)

    def finish(self, request_id: int, timings, end_ns: int, sent=None) -> None:
        """Writes request `request_id`'s trace, if it has one (`timings`: its batch's)."""
        trace = self.open_traces.pop(request_id, None)
        if trace is None:
            return
        stamps = self.core.take_trace_stamps(request_id)
        if stamps is not None:  # the general path's: known once it was queued
            trace.take_stamps(stamps)
        if trace.protocol and trace.keeps_tensors:  # a lane's: the codec kept them
            trace.tensors = self.lane.take_trace_tensors(request_id)
        if self.table.is_ensemble(trace.model, trace.version):
            timings = None  # an ensemble computes nothing itself, as in Triton
        children = self.core.take_trace_children(request_id)
        models = self.table.core_models() if children else None
        self.tracer.finish(trace, timings, end_ns, sent, request_id, children, models)

    def drop(self, request_id: int) -> None:
        """A traced request whose trace is not written (a streamed one): forgotten here
        and in the core."""
        if self.open_traces.pop(request_id, None) is not None:
            self.core.take_trace_stamps(request_id)
            self.core.take_trace_children(request_id)

    def close(self) -> None:
        if self.tracer is not None:
            self.tracer.close()
