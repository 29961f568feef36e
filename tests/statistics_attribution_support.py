"""Shared by the statistics-attribution tests: a light load on add_sub over HTTP and
gRPC (tritonclient) and raw HTTP, and the parts of the statistics extension it moved."""

from __future__ import annotations

import numpy as np
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

MODEL = "add_sub"
PARTS = ("queue", "compute_input", "compute_infer", "compute_output")
RAW_BODY = {
    "inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": [1.0] * 16},
        {"name": "INPUT1", "datatype": "FP32", "shape": [1, 16], "data": [2.0] * 16},
    ]
}


def _inputs(module):
    data = np.arange(16, dtype=np.float32).reshape(1, 16)
    inputs = [module.InferInput(name, [1, 16], "FP32") for name in ("INPUT0", "INPUT1")]
    for item in inputs:
        item.set_data_from_numpy(data)
    return inputs


def send_load(http_port: int, grpc_port: int, each: int) -> int:
    """`each` requests, one at a time, over tritonclient HTTP, tritonclient gRPC and raw
    HTTP; returns how many were sent (all answered 200 / OK)."""
    http = httpclient.InferenceServerClient(f"127.0.0.1:{http_port}")
    grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
    try:
        for _ in range(each):
            http.infer(MODEL, _inputs(httpclient))
            grpc.infer(MODEL, _inputs(grpcclient))
            reply = requests.post(
                f"http://127.0.0.1:{http_port}/v2/models/{MODEL}/infer", json=RAW_BODY, timeout=30
            )
            assert reply.status_code == 200, reply.text
    finally:
        http.close()
        grpc.close()
    return 3 * each


def inference_stats(http_port: int) -> dict:
    """The model's statistics (HTTP statistics extension) of its one version."""
    reply = requests.get(f"http://127.0.0.1:{http_port}/v2/models/{MODEL}/stats", timeout=30)
    assert reply.status_code == 200, reply.text
    (model,) = reply.json()["model_stats"]
    return model


def grpc_inference_stats(grpc_port: int) -> dict:
    """As inference_stats, through gRPC ModelStatistics (tritonclient's JSON form)."""
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
    try:
        (model,) = client.get_inference_statistics(MODEL, as_json=True)["model_stats"]
    finally:
        client.close()
    # protobuf's JSON form: uint64 as strings, zero fields left out.
    return {
        name: {"count": int(value.get("count", 0)), "ns": int(value.get("ns", 0))}
        for name, value in model["inference_stats"].items()
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
