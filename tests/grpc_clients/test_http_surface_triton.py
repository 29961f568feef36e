"""Differential checks of the HTTP surface against the real Triton 2.51 (runs where it
is installed, tests/triton_peer.py): classification (HTTP and gRPC), response
compression, header forwarding, the server's extensions and restricted APIs. The
same requests to both servers get the same status, the same headers a client reads
and the same body bytes."""

from __future__ import annotations

import json

import numpy as np
import requests
import tritonclient.grpc as grpcclient
from server_harness import NaiadServer
from surface_support import (
    CLASSIFICATION_CASES,
    COMPRESSION_CASES,
    READ_HEADERS,
    SURFACE_MODELS,
    exchange,
    infer_request,
    tensor,
)
from triton_peer import TritonPeer, needs_triton
from tritonclient.utils import InferenceServerException

pytestmark = needs_triton

FORWARD = ["--http-header-forward-pattern=x-fwd.*", "--grpc-header-forward-pattern=x-fwd.*"]

# Restrictions on every category but HTTP health (both harnesses wait on it unasked;
# tests/test_http_surface.py restricts it on Naiad), with two keys.
HTTP_RESTRICTED = [
    "--http-restricted-api=inference:infer-key=secret",
    "--http-restricted-api=metadata,model-config,statistics,shared-memory,"
    "model-repository,trace,logging:admin-key=root",
]
GRPC_RESTRICTED = [
    "--grpc-restricted-protocol=inference,health,metadata:infer-key=secret",
    "--grpc-restricted-protocol=model-config,statistics,shared-memory,model-repository:other=x",
]


def _answer(reply: tuple[int, dict, bytes]) -> tuple:
    status, headers, body = reply
    return status, {h: headers.get(h) for h in READ_HEADERS}, body


def _http_answers(url: str) -> list:
    answers = []
    for name, model, doc in CLASSIFICATION_CASES:
        answers.append((name, _answer(exchange(url, infer_request(model, doc)))))
    for name, doc, accept in COMPRESSION_CASES:
        request = infer_request("classes", doc, f"Accept-Encoding: {accept}\r\n")
        answers.append((name, _answer(exchange(url, request))))
    # Only inference responses are compressed: not the metadata.
    status, headers, _ = exchange(
        url, b"GET /v2 HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n"
    )
    answers.append(("metadata not compressed", (status, headers.get("content-encoding"))))
    forwarded = {"inputs": [tensor("IN_FP32", "FP32", [1, 1], [1])], "outputs": [{"name": "ECHO"}]}
    for name, headers, doc in [
        (
            "forwarded, names as sent",
            "X-Fwd-One: Va\r\nx-fwd-two: vb\r\nX-FWD-three: c\r\nx-other: no\r\nmy-x-fwd: m\r\n",
            forwarded,
        ),
        (
            "forwarded with a parameter",
            "X-Fwd-One: Va\r\n",
            {**forwarded, "parameters": {"x-fwd-one": 5}},
        ),
        ("forwarded twice", "X-Fwd-One: Va\r\nX-Fwd-One: Vb\r\n", forwarded),
    ]:
        answers.append((name, _answer(exchange(url, infer_request("classes", doc, headers)))))
    return answers


def _grpc_answers(url: str) -> list:
    client = grpcclient.InferenceServerClient(url)
    answers = []

    def infer(model, name, datatype, array, output, count, headers=None):
        tensor_in = grpcclient.InferInput(name, list(array.shape), datatype)
        tensor_in.set_data_from_numpy(array)
        requested = grpcclient.InferRequestedOutput(output, class_count=count)
        try:
            result = client.infer(model, [tensor_in], outputs=[requested], headers=headers)
        except InferenceServerException as exc:
            return exc.status(), exc.message()
        out = result.get_response().outputs[0]
        return out.datatype, list(out.shape), result.as_numpy(output).tolist()

    rows = np.array([[0.5, 2.25, -1, 2.25, 7, 0.1]], dtype=np.float32)
    answers.append(infer("classes", "IN_FP32", "FP32", rows, "OUT_FP32", 3))
    answers.append(
        infer("classes", "IN_FP32", "FP32", np.ones((1, 20), np.float32), "OUT_FP32", 20)
    )
    answers.append(infer("classes_nobatch", "IN_FP32", "FP32", rows[0], "OUT_FP32", 9))
    answers.append(
        infer("classes", "IN_INT32", "INT32", np.array([[4, -1]], np.int32), "OUT_INT32", 1)
    )
    answers.append(infer("classes", "IN_BOOL", "BOOL", np.array([[True, False]]), "OUT_BOOL", 1))
    # Metadata reaches the model (as keys are sent on the wire: lower case).
    echo = infer("classes", "IN_FP32", "FP32", rows, "ECHO", 0, {"x-fwd-a": "1", "other": "2"})
    answers.append(echo)
    client.close()
    return answers


