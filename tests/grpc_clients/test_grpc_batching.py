"""The dynamic batcher seen from gRPC clients (tests/test_batching.py has the rest): the
early exit for gRPC connections, and HTTP and gRPC fast-path requests in one batch. Run
apart from the main suite (tests/grpc_clients/conftest.py says why)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from server_harness import NaiadServer
from test_batching import TIMEOUT, build_repository, idle_connection, queue_ns


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repository = build_repository(tmp_path_factory.mktemp("batching-repository"))
    server = NaiadServer(repository, log_dir=tmp_path_factory.mktemp("batching"), name="batching")
    server.start(wait="ready", timeout=120)
    yield server
    server.stop()


def _grpc_infer(client, value: int, model: str = "batch_delay") -> float:
    tensor = grpcclient.InferInput("INPUT0", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.array([[value]], dtype=np.int32))
    start = time.monotonic()
    result = client.infer(model, [tensor], client_timeout=TIMEOUT)
    assert result.as_numpy("OUTPUT0")[0][0] == value
    return time.monotonic() - start


def test_grpc_lone_call_leaves_early_but_not_below_the_clients_concurrency(server):
    """A gRPC connection counts as waiting while it has as many inference calls in
    flight as it ever had at once (arrivals.py): one call at a time leaves at once; after
    the client has had two calls going, a single call waits the 300 ms delay, since the
    client could still send its second."""
    with grpcclient.InferenceServerClient(f"{server.host}:{server.grpc_port}") as client:
        _grpc_infer(client, 0)  # warm up
        # On batch_early (a 5 s delay): the server's own account of the call's wait says
        # it left before the delay, however slow the machine.
        before = queue_ns(server, "batch_early")
        _grpc_infer(client, 1, "batch_early")
        count, ns = queue_ns(server, "batch_early")
        assert count - before[0] == 1 and ns - before[1] < 5_000_000_000, (count, ns, before)
        # Two calls at once: the first runs 200 ms (DELAY_MS), so the second joins it.
        value = grpcclient.InferInput("INPUT0", [1, 1], "INT32")
        value.set_data_from_numpy(np.array([[2]], dtype=np.int32))
        delay = grpcclient.InferInput("DELAY_MS", [1, 1], "INT32")
        delay.set_data_from_numpy(np.array([[200]], dtype=np.int32))
        done = threading.Semaphore(0)
        for inputs in ([value, delay], [value]):
            client.async_infer("batch_delay", inputs, lambda result, error: done.release())
        assert done.acquire(timeout=TIMEOUT) and done.acquire(timeout=TIMEOUT)
        assert _grpc_infer(client, 3) >= 0.3


def test_http_and_grpc_fast_path_requests_share_a_batch(server):
    """An HTTP lane request and a gRPC fast-path request (raw contents) meet in one held
    batch: one codec reads the result block once and answers each in its protocol."""
    lanes_before = requests.get(f"{server.url}/v2/naiad/lanes", timeout=TIMEOUT).json()
    grpc_input = grpcclient.InferInput("INPUT0", [1, 1], "INT32")
    grpc_input.set_data_from_numpy(np.array([[41]], dtype=np.int32))
    http_input = httpclient.InferInput("INPUT0", [1, 1], "INT32")
    http_input.set_data_from_numpy(np.array([[42]], dtype=np.int32), binary_data=True)
    with (
        idle_connection(server),
        grpcclient.InferenceServerClient(f"{server.host}:{server.grpc_port}") as grpc_client,
        httpclient.InferenceServerClient(f"{server.host}:{server.http_port}") as http_client,
        ThreadPoolExecutor(2) as pool,
    ):
        via_grpc = pool.submit(grpc_client.infer, "batch_delay", [grpc_input], request_id="g")
        via_http = pool.submit(http_client.infer, "batch_delay", [http_input], request_id="h")
        grpc_result, http_result = via_grpc.result(TIMEOUT), via_http.result(TIMEOUT)
    assert grpc_result.as_numpy("OUTPUT0")[0][0] == 41
    assert http_result.as_numpy("OUTPUT0")[0][0] == 42
    assert grpc_result.get_response().id == "g" and http_result.get_response()["id"] == "h"
    assert grpc_result.as_numpy("BATCH")[0][0] == 2 == http_result.as_numpy("BATCH")[0][0]
    lanes = requests.get(f"{server.url}/v2/naiad/lanes", timeout=TIMEOUT).json()
    # The two, and the idle connection's one JSON request (JSON tensors take the lane).
    assert lanes["lane_requests"] - lanes_before["lane_requests"] == 3
    assert lanes["general_requests"] == lanes_before["general_requests"]
