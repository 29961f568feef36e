"""Differential (issue 41, "Answers that differ"): the same requests to the real Triton
2.51 and to Naiad get the same status and message. A gRPC request naming a version that
is not an integer > 0 (ModelInfer, ModelMetadata, ModelConfig, ModelReady, and
ModelStatistics); an HTTP body with binary tensor data sent without
Inference-Header-Content-Length; and --id, which names the server in GET /v2 and
ServerMetadata (Naiad started with --id=triton against Triton's default). Also the CPU
gauges of /metrics (--allow-cpu-metrics): names, HELP, TYPE and labels. Skips, saying
why, where Triton is not installed (tests/triton_peer.py)."""

from __future__ import annotations

import contextlib
import json
import queue
import re
import socket
import threading

import hpack
import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from server_harness import NaiadServer, make_repository
from triton_peer import TritonPeer, needs_triton

pytestmark = [
    pytest.mark.timeout(300),
    needs_triton,
]

MODEL = "add_sub"
# Versions as a gRPC request names them: not numbers, negative, out of a long's range
# (INVALID_ARGUMENT); 0 and an absent version (NOT_FOUND / not ready); read as
# std::stol reads them (" 1", "+1", "1abc" are version 1).
VERSIONS = [
    "wrong_specification",
    "-1",
    "",
    " ",
    "99999999999999999999",
    "0",
    "2",
    " 1",
    "+1",
    "1abc",
]


ECHO_CONFIG = """
name: "echo"
backend: "python"
max_batch_size: 1
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 65536 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 65536 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

ECHO_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]
            )
            for r in requests
        ]
"""

# Both servers compress their gRPC answers (--grpc-infer-response-compression-level)
# and read add_sub's custom config configs/small.pbtxt (--model-config-name; echo has
# none: its config.pbtxt).
FLAGS = ["--grpc-infer-response-compression-level=high", "--model-config-name=small"]


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    repository = make_repository(tmp_path_factory.mktemp("repo"), [MODEL])
    (repository / "echo" / "1").mkdir(parents=True)
    (repository / "echo" / "config.pbtxt").write_text(ECHO_CONFIG)
    (repository / "echo" / "1" / "model.py").write_text(ECHO_MODEL)
    (repository / MODEL / "configs").mkdir()
    config = (repository / MODEL / "config.pbtxt").read_text()
    small = config.replace("max_batch_size: 64", "max_batch_size: 8")
    assert small != config
    (repository / MODEL / "configs" / "small.pbtxt").write_text(small)
    with TritonPeer(repository, tmp_path_factory.mktemp("triton"), FLAGS) as triton:
        triton.wait_ready([MODEL, "echo"])
        naiad = NaiadServer(
            repository,
            log_dir=tmp_path_factory.mktemp("naiad"),
            extra_args=["--id=triton", *FLAGS],
        )
        with naiad:
            yield triton, naiad


def _grpc(server):
    return grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")


