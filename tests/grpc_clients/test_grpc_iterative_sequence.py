"""Iterative sequences and request rescheduling (`sequence_batching { iterative_sequence:
true }`, `request.set_release_flags(TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)` in a
decoupled Python model), over gRPC streaming: each request runs again until the model
releases it, each execution streaming a response, the request's flags START on its first
run only; several requests counting down at once each get their own count; each run sees
the sequence controls as Triton's sequence batcher sets them and counts as an execution,
an inference and a success in the statistics. Compared with the real Triton 2.51 where
it is installed."""

from __future__ import annotations

import queue
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from iterative_support import all_runs, run_counts
from server_harness import NaiadServer, make_repository
from triton_peer import TritonPeer, find_triton

pytestmark = pytest.mark.timeout(300)

MODELS = Path(__file__).resolve().parent.parent / "iterative_models"
TIMEOUT = 60


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    root = tmp_path_factory.mktemp("iterative")
    models = {name: MODELS / name for name in ("countdown", "history_stream")}
    return make_repository(root / "models", models), root


@pytest.fixture(scope="module")
def naiad(repository):
    models, root = repository
    with NaiadServer(models, log_dir=root) as server:
        yield f"{server.host}:{server.grpc_port}"


def _countdowns(url: str, starts: dict) -> dict:
    """Sends one request per (request id, count) of `starts` on one stream; each
    request's responses in order: (OUT, FLAGS, final)."""
    responses: queue.Queue = queue.Queue()
    got: dict = {key: [] for key in starts}
    with grpcclient.InferenceServerClient(url) as client:
        client.start_stream(callback=lambda result, error: responses.put((result, error)))
        for request_id, count in starts.items():
            value = grpcclient.InferInput("IN", [1, 1], "INT32")
            value.set_data_from_numpy(np.array([[count]], dtype=np.int32))
            client.async_stream_infer("countdown", [value], request_id=request_id)
        open_requests = set(starts)
        while open_requests:
            result, error = responses.get(timeout=TIMEOUT)
            assert error is None, error
            response = result.get_response()
            final = response.parameters["triton_final_response"].bool_param
            got[response.id].append(
                (int(result.as_numpy("OUT")[0, 0]), int(result.as_numpy("FLAGS")[0, 0]), final)
            )
            if final:
                open_requests.discard(response.id)
        client.stop_stream()
    return got


ONE = {"a": 3}
# The first run of each request is START; later runs are not; the last response is final.
ONE_EXPECTED = {"a": [(2, 1, False), (1, 0, False), (0, 0, True)]}


def test_a_rescheduled_request_runs_until_released(naiad):
    assert _countdowns(naiad, ONE) == ONE_EXPECTED


def test_requests_rescheduled_together_keep_their_own_counts(naiad):
    got = _countdowns(naiad, {"a": 4, "b": 2, "c": 1})
    assert got == {
        "a": [(3, 1, False), (2, 0, False), (1, 0, False), (0, 0, True)],
        "b": [(1, 1, False), (0, 0, True)],
        "c": [(0, 1, True)],
    }


@pytest.mark.skipif(find_triton() is None, reason="Triton 2.51 is not installed (/tmp/peers)")
def test_the_same_stream_as_triton(repository, naiad):
    models, root = repository
    with TritonPeer(models, root, []) as triton:
        triton.wait_ready(["countdown"])
        expected = _countdowns(f"127.0.0.1:{triton.grpc_port}", ONE)
    assert expected == ONE_EXPECTED
    assert _countdowns(naiad, ONE) == expected


def _runs(url: str, request_id: str, count: int) -> list:
    """One request to history_stream on a stream: per response (OUT, what the run saw:
    START, END, READY, CORRID, flags(), correlation_id(), requests in that execute,
    final)."""
    responses: queue.Queue = queue.Queue()
    got = []
    with grpcclient.InferenceServerClient(url) as client:
        client.start_stream(callback=lambda result, error: responses.put((result, error)))
        value = grpcclient.InferInput("IN", [1, 1], "INT32")
        value.set_data_from_numpy(np.array([[count]], dtype=np.int32))
        client.async_stream_infer("history_stream", [value], request_id=request_id)
        final = False
        while not final:
            result, error = responses.get(timeout=TIMEOUT)
            assert error is None, error
            final = result.get_response().parameters["triton_final_response"].bool_param
            seen = tuple(int(v) for v in result.as_numpy("HISTORY")[0])
            got.append((int(result.as_numpy("OUT")[0, 0]), seen, final))
        client.stop_stream()
    return got


# A request without a correlation id gets one of its own (1 for the model's first);
# START on its first run only, END never; every run an execution of one request.
STREAM_EXPECTED = [
    (2, (1, 0, 1, 1, 1, 1, 1), False),
    (1, (0, 0, 1, 1, 0, 1, 1), False),
    (0, (0, 0, 1, 1, 0, 1, 1), True),
]
STREAM_COUNTS = all_runs(3, 1)


def test_each_run_sees_the_controls_and_counts(repository):
    models, root = repository
    # A server of its own: the correlation ids and statistics start from nothing.
    with NaiadServer(models, log_dir=root) as server:
        assert _runs(f"{server.host}:{server.grpc_port}", "s", 3) == STREAM_EXPECTED
        assert run_counts(server.url, "history_stream", 1) == STREAM_COUNTS


@pytest.mark.skipif(find_triton() is None, reason="Triton 2.51 is not installed (/tmp/peers)")
def test_the_same_controls_and_statistics_as_triton(repository):
    models, root = repository
    with TritonPeer(models, root, []) as triton:
        triton.wait_ready(["history_stream"])
        expected = (
            _runs(f"127.0.0.1:{triton.grpc_port}", "s", 3),
            run_counts(triton.url, "history_stream", 1),
        )
    assert expected == (STREAM_EXPECTED, STREAM_COUNTS)
    with NaiadServer(models, log_dir=root) as server:
        got = (
            _runs(f"{server.host}:{server.grpc_port}", "s", 3),
            run_counts(server.url, "history_stream", 1),
        )
    assert got == expected
