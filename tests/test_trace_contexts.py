"""The worker's side of a model's trace context (mode opentelemetry): the contexts the
core wrote into a batch's request blocks reach the requests the model sees, and follow
them when a sequence batcher rearranges the batch (not-ready gaps have none). The
black-box checks against exported spans are grpc_clients/test_grpc_trace_otel.py."""

from __future__ import annotations

from naiad import triton_python_backend_utils as pb_utils
from naiad.backends.base import Batch
from naiad.tracing.otel import tracestate_literal, tracestate_text
from naiad.worker.sequence import _inner_batch


def test_requests_get_their_contexts_by_index():
    requests = [
        pb_utils.InferenceRequest(
            request_id=f"r{i}", inputs=[], requested_output_names=[], model_name="m"
        )
        for i in range(3)
    ]
    pb_utils._set_trace_contexts(requests, {1: '{"traceparent":"00-a-b-01"}'})
    assert requests[1].trace().get_context() == '{"traceparent":"00-a-b-01"}'
    assert requests[0].trace().get_context() is None
    assert requests[2].trace().get_context() is None
    # The trace names its request (a BLS call made with trace= finds it: worker/bls.py).
    assert requests[1].trace()._request is requests[1]


def test_a_sequence_batch_keeps_each_requests_context_where_it_moved():
    batch = Batch(["h0", "h1", "h2"], [[], [], []])
    batch.trace_contexts = {0: "zero", 2: "two"}
    inner = _inner_batch(batch, ["h2", "h0", "h1"], [[], [], []], [2, -1, 1])
    assert inner.trace_contexts == {0: "two"}  # position 1 is a gap, request 1 untraced
    assert _inner_batch(batch, ["h1"], [[]], [1]).trace_contexts is None
    untraced = Batch(["h0"], [[]])
    assert _inner_batch(untraced, ["h0"], [[]], [0]).trace_contexts is None


def test_a_clients_tracestate_is_carried_as_triton_carries_it():
    """As Triton 2.51 gives it to a model (probed over HTTP and gRPC): members joined
    with ',' without spaces and empty members; an invalid member drops it all."""
    assert tracestate_text("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7") == (
        "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
    )
    for spaced in ("a=1,b=2,", "a=1 ,b=2", "a=1, b=2", " a=1,b=2", "a=1,,b=2"):
        assert tracestate_text(spaced) == "a=1,b=2", spaced
        assert tracestate_text(spaced, exact=True) is None, spaced  # gRPC: dropped
    assert tracestate_text("a=1,b=2", exact=True) == "a=1,b=2"
    assert tracestate_text("tenant@vendor=x,k*/_-9=v") == "tenant@vendor=x,k*/_-9=v"
    for invalid in ("Bad=1,ok=2", "a=1,b", "a=x\x01", "=1", "a=1=2", "a=é", "", None):
        assert tracestate_text(invalid) is None, invalid
    assert tracestate_text(",".join(f"k{i}=v" for i in range(32))) is not None
    assert tracestate_text(",".join(f"k{i}=v" for i in range(33))) is None
    # The block carries it as a JSON literal: quotes and backslashes escaped.
    assert tracestate_literal('a=say"hi"\\') == b'"a=say\\"hi\\"\\\\"'
    assert tracestate_literal(None) is None


def test_a_bls_call_carries_its_requests_tracestate():
    with_state = pb_utils.InferenceTrace('{"traceparent":"00-a-b-01","tracestate":"k=v"}')
    assert with_state._client_state() == b'"k=v"'
    assert pb_utils.InferenceTrace('{"traceparent":"00-a-b-01"}')._client_state() is None
    assert pb_utils.InferenceTrace(None)._client_state() is None
