"""Security promises of issue 16 that no other test holds:

- each server binds the address it is given (`--http-address`, `--grpc-address`,
  `--metrics-address`), and nothing else;
- a request never sees another request's tensor bytes, however the arena's blocks and the
  batch slabs are reused;
- no error message a client gets names a path of the host (the model repository, the
  server's Python, the home folder) or a secret from the server's environment.

(Region confinement of shared memory, model names and `file:` overrides that try to leave the
repository are tested in tests/test_shm.py, test_model_control.py and
test_repository_control.py; restricted APIs where they are built.)
"""

from __future__ import annotations

import json
import os
import random
import socket
import struct
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import requests
from security_support import leaks_in, server_with_broken_models
from server_harness import NaiadServer, make_repository

SECURITY_MODELS = Path(__file__).resolve().parent / "security_models"


def _listening_sockets(pid: int) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket process `pid` listens on, from /proc: what the
    process itself holds, whatever other processes on the host listen on."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A" or fields[9] not in inodes:  # 0A: LISTEN
                continue
            address, port = fields[1].split(":")
            if len(address) == 8:
                host = socket.inet_ntoa(struct.pack("<I", int(address, 16)))
            else:
                host = "ipv6:" + address
            found.add((host, int(port, 16)))
    return found


def test_each_server_binds_only_its_address(tmp_path):
    repo = make_repository(tmp_path / "repo", ["add_sub"])
    server = NaiadServer(
        repo,
        log_dir=tmp_path,
        extra_args=["--grpc-address", "127.0.0.2", "--metrics-address", "127.0.0.3"],
    )
    expected = {
        ("127.0.0.1", server.http_port),
        ("127.0.0.2", server.grpc_port),
        ("127.0.0.3", server.metrics_port),
    }
    with server.start():
        # Ready is answered over HTTP, which starts first (as in Triton): the metrics
        # listener may bind a moment later.
        deadline = time.monotonic() + 10
        while _listening_sockets(server.pid) != expected and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _listening_sockets(server.pid) == expected
        metrics = requests.get(f"http://127.0.0.3:{server.metrics_port}/metrics", timeout=10)
        assert metrics.status_code == 200 and "nv_cpu_utilization" in metrics.text
        with socket.create_connection(("127.0.0.2", server.grpc_port), timeout=5):
            pass


# -- one request's bytes never reach another -------------------------------------------


def _binary_request(floats: np.ndarray, strings: list[bytes]) -> tuple[bytes, dict]:
    packed = b"".join(struct.pack("<I", len(s)) + s for s in strings)
    header = {
        "inputs": [
            {
                "name": "F",
                "datatype": "FP32",
                "shape": [1, len(floats)],
                "parameters": {"binary_data_size": floats.nbytes},
            },
            {
                "name": "S",
                "datatype": "BYTES",
                "shape": [1, len(strings)],
                "parameters": {"binary_data_size": len(packed)},
            },
        ],
        "outputs": [
            {"name": "F_OUT", "parameters": {"binary_data": True}},
            {"name": "S_OUT", "parameters": {"binary_data": True}},
        ],
    }
    head = json.dumps(header).encode()
    return head + floats.tobytes() + packed, {
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(len(head)),
    }


def _json_request(floats: np.ndarray, strings: list[bytes]) -> tuple[bytes, dict]:
    body = {
        "inputs": [
            {"name": "F", "datatype": "FP32", "shape": [1, len(floats)], "data": floats.tolist()},
            {
                "name": "S",
                "datatype": "BYTES",
                "shape": [1, len(strings)],
                "data": [s.decode() for s in strings],
            },
        ]
    }
    return json.dumps(body).encode(), {"Content-Type": "application/json"}


def _decode(response: requests.Response) -> tuple[np.ndarray, list[bytes]]:
    if "Inference-Header-Content-Length" in response.headers:
        head_len = int(response.headers["Inference-Header-Content-Length"])
        meta, at, got = json.loads(response.content[:head_len]), head_len, {}
        for out in meta["outputs"]:
            size = out["parameters"]["binary_data_size"]
            got[out["name"]] = response.content[at : at + size]
            at += size
        floats = np.frombuffer(got["F_OUT"], np.float32)
        strings, raw, at = [], got["S_OUT"], 0
        while at < len(raw):
            (n,) = struct.unpack_from("<I", raw, at)
            strings.append(raw[at + 4 : at + 4 + n])
            at += 4 + n
        return floats, strings
    outputs = {o["name"]: o for o in response.json()["outputs"]}
    return (
        np.asarray(outputs["F_OUT"]["data"], np.float32),
        [s.encode() for s in outputs["S_OUT"]["data"]],
    )


SECRET_FLOAT = np.float32(-7777.25)
SECRET_TEXT = b"SECRET-of-another-request"


