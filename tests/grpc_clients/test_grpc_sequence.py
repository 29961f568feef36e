"""The sequence batcher from gRPC clients (tests/test_sequence.py has the HTTP side):
tritonclient.grpc's sequence_id / sequence_start / sequence_end, many sequences
interleaved over one channel, Triton's status codes, and HTTP and gRPC requests of one
sequence. Run apart from the main suite (tests/grpc_clients/conftest.py says why)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from server_harness import NaiadServer
from test_sequence import TIMEOUT, build_repository
from triton_peer import TritonPeer, needs_triton
from tritonclient.utils import InferenceServerException


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repository = build_repository(tmp_path_factory.mktemp("sequence-repository"))
    server = NaiadServer(repository, log_dir=tmp_path_factory.mktemp("sequence"), name="sequence")
    server.start(wait="ready", timeout=120)
    yield server
    server.stop()


def _input(module, value: int):
    tensor = module.InferInput("INPUT", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.array([[value]], dtype=np.int32))
    return tensor


def _infer(client, model, value, **sequence):
    result = client.infer(model, [_input(grpcclient, value)], client_timeout=TIMEOUT, **sequence)
    return {
        name: result.as_numpy(name).reshape(-1).tolist()
        for name in ("OUTPUT", "CTRL", "INSTANCE", "SLOTS")
    }


def _lanes(server) -> dict:
    return requests.get(f"{server.url}/v2/naiad/lanes", timeout=TIMEOUT).json()


def test_grpc_refusals_are_tritons(client):
    with pytest.raises(InferenceServerException) as info:
        client.infer("seq_direct", [_input(grpcclient, 1)])
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert info.value.message() == (
        "inference request to model 'seq_direct' must specify a non-zero or non-empty "
        "correlation ID"
    )
    with pytest.raises(InferenceServerException) as info:
        client.infer("seq_direct", [_input(grpcclient, 1)], sequence_id=31337)
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert info.value.message() == (
        "inference request for sequence 31337 to model 'seq_direct' must specify the START "
        "flag on the first request of the sequence"
    )
    with pytest.raises(InferenceServerException) as info:
        client.infer("seq_string", [_input(grpcclient, 1)], sequence_id="nope")
    assert "for sequence nope to model 'seq_string'" in info.value.message()


def test_grpc_sequences_take_the_fast_path(server, client):
    before = _lanes(server)
    assert _infer(client, "seq_direct", 2, sequence_id=5, sequence_start=True)["OUTPUT"] == [2]
    assert _infer(client, "seq_direct", 3, sequence_id=5)["OUTPUT"] == [5]
    last = _infer(client, "seq_direct", 4, sequence_id=5, sequence_end=True)
    assert last["OUTPUT"] == [9] and last["CTRL"] == [0, 1, 1]
    string = _infer(
        client, "seq_string", 4, sequence_id="g-1", sequence_start=True, sequence_end=True
    )
    assert string["CTRL"] == [1, 1, 1]
    after = _lanes(server)
    assert after["lane_requests"] - before["lane_requests"] == 4
    assert after["general_requests"] == before["general_requests"]


def test_http_and_grpc_requests_of_one_sequence(server, client):
    http = httpclient.InferenceServerClient(f"{server.host}:{server.http_port}")
    try:
        first = http.infer(
            "seq_oldest", [_input(httpclient, 1)], sequence_id=9, sequence_start=True
        )
        assert first.as_numpy("OUTPUT").reshape(-1).tolist() == [1]
        assert _infer(client, "seq_oldest", 2, sequence_id=9)["OUTPUT"] == [3]
        last = http.infer("seq_oldest", [_input(httpclient, 3)], sequence_id=9, sequence_end=True)
        assert last.as_numpy("OUTPUT").reshape(-1).tolist() == [6]
    finally:
        http.close()


@pytest.mark.parametrize("model", ["seq_slow", "seq_oldest"])
def test_grpc_many_sequences_interleaved(client, model):
    """10 sequences from threads sharing one gRPC channel, on 2 instances of 4 slots:
    some wait in the backlog; each keeps its instance and its sum."""

    def run(corrid):
        outs = []
        for step in range(5):
            flags = {"sequence_start": step == 0, "sequence_end": step == 4}
            outs.append(_infer(client, model, corrid % 7 + 1, sequence_id=corrid, **flags))
        return outs

    with ThreadPoolExecutor(10) as pool:
        results = dict(zip(range(2000, 2010), pool.map(run, range(2000, 2010))))
    instances = set()
    for corrid, outs in results.items():
        value = corrid % 7 + 1
        assert [o["OUTPUT"][0] for o in outs] == [value * (i + 1) for i in range(5)]
        assert len({o["INSTANCE"][0] for o in outs}) == 1
        instances.add(outs[0]["INSTANCE"][0])
    assert len(instances) == 2


def test_grpc_sequence_over_a_stream(server):
    """A sequence sent over ModelStreamInfer, one request after the other, as streaming
    clients do; a refused request answers on the stream and the stream goes on."""
    import queue

    answers: queue.Queue = queue.Queue()
    with grpcclient.InferenceServerClient(f"{server.host}:{server.grpc_port}") as client:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        try:
            got = []
            for step in range(4):
                flags = {"sequence_start": step == 0, "sequence_end": step == 3}
                client.async_stream_infer(
                    "seq_direct", [_input(grpcclient, step + 1)], sequence_id=4040, **flags
                )
                result, error = answers.get(timeout=TIMEOUT)
                assert error is None, error
                got.append(result.as_numpy("OUTPUT").reshape(-1).tolist()[0])
            assert got == [1, 3, 6, 10]
            client.async_stream_infer("seq_direct", [_input(grpcclient, 1)], sequence_id=4040)
            result, error = answers.get(timeout=TIMEOUT)
            assert result is None and "must specify the START flag" in error.message()
        finally:
            client.stop_stream()


@needs_triton
def test_grpc_answers_as_triton(server, client, tmp_path):
    """The same gRPC calls to Triton 2.51 on the same models: status codes, messages and
    control inputs (OUTPUT only at START: Triton's Python backend drops state outputs)."""
    repository = build_repository(tmp_path / "repository")

    def calls(target):
        out = []
        steps = [
            ("seq_direct", 1, {}),
            ("seq_direct", 1, {"sequence_id": 6060}),
            ("seq_direct", 2, {"sequence_id": 6060, "sequence_start": True}),
            ("seq_direct", 3, {"sequence_id": 6060, "sequence_end": True}),
            ("seq_direct", 4, {"sequence_id": 6060}),
            ("seq_oldest", 5, {"sequence_id": 6061, "sequence_start": True, "sequence_end": True}),
        ]
        for model, value, sequence in steps:
            try:
                result = _infer(target, model, value, **sequence)
                if not sequence.get("sequence_start"):
                    result.pop("OUTPUT")
                result.pop("INSTANCE")
                out.append(("ok", result))
            except InferenceServerException as error:
                out.append((error.status(), error.message()))
        return out

    with TritonPeer(repository, tmp_path, []) as triton:
        with grpcclient.InferenceServerClient(f"127.0.0.1:{triton.grpc_port}") as theirs:
            for _ in range(300):
                try:
                    if theirs.is_server_ready():
                        break
                except InferenceServerException:
                    pass
                time.sleep(0.2)
            assert calls(client) == calls(theirs)


def test_grpc_decoupled_sequence_model_gets_its_controls(server):
    """A decoupled model with sequence batching over ModelStreamInfer: each request's
    responses carry the control inputs the model saw."""
    import queue

    answers: queue.Queue = queue.Queue()
    with grpcclient.InferenceServerClient(f"{server.host}:{server.grpc_port}") as client:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        try:
            for step, flags in enumerate(({"sequence_start": True}, {}, {"sequence_end": True})):
                client.async_stream_infer(
                    "seq_decoupled", [_input(grpcclient, 2)], sequence_id=77, **flags
                )
                got = []
                for _ in range(2):
                    result, error = answers.get(timeout=TIMEOUT)
                    assert error is None, error
                    got.append(
                        (
                            result.as_numpy("OUTPUT").reshape(-1).tolist(),
                            result.as_numpy("CTRL").reshape(-1).tolist(),
                        )
                    )
                expected_ctrl = [[1, 0, 1], [0, 0, 1], [0, 1, 1]][step]
                assert got == [([0], expected_ctrl), ([1], expected_ctrl)]
        finally:
            client.stop_stream()


def test_grpc_decoupled_sequence_model_keeps_the_state_of_its_last_response(server):
    """seq_decoupled_state answers each request twice, the second time (final) from a
    thread after execute() returned; each response carries a state output: the
    sequence's next request gets the last one's, and the client sees none of them."""
    import queue

    answers: queue.Queue = queue.Queue()
    outputs = [grpcclient.InferRequestedOutput("OUTPUT")]
    with grpcclient.InferenceServerClient(f"{server.host}:{server.grpc_port}") as client:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        try:
            for corrid in (88, 89):  # the second sequence starts from zero again
                got = []
                for step, value in enumerate((1, 2, 3)):
                    flags = {"sequence_start": step == 0, "sequence_end": step == 2}
                    client.async_stream_infer(
                        "seq_decoupled_state",
                        [_input(grpcclient, value)],
                        outputs=outputs if step == 1 else None,
                        sequence_id=corrid,
                        **flags,
                    )
                    for _ in range(2):
                        result, error = answers.get(timeout=TIMEOUT)
                        assert error is None, error
                        names = [o.name for o in result.get_response().outputs]
                        assert names == ["OUTPUT"]
                        got.append(result.as_numpy("OUTPUT").reshape(-1).tolist()[0])
                assert got == [1, 2, 4, 6, 9, 12], corrid
        finally:
            client.stop_stream()
