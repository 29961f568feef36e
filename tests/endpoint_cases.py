"""Requests to the SageMaker and Vertex AI endpoints (http/endpoint_routes.py) for the
black-box and differential tests: each case is sent with http.client on a connection
kept across the cases, and answered as (status, content type, body)."""

from __future__ import annotations

import http.client
import json

from model_control_support import add_sub_binary_request

__all__ = ["INFER", "answer_of", "binary_infer", "sagemaker_cases", "send_all", "vertex_cases"]

INFER = {
    "inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": list(range(16))},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": [1] * 16},
    ]
}
SAGEMAKER_BINARY = "application/vnd.sagemaker-triton.binary+json;json-header-size="
VERTEX_BINARY = "application/vnd.vertex-ai-triton.binary+json;json-header-size="


def binary_infer() -> tuple[bytes, int]:
    """An add_sub request with binary inputs (INPUT0 zeros, INPUT1 ones) and a binary
    OUTPUT0: (body, JSON size)."""
    body, headers = add_sub_binary_request(0.0)
    return body, int(headers["Inference-Header-Content-Length"])


def sagemaker_cases() -> list[tuple[str, str, str, bytes, dict]]:
    """(case, method, path, body, headers)."""
    body = json.dumps(INFER).encode()
    binary, size = binary_infer()
    return [
        ("ping", "GET", "/ping", b"", {}),
        ("ping POST", "POST", "/ping", b"", {}),
        ("invocations", "POST", "/invocations", body, {}),
        ("invocations query", "POST", "/invocations?x=1", body, {}),
        ("invocations GET", "GET", "/invocations", b"", {}),
        ("invocations no inputs", "POST", "/invocations", b'{"inputs":[]}', {}),
        ("invocations binary", "POST", "/invocations", binary, {"Content-Type": SAGEMAKER_BINARY + str(size)}),
        ("invocations header size too large", "POST", "/invocations", binary, {"Content-Type": SAGEMAKER_BINARY + "99999"}),
        ("invocations binary type not first", "POST", "/invocations", binary, {"Content-Type": "text/x; " + SAGEMAKER_BINARY + "5"}),
        ("invocations gzip ignored", "POST", "/invocations", body, {"Accept-Encoding": "gzip"}),
        ("invocations chunked", "POST", "/invocations", [body[:7], body[7:]], {}),
        ("invocations binary chunked", "POST", "/invocations", [binary[:9], binary[9:]], {"Content-Type": SAGEMAKER_BINARY + str(size)}),
        ("invocations trailing slash", "POST", "/invocations/", body, {}),
        ("models", "GET", "/models", b"", {}),
        ("model", "GET", "/models/add_sub", b"", {}),
        ("model invoke", "POST", "/models/add_sub/invoke", body, {}),
        ("model unload", "DELETE", "/models/add_sub", b"", {}),
        ("models PUT", "PUT", "/models", b"", {}),
        ("KServe path", "GET", "/v2/health/ready", b"", {}),
        ("unknown path", "GET", "/nothing", b"", {}),
    ]  # fmt: skip


def vertex_cases() -> list[tuple[str, str, str, bytes, dict]]:
    body = json.dumps(INFER).encode()
    binary, size = binary_infer()
    redirect = "X-Vertex-Ai-Triton-Redirect"
    return [
        ("health", "GET", "/health", b"", {}),
        ("health POST", "POST", "/health", b"", {}),
        ("predict", "POST", "/predict", body, {}),
        ("predict GET", "GET", "/predict", b"", {}),
        ("predict no inputs", "POST", "/predict", b'{"inputs":[]}', {}),
        ("predict binary", "POST", "/predict", binary, {"Content-Type": VERTEX_BINARY + str(size)}),
        ("redirect ready", "POST", "/predict", b"", {redirect: "v2/models/add_sub/ready"}),
        ("redirect GET", "GET", "/predict", b"", {redirect: "v2/models/add_sub/ready"}),
        ("redirect unknown action", "POST", "/predict", b"", {redirect: "v2/models/add_sub/nothing"}),
        ("redirect unknown model", "POST", "/predict", b"", {redirect: "v2/models/nothing/ready"}),
        ("redirect live", "POST", "/predict", b"", {redirect: "v2/health/live"}),
        ("redirect infer", "POST", "/predict", body, {redirect: "v2/models/add_sub/infer"}),
        ("redirect index", "POST", "/predict", b"", {redirect: "v2/repository/index"}),
        ("redirect shm status", "POST", "/predict", b"", {redirect: "v2/systemsharedmemory/status"}),
        ("predict chunked", "POST", "/predict", [body[:5], body[5:]], {}),
        ("redirect unknown model bad binary type", "POST", "/predict", binary, {redirect: "v2/models/nothing/infer", "Content-Type": "x;" + VERTEX_BINARY + "1"}),
        ("unknown path", "GET", "/nothing", b"", {}),
    ]  # fmt: skip


def answer_of(response: http.client.HTTPResponse) -> tuple:
    body = response.read()
    kind = response.getheader("Content-Type")
    try:
        parsed = json.loads(body) if body else None
    except ValueError:
        parsed = body  # a binary answer: compared byte for byte
    return response.status, kind, parsed


def send_all(port: int, cases) -> dict:
    """Each case on one kept-alive connection: {case: (status, content type, body)}. A
    body given as a list of parts is sent chunked, a part a chunk."""
    answers = {}
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        for name, method, path, body, headers in cases:
            chunked = isinstance(body, list)
            connection.request(
                method, path, body=body or None, headers=headers, encode_chunked=chunked
            )
            answers[name] = answer_of(connection.getresponse())
    finally:
        connection.close()
    return answers
