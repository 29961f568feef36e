"""Ensembles and BLS seen from tritonclient.grpc (tests/test_pipelines.py has the HTTP
side and the model set). Run apart from the main suite (conftest.py says why)."""

from __future__ import annotations

import json
import queue
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
from server_harness import REPO_ROOT, NaiadServer
from test_grpc_decoupled import Stream
from test_pipelines import ENSEMBLE_SEQUENCES, A, B, build_repository, sequence_parameters
from tritonclient.utils import InferenceServerException

# The line of repeat's model.py whose raise the error names (the model may change).
_REPEAT_MODEL = REPO_ROOT / "tests" / "decoupled_models" / "repeat" / "1" / "model.py"
_REPEAT_RAISES_AT = next(
    number
    for number, line in enumerate(_REPEAT_MODEL.read_text().splitlines(), 1)
    if 'raise RuntimeError("the model failed mid-stream")' in line
)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repository = build_repository(tmp_path_factory.mktemp("pipelines-repository"), bad=False)
    server = NaiadServer(
        repository, log_dir=tmp_path_factory.mktemp("pipelines"), name="grpc-pipelines"
    )
    server.start(wait="ready", timeout=120)
    yield server
    server.stop()


def _inputs():
    inputs = [
        grpcclient.InferInput("INPUT0", [1, 16], "FP32"),
        grpcclient.InferInput("INPUT1", [1, 16], "FP32"),
    ]
    inputs[0].set_data_from_numpy(A)
    inputs[1].set_data_from_numpy(B)
    return inputs


def test_ensemble_over_grpc(client):
    result = client.infer("ensemble_add_sub", _inputs(), client_timeout=30)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * A)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), 2 * B)


@pytest.mark.parametrize("mode", ["sync", "async", "self", "nested", "ensemble"])
def test_bls_over_grpc(client, mode):
    result = client.infer("bls", _inputs(), parameters={"mode": mode}, client_timeout=30)
    if mode == "ensemble":
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * A)
    else:
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)


def _bls_counts(client) -> tuple:
    stats = client.get_inference_statistics("bls", as_json=True)["model_stats"][0]
    inference = stats["inference_stats"]
    return (
        int(inference["success"].get("count", 0)),
        int(inference["fail"].get("count", 0)),
        int(stats.get("execution_count", 0)),
    )


def test_bls_error_over_grpc(client):
    before = _bls_counts(client)
    with pytest.raises(InferenceServerException) as info:
        client.infer(
            "bls", _inputs(), parameters={"mode": "target", "target": "nope"}, client_timeout=30
        )
    assert info.value.status() == "StatusCode.INTERNAL"
    assert info.value.message() == (
        "Model nope - Error when running inference: Failed for execute the inference request. "
        "Model 'nope' is not ready."
    )
    # The error is bls's own answer (InferenceResponse(error=...)): a success of bls's,
    # as Triton 2.51's Python backend counts it.
    successes, failures, executions = before
    assert _bls_counts(client) == (successes + 1, failures, executions + 1)


def test_ensemble_and_bls_under_concurrent_grpc_load(client):
    def one(k: int):
        model = "ensemble_add_sub" if k % 2 else "bls"
        return model, client.infer(model, _inputs(), client_timeout=30)

    with ThreadPoolExecutor(8) as pool:
        for model, result in pool.map(one, range(64)):
            expected = 2 * A if model == "ensemble_add_sub" else A + B
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), expected)


@pytest.mark.parametrize("model", ["ens_nested", "ens_nested_deep"])
def test_an_ensemble_of_ensembles_over_grpc(client, model):
    result = client.infer(model, _inputs(), client_timeout=30)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * A + 2 * B)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), 2 * A - 2 * B)


def parameter_values(response) -> dict:
    """A gRPC response's parameters as plain values (whichever of bool/int64/string)."""
    return {
        key: getattr(value, value.WhichOneof("parameter_choice"))
        for key, value in response.parameters.items()
    }


