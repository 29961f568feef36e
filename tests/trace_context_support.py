"""Trace mode opentelemetry: the trace context each model is given
(request.trace().get_context()), checked against the spans its server exported. The
requests go to tests/pipeline_models/trace_context (it answers its CONTEXT, and a BLS
call's as CHILD_CONTEXT) and ens_trace_context (one step of it); used against Naiad
alone (grpc_clients/test_grpc_trace_otel.py) and beside Triton 2.51
(grpc_clients/test_grpc_trace_children_triton.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

PIPELINES = Path(__file__).resolve().parent / "pipeline_models"
MODELS = {
    "trace_context": PIPELINES / "trace_context",
    "ens_trace_context": PIPELINES / "ens_trace_context",
}
CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"  # the trace of a client's traceparent
# A client's tracestate, with the spaces and empty member a W3C parser drops, and the
# text the models' contexts carry (Triton 2.51 over HTTP and gRPC).
CLIENT_STATE = "congo=t61rcWkgMzE , rojo=00f067aa0ba902b7,"
CLIENT_STATE_CARRIED = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
# The spans the requests make: plain 3, call 3 + 2, client 3 + 2, ensemble 2 + 2,
# client ensemble 2 + 2.
SPANS = 21


def otel_flags(url: str) -> list:
    """Every request traced (rate 1), spans sent to `url` at once."""
    flags = ["--trace-config", "mode=opentelemetry", "--trace-config", "rate=1"]
    flags += ["--trace-config", "level=TIMESTAMPS"]
    flags += ["--trace-config", f"opentelemetry,url={url}"]
    return flags + ["--trace-config", "opentelemetry,bsp_schedule_delay=100"]


def send_requests(http_port: int, grpc_port: int) -> dict:
    """The trace contexts the models saw, by request id: (CONTEXT, CHILD_CONTEXT).
    "plain": a request the HTTP lane takes; "call": over gRPC, whose model makes a
    traced BLS call; "client": with a client's traceparent and tracestate, whose model
    makes a traced BLS call; "ensemble": to the ensemble over gRPC; "client_ensemble":
    to the ensemble over gRPC with the client's traceparent and tracestate; "off": after
    tracing was turned off."""
    data = np.ones((1, 1), dtype=np.float32)
    seen = {}
    http = httpclient.InferenceServerClient(f"127.0.0.1:{http_port}")
    grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
    traceparent = {"traceparent": f"00-{CLIENT_TRACE}-00f067aa0ba902b7-01"}
    # Over gRPC Triton 2.51 carries only a tracestate written without spaces or empty
    # members (naiad/tracing/otel.py tracestate_text); over HTTP it drops those.
    grpc_traceparent = {**traceparent, "tracestate": CLIENT_STATE_CARRIED}
    traceparent["tracestate"] = CLIENT_STATE
    call = {"call": "trace_context"}
    for client, module, request_id, model, parameters, headers in (
        (http, httpclient, "plain", "trace_context", None, None),
        (grpc, grpcclient, "call", "trace_context", call, None),
        # gRPC first: Triton 2.51 drops a gRPC call's tracestate once an HTTP request's
        # had spaces or an empty member (probed; Naiad carries each request's own).
        (grpc, grpcclient, "client_ensemble", "ens_trace_context", None, grpc_traceparent),
        (http, httpclient, "client", "trace_context", call, traceparent),
        (grpc, grpcclient, "ensemble", "ens_trace_context", None, None),
        (http, httpclient, "off", "trace_context", None, None),
    ):
        if request_id == "off":
            http.update_trace_settings(settings={"trace_level": ["OFF"]})
        inputs = [module.InferInput("INPUT0", [1, 1], "FP32")]
        inputs[0].set_data_from_numpy(data)
        result = client.infer(
            model, inputs, request_id=request_id, parameters=parameters, headers=headers
        )
        seen[request_id] = tuple(
            result.as_numpy(name).reshape(-1)[0].decode() for name in ("CONTEXT", "CHILD_CONTEXT")
        )
    http.close()
    grpc.close()
    return seen


def _traceparent(span, state: str = "") -> str:
    """The context Triton gives a model for its model span `span` (with the client's
    tracestate `state`, as carried)."""
    traceparent = f"00-{span['trace'].hex()}-{span['id'].hex()}-01"
    if state:
        return '{"traceparent":"' + traceparent + '","tracestate":"' + state + '"}'
    return '{"traceparent":"' + traceparent + '"}'


def _model_spans(spans) -> dict:
    """Request id of each InferRequest tree -> its model spans, outermost first (spans
    as OtlpReceiver.span_records gives them)."""
    by_parent: dict = {}
    ids = {span["id"] for span in spans}
    for span in spans:
        by_parent.setdefault(span["parent"], []).append(span)
    out = {}
    for root in spans:  # a client's traceparent makes the InferRequest span a child
        if root["name"] != "InferRequest" or root["parent"] in ids:
            continue
        models, level = [], by_parent.get(root["id"], [])
        while level:
            models += level
            level = [c for s in level for c in by_parent.get(s["id"], []) if c["name"] != "compute"]
        out[models[0]["attributes"]["triton.request_id"]] = models
    return out


def check_contexts(seen: dict, spans: list) -> None:
    """Each traced request's model, and the models of its BLS call and its ensemble's
    step, got the W3C context of its own model span; the request sent with tracing off
    got none."""
    models = _model_spans(spans)
    assert set(models) == {"plain", "call", "client", "ensemble", "client_ensemble"}, models
    assert seen["plain"] == (_traceparent(models["plain"][0]), "")
    outer, inner = models["call"]
    assert inner["attributes"]["triton.request_id"] == "child"
    assert seen["call"] == (_traceparent(outer), _traceparent(inner))
    # The client's tracestate reaches its model, its BLS call's and its ensemble's step.
    outer, inner = models["client"]
    assert outer["trace"].hex() == CLIENT_TRACE
    state = CLIENT_STATE_CARRIED
    assert seen["client"] == (_traceparent(outer, state), _traceparent(inner, state))
    ensemble, step = models["ensemble"]
    assert (ensemble["name"], step["name"]) == ("ens_trace_context", "trace_context")
    assert seen["ensemble"] == (_traceparent(step), "")
    ensemble, step = models["client_ensemble"]
    assert step["trace"].hex() == CLIENT_TRACE
    assert seen["client_ensemble"] == (_traceparent(step, state), "")
    assert seen["off"] == ("", "")