def test_a_request_never_sees_another_requests_tensors(tmp_path):
    """Requests carrying a secret (large tensors) run between and beside small ones of every
    size, 0 included, in batches and alone, on the lane and the general path, binary and
    JSON. Every answer is exactly its own request's tensors: never a secret byte, never a
    byte more or less."""
    repo = make_repository(
        tmp_path / "repo", {"isolation_echo": SECURITY_MODELS / "isolation_echo"}
    )
    problems: list[str] = []

    with NaiadServer(repo, log_dir=tmp_path).start() as server:
        url = f"{server.url}/v2/models/isolation_echo/infer"

        def secret_sender(stop: threading.Event) -> None:
            floats = np.full(4096, SECRET_FLOAT, np.float32)
            strings = [SECRET_TEXT * 8] * 64
            body, headers = _binary_request(floats, strings)
            with requests.Session() as session:
                while not stop.is_set():
                    response = session.post(url, data=body, headers=headers, timeout=30)
                    if response.status_code != 200:
                        problems.append(f"secret request failed: {response.text}")

        def checker(seed: int, count: int) -> None:
            rng = random.Random(seed)
            with requests.Session() as session:
                for _ in range(count):
                    n = rng.choice([0, 1, 2, 7, 64, 200, 1000])
                    floats = np.asarray([rng.uniform(-100, 100) for _ in range(n)], np.float32)
                    strings = [
                        bytes(rng.choice(b"abcdefgh") for _ in range(rng.randrange(0, 12)))
                        for _ in range(rng.choice([0, 1, 3, 20]))
                    ]
                    make = _json_request if rng.random() < 0.3 else _binary_request
                    body, headers = make(floats, strings)
                    response = session.post(url, data=body, headers=headers, timeout=30)
                    if response.status_code != 200:
                        problems.append(f"{response.status_code} {response.text[:200]}")
                        continue
                    got_floats, got_strings = _decode(response)
                    if not np.array_equal(got_floats, floats) or got_strings != strings:
                        problems.append(
                            f"request with {n} floats / {len(strings)} strings got "
                            f"{len(got_floats)} floats / {len(got_strings)} strings back"
                        )
                    if SECRET_FLOAT in got_floats or any(SECRET_TEXT in s for s in got_strings):
                        problems.append("a request saw another request's secret")

        stop = threading.Event()
        secrets = [threading.Thread(target=secret_sender, args=(stop,)) for _ in range(2)]
        checkers = [threading.Thread(target=checker, args=(seed, 150)) for seed in range(4)]
        for thread in secrets + checkers:
            thread.start()
        for thread in checkers:
            thread.join(timeout=300)
        stop.set()
        for thread in secrets:
            thread.join(timeout=60)
        assert not any(t.is_alive() for t in secrets + checkers), "a client hung"

    assert problems == []


# -- error messages keep the host's paths and secrets to themselves ----------------------


def _error_bodies(server: NaiadServer) -> list[tuple[str, int, str]]:
    """(what, status, body) of every failing call a client can make over HTTP."""
    base = server.url
    calls: list[tuple[str, str, str, object]] = [
        ("unknown model infer", "post", "/v2/models/nope/infer", {"inputs": []}),
        ("unknown version", "get", "/v2/models/add_sub/versions/9", None),
        ("unknown model config", "get", "/v2/models/nope/config", None),
        ("unknown model stats", "get", "/v2/models/nope/stats", None),
        ("malformed JSON", "post", "/v2/models/add_sub/infer", b"{not json"),
        (
            "wrong shape",
            "post",
            "/v2/models/add_sub/infer",
            {
                "inputs": [
                    {"name": "INPUT0", "datatype": "FP32", "shape": [1, 3], "data": [1, 2, 3]},
                    {"name": "INPUT1", "datatype": "FP32", "shape": [1, 3], "data": [1, 2, 3]},
                ]
            },
        ),
        (
            "wrong datatype",
            "post",
            "/v2/models/add_sub/infer",
            {
                "inputs": [
                    {"name": "INPUT0", "datatype": "INT8", "shape": [1, 16], "data": [1] * 16},
                    {"name": "INPUT1", "datatype": "FP32", "shape": [1, 16], "data": [1] * 16},
                ]
            },
        ),
        (
            "unknown region",
            "post",
            "/v2/systemsharedmemory/region/r/register",
            {"key": "/naiad_no_such_object", "offset": 0, "byte_size": 64},
        ),
        (
            "region path trick",
            "post",
            "/v2/systemsharedmemory/region/r2/register",
            {"key": "/../../etc/passwd", "offset": 0, "byte_size": 64},
        ),
        ("unknown route", "get", "/v2/nothing/here", None),
    ]
    for model in ("bad_config", "no_model_file", "bad_onnx", "init_fails", "not_in_repo"):
        calls.append((f"load {model}", "post", f"/v2/repository/models/{model}/load", {}))
    found = []
    for what, method, path, body in calls:
        kwargs = {"timeout": 60}
        if isinstance(body, bytes):
            kwargs["data"] = body
        elif body is not None:
            kwargs["json"] = body
        response = getattr(requests, method)(base + path, **kwargs)
        found.append((what, response.status_code, response.text))
    index = requests.post(base + "/v2/repository/index", json={}, timeout=30)
    found.append(("repository index", index.status_code, index.text))
    return found


def test_error_messages_name_no_host_path_or_secret(tmp_path, monkeypatch):
    host_dir = tmp_path / "host-private-7f3a"
    server = server_with_broken_models(host_dir, tmp_path, monkeypatch)
    with server.start():
        bodies = _error_bodies(server)
    found = [
        (what, status, needle, body[:400])
        for what, status, body in bodies
        for needle in leaks_in(body, host_dir)
    ]
    assert found == []
    # The calls did fail, and the failures still say which file is wrong (relative to the
    # repository, as an operator reads it).
    by_what = {what: (status, body) for what, status, body in bodies}
    assert all(status >= 400 for what, (status, _) in by_what.items() if what != "repository index")
    assert "bad_config/config.pbtxt" in by_what["load bad_config"][1]
    assert "model.py" in by_what["load no_model_file"][1]
    assert "bad_onnx" in by_what["load bad_onnx"][1]
    # The operator's log keeps the whole path.
    assert str(host_dir) in server.stderr_text()


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    # 127.0.0.2/.3 must not go through a proxy from the environment.
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,127.0.0.2,127.0.0.3")
