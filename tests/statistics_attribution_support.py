"""Shared by the statistics-attribution tests: a light load on add_sub over HTTP
(tritonclient), gRPC and raw HTTP, and the parts of the statistics extension it moved.

gRPC goes through naiad's own generated stubs: tritonclient.grpc cannot be imported in
the pytest process that imports naiad.protos (both register model_config.proto;
tests/grpc_clients/ runs the tritonclient.grpc tests apart)."""

from __future__ import annotations

import grpc
import numpy as np
import requests
import tritonclient.http as httpclient
from naiad.protos import grpc_service_pb2 as service_pb2
from naiad.protos import grpc_service_pb2_grpc as service_pb2_grpc

MODEL = "add_sub"
PARTS = ("queue", "compute_input", "compute_infer", "compute_output")
RAW_BODY = {
    "inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": [1.0] * 16},
        {"name": "INPUT1", "datatype": "FP32", "shape": [1, 16], "data": [2.0] * 16},
    ]
}


def _inputs():
    data = np.arange(16, dtype=np.float32).reshape(1, 16)
    inputs = [httpclient.InferInput(name, [1, 16], "FP32") for name in ("INPUT0", "INPUT1")]
    for item in inputs:
        item.set_data_from_numpy(data)
    return inputs


def _grpc_request() -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name=MODEL)
    data = np.arange(16, dtype=np.float32).tobytes()
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="FP32", shape=[1, 16])
        request.raw_input_contents.append(data)
    return request


def send_load(http_port: int, grpc_port: int, each: int) -> int:
    """`each` requests, one at a time, over tritonclient HTTP, tritonclient gRPC and raw
    HTTP; returns how many were sent (all answered 200 / OK)."""
    http = httpclient.InferenceServerClient(f"127.0.0.1:{http_port}")
    channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    try:
        for _ in range(each):
            http.infer(MODEL, _inputs())
            stub.ModelInfer(_grpc_request(), timeout=30)
            reply = requests.post(
                f"http://127.0.0.1:{http_port}/v2/models/{MODEL}/infer", json=RAW_BODY, timeout=30
            )
            assert reply.status_code == 200, reply.text
    finally:
        http.close()
        channel.close()
    return 3 * each


def inference_stats(http_port: int) -> dict:
    """The model's statistics (HTTP statistics extension) of its one version."""
    reply = requests.get(f"http://127.0.0.1:{http_port}/v2/models/{MODEL}/stats", timeout=30)
    assert reply.status_code == 200, reply.text
    (model,) = reply.json()["model_stats"]
    return model


def grpc_inference_stats(grpc_port: int) -> dict:
    """As inference_stats' inference_stats, through gRPC ModelStatistics."""
    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        reply = stub.ModelStatistics(service_pb2.ModelStatisticsRequest(name=MODEL), timeout=30)
    (model,) = reply.model_stats
    stats = model.inference_stats
    return {
        field.name: {"count": value.count, "ns": value.ns} for field, value in stats.ListFields()
    }


def moved(before: dict, after: dict, name: str) -> tuple[int, int]:
    """(count, ns) that inference_stats' `name` gained between two reads."""
    return (
        after[name]["count"] - before[name]["count"],
        after[name]["ns"] - before[name]["ns"],
    )


def covered_share(before: dict, after: dict) -> float:
    """The share of the requests' duration (success ns) that queue and compute cover."""
    success = moved(before, after, "success")[1]
    return sum(moved(before, after, part)[1] for part in PARTS) / success