@pytest.mark.parametrize(
    "model, parameters, expected",
    # The uint64 id above int64's range has no tritonclient.grpc spelling.
    [case for case in ENSEMBLE_SEQUENCES if (case[1] or {}).get("sequence_id", 0) != 2**63 + 5],
)
def test_ensemble_responses_say_their_sequence_over_grpc(client, model, parameters, expected):
    # tritonclient takes the sequence as arguments (it refuses them as parameters).
    sequence = parameters or {}
    result = client.infer(model, _inputs(), client_timeout=30, **sequence)
    assert parameter_values(result.get_response()) == expected
    assert result.as_numpy("OUTPUT0") is not None
    # A plain model says nothing of its sequence.
    plain = client.infer("add_sub", _inputs(), client_timeout=30, **sequence)
    assert parameter_values(plain.get_response()) == {}


def _int_input(value: int):
    tensor = grpcclient.InferInput("INPUT", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.array([[value]], dtype=np.int32))
    return [tensor]


def test_a_models_response_parameters_come_back_over_grpc(client):
    asked = {"note": "x", "count": 3, "flag": True}
    result = client.infer(
        "sequence_override",
        _int_input(3),
        parameters={"respond_with": json.dumps(asked)},
        client_timeout=30,
    )
    assert parameter_values(result.get_response()) == asked
    assert result.as_numpy("OUT").tolist() == [[3]]


def test_a_steps_response_parameters_name_the_sequence_over_grpc(client):
    result = client.infer(
        "ens_override",
        _int_input(4),
        parameters={"respond_with": json.dumps({"sequence_id": 31, "sequence_start": True})},
        sequence_id=6,
        sequence_start=True,
        client_timeout=30,
    )
    assert parameter_values(result.get_response()) == sequence_parameters(31, True)
    assert result.as_numpy("CORRID_OUT").tolist() == [[b"31"]]
    assert result.as_numpy("CTRL").tolist() == [[1, 0]]


def _n(value: int):
    n = grpcclient.InferInput("N", [1], "INT32")
    n.set_data_from_numpy(np.array([value], dtype=np.int32))
    return [n]


def ensemble_stream(client, model: str = "ens_decoupled", output: str = "Y") -> Stream:
    """A started stream to a decoupled ensemble around repeat (its steps take longer
    than repeat alone under load: 30 s per response)."""
    return Stream(client, model, output, timeout=30)


def streamed_until_error(url: str, mode: str) -> list:
    """What a stream to ens_decoupled with N=2 and repeat's failing `mode` received,
    up to and with the error that ends it (and that nothing came after it)."""
    with grpcclient.InferenceServerClient(url) as client:
        stream = ensemble_stream(client)
        stream.send(2, mode, "f", True)
        got = []
        while not got or got[-1][0] != "error":
            got += stream.take(1)
        assert stream.nothing_more()
        client.stop_stream()
    return got


def streamed(url: str, model: str, sends: list, count: int, output: str = "Y") -> list:
    """The `count` responses of the requests `sends` [(N, mode, id, empty final)] on
    one stream to `model` (and that nothing more came)."""
    with grpcclient.InferenceServerClient(url) as client:
        stream = ensemble_stream(client, model, output)
        for n, mode, request_id, empty in sends:
            stream.send(n, mode, request_id, empty)
        got = stream.take(count)
        assert stream.nothing_more()
        client.stop_stream()
    return got


def streamed_in_sequence(url: str, model: str, output: str, n: int, mode: str, **sequence):
    """The responses [(value of `output` or None, parameters)] of one request (N = `n`,
    repeat's `mode`, an empty final response asked for) in `sequence` on a stream."""
    responses = queue.Queue()
    with grpcclient.InferenceServerClient(url) as client:
        client.start_stream(callback=lambda result, error: responses.put((result, error)))
        client.async_stream_infer(
            model,
            _n(n),
            request_id="q",
            parameters={"mode": mode},
            enable_empty_final_response=True,
            **sequence,
        )
        got = []
        while not got or not got[-1][1].get("triton_final_response"):
            result, error = responses.get(timeout=30)
            assert error is None, error
            values = result.as_numpy(output)
            got.append(
                (
                    None if values is None else int(values[0]),
                    parameter_values(result.get_response()),
                )
            )
        client.stop_stream()
    return got


def _arena(server) -> dict:
    return requests.get(f"{server.url}/v2/naiad/arena", timeout=30).json()


def _settles(server, blocks: int) -> None:
    """Nothing in flight and the arena's blocks back to `blocks` (within 5 s)."""
    deadline = time.monotonic() + 5
    while True:
        arena = _arena(server)
        if arena["requests_in_flight"] == 0 and arena["blocks_in_use"] == blocks:
            return
        assert time.monotonic() < deadline, arena
        time.sleep(0.05)


