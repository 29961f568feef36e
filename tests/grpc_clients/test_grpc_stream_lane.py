"""ModelStreamInfer and large tensors on the C++ fast path (csrc/http2/grpc_lane.h): streamed
requests with raw contents are queued from the received message and answered with
ModelStreamInferResponse bytes built in C++ from the result block, each with its request
id; a failed one is answered with `error_message` (and its id) while the stream stays
open; a 602 KB answer is written from the result block (GrpcAnswer) on both RPCs.
"""

from __future__ import annotations

import queue
from pathlib import Path

import grpc
import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
from server_harness import NaiadServer, make_repository
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pbg

TIMEOUT = 20
PERF_MODELS = Path(__file__).resolve().parents[2] / "perf" / "models"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("grpc_stream")
    repository = make_repository(
        root / "models",
        {"add_sub": None, "raiser": None, "identity_fp32": PERF_MODELS / "identity_fp32"},
    )
    server = NaiadServer(repository, log_dir=root, name="grpc-stream")
    server.start(wait="ready", timeout=120)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def url(server):
    return f"{server.host}:{server.grpc_port}"


def _lanes(server) -> dict:
    return requests.get(f"{server.url}/v2/naiad/lanes", timeout=TIMEOUT).json()


def _add_sub_inputs(a, b):
    inputs = [
        grpcclient.InferInput("INPUT0", list(a.shape), "FP32"),
        grpcclient.InferInput("INPUT1", list(b.shape), "FP32"),
    ]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs


def _image(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random((1, 3, 224, 224), dtype=np.float32)


def test_stream_requests_take_the_fast_lane_with_their_ids(server, url):
    before = _lanes(server)
    answers: queue.Queue = queue.Queue()
    expected = {}
    with grpcclient.InferenceServerClient(url) as client:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        rng = np.random.default_rng(5)
        for i in range(12):
            a = rng.random((1, 16), dtype=np.float32)
            b = rng.random((1, 16), dtype=np.float32)
            expected[f"s-{i}"] = ("OUTPUT0", a + b)
            client.async_stream_infer("add_sub", _add_sub_inputs(a, b), request_id=f"s-{i}")
        for i in range(2):  # 602 KB each way: answered from the result block
            image = _image(i)
            tensor = grpcclient.InferInput("INPUT0", list(image.shape), "FP32")
            tensor.set_data_from_numpy(image)
            expected[f"big-{i}"] = ("OUTPUT0", image)
            client.async_stream_infer("identity_fp32", [tensor], request_id=f"big-{i}")
        got = {}
        for _ in expected:
            result, error = answers.get(timeout=TIMEOUT)
            assert error is None, error
            request_id = result.get_response().id
            got[request_id] = result.as_numpy(expected[request_id][0])
        client.stop_stream()
    assert set(got) == set(expected)
    for request_id, (_, value) in expected.items():
        np.testing.assert_array_equal(got[request_id], value)
    after = _lanes(server)
    assert after["lane_requests"] - before["lane_requests"] == len(expected)
    assert after["general_requests"] == before["general_requests"]


def test_stream_errors_carry_their_id_and_the_stream_stays_open(server, url):
    before = _lanes(server)
    with grpc.insecure_channel(url) as channel:
        stub = pbg.GRPCInferenceServiceStub(channel)

        def add_sub(request_id, datatype="FP32"):
            request = pb.ModelInferRequest(model_name="add_sub", id=request_id)
            for name in ("INPUT0", "INPUT1"):
                request.inputs.add(name=name, datatype=datatype, shape=[1, 16])
                request.raw_input_contents.append(np.ones((1, 16), np.float32).tobytes())
            return request

        raiser = pb.ModelInferRequest(model_name="raiser", id="fails-in-model")
        raiser.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 1])
        raiser.raw_input_contents.append(np.ones((1, 1), np.float32).tobytes())
        requests_ = [raiser, add_sub("refused", "INT8"), add_sub("fine")]
        responses = list(stub.ModelStreamInfer(iter(requests_), timeout=TIMEOUT))
    by_id = {r.infer_response.id: r for r in responses}
    assert set(by_id) == {"fails-in-model", "refused", "fine"}
    assert "raiser refuses to run" in by_id["fails-in-model"].error_message
    assert "expects 'FP32'" in by_id["refused"].error_message
    assert by_id["fine"].error_message == ""
    out = np.frombuffer(by_id["fine"].infer_response.raw_output_contents[0], np.float32)
    np.testing.assert_array_equal(out, np.full(16, 2, np.float32))
    after = _lanes(server)
    assert after["general_requests"] == before["general_requests"]
    assert after["lane_requests"] - before["lane_requests"] == 2  # the refused one: at once
    assert after["lane_refused"] - before["lane_refused"] == 1


def test_large_unary_answer_written_from_the_result_block(server, url):
    image = _image(9)
    with grpcclient.InferenceServerClient(url) as client:
        tensor = grpcclient.InferInput("INPUT0", list(image.shape), "FP32")
        tensor.set_data_from_numpy(image)
        for _ in range(3):
            result = client.infer("identity_fp32", [tensor], request_id="big")
            assert result.get_response().id == "big"
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), image)
