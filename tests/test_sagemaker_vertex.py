"""The SageMaker and Vertex AI endpoints of `naiad serve` (http/endpoint_routes.py,
csrc/http1/endpoint_routes.h), black-box: real servers started with Triton's flags and
environment, raw HTTP sent to their ports. tests/test_sagemaker_vertex_triton.py compares
the same requests with Triton 2.51."""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import struct
import subprocess
import sys
import time

import pytest
import requests
from endpoint_cases import INFER, SAGEMAKER_BINARY, VERTEX_BINARY, binary_infer, send_all
from server_harness import NaiadServer, _free_ports, make_repository


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    return make_repository(tmp_path_factory.mktemp("repo"), ["add_sub"])


@pytest.fixture(scope="module")
def sagemaker(repository, tmp_path_factory):
    """A server with the SageMaker endpoint on `server.sagemaker_port`."""
    port = _free_ports(1)[0]
    saved = os.environ.get("SAGEMAKER_TRITON_DEFAULT_MODEL_NAME")
    os.environ["SAGEMAKER_TRITON_DEFAULT_MODEL_NAME"] = "add_sub"
    try:
        server = NaiadServer(
            repository,
            log_dir=tmp_path_factory.mktemp("logs"),
            extra_args=["--allow-sagemaker=true", f"--sagemaker-port={port}"],
        )
        server.start()
    finally:
        if saved is None:
            del os.environ["SAGEMAKER_TRITON_DEFAULT_MODEL_NAME"]
        else:
            os.environ["SAGEMAKER_TRITON_DEFAULT_MODEL_NAME"] = saved
    server.sagemaker_port = port
    yield server
    server.stop()


