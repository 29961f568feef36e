"""gRPC on `naiad serve --http-thread-count 2` (naiad/io_engine.py): every gRPC
connection stays on loop 0 (its keepalive and age are Python's), while HTTP connections
are spread over both loops. tritonclient.grpc unary infer on many connections at once,
control-plane calls (metadata, statistics, load and unload), and HTTP clients on both
loops served alongside, and a decoupled model's ModelStreamInfer stream whose every
response arrives, in order, whichever loop polls the core for it. HTTP alone:
tests/test_io_threads.py."""

from __future__ import annotations

import queue
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
from model_control_support import (
    ADD_SUB_MODEL,
    add_sub_binary_request,
    add_sub_client_inputs,
    add_sub_pbtxt,
    write_model,
)
from server_harness import NaiadServer, make_repository

pytestmark = pytest.mark.timeout(300)

DECOUPLED_MODELS = Path(__file__).resolve().parent.parent / "decoupled_models"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("grpc_io_threads")
    repo = make_repository(root / "models", {"repeat": DECOUPLED_MODELS / "repeat"})
    write_model(repo, "add_sub", add_sub_pbtxt(), ADD_SUB_MODEL)
    write_model(repo, "other", add_sub_pbtxt("other"), ADD_SUB_MODEL)
    args = [
        "--grpc-infer-thread-count=2",
        "--model-control-mode=explicit",
        "--load-model=add_sub",
        "--load-model=repeat",
    ]
    with NaiadServer(repo, log_dir=root, extra_args=args) as running:
        yield running


def _loops(server) -> list[dict]:
    return requests.get(f"{server.url}/v2/naiad/io_loops", timeout=10).json()["loops"]


def test_grpc_infer_on_many_connections_beside_http_on_both_loops(server):
    before = _loops(server)
    assert len(before) == 2

    def grpc_client(index: int) -> int:
        # A subchannel pool of its own: a connection of its own (grpcio shares them).
        with grpcclient.InferenceServerClient(
            f"{server.host}:{server.grpc_port}",
            channel_args=[("grpc.use_local_subchannel_pool", 1)],
        ) as client:
            for n in range(10):
                value = float(index * 10 + n)
                result = client.infer("add_sub", add_sub_client_inputs(grpcclient, value))
                assert np.array_equal(result.as_numpy("OUTPUT0"), np.full((1, 16), value + 1))
        return 10

    def http_client(_: int) -> int:
        body, headers = add_sub_binary_request(2.0)
        with requests.Session() as session:
            for _ in range(10):
                reply = session.post(
                    f"{server.url}/v2/models/add_sub/infer", data=body, headers=headers, timeout=30
                )
                assert reply.status_code == 200, reply.text
        return 10

    with ThreadPoolExecutor(16) as pool:
        grpc_done = pool.map(grpc_client, range(8))
        http_done = pool.map(http_client, range(8))
        assert sum(grpc_done) == 80 and sum(http_done) == 80
    after = _loops(server)
    served = [a["connections_served"] - b["connections_served"] for a, b in zip(after, before)]
    # 9 HTTP connections (the clients' and this GET's) alternate between the loops; the
    # 8 gRPC connections all stay on loop 0.
    assert served[1] in (4, 5), served
    assert served[0] == 17 - served[1], served


def test_control_plane_calls_on_two_loops(server):
    with grpcclient.InferenceServerClient(f"{server.host}:{server.grpc_port}") as client:
        assert client.get_model_metadata("add_sub").name == "add_sub"
        start = client.get_inference_statistics("add_sub").model_stats[0]
        for _ in range(3):
            client.infer("add_sub", add_sub_client_inputs(grpcclient, 1.0))
        stats = client.get_inference_statistics("add_sub").model_stats[0]
        assert stats.inference_stats.success.count - start.inference_stats.success.count == 3
        client.load_model("other")
        assert client.is_model_ready("other")
        result = client.infer("other", add_sub_client_inputs(grpcclient, 5.0))
        assert np.array_equal(result.as_numpy("OUTPUT0"), np.full((1, 16), 6.0))
        client.unload_model("other")
        assert not client.is_model_ready("other")


def test_a_decoupled_stream_gets_every_response_in_order_on_two_loops(server):
    # Python answers the stream; loop 1's thread polls the core too (it waits on the
    # core's eventfd beside loop 0), and must leave Python's completions for loop 0 in
    # the order they were done: none after its request's final response, none swapped.
    # (Before the fix, some were swapped or lost in most runs of this stream.)
    responses = 200
    requests_sent = {"a": "inline", "b": "thread", "c": "inline", "d": "thread"}
    received: queue.Queue = queue.Queue()
    with grpcclient.InferenceServerClient(f"{server.host}:{server.grpc_port}") as client:
        client.start_stream(callback=lambda result, error: received.put((result, error)))
        for request_id, mode in requests_sent.items():
            n = grpcclient.InferInput("N", [1], "INT32")
            n.set_data_from_numpy(np.array([responses], dtype=np.int32))
            client.async_stream_infer(
                "repeat",
                [n],
                request_id=request_id,
                parameters={"mode": mode},
                enable_empty_final_response=True,
            )
        got: dict[str, list] = {request_id: [] for request_id in requests_sent}
        finals = 0
        while finals < len(requests_sent):
            result, error = received.get(timeout=30)
            assert error is None, error
            response = result.get_response()
            values = result.as_numpy("OUT")
            final = response.parameters["triton_final_response"].bool_param
            got[response.id].append((None if values is None else int(values[0]), final))
            finals += final
        client.stop_stream()
    for request_id, mode in requests_sent.items():
        if mode == "inline":  # the final flag on the last response
            expected = [(i, i == responses - 1) for i in range(responses)]
        else:  # the final flag alone, after them
            expected = [(i, False) for i in range(responses)] + [(None, True)]
        assert got[request_id] == expected, (request_id, got[request_id])
