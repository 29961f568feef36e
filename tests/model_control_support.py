"""Helpers for the model control tests: repositories, requests, a constant load."""

from __future__ import annotations

import base64
import json
import threading
import time
from pathlib import Path

import numpy as np
import requests
from server_harness import EXAMPLE_MODELS, NaiadServer

ADD_SUB_MODEL = (EXAMPLE_MODELS / "add_sub" / "1" / "model.py").read_text()

INIT_FAILS = """
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("{name} refuses to initialize")

    def execute(self, requests):
        return []
"""

# Initializes once (it leaves a marker), then fails in initialize every later time:
# what a model with a broken dependency looks like after its first crash.
INIT_ONCE = """
import os
import time
import numpy as np
import triton_python_backend_utils as pb_utils

MARKER = {marker!r}


class TritonPythonModel:
    def initialize(self, args):
        if os.path.exists(MARKER):
            with open(MARKER + ".attempts", "a") as out:  # when (CLOCK_MONOTONIC), a line each
                out.write(f"{{time.monotonic()}}\\n")
            raise RuntimeError("init_once initializes only once")
        open(MARKER, "w").close()

    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            if (value < 0).any():
                os._exit(1)
            out = pb_utils.Tensor("OUTPUT0", (value * 2).astype(np.float32))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
"""


def add_sub_config(name: str = "add_sub", max_batch_size: int = 64, count: int = 1) -> dict:
    """add_sub's config as Triton's JSON (what a `config` load parameter carries)."""
    return {
        "name": name,
        "backend": "python",
        "max_batch_size": max_batch_size,
        "input": [
            {"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [16]},
            {"name": "INPUT1", "data_type": "TYPE_FP32", "dims": [16]},
        ],
        "output": [
            {"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [16]},
            {"name": "OUTPUT1", "data_type": "TYPE_FP32", "dims": [16]},
        ],
        "dynamic_batching": {},
        "instance_group": [{"count": count, "kind": "KIND_CPU"}],
    }


def add_sub_pbtxt(name: str = "add_sub", max_batch_size: int = 64, count: int = 1) -> str:
    return f"""
name: "{name}"
backend: "python"
max_batch_size: {max_batch_size}
input [
  {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] }},
  {{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] }}
]
output [
  {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] }},
  {{ name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] }}
]
dynamic_batching {{ }}
instance_group [ {{ count: {count} kind: KIND_CPU }} ]
"""


def one_input_pbtxt(name: str) -> str:
    return f"""
name: "{name}"
backend: "python"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
"""


def write_model(repo: Path, name: str, config: str, model_py: str, versions=(1,)) -> Path:
    folder = Path(repo) / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.pbtxt").write_text(config)
    for version in versions:
        (folder / str(version)).mkdir(exist_ok=True)
        (folder / str(version) / "model.py").write_text(model_py)
    return folder


def control_repository(repo: Path) -> Path:
    """add_sub, a second add_sub (other), a broken config, and a model whose
    initialize raises."""
    write_model(repo, "add_sub", add_sub_pbtxt(), ADD_SUB_MODEL)
    write_model(repo, "other", add_sub_pbtxt("other"), ADD_SUB_MODEL)
    write_model(repo, "broken", 'name: "broken"\nbackend: "python"\nbogus_field: 1\n', "")
    write_model(
        repo, "init_fails", one_input_pbtxt("init_fails"), INIT_FAILS.format(name="init_fails")
    )
    return repo


def explicit_server(root: Path, name: str):
    """Yields an explicit-mode server over control_repository() that loads add_sub at
    start (the rest is loaded by tests), for a module fixture of HTTP or gRPC tests."""
    repo = control_repository(root / "models")
    server = NaiadServer(
        repo,
        log_dir=root,
        name=name,
        extra_args=["--model-control-mode=explicit", "--load-model=add_sub"],
    )
    server.start(wait="live")
    yield server
    server.stop()


def post(url: str, path: str, body=None, **kwargs) -> requests.Response:
    data = body if isinstance(body, (bytes, str)) or body is None else json.dumps(body)
    return requests.post(url + path, data=data, timeout=120, **kwargs)


def load(url: str, name: str, parameters: dict | None = None) -> requests.Response:
    body = {"parameters": parameters} if parameters is not None else None
    return post(url, f"/v2/repository/models/{name}/load", body)


def unload(url: str, name: str) -> requests.Response:
    return post(url, f"/v2/repository/models/{name}/unload")


def index(url: str, ready: bool | None = None) -> list[dict]:
    body = None if ready is None else {"ready": ready}
    reply = post(url, "/v2/repository/index", body)
    assert reply.status_code == 200, reply.text
    return reply.json()


def entries(url: str, name: str) -> list[dict]:
    return [e for e in index(url) if e["name"] == name]


def file_parameter(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def add_sub_json_request(value: float) -> dict:
    return {
        "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": [value] * 16},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": [1.0] * 16},
        ]
    }


def add_sub_client_inputs(client_module, value: float) -> list:
    """add_sub's inputs (INPUT0 = value, INPUT1 = 1, both [1, 16] FP32) for either client:
    `client_module` is tritonclient.http or tritonclient.grpc."""
    inputs = [
        client_module.InferInput("INPUT0", [1, 16], "FP32"),
        client_module.InferInput("INPUT1", [1, 16], "FP32"),
    ]
    inputs[0].set_data_from_numpy(np.full((1, 16), value, dtype=np.float32))
    inputs[1].set_data_from_numpy(np.ones((1, 16), dtype=np.float32))
    return inputs


def add_sub_binary_request(value: float) -> tuple[bytes, dict]:
    """A binary infer body (the fast lane's kind of request) and its headers."""
    a = np.full((1, 16), value, dtype=np.float32).tobytes()
    b = np.ones((1, 16), dtype=np.float32).tobytes()
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": name,
                    "shape": [1, 16],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": 64},
                }
                for name in ("INPUT0", "INPUT1")
            ],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
        }
    ).encode()
    headers = {
        "Inference-Header-Content-Length": str(len(header)),
        "Content-Type": "application/octet-stream",
    }
    return header + a + b, headers


