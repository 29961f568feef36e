"""Differential: decoupled models over gRPC, sent to Naiad and to the real Triton 2.51
(its Python backend) with the same repository. ModelStreamInfer must bring the same
responses (values, ids, `triton_final_response`, error messages) in the same order, and
ModelInfer the same status and message. Left out: the cases test_decoupled_triton.py
names (a model's own exception text, a model that never sends the final flag).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from server_harness import NaiadServer, make_repository
from test_grpc_decoupled import Stream, shm_stream
from triton_peer import TritonPeer, needs_triton
from tritonclient.utils import InferenceServerException

pytestmark = [
    pytest.mark.timeout(600),
    needs_triton,
]

DECOUPLED_MODELS = Path(__file__).resolve().parent.parent / "decoupled_models"

# (requests on one stream: (N, mode, id, enable_empty_final_response), responses expected)
STREAMS = [
    ([(3, "thread", "a", False)], 3),
    ([(3, "thread", "a", True)], 4),
    ([(3, "inline", "b", True), (2, "inline", "c", False)], 5),
    ([(0, "inline", "d", True)], 1),
    ([(2, "error_last", "e", True)], 3),
    ([(1, "after_final", "f", True)], 1),
]


@pytest.fixture(scope="module")
def urls(tmp_path_factory):
    root = tmp_path_factory.mktemp("grpc_decoupled_triton")
    repository = make_repository(root / "models", {"repeat": DECOUPLED_MODELS / "repeat"})
    naiad = NaiadServer(repository, log_dir=root).start()
    try:
        with TritonPeer(repository, root, []) as triton:
            triton.wait_ready(["repeat"])
            yield f"{naiad.host}:{naiad.grpc_port}", f"127.0.0.1:{triton.grpc_port}"
    finally:
        naiad.stop()


def _streamed(url: str, sends: list, count: int) -> list:
    with grpcclient.InferenceServerClient(url) as client:
        stream = Stream(client)
        for n, mode, request_id, empty in sends:
            stream.send(n, mode, request_id, empty)
        got = stream.take(count)
        assert stream.nothing_more()
        client.stop_stream()
    return got


@pytest.mark.parametrize("sends, count", STREAMS)
def test_same_stream_as_triton(urls, sends, count):
    naiad, triton = urls
    assert _streamed(naiad, sends, count) == _streamed(triton, sends, count)


@pytest.mark.parametrize("mode", ["inline", "thread"])
@pytest.mark.parametrize("byte_size", [4, 2])
def test_outputs_in_a_client_region_as_triton(urls, mode, byte_size):
    """Each response writes OUT into the region and carries metadata only; too small a
    region: Triton's error on each response (issue 10)."""
    naiad, triton = urls
    assert shm_stream(naiad, mode, byte_size) == shm_stream(triton, mode, byte_size)


def _infer_error(url: str) -> tuple:
    with grpcclient.InferenceServerClient(url) as client:
        tensor = grpcclient.InferInput("N", [1], "INT32")
        tensor.set_data_from_numpy(np.array([1], dtype=np.int32))
        with pytest.raises(InferenceServerException) as info:
            client.infer("repeat", [tensor])
    return info.value.status(), info.value.message()


def test_model_infer_refused_as_triton(urls):
    naiad, triton = urls
    assert _infer_error(naiad) == _infer_error(triton)
