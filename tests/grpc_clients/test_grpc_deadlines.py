"""Unary ModelInfer calls with a deadline (`grpc-timeout`) on the C++ I/O loop
(csrc/http1/deadline_timer.h, csrc/http2/grpc_io.cc): served by the loop with no Python
per call (`io_loop_requests` of /v2/naiad/lanes), and, where the deadline passes while a
gated model holds the call, answered as the real Triton 2.51 answers it: the same
grpc-status and grpc-message in the trailers a raw HTTP/2 client reads (a client that
does not give up at its own deadline, so that the server's answer is what is compared).
Models wait on a gate the test opens (tests/gated_model.py): no sleep decides anything.
"""

from __future__ import annotations

import socket
import threading
import time

import hpack
import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
from gated_model import GATED_MODEL, gate_parameter
from model_control_support import write_model
from server_harness import NaiadServer, metric_value
from triton_peer import TritonPeer, needs_triton
from tritonclient.grpc import service_pb2

pytestmark = pytest.mark.timeout(300)

WAIT_S = 60.0  # a guard against a hang, never a measure of speed
MODELS = ("served", "queued", "raw")
CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 4
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [
  {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] }},
  {{ name: "OUTPUT_ORDER" data_type: TYPE_INT64 dims: [ 1 ] }}
]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
{gate}
dynamic_batching {{ }}
"""


def _repository(root):
    """The models, each with its own gate folder (`served`'s open from the start)."""
    repo = root / "models"
    for name in MODELS:
        gate = root / f"gate-{name}"
        gate.mkdir(parents=True)
        config = CONFIG.format(name=name, gate=gate_parameter(gate))
        write_model(repo, name, config, GATED_MODEL)
    (root / "gate-served" / "open").touch()
    return repo


@pytest.fixture(scope="module")
def naiad(tmp_path_factory):
    root = tmp_path_factory.mktemp("naiad")
    with NaiadServer(_repository(root), log_dir=root, name="grpc-deadlines") as server:
        server.root = root
        yield server


def _lanes(server) -> dict:
    return requests.get(f"{server.url}/v2/naiad/lanes", timeout=WAIT_S).json()


def _pending(server, model: str) -> float:
    text = requests.get(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=WAIT_S).text
    return metric_value(text, f'nv_inference_pending_request_count{{model="{model}",version="1"}}')


def _until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"never happened in {WAIT_S}s: {what}"
        time.sleep(0.01)


def _input(value: float):
    tensor = grpcclient.InferInput("INPUT0", [1, 1], "FP32")
    tensor.set_data_from_numpy(np.array([[value]], np.float32))
    return [tensor]


def test_a_call_with_a_deadline_is_served_by_the_io_loop(naiad):
    before = _lanes(naiad)
    with grpcclient.InferenceServerClient(f"127.0.0.1:{naiad.grpc_port}") as client:
        result = client.infer("served", _input(3.0), client_timeout=WAIT_S)
    assert result.as_numpy("OUTPUT0").tolist() == [[3.0]]
    after = _lanes(naiad)
    assert after["io_loop_requests"] == before["io_loop_requests"] + 1
    assert after["general_requests"] == before["general_requests"]


def test_a_queued_call_past_its_deadline_is_dropped_and_never_runs(naiad):
    """The first call holds the model's one instance; the second, with a deadline,
    queues behind it. Its deadline passes: DEADLINE_EXCEEDED, and the queued request
    leaves the core's queue while the first still runs, so it never executes."""
    gate = naiad.root / "gate-queued"
    before = _lanes(naiad)
    answers = []
    with grpcclient.InferenceServerClient(f"127.0.0.1:{naiad.grpc_port}") as client:
        first = threading.Thread(
            target=lambda: answers.append(client.infer("queued", _input(1.0))), daemon=True
        )
        first.start()
        _until(lambda: (gate / "executing-1").exists(), "the first execution")
        with pytest.raises(grpcclient.InferenceServerException) as late:
            client.infer("queued", _input(2.0), client_timeout=1.0)
        assert late.value.status() == "StatusCode.DEADLINE_EXCEEDED"
        _until(lambda: _pending(naiad, "queued") == 0, "the expired request dropped")
        assert not (gate / "executing-2").exists()
        (gate / "open").touch()
        first.join(WAIT_S)
        assert answers[0].as_numpy("OUTPUT0").tolist() == [[1.0]]
        third = client.infer("queued", _input(3.0), client_timeout=WAIT_S)
    assert third.as_numpy("OUTPUT_ORDER").tolist() == [[2]]  # the expired one never ran
    after = _lanes(naiad)
    assert after["io_loop_requests"] == before["io_loop_requests"] + 3
    assert after["general_requests"] == before["general_requests"]


# -- the server's own answer, compared with Triton 2.51's ------------------------------


def _frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return (
        len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload
    )


def _trailers_at_deadline(port: int, model: str, timeout: str) -> dict:
    """A ModelInfer call with grpc-timeout `timeout` from a raw HTTP/2 client that waits
    for the server's trailers however long they take: their headers, decoded."""
    request = service_pb2.ModelInferRequest(model_name=model)
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 1])
    request.raw_input_contents.append(np.array([[1.0]], np.float32).tobytes())
    message = request.SerializeToString()
    block = hpack.Encoder().encode(
        [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", "/inference.GRPCInferenceService/ModelInfer"),
            (":authority", "x"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
            ("grpc-timeout", timeout),
        ]
    )
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as sock:
        sock.sendall(
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
            + _frame(0x4, 0, 0)
            + _frame(0x1, 0x4, 1, block)
            + _frame(0x0, 0x1, 1, b"\x00" + len(message).to_bytes(4, "big") + message)
        )
        decoder, data = hpack.Decoder(), b""
        while True:
            while len(data) >= 9 and len(data) >= 9 + int.from_bytes(data[:3], "big"):
                length = int.from_bytes(data[:3], "big")
                kind, flags, payload = data[3], data[4], data[9 : 9 + length]
                stream = int.from_bytes(data[5:9], "big") & 0x7FFFFFFF
                data = data[9 + length :]
                if kind == 0x4 and not flags & 0x1:
                    sock.sendall(_frame(0x4, 0x1, 0))  # SETTINGS ACK
                if kind == 0x1:
                    headers = dict(decoder.decode(payload))
                    if stream == 1 and flags & 0x1:
                        return headers
            chunk = sock.recv(65536)
            assert chunk, "the server closed the connection before its trailers"
            data += chunk


@needs_triton
def test_a_deadline_passed_while_the_model_runs_is_answered_as_triton(naiad, tmp_path):
    root = tmp_path / "triton"
    with TritonPeer(_repository(root), tmp_path, []) as triton:
        triton.wait_ready(list(MODELS))
        answers = {}
        for name, server, gate in (
            ("triton", triton, root / "gate-raw"),
            ("naiad", naiad, naiad.root / "gate-raw"),
        ):
            before = _lanes(naiad)
            trailers = _trailers_at_deadline(server.grpc_port, "raw", "500m")
            # The gate was closed all along: the answer is the deadline's, not the model's.
            (gate / "open").touch()
            answers[name] = (trailers.get("grpc-status"), trailers.get("grpc-message"))
            if name == "naiad":
                assert _lanes(naiad)["io_loop_requests"] == before["io_loop_requests"] + 1
    assert answers["naiad"] == answers["triton"] == ("4", "Deadline Exceeded")
