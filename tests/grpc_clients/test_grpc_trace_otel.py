"""Trace mode opentelemetry: a real Naiad server exports its spans over OTLP/HTTP to a
test receiver (tests/otlp_receiver.py, decoded with opentelemetry-proto). Checked: the
spans Triton 2.51 sends for the same requests (InferRequest > model > compute, kind
SERVER, its attributes and events), a W3C traceparent from an HTTP header or gRPC
metadata as the parent, and timestamps nested as the events happened."""

from __future__ import annotations

import time

import numpy as np
import pytest
import trace_context_support
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from server_harness import NaiadServer, make_repository

otlp_receiver = pytest.importorskip("otlp_receiver", reason="opentelemetry-proto is not installed")
pytest.importorskip("opentelemetry.sdk", reason="the OpenTelemetry SDK is not installed")

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
HTTP_PARENT = "b7ad6b7169203331"
GRPC_PARENT = "00f067aa0ba902b7"


def _inputs(module):
    data = np.ones((1, 16), np.float32)
    inputs = [module.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(data)
    return inputs


def _by_trace(spans) -> dict:
    """request id -> {span name: span} for each InferRequest tree."""
    by_id = {span.span_id: span for _res, _scope, span in spans}
    trees: dict = {}
    for _res, _scope, span in spans:
        root = span
        while root.parent_span_id in by_id:
            root = by_id[root.parent_span_id]
        trees.setdefault(root.span_id, {})[span.name] = span
    out = {}
    for tree in trees.values():
        model = tree["add_sub"]
        attributes = {a.key: a.value for a in model.attributes}
        out[attributes["triton.request_id"].string_value] = tree
    return out


def test_spans_follow_triton_and_the_traceparent(tmp_path):
    repository = make_repository(tmp_path / "repo", ["add_sub"])
    with otlp_receiver.OtlpReceiver() as receiver:
        flags = [
            "--trace-config",
            "mode=opentelemetry",
            "--trace-config",
            "level=TIMESTAMPS",
            "--trace-config",
            "rate=3",
            "--trace-config",
            f"opentelemetry,url={receiver.url}",
            "--trace-config",
            "opentelemetry,resource=deployment=test",
            "--trace-config",
            "opentelemetry,bsp_schedule_delay=100",
        ]
        with NaiadServer(repository, log_dir=tmp_path, extra_args=flags) as server:
            before = time.time_ns()
            client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
            # Not sampled by the rate (1st and 2nd of 3), traced for their traceparent.
            traceparent = f"00-{TRACE_ID}-{HTTP_PARENT}-01"
            client.infer(
                "add_sub",
                _inputs(httpclient),
                request_id="h1",
                headers={"traceparent": traceparent},
            )
            grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
            traceparent = f"00-{TRACE_ID}-{GRPC_PARENT}-01"
            grpc.infer(
                "add_sub",
                _inputs(grpcclient),
                request_id="g1",
                headers={"traceparent": traceparent},
            )
            # The rate's 3rd request (the fast lane), and the 4th, neither sampled nor forced.
            client.infer("add_sub", _inputs(httpclient), request_id="h3")
            client.infer("add_sub", _inputs(httpclient), request_id="h4")
            settings = client.get_trace_settings()
            client.close()
            grpc.close()
            spans = receiver.wait_for(9)
            after = time.time_ns()
            time.sleep(0.5)  # nothing more comes
            got = sorted(_by_trace(receiver.spans()))
            assert len(receiver.spans()) == 9, got
    assert settings["trace_mode"] == "opentelemetry" and "trace_file" not in settings
    resource, scope, _span = spans[0]
    assert resource["service.name"].string_value == "triton-inference-server"
    assert resource["deployment"].string_value == "test"
    assert scope == "triton-server"
    traces = _by_trace(spans)
    assert set(traces) == {"h1", "g1", "h3"}
    for request_id, tree in traces.items():
        assert set(tree) == {"InferRequest", "add_sub", "compute"}
        root, model, compute = tree["InferRequest"], tree["add_sub"], tree["compute"]
        assert {s.kind for s in tree.values()} == {2}  # SPAN_KIND_SERVER
        assert model.parent_span_id == root.span_id and compute.parent_span_id == model.span_id
        assert len({s.trace_id for s in tree.values()}) == 1
        attributes = {a.key: a.value for a in model.attributes}
        assert list(attributes) == [
            "triton.model_name",
            "triton.model_version",
            "triton.trace_id",
            "triton.trace_parent_id",
            "triton.request_id",
        ]
        assert attributes["triton.model_name"].string_value == "add_sub"
        assert attributes["triton.model_version"].int_value == 1
        assert attributes["triton.trace_parent_id"].int_value == 0
        assert [e.name for e in model.events] == ["REQUEST_START", "QUEUE_START", "REQUEST_END"]
        assert [e.name for e in compute.events] == [
            "COMPUTE_START",
            "COMPUTE_INPUT_END",
            "COMPUTE_OUTPUT_START",
            "COMPUTE_END",
        ]
        # Nested in time as the events happened, inside the client's view of the run.
        assert before <= root.start_time_unix_nano <= model.start_time_unix_nano
        assert model.start_time_unix_nano <= compute.start_time_unix_nano
        assert compute.end_time_unix_nano <= model.end_time_unix_nano <= root.end_time_unix_nano
        assert root.end_time_unix_nano <= after
        for span in tree.values():
            stamps = [e.time_unix_nano for e in span.events]
            assert stamps == sorted(stamps), (request_id, span.name)
    assert traces["h1"]["InferRequest"].trace_id.hex() == TRACE_ID
    assert traces["h1"]["InferRequest"].parent_span_id.hex() == HTTP_PARENT
    assert traces["g1"]["InferRequest"].trace_id.hex() == TRACE_ID
    assert traces["g1"]["InferRequest"].parent_span_id.hex() == GRPC_PARENT
    lane_root = traces["h3"]["InferRequest"]
    assert lane_root.parent_span_id == b"" and lane_root.trace_id.hex() != TRACE_ID
    assert [e.name for e in lane_root.events] == [
        "HTTP_RECV_START",
        "HTTP_RECV_END",
        "INFER_RESPONSE_COMPLETE",
        "HTTP_SEND_START",
        "HTTP_SEND_END",
    ]


def test_models_get_their_spans_trace_context(tmp_path):
    """A traced request's model gets its model span's W3C context from
    request.trace().get_context(), as Triton 2.51 gives it (the differential is
    test_grpc_trace_children_triton.py): a lane's request, a BLS call made with
    trace=request.trace(), a client's traceparent's trace, an ensemble's step; a
    request not traced gets None."""
    repository = make_repository(tmp_path / "repo", trace_context_support.MODELS)
    with otlp_receiver.OtlpReceiver() as receiver:
        flags = trace_context_support.otel_flags(receiver.url)
        with NaiadServer(repository, log_dir=tmp_path, extra_args=flags) as server:
            seen = trace_context_support.send_requests(server.http_port, server.grpc_port)
            receiver.wait_for(trace_context_support.SPANS)
            time.sleep(0.3)  # nothing more comes
        spans = receiver.span_records()
    assert len(spans) == trace_context_support.SPANS
    trace_context_support.check_contexts(seen, spans)