def test_classification_compression_forwarding_as_triton(tmp_path):
    with TritonPeer(SURFACE_MODELS, tmp_path, FORWARD) as triton:
        theirs_http = _http_answers(triton.url)
        theirs_grpc = _grpc_answers(f"127.0.0.1:{triton.grpc_port}")
        theirs_extensions = json.loads(
            exchange(triton.url, b"GET /v2 HTTP/1.1\r\nHost: x\r\n\r\n")[2]
        )
    with NaiadServer(SURFACE_MODELS, log_dir=tmp_path, extra_args=FORWARD) as naiad:
        ours_http = _http_answers(naiad.url)
        ours_grpc = _grpc_answers(f"127.0.0.1:{naiad.grpc_port}")
        ours_extensions = json.loads(exchange(naiad.url, b"GET /v2 HTTP/1.1\r\nHost: x\r\n\r\n")[2])
    for (name, theirs), (_, ours) in zip(theirs_http, ours_http):
        assert ours == theirs, name
    assert ours_grpc == theirs_grpc
    # What Naiad lists is what Triton lists, in its order, less what is not built yet.
    listed = ours_extensions["extensions"]
    assert listed == [e for e in theirs_extensions["extensions"] if e in listed]


def _restricted_http(url: str) -> list:
    answers = []
    paths = [
        "GET /v2/health/live",
        "GET /v2/health/ready",
        "GET /v2",
        "GET /v2/models/classes",
        "GET /v2/models/classes/ready",
        "GET /v2/models/classes/config",
        "GET /v2/models/classes/stats",
        "GET /v2/models/stats",
        "GET /v2/systemsharedmemory/status",
        "POST /v2/repository/index",
        "GET /v2/nothing",
        "PUT /v2/health/live",
    ]
    for line in paths:
        method, path = line.split()
        for headers in [
            "",
            "infer-key: secret\r\n",
            "Infer-Key: secret\r\n",
            "infer-key: wrong\r\n",
            "admin-key: root\r\n",
        ]:
            request = f"{method} {path} HTTP/1.1\r\nHost: x\r\n{headers}Content-Length: 0\r\n\r\n"
            status, head, body = exchange(url, request.encode())
            # What was let through differs by server (names, versions, stats, a 405's
            # content type): its status is compared, a refusal whole.
            denied = status == 403
            answers.append(
                (
                    line,
                    headers,
                    status,
                    head.get("content-type") if denied else "",
                    body if denied else b"",
                )
            )
    doc = {"inputs": [tensor("IN_FP32", "FP32", [1, 2], [1, 2])], "outputs": [{"name": "OUT_FP32"}]}
    for headers in ["", "infer-key: secret\r\n", "infer-key: nope\r\n"]:
        answers.append(
            ("infer", headers, _answer(exchange(url, infer_request("classes", doc, headers))))
        )
    return answers


def _restricted_grpc(url: str) -> list:
    client = grpcclient.InferenceServerClient(url)
    answers = []
    calls = {
        "live": lambda h: client.is_server_live(headers=h),
        "metadata": lambda h: client.get_server_metadata(headers=h).extensions[:0],
        "config": lambda h: client.get_model_config("classes", headers=h).config.name,
        "statistics": lambda h: len(
            client.get_inference_statistics("classes", headers=h).model_stats
        ),
        "index": lambda h: len(client.get_model_repository_index(headers=h).models),
        "shm": lambda h: len(client.get_system_shared_memory_status(headers=h).regions),
    }
    array = np.array([[1, 2]], np.float32)
    tensor_in = grpcclient.InferInput("IN_FP32", [1, 2], "FP32")
    tensor_in.set_data_from_numpy(array)
    calls["infer"] = lambda h: (
        client.infer("classes", [tensor_in], headers=h).as_numpy("OUT_FP32").tolist()
    )
    for headers in [
        None,
        {"triton-grpc-protocol-infer-key": "secret"},
        {"infer-key": "secret"},
        {"triton-grpc-protocol-other": "x"},
    ]:
        for name, call in calls.items():
            try:
                answers.append((name, headers, call(headers)))
            except InferenceServerException as exc:
                answers.append((name, headers, exc.status(), exc.message()))
    client.close()
    return answers


def test_restricted_apis_as_triton(tmp_path):
    flags = HTTP_RESTRICTED + GRPC_RESTRICTED
    with TritonPeer(SURFACE_MODELS, tmp_path, flags) as triton:
        theirs_http = _restricted_http(triton.url)
        theirs_grpc = _restricted_grpc(f"127.0.0.1:{triton.grpc_port}")
    with NaiadServer(SURFACE_MODELS, log_dir=tmp_path, extra_args=flags) as naiad:
        ours_http = _restricted_http(naiad.url)
        before = requests.get(f"{naiad.url}/v2/naiad/lanes", timeout=30).json()
        ours_grpc = _restricted_grpc(f"127.0.0.1:{naiad.grpc_port}")
        after = requests.get(f"{naiad.url}/v2/naiad/lanes", timeout=30).json()
    # The infer calls are the C++ loop's: one served, three refused (UNAVAILABLE).
    assert after["io_loop_requests"] == before["io_loop_requests"] + 1
    assert after["lane_refused"] == before["lane_refused"] + 3
    assert after["general_requests"] == before["general_requests"]
    for theirs, ours in zip(theirs_http, ours_http):
        assert ours == theirs
    for theirs, ours in zip(theirs_grpc, ours_grpc):
        assert ours == theirs
