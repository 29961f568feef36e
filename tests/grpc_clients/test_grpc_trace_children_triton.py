"""Child traces against the real Triton 2.51 (where installed, tests/triton_peer.py):
each step of a traced ensemble request and each BLS call made with
trace=request.trace() is a trace of its own with its parent's trace id as parent_id
(a BLS call without trace= is not traced), written with its root's trace, in Triton's
order; trace_rate counts the requests clients sent, log_frequency whole trees.
Compared field by field (ids, model, version, request id, parent_id, timestamp names;
not the timestamps' values) over HTTP and gRPC, in modes triton and opentelemetry."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import numpy as np
import pytest
import trace_context_support
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from server_harness import NaiadServer, make_repository
from triton_peer import TritonPeer, needs_triton

pytestmark = [
    pytest.mark.timeout(300),
    needs_triton,
]

PIPELINES = Path(__file__).resolve().parent.parent / "pipeline_models"
MIXED = "add_sub,add_sub:untraced,ensemble_add_sub"  # traced, untraced, a traced ensemble

# (protocol, model, request id, the BLS model's calls). With trace_rate 2 the second of
# each pair is traced (the global setting's one count, over both models and protocols).
_REQUESTS = [
    ("http", "ensemble_add_sub", "e0", None),
    ("http", "ensemble_add_sub", "e1", None),
    ("http", "bls_trace", "b0", "add_sub"),
    ("http", "bls_trace", "b1", "add_sub"),
    ("grpc", "ensemble_add_sub", "e2", None),
    ("grpc", "ensemble_add_sub", "e3", None),
    ("grpc", "bls_trace", "b2", MIXED),
    ("grpc", "bls_trace", "b3", MIXED),
]


def _repository(root: Path) -> Path:
    return make_repository(
        root,
        {
            "add_sub": None,
            "ensemble_add_sub": PIPELINES / "ensemble_add_sub",
            "bls_trace": PIPELINES / "bls_trace",
        },
    )


def _send(http_port: int, grpc_port: int) -> list:
    """Sends _REQUESTS in order; the CONTEXT each BLS answer carried."""
    data = np.arange(16, dtype=np.float32).reshape(1, 16)
    clients = {
        "http": (httpclient, httpclient.InferenceServerClient(f"127.0.0.1:{http_port}")),
        "grpc": (grpcclient, grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")),
    }
    contexts = []
    for protocol, model, request_id, calls in _REQUESTS:
        module, client = clients[protocol]
        inputs = [module.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(data)
        parameters = {"calls": calls} if calls else None
        result = client.infer(model, inputs, request_id=request_id, parameters=parameters)
        np.testing.assert_allclose(result.as_numpy("OUTPUT0"), 2 * data)
        if model == "bls_trace":
            contexts.append(result.as_numpy("CONTEXT").item())
    for _module, client in clients.values():
        client.close()
    return contexts


def _trees(path: Path) -> list:
    """A trace file as Triton's reader sees it: per trace in file order, its id, its
    model record and its timestamp names (sorted: a trace's own records are in the
    order its events were reported, which differs between front ends)."""
    out = []
    by_id: dict = {}
    for record in json.loads(path.read_text()):
        trace = by_id.get(record["id"])
        if trace is None:
            trace = by_id[record["id"]] = {"id": record["id"], "model": None, "stamps": []}
            out.append(trace)
        if "model_name" in record:
            trace["model"] = record
        trace["stamps"] += [stamp["name"] for stamp in record.get("timestamps", [])]
        assert all(type(stamp["ns"]) is int for stamp in record.get("timestamps", []))
    for trace in out:
        trace["stamps"].sort()
    return out


def test_child_traces_in_the_trace_file_as_triton(tmp_path):
    repository = _repository(tmp_path / "repo")
    flags = ["--trace-config", "level=TIMESTAMPS", "--trace-config", "rate=2"]
    flags += ["--trace-config", "triton,log-frequency=2"]
    files = {}
    for name in ("triton", "naiad"):
        (tmp_path / name).mkdir()
        files[name] = tmp_path / name / "trace.json"
    args = ["--trace-config", f"triton,file={files['triton']}", *flags]
    with TritonPeer(repository, tmp_path, args) as triton:
        theirs_contexts = _send(triton.http_port, triton.grpc_port)
        triton.process.send_signal(signal.SIGTERM)
        triton.process.wait(60)
    args = ["--trace-config", f"triton,file={files['naiad']}", *flags]
    with NaiadServer(repository, log_dir=tmp_path, extra_args=args) as server:
        ours_contexts = _send(server.http_port, server.grpc_port)
        assert server.stop() == 0
    # In mode triton a model sees no trace context (get_context() is None).
    assert ours_contexts == theirs_contexts == [b""] * 4
    chunks = {}
    for name, path in files.items():
        chunks[name] = [_trees(Path(f"{path}.{i}")) for i in (0, 1)]
        assert not Path(f"{path}.2").exists()
    ours, theirs = chunks["naiad"], chunks["triton"]
    # Two trees per file: e1 and b1, then e3 and b3.
    roots = [[t["model"]["request_id"] for t in c if "parent_id" not in t["model"]] for c in ours]
    assert roots == [["e1", "b1"], ["e3", "b3"]]
    for mine, their in zip(ours, theirs):
        assert [t["id"] for t in mine] == [t["id"] for t in their]
        for one, other in zip(mine, their):
            assert one["model"] == other["model"], one["id"]
            assert one["stamps"] == other["stamps"], one["id"]
    # The nested tree: b3's traced calls (add_sub; the ensemble, whose steps are its
    # children), newest first, the request's own trace last.
    b3 = [(t["model"]["model_name"], t["model"].get("parent_id")) for t in ours[1][3:]]
    assert b3 == [
        ("add_sub", 11),
        ("add_sub", 11),
        ("ensemble_add_sub", 9),
        ("add_sub", 9),
        ("bls_trace", None),
    ]


def _tensor_trees(path: Path) -> list:
    """At level TENSORS alone a trace is its tensor records: per trace in file order, its
    id and its records as (activity, name, dtype, shape, data), sorted (the order of a
    trace's inputs is the order of Triton's hash maps, see README's Differences)."""
    out, by_id = [], {}
    for record in json.loads(path.read_text()):
        assert set(record) == {"id", "activity", "tensor"}, record
        if record["id"] not in by_id:
            by_id[record["id"]] = []
            out.append((record["id"], by_id[record["id"]]))
        tensor = record["tensor"]
        by_id[record["id"]].append(
            (record["activity"], tensor["name"], tensor["dtype"], tensor["shape"], tensor["data"])
        )
    return [(trace_id, sorted(records)) for trace_id, records in out]


def test_child_traces_tensors_as_triton(tmp_path):
    """Level TENSORS: every trace of a tree (the ensemble's steps, the BLS calls, an
    ensemble a BLS model calls and its steps) has its inputs as queued and its outputs,
    as Triton writes them."""
    repository = _repository(tmp_path / "repo")
    flags = ["--trace-config", "level=TENSORS", "--trace-config", "rate=1"]
    files = {}
    for name in ("triton", "naiad"):
        (tmp_path / name).mkdir()
        files[name] = tmp_path / name / "trace.json"

    def send(http_port: int, grpc_port: int) -> None:
        data = np.arange(16, dtype=np.float32).reshape(1, 16)
        other = np.full((1, 16), 3, dtype=np.float32)
        for module, url, model, calls in (
            (httpclient, f"127.0.0.1:{http_port}", "ensemble_add_sub", None),
            (grpcclient, f"127.0.0.1:{grpc_port}", "bls_trace", MIXED),
        ):
            client = module.InferenceServerClient(url)
            inputs = [module.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
            inputs[0].set_data_from_numpy(data)
            inputs[1].set_data_from_numpy(other)
            parameters = {"calls": calls} if calls else None
            client.infer(model, inputs, parameters=parameters)
            client.close()

    with TritonPeer(
        repository, tmp_path, ["--trace-config", f"triton,file={files['triton']}", *flags]
    ) as triton:
        send(triton.http_port, triton.grpc_port)
        triton.process.send_signal(signal.SIGTERM)
        triton.process.wait(60)
    args = ["--trace-config", f"triton,file={files['naiad']}", *flags]
    with NaiadServer(repository, log_dir=tmp_path, extra_args=args) as server:
        send(server.http_port, server.grpc_port)
        assert server.stop() == 0
    ours, theirs = _tensor_trees(files["naiad"]), _tensor_trees(files["triton"])
    # The ensemble and its 2 steps; bls_trace, its traced add_sub call, its traced
    # ensemble call and that ensemble's 2 steps (the untraced call has no trace).
    assert len(ours) == 8
    assert all(
        {activity for activity, *_ in records} == {"TENSOR_QUEUE_INPUT", "TENSOR_BACKEND_OUTPUT"}
        for _id, records in ours
    )
    assert ours == theirs


def _span_tree(spans) -> dict:
    """request id of each root -> its spans as (depth, name, attributes, event names),
    depth first, children in start order."""
    by_parent: dict = {}
    for span in spans:
        by_parent.setdefault(span["parent"], []).append(span)
    for children in by_parent.values():
        children.sort(key=lambda s: (s["start"], s["name"] == "compute"))

    def walk(span, depth, out):
        out.append((depth, span["name"], span["attributes"], span["events"]))
        for child in by_parent.get(span["id"], []):
            walk(child, depth + 1, out)
        return out

    trees = {}
    for root in by_parent.get(b"", []):
        tree = walk(root, 0, [])
        trees[tree[1][2]["triton.request_id"]] = tree
    return trees


def _otel_requests(http_port: int, grpc_port: int) -> None:
    data = np.arange(16, dtype=np.float32).reshape(1, 16)
    for module, url, request_id, model, calls in (
        (httpclient, f"127.0.0.1:{http_port}", "h", "ensemble_add_sub", None),
        (grpcclient, f"127.0.0.1:{grpc_port}", "g", "bls_trace", MIXED),
    ):
        client = module.InferenceServerClient(url)
        inputs = [module.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(data)
        parameters = {"calls": calls} if calls else None
        client.infer(model, inputs, request_id=request_id, parameters=parameters)
        client.close()


def test_child_spans_as_triton(tmp_path):
    otlp_receiver = pytest.importorskip("otlp_receiver", reason="opentelemetry-proto is missing")
    pytest.importorskip("opentelemetry.sdk", reason="the OpenTelemetry SDK is not installed")
    repository = _repository(tmp_path / "repo")
    trees = {}
    for name in ("triton", "naiad"):
        with otlp_receiver.OtlpReceiver() as receiver:
            flags = ["--trace-config", "mode=opentelemetry", "--trace-config", "rate=1"]
            flags += ["--trace-config", "level=TIMESTAMPS"]
            flags += ["--trace-config", f"opentelemetry,url={receiver.url}"]
            flags += ["--trace-config", "opentelemetry,bsp_schedule_delay=100"]
            if name == "triton":
                with TritonPeer(repository, tmp_path, flags) as triton:
                    _otel_requests(triton.http_port, triton.grpc_port)
                    triton.process.send_signal(signal.SIGTERM)
                    triton.process.wait(60)
                spans = receiver.json_span_records()
            else:
                with NaiadServer(repository, log_dir=tmp_path, extra_args=flags) as server:
                    _otel_requests(server.http_port, server.grpc_port)
                    receiver.wait_for(6 + 9)  # h: 2 + 2 steps x 2; g: 3 + 2 + 1 + 2 x 2
                    time.sleep(0.3)
                spans = receiver.span_records()
        trees[name] = _span_tree(spans)
    assert set(trees["naiad"]) == {"h", "g"}
    assert trees["naiad"] == trees["triton"]


def test_models_get_their_spans_trace_context_as_triton(tmp_path):
    """In mode opentelemetry a traced request's model gets its model span's W3C context
    from request.trace().get_context() (tests/trace_context_support.py), in Triton 2.51
    as in Naiad: the same requests, each checked against its own server's spans."""
    otlp_receiver = pytest.importorskip("otlp_receiver", reason="opentelemetry-proto is missing")
    pytest.importorskip("opentelemetry.sdk", reason="the OpenTelemetry SDK is not installed")
    repository = make_repository(tmp_path / "repo", trace_context_support.MODELS)
    for name in ("triton", "naiad"):
        with otlp_receiver.OtlpReceiver() as receiver:
            flags = trace_context_support.otel_flags(receiver.url)
            if name == "triton":
                with TritonPeer(repository, tmp_path, flags) as triton:
                    seen = trace_context_support.send_requests(triton.http_port, triton.grpc_port)
                    triton.process.send_signal(signal.SIGTERM)
                    triton.process.wait(60)
                spans = receiver.json_span_records()
            else:
                with NaiadServer(repository, log_dir=tmp_path, extra_args=flags) as server:
                    seen = trace_context_support.send_requests(server.http_port, server.grpc_port)
                    receiver.wait_for(trace_context_support.SPANS)
                    time.sleep(0.3)
                spans = receiver.span_records()
        assert len(spans) == trace_context_support.SPANS, name
        trace_context_support.check_contexts(seen, spans)
