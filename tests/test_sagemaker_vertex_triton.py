"""The SageMaker and Vertex AI endpoints against the real Triton 2.51 (where it is
installed, tests/triton_peer.py): the same requests to both get the same status, content
type and body, and the same start-up errors."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from endpoint_cases import INFER, sagemaker_cases, send_all, vertex_cases
from server_harness import NaiadServer, _free_ports, make_repository
from triton_peer import TritonPeer, find_triton, needs_triton

pytestmark = needs_triton


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    return make_repository(tmp_path_factory.mktemp("repo"), ["add_sub"])


def _both(repository, log_dir, monkeypatch, env: dict, naiad_args, triton_args, cases):
    """Answers of Naiad and of Triton to `cases` on the endpoint port each was given."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    naiad_port, triton_port = _free_ports(2)
    with (
        NaiadServer(repository, log_dir=log_dir, extra_args=[*naiad_args(naiad_port)]) as naiad,
        TritonPeer(repository, log_dir, [*triton_args(triton_port)]) as triton,
    ):
        triton.wait_ready(["add_sub"])
        naiad.wait_for("ready")
        # Triton opens the endpoint's port after its HTTP port.
        _wait_listening(triton_port, triton.log_path)
        return send_all(naiad_port, cases), send_all(triton_port, cases)


def _wait_listening(port: int, log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 2):
            return
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.1)


def _compare(naiad: dict, triton: dict) -> None:
    differing = [
        f"{case}:\n  naiad  {naiad[case]!r:.300}\n  triton {triton[case]!r:.300}"
        for case in triton
        if naiad[case] != triton[case]
    ]
    if differing:
        pytest.fail("\n".join(differing), pytrace=False)


def test_sagemaker_answers_as_triton(repository, tmp_path, monkeypatch):
    naiad, triton = _both(
        repository,
        tmp_path,
        monkeypatch,
        {"SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "add_sub"},
        lambda port: ["--allow-sagemaker=true", f"--sagemaker-port={port}"],
        lambda port: ["--allow-sagemaker=true", f"--sagemaker-port={port}"],
        sagemaker_cases(),
    )
    assert triton["invocations"][0] == 200 and triton["invocations binary"][0] == 200
    assert triton["invocations chunked"][0] == 200, triton["invocations chunked"]
    _compare(naiad, triton)


def test_sagemaker_without_a_default_model(repository, tmp_path, monkeypatch):
    monkeypatch.delenv("SAGEMAKER_TRITON_DEFAULT_MODEL_NAME", raising=False)
    # A bad binary Content-Type too gets the unknown model's 404: the model is looked up
    # first.
    cases = [case for case in sagemaker_cases() if case[0].startswith(("ping", "invocations"))]
    naiad, triton = _both(
        repository,
        tmp_path,
        monkeypatch,
        {},
        lambda port: ["--allow-sagemaker=true", f"--sagemaker-port={port}"],
        lambda port: ["--allow-sagemaker=true", f"--sagemaker-port={port}"],
        cases,
    )
    assert triton["invocations"][0] == 404
    _compare(naiad, triton)


_VERTEX_ENV = {"AIP_PREDICT_ROUTE": "/predict", "AIP_HEALTH_ROUTE": "/health"}


def _vertex_args(port: int) -> list[str]:
    return ["--allow-vertex-ai=true", f"--vertex-ai-port={port}"]


def test_vertex_ai_answers_as_triton(repository, tmp_path, monkeypatch):
    naiad, triton = _both(
        repository,
        tmp_path,
        monkeypatch,
        _VERTEX_ENV,
        _vertex_args,
        _vertex_args,
        vertex_cases(),
    )
    assert triton["predict"][0] == 200 and triton["redirect infer"][0] == 200
    assert triton["predict chunked"][0] == 200, triton["predict chunked"]
    _compare(naiad, triton)


def test_vertex_ai_routes_as_regular_expressions_and_metrics_as_triton(
    repository, tmp_path, monkeypatch
):
    redirect = {"X-Vertex-Ai-Triton-Redirect": "metrics"}
    predict = "/v1/endpoints/12/deployedModels/34:predict"
    cases = [
        ("health", "GET", "/v1/endpoints/abc/health", b"", {}),
        ("health two segments", "GET", "/v1/endpoints/a/b/health", b"", {}),
        ("predict", "POST", predict, json.dumps(INFER).encode(), {}),
        ("predict not all digits", "POST", "/v1/endpoints/x/deployedModels/34:predict", b"{}", {}),
        ("predict longer", "POST", predict + "/x", b"{}", {}),
        ("metrics GET", "GET", predict, b"", redirect),
        ("metrics", "POST", predict, b"", redirect),
    ]
    env = {
        "AIP_PREDICT_ROUTE": "/v1/endpoints/[0-9]+/deployedModels/[0-9]+:predict",
        "AIP_HEALTH_ROUTE": "/v1/endpoints/[^/]+/health",
    }
    naiad, triton = _both(
        repository,
        tmp_path,
        monkeypatch,
        env,
        _vertex_args,
        _vertex_args,
        cases,
    )
    assert triton["predict"][0] == 200 and triton["health"][0] == 200
    # The metrics pages differ in their values (and Naiad's in the families it has):
    # status, type and the model's success counter are compared (its value is not: the
    # counter may count the request just after its answer was sent).
    pages = naiad.pop("metrics"), triton.pop("metrics")
    assert [page[:2] for page in pages] == [(200, pages[1][1])] * 2, pages[1][:2]
    for page in pages:
        text = page[2].decode() if isinstance(page[2], bytes) else str(page[2])
        assert 'nv_inference_request_success{model="add_sub",version="1"} ' in text
    _compare(naiad, triton)


def _start_failure(command: list[str], env: dict, log: Path) -> str:
    """The output of a server that must fail to start. Its own session: Triton's
    backend stubs outlive it for a while, and are stopped with it."""
    with open(log, "wb") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    try:
        returncode = process.wait(120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    assert returncode != 0
    return log.read_text()


@pytest.mark.parametrize(
    "env,args,message",
    [
        (
            _VERTEX_ENV,
            ["--vertex-ai-default-model=nothing"],
            "failed to start Vertex AI service: Invalid argument - Expect the default model "
            "'nothing' is loaded",
        ),
        (
            {"AIP_HEALTH_ROUTE": "/health"},
            [],
            "failed to start Vertex AI service: Invalid argument - API_PREDICT_ROUTE is not "
            "defined for Vertex AI endpoint",
        ),
    ],
)
def test_vertex_ai_start_up_errors_as_triton(repository, tmp_path, env, args, message):
    ports = _free_ports(4)
    common = [
        f"--model-repository={repository}",
        f"--http-port={ports[0]}",
        f"--grpc-port={ports[1]}",
        f"--metrics-port={ports[2]}",
        "--allow-vertex-ai=true",
        f"--vertex-ai-port={ports[3]}",
        *args,
    ]
    prefix, triton_env = find_triton()
    triton_command = [*prefix, *common, "--exit-timeout-secs=2"]
    assert message in _start_failure(triton_command, {**triton_env, **env}, tmp_path / "triton.log")
    naiad_env = {k: v for k, v in os.environ.items() if not k.startswith("AIP_")}
    assert message in _start_failure(
        [sys.executable, "-m", "naiad", "serve", *common, "--host=127.0.0.1"],
        {**naiad_env, **env},
        tmp_path / "naiad.log",
    )