def _exchange(port: int, data: bytes, pieces: int = 1) -> bytes:
    """Sends `data` in `pieces` writes and reads until the server closes or is quiet."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        step = max(1, len(data) // pieces)
        for at in range(0, len(data), step):
            sock.sendall(data[at : at + step])
        sock.shutdown(socket.SHUT_WR)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
        return received


def test_invocations_infer_the_default_model(sagemaker):
    url = f"http://127.0.0.1:{sagemaker.sagemaker_port}"
    assert requests.get(url + "/ping", timeout=10).status_code == 200
    reply = requests.post(url + "/invocations", json=INFER, timeout=30)
    assert reply.status_code == 200, reply.text
    outputs = {o["name"]: o["data"] for o in reply.json()["outputs"]}
    assert outputs["OUTPUT0"] == [float(i + 1) for i in range(16)]
    assert outputs["OUTPUT1"] == [float(i - 1) for i in range(16)]
    # The same request on the HTTP port: the endpoint adds nothing there.
    direct = requests.post(sagemaker.url + "/v2/models/add_sub/infer", json=INFER, timeout=30)
    assert direct.json() == reply.json()
    assert requests.get(sagemaker.url + "/ping", timeout=10).status_code == 404


def test_binary_bodies_use_the_sagemaker_content_type(sagemaker):
    body, size = binary_infer()
    reply = requests.post(
        f"http://127.0.0.1:{sagemaker.sagemaker_port}/invocations",
        data=body,
        headers={"Content-Type": SAGEMAKER_BINARY + str(size)},
        timeout=30,
    )
    assert reply.status_code == 200, reply.text
    kind = reply.headers["Content-Type"]
    assert kind.startswith(SAGEMAKER_BINARY)
    assert "Inference-Header-Content-Length" not in reply.headers
    header_size = int(kind[len(SAGEMAKER_BINARY) :])
    header = json.loads(reply.content[:header_size])
    assert header["outputs"][0]["parameters"] == {"binary_data_size": 64}
    assert struct.unpack("16f", reply.content[header_size:]) == (1.0,) * 16


def test_pipelined_requests_with_heads_split_across_reads(sagemaker):
    infer = json.dumps(INFER).encode()
    data = (
        b"POST /invocations HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(infer)
        + infer
        + b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n"
        + b"GET /models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    received = _exchange(sagemaker.sagemaker_port, data, pieces=7)
    statuses = re.findall(rb"HTTP/1\.1 \d+ [^\r]*\r\n", received)
    assert statuses == [b"HTTP/1.1 200 OK\r\n"] * 3, received
    assert b'"model_name":"add_sub"' in received
    assert received.endswith(b'{"models":[]}')


def test_chunked_bodies_are_read_and_head_requests_refused(sagemaker):
    port = sagemaker.sagemaker_port
    infer = json.dumps(INFER).encode()
    chunks = b"".join(
        b"%x;ext=1\r\n%s\r\n" % (len(part), part) for part in (infer[:10], infer[10:])
    )
    received = _exchange(
        port,
        b"POST /invocations HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        + chunks
        + b"0\r\nX-Trailer: 1\r\n\r\n"
        # The next request is the endpoint's too: a KServe path gets Triton's 400.
        + b"GET /v2/repository/index HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        pieces=9,
    )
    statuses = re.findall(rb"HTTP/1\.1 \d+ [^\r]*\r\n", received)
    assert statuses == [b"HTTP/1.1 200 OK\r\n", b"HTTP/1.1 400 Bad Request\r\n"], received
    assert b'"model_name":"add_sub"' in received
    # Broken chunk framing: the KServe reader's 400, and nothing after it is read.
    received = _exchange(
        port,
        b"POST /invocations HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"zz\r\n{}\r\n0\r\n\r\nGET /ping HTTP/1.1\r\n\r\n",
    )
    assert received.startswith(b"HTTP/1.1 400 "), received
    assert received.count(b"HTTP/1.1") == 1
    assert _exchange(
        port, b"HEAD /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    ).startswith(b"HTTP/1.1 405 ")
    # A server still serving.
    assert requests.get(f"http://127.0.0.1:{port}/ping", timeout=10).status_code == 200


def test_the_internal_reply_route_needs_its_header(sagemaker):
    reply = requests.get(sagemaker.url + "/v2/naiad/endpoint_reply/200", timeout=10)
    assert reply.status_code == 200 and reply.content == b""
    assert requests.get(sagemaker.url + "/v2/naiad/endpoint_reply/x", timeout=10).status_code == 404


def test_vertex_ai_in_a_prediction_container(repository, tmp_path, monkeypatch):
    """AIP_MODE=PREDICTION: the Vertex AI endpoint on AIP_HTTP_PORT with the one model,
    and no HTTP port (Triton's defaults there)."""
    port = _free_ports(1)[0]
    for name, value in {
        "AIP_MODE": "PREDICTION",
        "AIP_HTTP_PORT": str(port),
        "AIP_PREDICT_ROUTE": "/v1/endpoints/1/deployedModels/2:predict",
        "AIP_HEALTH_ROUTE": "/v1/endpoints/1/deployedModels/2",
    }.items():
        monkeypatch.setenv(name, value)
    server = NaiadServer(repository, log_dir=tmp_path)
    server.start(wait=None)
    try:
        url = f"http://127.0.0.1:{port}/v1/endpoints/1/deployedModels/2"
        session = requests.Session()
        deadline = time.monotonic() + 120
        while True:  # polled as the harness polls /v2/health/ready
            with contextlib.suppress(requests.ConnectionError):
                if session.get(url, timeout=2).status_code == 200:
                    break
            assert server.poll() is None, server.stderr_text()
            assert time.monotonic() < deadline, server.stderr_text()
            time.sleep(0.1)
        reply = session.post(url + ":predict", json=INFER, timeout=30)
        assert reply.status_code == 200, reply.text
        assert reply.json()["model_name"] == "add_sub"
        with pytest.raises(requests.ConnectionError):
            requests.get(server.url + "/v2/health/live", timeout=5)
        assert "Started Vertex AI HTTPService" in server.stderr_text() + server.stdout_text()
    finally:
        server.stop()


def _failed_start(repository, *args: str, env=None) -> tuple[int, str]:
    """The HTTP port given to `naiad serve` with `args` (free ports), which must exit 1,
    and its stderr."""
    http_port, grpc_port, metrics_port = _free_ports(3)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "naiad",
            "serve",
            f"--model-repository={repository}",
            f"--http-port={http_port}",
            f"--grpc-port={grpc_port}",
            f"--metrics-port={metrics_port}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert result.returncode == 1, result.stderr
    return http_port, result.stderr


def test_sagemaker_safe_port_range(repository):
    http_port, stderr = _failed_start(
        repository, "--allow-sagemaker=true", "--sagemaker-safe-port-range=1-2"
    )
    assert (
        f"The server cannot listen to HTTP requests at port {http_port}, allowed port range "
        "is [1, 2]" in stderr
    )


def test_requests_on_a_kept_connection(sagemaker):
    answers = send_all(
        sagemaker.sagemaker_port,
        [("ping", "GET", "/ping", b"", {}), ("again", "GET", "/ping", b"", {})],
    )
    assert answers == {"ping": (200, "text/plain", None), "again": (200, "text/plain", None)}


def test_vertex_ai_routes_are_regular_expressions(repository, tmp_path, monkeypatch):
    """AIP_PREDICT_ROUTE and AIP_HEALTH_ROUTE match the whole path as regular
    expressions; the redirect to "metrics" serves the metrics page; a bad binary
    Content-Type for an unknown model gets the model's 404 first (Triton's order)."""
    port = _free_ports(1)[0]
    monkeypatch.setenv("AIP_PREDICT_ROUTE", "/v1/endpoints/[0-9]+/deployedModels/[0-9]+:predict")
    monkeypatch.setenv("AIP_HEALTH_ROUTE", "/v1/endpoints/[^/]+/health")
    with NaiadServer(
        repository,
        log_dir=tmp_path,
        extra_args=["--allow-vertex-ai=true", f"--vertex-ai-port={port}"],
    ) as server:
        server.wait_for("ready")
        url = f"http://127.0.0.1:{port}/v1/endpoints"
        assert requests.get(url + "/abc/health", timeout=10).status_code == 200
        assert requests.get(url + "/a/b/health", timeout=10).status_code == 400
        reply = requests.post(url + "/12/deployedModels/3:predict", json=INFER, timeout=30)
        assert reply.status_code == 200, reply.text
        assert (
            requests.post(url + "/x/deployedModels/3:predict", json=INFER, timeout=10).status_code
            == 400
        )
        redirect = {"X-Vertex-Ai-Triton-Redirect": "metrics"}
        metrics = requests.post(url + "/1/deployedModels/1:predict", headers=redirect, timeout=10)
        assert metrics.status_code == 200
        assert 'nv_inference_request_success{model="add_sub",version="1"} ' in metrics.text
        assert metrics.headers["Content-Type"] == "text/plain"
        binary, _ = binary_infer()
        bad_type = {"Content-Type": "text/x;" + VERTEX_BINARY + "4"}
        for model, status in (("nothing", 404), ("add_sub", 400)):
            reply = requests.post(
                url + "/1/deployedModels/1:predict",
                data=binary,
                headers={**bad_type, "X-Vertex-Ai-Triton-Redirect": f"v2/models/{model}/infer"},
                timeout=10,
            )
            assert reply.status_code == status, reply.text
            assert ("unknown model" in reply.text) == (status == 404), reply.text


def test_a_vertex_ai_route_that_is_no_regular_expression_stops_the_start(repository):
    env = {**os.environ, "AIP_PREDICT_ROUTE": "/predict(", "AIP_HEALTH_ROUTE": "/health"}
    _, stderr = _failed_start(
        repository,
        "--allow-vertex-ai=true",
        f"--vertex-ai-port={_free_ports(1)[0]}",
        env=env,
    )
    assert "AIP_PREDICT_ROUTE '/predict(' is not a regular expression" in stderr