def _inputs():
    inputs = [grpcclient.InferInput(name, [1, 16], "FP32") for name in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(np.ones((1, 16), np.float32))
    return inputs


CALLS = {
    "ModelInfer": lambda client, v: (
        client.infer(MODEL, _inputs(), model_version=v).as_numpy("OUTPUT0").tolist()
    ),
    "ModelMetadata": lambda client, v: client.get_model_metadata(MODEL, v, as_json=True),
    "ModelConfig": lambda client, v: client.get_model_config(MODEL, v, as_json=True)["config"][
        "name"
    ],
    "ModelReady": lambda client, v: client.is_model_ready(MODEL, v),
    "ModelStatistics": lambda client, v: [
        s["name"] for s in client.get_inference_statistics(MODEL, v, as_json=True)["model_stats"]
    ],
}


def _answer(call, client, version):
    try:
        return ("OK", CALLS[call](client, version))
    except grpcclient.InferenceServerException as exc:
        return (exc.status(), exc.message())


@pytest.mark.parametrize("call", sorted(CALLS))
def test_grpc_version_strings(servers, call):
    triton, naiad = servers
    with _grpc(triton) as t, _grpc(naiad) as n:
        for version in VERSIONS:
            expected = _answer(call, t, version)
            assert _answer(call, n, version) == expected, (call, version)
    if call == "ModelReady":
        assert expected == ("OK", True)  # "1abc" names version 1, as std::stol reads it


def _stream_answers(server) -> list:
    """ModelStreamInfer: one request per version string on one stream, each answer's
    error message (None when it ran)."""
    answers = queue.Queue()
    with _grpc(server) as client:
        client.start_stream(lambda result, error: answers.put(error))
        try:
            got = []
            for version in VERSIONS:
                client.async_stream_infer(MODEL, _inputs(), model_version=version)
                error = answers.get(timeout=60)
                got.append(None if error is None else error.message())
        finally:
            client.stop_stream()
    return got


def test_grpc_stream_version_strings(servers):
    triton, naiad = servers
    expected = _stream_answers(triton)
    assert expected[0].startswith("failed to get model version from specified version")
    assert _stream_answers(naiad) == expected


def _binary_body(binary: list[bool], trailing: bytes = b"") -> bytes:
    inputs = [httpclient.InferInput(name, [1, 16], "FP32") for name in ("INPUT0", "INPUT1")]
    for tensor, as_binary in zip(inputs, binary):
        tensor.set_data_from_numpy(np.ones((1, 16), np.float32), binary_data=as_binary)
    body, _ = httpclient.InferenceServerClient.generate_request_body(inputs)
    return body + trailing


# Bodies POSTed without Inference-Header-Content-Length (the binary data of FP32 ones
# starts with a NUL byte, where Triton's JSON parser stops).
BODIES = {
    "both binary": _binary_body([True, True]),
    "second binary": _binary_body([False, True]),
    "more bytes than the inputs": _binary_body([True, True], b"\0" * 32),
    "json then junk": json.dumps({"inputs": []}).encode() + b"junk",
    "json then bytes that are no UTF-8": json.dumps({"inputs": []}).encode() + b"\xff\xfe",
    "json then white space": b'{"id": "x", "inputs": []}\n  ',
}


@pytest.mark.parametrize("case", sorted(BODIES))
def test_http_binary_body_without_header_length(servers, case):
    triton, naiad = servers
    answers = [
        requests.post(f"{server.url}/v2/models/{MODEL}/infer", data=BODIES[case], timeout=30)
        for server in (triton, naiad)
    ]
    assert [a.status_code for a in answers[1:]] == [answers[0].status_code]
    assert answers[1].json() == answers[0].json()
    if case == "both binary":
        assert answers[1].status_code == 400
        assert "INPUT0" in answers[1].json()["error"]


def test_id_names_the_server(servers):
    triton, naiad = servers
    http = [requests.get(f"{s.url}/v2", timeout=10).json()["name"] for s in servers]
    with _grpc(triton) as t, _grpc(naiad) as n:
        grpc_names = [c.get_server_metadata(as_json=True)["name"] for c in (t, n)]
    assert http == ["triton", "triton"]
    assert grpc_names == ["triton", "triton"]


def _cpu_families(server) -> list[str]:
    text = requests.get(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).text
    # HELP and TYPE lines as they are; samples with the value left out.
    return [
        re.sub(r" \S+$", "", line)
        for line in text.splitlines()
        if re.match(r"(# (HELP|TYPE) )?nv_cpu_", line)
    ]


def test_cpu_metrics_as_triton(servers):
    triton, naiad = servers
    expected = _cpu_families(triton)
    assert any(line.startswith("nv_cpu_utilization") for line in expected)
    assert _cpu_families(naiad) == expected


class _Recorder:
    """A TCP proxy to `port` that keeps the bytes the server sends."""

    def __init__(self, port: int):
        self.target = port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.received: list[bytes] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        try:
            client, _ = self.listener.accept()  # one connection: one HPACK context
        except OSError:
            return
        upstream = socket.create_connection(("127.0.0.1", self.target))
        threading.Thread(target=self._pipe, args=(client, upstream, None), daemon=True).start()
        threading.Thread(
            target=self._pipe, args=(upstream, client, self.received), daemon=True
        ).start()

    @staticmethod
    def _pipe(source, sink, keep) -> None:
        try:
            while data := source.recv(65536):
                if keep is not None:  # before the client can have them
                    keep.append(data)
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def response_headers(self) -> list[dict]:
        """The header blocks the server sent, decoded in order."""
        data, decoder, blocks = b"".join(self.received), hpack.Decoder(), []
        while len(data) >= 9:
            length = int.from_bytes(data[:3], "big")
            kind, payload = data[3], data[9 : 9 + length]
            if kind == 0x1:  # HEADERS (neither padded nor with priority from these peers)
                blocks.append(dict(decoder.decode(payload)))
            data = data[9 + length :]
        return blocks


def test_answers_compressed_as_triton(servers):
    """--grpc-infer-response-compression-level=high: the same algorithm as Triton for
    what the client accepts (grpc-encoding), and far fewer bytes than the answer's."""
    seen = []
    for server in servers:
        recorder = _Recorder(server.grpc_port)
        try:
            with grpcclient.InferenceServerClient(f"127.0.0.1:{recorder.port}") as client:
                tensor = grpcclient.InferInput("INPUT0", [1, 65536], "FP32")
                tensor.set_data_from_numpy(np.zeros((1, 65536), np.float32))
                result = client.infer("echo", [tensor]).as_numpy("OUTPUT0")
            assert result.shape == (1, 65536) and not result.any()
            sent = sum(len(chunk) for chunk in recorder.received)
            encodings = [h.get("grpc-encoding") for h in recorder.response_headers()]
            seen.append([e for e in encodings if e is not None])
            assert sent < 65536  # of 256 KiB answered
        finally:
            recorder.listener.close()
    assert seen[0] and seen[1] == seen[0]


def test_model_config_name_as_triton(servers):
    batches = [
        [
            requests.get(f"{server.url}/v2/models/{name}/config", timeout=10).json()[
                "max_batch_size"
            ]
            for name in (MODEL, "echo")
        ]
        for server in servers
    ]
    assert batches == [[8, 1], [8, 1]]