def _url(server) -> str:
    return f"{server.host}:{server.grpc_port}"


def test_an_ensemble_with_a_decoupled_step_streams_each_of_its_responses(client, server):
    # As Triton 2.51: each response of repeat (OUT = 0, 1, 2, the final flag on the
    # last) runs int_double, and each Y is streamed; the last is flagged final.
    blocks = _arena(server)["blocks_in_use"]
    got = streamed(_url(server), "ens_decoupled", [(3, "inline", "r1", True)], 3)
    assert got == [(0, False, "r1"), (2, False, "r1"), (4, True, "r1")]
    # repeat's final flag alone after its responses (mode thread): the ensemble's last
    # response is Y = 4 or, when int_double was done first, the final flag alone.
    got = streamed(_url(server), "ens_decoupled", [(3, "thread", "r2", False)], 3)
    assert [(v, i) for v, _f, i in got] == [(0, "r2"), (2, "r2"), (4, "r2")]
    _settles(server, blocks)
    with pytest.raises(InferenceServerException) as info:
        client.infer("ens_decoupled", _n(3), client_timeout=30)
    assert info.value.status() == "StatusCode.UNIMPLEMENTED"
    assert info.value.message() == (
        "ModelInfer RPC doesn't support models with decoupled transaction policy"
    )


def test_an_ensemble_of_a_decoupled_step_alone_streams_the_steps_responses(server):
    got = streamed(_url(server), "ens_repeat", [(3, "thread", "a", True)], 4, output="OUT")
    assert got == [(0, False, "a"), (1, False, "a"), (2, False, "a"), (None, True, "a")]
    got = streamed(_url(server), "ens_repeat", [(2, "inline", "b", True)], 2, output="OUT")
    assert got == [(0, False, "b"), (1, True, "b")]


def test_requests_on_one_stream_to_a_decoupled_ensemble_each_stream(server):
    sends = [(2, "inline", "x", True), (3, "inline", "y", False)]
    got = streamed(_url(server), "ens_decoupled", sends, 5)
    assert [r for r in got if r[2] == "x"] == [(0, False, "x"), (2, True, "x")]
    assert [r for r in got if r[2] == "y"] == [(0, False, "y"), (2, False, "y"), (4, True, "y")]


def test_a_decoupled_ensemble_whose_step_sends_no_response_ends_with_the_final_flag(server):
    blocks = _arena(server)["blocks_in_use"]
    got = streamed(_url(server), "ens_decoupled", [(0, "inline", "z", True)], 1)
    assert got == [(None, True, "z")]
    assert streamed(_url(server), "ens_decoupled", [(0, "inline", "w", False)], 0) == []
    _settles(server, blocks)


@pytest.mark.parametrize(
    "mode, message",
    [
        ("error_last", "in ensemble 'ens_decoupled', bad things"),
        (
            "raise",
            "in ensemble 'ens_decoupled', Failed to process the request(s) for model "
            "'repeat_0_0', "
            "message: RuntimeError: the model failed mid-stream (at model.py:"
            f"{_REPEAT_RAISES_AT} in execute)",
        ),
        (
            "no_final",
            "in ensemble 'ens_decoupled', Failed to process the request(s) for model "
            "'repeat_0_0', "
            "message: the model released the request without sending a response flagged "
            "TRITONSERVER_RESPONSE_COMPLETE_FINAL",
        ),
    ],
)
def test_a_decoupled_ensemble_whose_step_fails_mid_stream_ends_with_the_error(
    server, mode, message
):
    # repeat sends Y = 0, 1, then fails: the Y it ran int_double for before the error
    # arrived are streamed, then the error ends the request; nothing stays in flight.
    blocks = _arena(server)["blocks_in_use"]
    got = streamed_until_error(_url(server), mode)
    assert got[-1] == ("error", message)
    assert got[:-1] == [(0, False, "f"), (2, False, "f")][: len(got) - 1]
    _settles(server, blocks)


