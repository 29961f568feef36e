"""Differential: decoupled ensembles over gRPC ModelStreamInfer, sent to Naiad and to
the real Triton 2.51 (its Python backend) with the same repository: ens_decoupled
(repeat, then int_double on each of repeat's responses) and ens_repeat (repeat alone).
The same responses (values, ids, `triton_final_response`, error messages) in the same
order, the same empty final response, ModelInfer's refusal, and the same statistics.

Left out (timing decides them, in Triton as in Naiad): whether ens_decoupled's last
response carries the final flag when repeat sends it alone after its responses (mode
"thread"), how many Y are streamed before a mid-stream error, and the order of two
requests' responses on one stream (each request's own order is compared). Triton 2.51
counts a failure twice for an ensemble whose failing step was the last one running
(README "Differences").
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
from server_harness import NaiadServer, make_repository
from test_grpc_pipelines import (
    ensemble_stream,
    streamed,
    streamed_in_sequence,
    streamed_until_error,
)
from triton_peer import TritonPeer, needs_triton
from tritonclient.utils import InferenceServerException

pytestmark = [
    pytest.mark.timeout(600),
    needs_triton,
]

TESTS = Path(__file__).resolve().parent.parent
MODELS = {
    "repeat": TESTS / "decoupled_models" / "repeat",
    "int_double": TESTS / "pipeline_models" / "int_double",
    "ens_decoupled": TESTS / "pipeline_models" / "ens_decoupled",
    "ens_repeat": TESTS / "pipeline_models" / "ens_repeat",
}

# (model, its output, requests on one stream: (N, mode, id, empty final), responses)
STREAMS = [
    ("ens_decoupled", "Y", [(3, "inline", "a", False)], 3),
    ("ens_decoupled", "Y", [(3, "inline", "a", True)], 3),
    ("ens_decoupled", "Y", [(0, "inline", "z", True)], 1),
    ("ens_decoupled", "Y", [(0, "inline", "z", False)], 0),
    ("ens_decoupled", "Y", [(2, "inline", "b", True), (3, "inline", "c", False)], 5),
    ("ens_repeat", "OUT", [(3, "thread", "t", True)], 4),
    ("ens_repeat", "OUT", [(3, "thread", "t", False)], 3),
    ("ens_repeat", "OUT", [(3, "inline", "i", True)], 3),
    ("ens_repeat", "OUT", [(0, "inline", "z", True)], 1),
    ("ens_repeat", "OUT", [(2, "error_last", "e", True)], 3),
]


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    root = tmp_path_factory.mktemp("grpc_ensemble_stream_triton")
    repository = make_repository(root / "models", MODELS)
    naiad = NaiadServer(repository, log_dir=root).start()
    try:
        with TritonPeer(repository, root, []) as triton:
            triton.wait_ready(MODELS)
            yield naiad, triton
    finally:
        naiad.stop()


def _urls(servers) -> list[str]:
    naiad, triton = servers
    return [f"{naiad.host}:{naiad.grpc_port}", f"127.0.0.1:{triton.grpc_port}"]


def _by_request(responses: list) -> dict:
    out: dict = {}
    for response in responses:
        out.setdefault(response[2], []).append(response)
    return out


@pytest.mark.parametrize("model, output, sends, count", STREAMS)
def test_same_stream_as_triton(servers, model, output, sends, count):
    naiad, triton = (streamed(url, model, sends, count, output) for url in _urls(servers))
    if len(sends) > 1:  # each request's responses in order; the two interleave as they come
        naiad, triton = _by_request(naiad), _by_request(triton)
    assert naiad == triton


def _empty_final(url: str, model: str) -> tuple:
    with grpcclient.InferenceServerClient(url) as client:
        stream = ensemble_stream(client, model)
        stream.send(0, "inline", "e0", True)
        result, error = stream.queue.get(timeout=30)
        client.stop_stream()
    assert error is None
    response = result.get_response()
    return (
        response.model_name,
        response.model_version,
        response.id,
        len(response.outputs),
        {k: v.bool_param for k, v in response.parameters.items()},
    )


@pytest.mark.parametrize("model", ["ens_decoupled", "ens_repeat"])
def test_the_empty_final_response_is_tritons(servers, model):
    naiad, triton = (_empty_final(url, model) for url in _urls(servers))
    assert naiad == triton


@pytest.mark.parametrize("mode", ["error_last", "raise"])
def test_a_step_failing_mid_stream_ends_the_stream_as_in_triton(servers, mode):
    ends = []
    for url in _urls(servers):
        got = streamed_until_error(url, mode)
        # The Y streamed before the error came (as many as int_double had run by then).
        assert got[:-1] == [(0, False, "f"), (2, False, "f")][: len(got) - 1]
        ends.append(got[-1][1])
    naiad, triton = ends
    if mode == "raise":  # the model's own exception text differs (README "Differences")
        naiad, triton = (e.split(", message: ")[0] for e in (naiad, triton))
    assert naiad == triton


def _infer_error(url: str, model: str) -> tuple:
    with grpcclient.InferenceServerClient(url) as client:
        tensor = grpcclient.InferInput("N", [1], "INT32")
        tensor.set_data_from_numpy(np.array([1], dtype=np.int32))
        with pytest.raises(InferenceServerException) as info:
            client.infer(model, [tensor])
    return info.value.status(), info.value.message()


@pytest.mark.parametrize("model", ["ens_decoupled", "ens_repeat"])
def test_model_infer_refused_as_triton(servers, model):
    naiad, triton = (_infer_error(url, model) for url in _urls(servers))
    assert naiad == triton


def _counts(server, model: str) -> tuple:
    stats = requests.get(f"{server.url}/v2/models/{model}/stats", timeout=30).json()
    entry = stats["model_stats"][0]
    inference = entry["inference_stats"]
    return (
        inference["success"]["count"],
        inference["fail"]["count"],
        entry["inference_count"],
        entry["execution_count"],
    )


@pytest.mark.parametrize(
    "model, output, sends, count, models",
    [
        ("ens_decoupled", "Y", [(3, "inline", "s", True)], 3, ("repeat", "int_double")),
        ("ens_decoupled", "Y", [(0, "inline", "s", True)], 1, ("repeat", "int_double")),
        ("ens_repeat", "OUT", [(3, "inline", "s", True)], 3, ("repeat",)),
        ("ens_repeat", "OUT", [(3, "thread", "s", False)], 3, ("repeat",)),
    ],
)
def test_statistics_as_triton(servers, model, output, sends, count, models):
    changes = []
    for server, url in zip(servers, _urls(servers)):
        counted = (model, *models)
        before = {m: _counts(server, m) for m in counted}
        got = streamed(url, model, sends, count, output)
        assert len(got) == count
        after = {m: _counts(server, m) for m in counted}
        changes.append({m: tuple(a - b for a, b in zip(after[m], before[m])) for m in counted})
    naiad, triton = changes
    assert naiad == triton


@pytest.mark.parametrize(
    "model, output, n, mode, sequence",
    [
        ("ens_decoupled", "Y", 3, "inline", {"sequence_id": 7, "sequence_start": True}),
        ("ens_decoupled", "Y", 2, "inline", {"sequence_id": "s1", "sequence_end": True}),
        ("ens_decoupled", "Y", 2, "inline", {}),
        ("ens_repeat", "OUT", 2, "thread", {"sequence_id": 8}),
        ("ens_repeat", "OUT", 0, "inline", {"sequence_id": 8}),
    ],
)
def test_streamed_responses_say_their_sequence_as_triton(servers, model, output, n, mode, sequence):
    naiad, triton = (
        streamed_in_sequence(url, model, output, n, mode, **sequence) for url in _urls(servers)
    )
    assert naiad == triton
