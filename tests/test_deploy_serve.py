"""The containers that deploy/ declares, run here: `naiad serve` started with exactly the
command, args and env of the Deployment's `naiad` container and of the KServe
ClusterServingRuntime's `kserve-container`, then every probe they declare must answer 200 on
the port it names, and the Prometheus annotations must point at the metrics page.

What is substituted, and why (deploy_support.local_command): the image's `naiad` is this
checkout's console script; the container's model path (/models, /mnt/models) is a temporary
copy of model_repository/ (what the init container or KServe's storage initializer would have
put there); each port is a free 127.0.0.1 port (a shared machine may have 8000 or 8080 taken);
`--host=127.0.0.1` is added so the test server listens on loopback only.
"""

from __future__ import annotations

import numpy as np
import pytest
import requests
from deploy_support import (
    KSERVE,
    KUBERNETES,
    ManifestServer,
    container,
    describe,
    local_command,
    one,
)
from server_harness import EXAMPLE_MODELS, _free_ports, make_repository

TIMEOUT = 10


def _start(tmp_path, monkeypatch, spec, model_path, ports, http_port, name):
    repository = make_repository(
        tmp_path / "models", sorted(p.name for p in EXAMPLE_MODELS.iterdir())
    )
    # Distinct ports: separate free_port() calls can hand out the same one twice.
    local = dict(zip(ports, _free_ports(len(ports))))
    argv, env = local_command(spec, model_path=model_path, repository=repository, ports=local)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    metrics_port = local[ports[-1]]
    server = ManifestServer(
        argv,
        http_port=local[http_port],
        metrics_port=metrics_port,
        repository=repository,
        log_dir=tmp_path,
        name=name,
    )
    print("running:", describe(argv))
    # Wait for liveness only: the probes themselves are what the test checks.
    server.start(wait="live", timeout=120)
    return server, local


def _get(url):
    return requests.get(url, timeout=TIMEOUT)


def _infer_add_sub(server):
    a = np.arange(16, dtype=np.float32)
    body = {
        "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": a.tolist()},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": [1.0] * 16},
        ]
    }
    reply = requests.post(f"{server.url}/v2/models/add_sub/infer", json=body, timeout=TIMEOUT)
    assert reply.status_code == 200, reply.text
    outputs = {o["name"]: o["data"] for o in reply.json()["outputs"]}
    assert outputs["OUTPUT0"] == (a + 1).tolist()


def _check_probes(server, spec, port_of):
    probes = [name for name in ("startupProbe", "readinessProbe", "livenessProbe") if name in spec]
    assert "readinessProbe" in probes and "livenessProbe" in probes
    for name in probes:
        http_get = spec[name]["httpGet"]
        port = port_of(http_get["port"])
        reply = _get(f"http://127.0.0.1:{port}{http_get['path']}")
        assert reply.status_code == 200, f"{name} {http_get} -> {reply.status_code}"


def _check_metrics(annotations, local):
    port = local[int(annotations["prometheus.io/port"])]
    reply = _get(f"http://127.0.0.1:{port}{annotations['prometheus.io/path']}")
    assert reply.status_code == 200
    assert "nv_inference_request_success{" in reply.text


def test_deployment_container_serves_and_answers_its_probes(tmp_path, monkeypatch):
    deployment = one("Deployment", KUBERNETES)
    template = deployment["spec"]["template"]
    spec = container(template["spec"], "naiad")
    container_ports = {p["name"]: p["containerPort"] for p in spec["ports"]}
    ports = [container_ports["http"], container_ports["grpc"], container_ports["metrics"]]
    model_path = next(m["mountPath"] for m in spec["volumeMounts"] if m["name"] == "models")
    server, local = _start(
        tmp_path, monkeypatch, spec, model_path, ports, container_ports["http"], "deployment"
    )
    try:
        _check_probes(server, spec, lambda port: local[container_ports.get(port, port)])
        _check_metrics(template["metadata"]["annotations"], local)
        _infer_add_sub(server)
        assert "PYTHONUNBUFFERED" in {e["name"] for e in spec["env"]}
    finally:
        code = server.stop()
    # SIGTERM (what the kubelet sends after preStop) ends it cleanly within the grace period.
    assert code == 0, server.stderr_text()[-3000:]


def test_serving_runtime_container_serves_and_answers_its_probes(tmp_path, monkeypatch):
    runtime = one("ClusterServingRuntime", KSERVE)
    spec = container(runtime["spec"], "kserve-container")
    # KServe puts the model at /mnt/models (its storage initializer) and gives the ports in args.
    ports = [8080, 9000, int(runtime["spec"]["annotations"]["prometheus.kserve.io/port"])]
    server, local = _start(tmp_path, monkeypatch, spec, "/mnt/models", ports, 8080, "kserve")
    try:
        _check_probes(server, spec, lambda port: local[port])
        _check_metrics(runtime["spec"]["annotations"], local)
        _infer_add_sub(server)
    finally:
        code = server.stop()
    assert code == 0, server.stderr_text()[-3000:]


def test_local_command_substitutes_only_paths_ports_and_host(tmp_path):
    spec = {
        "command": ["naiad", "serve"],
        "args": ["--model-store=/mnt/models", "--http-port", "8080", "--log-verbose=1"],
        "env": [{"name": "X", "value": "1"}],
    }
    argv, env = local_command(
        spec, model_path="/mnt/models", repository=tmp_path, ports={8080: 1234}
    )
    assert argv[1:] == [
        "serve",
        f"--model-store={tmp_path}",
        "--http-port",
        "1234",
        "--log-verbose=1",
        "--host=127.0.0.1",
    ]
    assert argv[0].endswith("/naiad") and env == {"X": "1"}
    with pytest.raises(KeyError):  # a port the test did not map is an error, not a guess
        local_command(
            {"command": ["naiad"], "args": ["--http-port=9"]},
            model_path="/m",
            repository=tmp_path,
            ports={},
        )