class ConstantLoad:
    """Threads that send add_sub infer requests (JSON and binary, unversioned URL) without
    pause until stopped; every answer is checked, every failure kept."""

    def __init__(self, url: str, model: str = "add_sub", threads: int = 4):
        self.url = url
        self.model = model
        self.ok = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(threads)
        ]

    def __enter__(self) -> ConstantLoad:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)

    def wait_for(self, count: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        start = self.ok
        while self.ok - start < count and time.monotonic() < deadline:
            time.sleep(0.02)

    def _run(self, index: int) -> None:
        url = f"{self.url}/v2/models/{self.model}/infer"
        with requests.Session() as session:
            value = 0.0
            while not self._stop.is_set():
                value += 1.0
                try:
                    if index % 2:
                        reply = session.post(url, json=add_sub_json_request(value), timeout=60)
                        good = (
                            reply.status_code == 200
                            and reply.json()["outputs"][0]["data"][0] == value + 1.0
                        )
                    else:
                        body, headers = add_sub_binary_request(value)
                        reply = session.post(url, data=body, headers=headers, timeout=60)
                        good = reply.status_code == 200
                        if good:
                            length = int(reply.headers["Inference-Header-Content-Length"])
                            out = np.frombuffer(reply.content[length:], dtype=np.float32)
                            good = out.size == 16 and out[0] == value + 1
                    detail = f"{reply.status_code} {reply.content[:200]!r}"
                except (requests.RequestException, ValueError, KeyError) as exc:
                    good, detail = False, repr(exc)
                with self._lock:
                    if good:
                        self.ok += 1
                    else:
                        self.failures.append(detail)
