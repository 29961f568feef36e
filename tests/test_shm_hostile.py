"""Hostile system shared-memory objects, black-box against a real `naiad serve` (HTTP;
the gRPC cases are in tests/grpc_clients/test_grpc_shm_hostile.py): a FIFO as a key
must be refused at once, without blocking the server; an object the client truncates
after registering it must fail the requests that use it, with the region named, and
nothing else (the frontend and the workers keep serving); and the region cap is a flag.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys

import numpy as np
import pytest
import requests
from server_harness import NaiadServer
from shm_support import SHM_MODELS, Region, new_key

# Long enough for a loaded machine, short enough that a server blocked on a FIFO fails
# the test instead of hanging it.
TIMEOUT = 10
REGION_BYTES = 64 * 1024


@pytest.fixture(scope="module", params=["lane", "general"])
def server(request, tmp_path_factory):
    """Every test with the C++ fast lane and with the Python general path only."""
    extra = [] if request.param == "lane" else ["--fast-lane=false"]
    log_dir = tmp_path_factory.mktemp(f"shm_hostile_{request.param}")
    with NaiadServer(SHM_MODELS, log_dir=log_dir, extra_args=extra) as running:
        yield running


@pytest.fixture
def clean(server):
    yield server
    requests.post(server.url + "/v2/systemsharedmemory/unregister", timeout=TIMEOUT)


def register(server, name, key, byte_size, offset=0):
    return requests.post(
        f"{server.url}/v2/systemsharedmemory/region/{name}/register",
        json={"key": key, "offset": offset, "byte_size": byte_size},
        timeout=TIMEOUT,
    )


def infer(server, model, body):
    return requests.post(f"{server.url}/v2/models/{model}/infer", json=body, timeout=TIMEOUT)


def shm_tensor(name, region, byte_size, shape, datatype):
    params = {"shared_memory_region": region, "shared_memory_byte_size": byte_size}
    return {"name": name, "shape": shape, "datatype": datatype, "parameters": params}


def assert_serving(server) -> None:
    """Health, and both models answer an inline request (frontend and workers alive)."""
    assert requests.get(server.url + "/v2/health/ready", timeout=TIMEOUT).status_code == 200
    fp32 = {"inputs": [{"name": "INPUT0", "shape": [1, 2], "datatype": "FP32", "data": [1, 2]}]}
    reply = infer(server, "shm_identity", fp32)
    assert reply.status_code == 200, reply.text
    assert reply.json()["outputs"][0]["data"] == [1.0, 2.0]
    text = {"inputs": [{"name": "INPUT0", "shape": [1], "datatype": "BYTES", "data": ["ok"]}]}
    reply = infer(server, "shm_bytes", text)
    assert reply.status_code == 200, reply.text
    assert reply.json()["outputs"][0]["data"] == ["ok"]
    assert server.running


def truncated_message(name, key, byte_size):
    return (
        f"shared memory region '{name}' was truncated after registration (its object "
        f"'{key}' has 0 bytes, the region needs offset 0 + byte_size {byte_size})"
    )


def test_fifo_key_is_refused_without_blocking(clean):
    server = clean
    key = new_key("fifo")
    path = "/dev/shm" + key
    os.mkfifo(path, 0o600)
    try:
        reply = register(server, "fifo", key, 64)
        assert (reply.status_code, reply.json()) == (
            500,
            {"error": f"Unable to open shared memory region: '{key}' (not a shared memory object)"},
        )
        assert requests.get(server.url + "/v2/health/live", timeout=TIMEOUT).status_code == 200
        listed = requests.get(server.url + "/v2/systemsharedmemory/status", timeout=TIMEOUT)
        assert listed.json() == []
        # Nothing opened the FIFO for reading behind our back: a writer cannot open it.
        with pytest.raises(OSError):
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        assert_serving(server)
    finally:
        os.unlink(path)


def test_truncated_bytes_input_fails_that_request_only(clean):
    server = clean
    element = b"hostile"
    serialized = struct.pack("<I", len(element)) + element
    with Region("trunc_bytes", REGION_BYTES) as region:
        region.write_bytes(serialized)
        assert register(server, "tb", region.key, REGION_BYTES).status_code == 200
        body = {"inputs": [shm_tensor("INPUT0", "tb", len(serialized), [1], "BYTES")]}
        reply = infer(server, "shm_bytes", body)
        assert reply.status_code == 200, reply.text
        assert reply.json()["outputs"][0]["data"] == ["hostile"]
        os.truncate("/dev/shm" + region.key, 0)
        reply = infer(server, "shm_bytes", body)
        assert (reply.status_code, reply.json()) == (
            400,
            {"error": truncated_message("tb", region.key, REGION_BYTES)},
        )
        assert_serving(server)


def test_truncated_fp32_input_and_output_fail_those_requests_only(clean):
    server = clean
    data = np.arange(4, dtype=np.float32)
    with Region("trunc_in", REGION_BYTES) as source, Region("trunc_out", REGION_BYTES) as target:
        source.write([data])
        assert register(server, "ti", source.key, REGION_BYTES).status_code == 200
        assert register(server, "to", target.key, REGION_BYTES).status_code == 200
        body = {"inputs": [shm_tensor("INPUT0", "ti", 16, [1, 4], "FP32")]}
        reply = infer(server, "shm_identity", body)
        assert reply.status_code == 200, reply.text
        assert reply.json()["outputs"][0]["data"] == [0.0, 1.0, 2.0, 3.0]
        os.truncate("/dev/shm" + source.key, 0)
        reply = infer(server, "shm_identity", body)
        assert (reply.status_code, reply.json()) == (
            400,
            {"error": truncated_message("ti", source.key, REGION_BYTES)},
        )
        # An output into a truncated region: refused before anything runs.
        os.truncate("/dev/shm" + target.key, 0)
        inline = {"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}
        out = {
            "name": "OUTPUT0",
            "parameters": {"shared_memory_region": "to", "shared_memory_byte_size": 16},
        }
        reply = infer(server, "shm_identity", {"inputs": [inline], "outputs": [out]})
        assert (reply.status_code, reply.json()) == (
            400,
            {"error": truncated_message("to", target.key, REGION_BYTES)},
        )
        assert_serving(server)
        # Unregistering still works, and the object grown back registers afresh.
        for name in ("ti", "to"):
            unregister = f"{server.url}/v2/systemsharedmemory/region/{name}/unregister"
            assert requests.post(unregister, timeout=TIMEOUT).status_code == 200
        os.truncate("/dev/shm" + source.key, REGION_BYTES)
        source.write([data])
        assert register(server, "ti", source.key, REGION_BYTES).status_code == 200
        reply = infer(server, "shm_identity", body)
        assert reply.status_code == 200, reply.text
        assert reply.json()["outputs"][0]["data"] == [0.0, 1.0, 2.0, 3.0]


def truncated_in_use(name):
    return (
        f"shared memory region '{name}' was truncated while in use; unregister it and "
        "register it again"
    )


def failures(server, model) -> int:
    url = f"{server.url}/v2/models/{model}/stats"
    stats = requests.get(url, timeout=TIMEOUT).json()["model_stats"][0]
    return stats["inference_stats"]["fail"]["count"]


def test_input_truncated_while_the_model_reads_it_fails_that_request(clean):
    """The race made certain: shm_identity truncates the object (request parameter
    `truncate`) after the request was admitted and before it reads its input in place;
    the worker's mapping faults, and the request fails instead of answering zeros."""
    server = clean
    data = np.arange(1, 5, dtype=np.float32)
    with Region("race_in", REGION_BYTES) as source:
        source.write([data])
        assert register(server, "ri", source.key, REGION_BYTES).status_code == 200
        body = {"inputs": [shm_tensor("INPUT0", "ri", 16, [1, 4], "FP32")]}
        reply = infer(server, "shm_identity", body)
        assert reply.status_code == 200, reply.text
        assert reply.json()["outputs"][0]["data"] == [1.0, 2.0, 3.0, 4.0]
        failed_before = failures(server, "shm_identity")
        reply = infer(server, "shm_identity", {**body, "parameters": {"truncate": source.key}})
        assert (reply.status_code, reply.json()) == (400, {"error": truncated_in_use("ri")})
        assert failures(server, "shm_identity") == failed_before + 1
        # The next request is refused before it runs (the object has 0 bytes now).
        reply = infer(server, "shm_identity", body)
        assert (reply.status_code, reply.json()) == (
            400,
            {"error": truncated_message("ri", source.key, REGION_BYTES)},
        )
        # Grown back, the object passes the frontend's check, but the worker's mapping of
        # it holds the guard's zeros: that request alone is refused, with the region named.
        os.truncate("/dev/shm" + source.key, REGION_BYTES)
        inline = {"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}
        reply = infer(server, "shm_identity", body)
        assert (reply.status_code, reply.json()) == (400, {"error": truncated_in_use("ri")})
        reply = infer(server, "shm_identity", {"inputs": [inline]})
        assert reply.status_code == 200, reply.text
        assert_serving(server)


def test_an_answer_computed_from_a_truncated_input_fails_that_request(clean):
    """As above, but the model answers a copy of what it read (the guard's zeros), not a
    view of the region: the worker sees the fault before it posts."""
    server = clean
    data = np.arange(1, 5, dtype=np.float32)
    with Region("race_copy", REGION_BYTES) as source:
        source.write([data])
        assert register(server, "rc", source.key, REGION_BYTES).status_code == 200
        body = {"inputs": [shm_tensor("INPUT0", "rc", 16, [1, 4], "FP32")]}
        reply = infer(server, "shm_identity", {**body, "parameters": {"copy": True}})
        assert reply.status_code == 200, reply.text
        assert reply.json()["outputs"][0]["data"] == [1.0, 2.0, 3.0, 4.0]
        parameters = {"copy": True, "truncate": source.key}
        reply = infer(server, "shm_identity", {**body, "parameters": parameters})
        assert (reply.status_code, reply.json()) == (400, {"error": truncated_in_use("rc")})
        assert_serving(server)


def test_output_truncated_before_the_worker_writes_it_fails_that_request(clean):
    server = clean
    inline = {"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}
    out = {
        "name": "OUTPUT0",
        "parameters": {"shared_memory_region": "ro", "shared_memory_byte_size": 16},
    }
    with Region("race_out", REGION_BYTES) as target:
        assert register(server, "ro", target.key, REGION_BYTES).status_code == 200
        body = {"inputs": [inline], "outputs": [out]}
        reply = infer(server, "shm_identity", body)
        assert reply.status_code == 200, reply.text
        assert target.read(np.float32, [4]).tolist() == [1.0, 2.0, 3.0, 4.0]
        reply = infer(server, "shm_identity", {**body, "parameters": {"truncate": target.key}})
        assert (reply.status_code, reply.json()) == (400, {"error": truncated_in_use("ro")})
        assert_serving(server)


def test_ensemble_output_truncated_before_the_frontend_writes_it(clean):
    """An ensemble's answer is written into the client's region by the frontend: its
    step truncates the object first, the frontend's copy faults, and the request fails
    with the region named (not 500, not an answer whose bytes went nowhere)."""
    server = clean
    inline = {"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [5, 6, 7, 8]}
    out = {
        "name": "OUTPUT0",
        "parameters": {"shared_memory_region": "eo", "shared_memory_byte_size": 16},
    }
    with Region("race_ens", REGION_BYTES) as target:
        assert register(server, "eo", target.key, REGION_BYTES).status_code == 200
        body = {"inputs": [inline], "outputs": [out]}
        reply = infer(server, "shm_ensemble", body)
        assert reply.status_code == 200, reply.text
        assert target.read(np.float32, [4]).tolist() == [5.0, 6.0, 7.0, 8.0]
        failed_before = failures(server, "shm_ensemble")
        reply = infer(server, "shm_ensemble", {**body, "parameters": {"truncate": target.key}})
        assert (reply.status_code, reply.json()) == (400, {"error": truncated_in_use("eo")})
        assert failures(server, "shm_ensemble") == failed_before + 1
        # The frontend's mapping holds the guard's zeros now: refused from then on, even
        # once the object is whole again, until the client registers it anew.
        os.truncate("/dev/shm" + target.key, REGION_BYTES)
        reply = infer(server, "shm_ensemble", body)
        assert (reply.status_code, reply.json()) == (400, {"error": truncated_in_use("eo")})
        assert_serving(server)


def test_region_cap_is_a_flag(tmp_path):
    with (
        Region("cap", 64) as region,
        NaiadServer(SHM_MODELS, log_dir=tmp_path, extra_args=["--shm-max-regions=2"]) as server,
    ):
        assert register(server, "a", region.key, 8).status_code == 200
        assert register(server, "b", region.key, 8).status_code == 200
        over = register(server, "c", region.key, 8)
        assert (over.status_code, over.json()) == (
            500,
            {
                "error": "failed to register shared memory region 'c': 2 regions are in use, "
                "the most this server serves (--shm-max-regions)"
            },
        )
        # A slot freed is a slot to take again.
        unregister = f"{server.url}/v2/systemsharedmemory/region/a/unregister"
        assert requests.post(unregister, timeout=TIMEOUT).status_code == 200
        assert register(server, "c", region.key, 8).status_code == 200


def test_region_cap_flag_help():
    shown = subprocess.run(
        [sys.executable, "-m", "naiad", "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "--shm-max-regions" in shown
    flat = " ".join(shown.split())
    assert "Naiad's own" in flat[flat.rindex("--shm-max-regions") :][:400]