def test_cancelling_a_stream_to_a_decoupled_ensemble_ends_its_steps(server):
    # repeat streams until it sees is_cancelled(); the client's cancel reaches it
    # through the ensemble, and nothing stays in flight.
    blocks = _arena(server)["blocks_in_use"]
    with grpcclient.InferenceServerClient(_url(server)) as client:
        stream = ensemble_stream(client)
        stream.send(0, "until_cancelled", "c")
        got = stream.take(3)
        assert [v for v, _f, _i in got] == [0, 2, 4]
        client.stop_stream(cancel_requests=True)
    _settles(server, blocks)
    got = streamed(_url(server), "ens_repeat", [(0, "cancelled", "n", False)], 1, "OUT")
    assert got[0][0] >= 1  # repeat saw is_cancelled() once at least


def test_a_decoupled_ensembles_responses_say_their_sequence(server):
    # As Triton 2.51: each response with outputs names the request's sequence beside
    # its final flag; the final flag sent alone says nothing more.
    in_sequence = sequence_parameters(7, start=True)
    got = streamed_in_sequence(
        _url(server), "ens_decoupled", "Y", 2, "inline", sequence_id=7, sequence_start=True
    )
    assert got == [
        (0, {**in_sequence, "triton_final_response": False}),
        (2, {**in_sequence, "triton_final_response": True}),
    ]
    got = streamed_in_sequence(_url(server), "ens_repeat", "OUT", 1, "thread", sequence_id="k")
    assert got == [
        (0, {**sequence_parameters("k"), "triton_final_response": False}),
        (None, {"triton_final_response": True}),
    ]


def test_a_decoupled_ensembles_statistics_count_each_request_once(server):
    # As Triton 2.51: one success and one execution for the ensemble per request, one
    # per run for int_double (tests/grpc_clients/test_grpc_ensemble_stream_triton.py).
    def counts(model):
        stats = requests.get(f"{server.url}/v2/models/{model}/stats", timeout=30).json()
        entry = stats["model_stats"][0]
        return entry["inference_stats"]["success"]["count"], entry["execution_count"]

    models = ("ens_decoupled", "repeat", "int_double")
    before = {m: counts(m) for m in models}
    streamed(_url(server), "ens_decoupled", [(3, "inline", "s", True)], 3)
    after = {m: counts(m) for m in models}
    changes = {m: tuple(a - b for a, b in zip(after[m], before[m])) for m in models}
    assert changes == {"ens_decoupled": (1, 1), "repeat": (1, 1), "int_double": (3, 3)}


def _bls_sequence(client, value: int, parameters: dict):
    data = grpcclient.InferInput("INPUT", [1, 1], "INT32")
    data.set_data_from_numpy(np.array([[value]], dtype=np.int32))
    result = client.infer("bls_sequence", [data], parameters=parameters, client_timeout=30)
    return int(result.as_numpy("TOTAL")[0][0]), result.as_numpy("CORRID_OUT")[0][0].decode()


def test_bls_calls_drive_a_sequence_model_over_grpc(client):
    assert _bls_sequence(client, 4, {"corrid": 31, "start": True}) == (4, "31")
    assert _bls_sequence(
        client, 5, {"corrid": "grpc-id", "start": True, "target": "seq_echo_string"}
    ) == (5, "grpc-id")
    assert _bls_sequence(client, 2, {"corrid": 31, "end": True}) == (6, "31")
    assert _bls_sequence(
        client, 1, {"corrid": "grpc-id", "end": True, "target": "seq_echo_string"}
    ) == (6, "grpc-id")
    with pytest.raises(InferenceServerException) as info:
        _bls_sequence(client, 1, {"corrid": 31})
    assert info.value.status() == "StatusCode.INTERNAL"
    assert info.value.message() == (
        "Model seq_echo - Error when running inference: inference request for sequence 31 to "
        "model 'seq_echo' must specify the START flag on the first request of the sequence"
    )


def _repeat_saw_cancelled(url: str) -> int:
    """How many of repeat's requests saw is_cancelled() (its one instance counts them)."""
    return streamed(url, "repeat", [(0, "cancelled", "c", False)], 1, output="OUT")[0][0]


def test_cancelling_a_bls_stream_over_grpc(client, server):
    # The stream ended because repeat saw the cancel, not because it ran out (uncancelled
    # it streams for 10 s): the count of cancellations it saw tells, not the time taken.
    before = _repeat_saw_cancelled(_url(server))
    result = client.infer("bls_cancel", _n(2), client_timeout=30)
    assert _repeat_saw_cancelled(_url(server)) == before + 1
    assert int(result.as_numpy("RECEIVED")[0]) >= 2
    assert result.as_numpy("ERROR")[0] == b""
