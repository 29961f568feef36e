"""The sequence batcher from gRPC clients (tests/test_sequence.py has the HTTP side):
tritonclient.grpc's sequence_id / sequence_start / sequence_end, many sequences
interleaved over one channel, Triton's status codes, and HTTP and gRPC requests of one
sequence. Run apart from the main suite (tests/grpc_clients/conftest.py says why)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from server_harness import NaiadServer
from test_sequence import TIMEOUT, build_repository
from tritonclient.utils import InferenceServerException


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repository = build_repository(tmp_path_factory.mktemp("sequence-repository"))
    server = NaiadServer(repository, log_dir=tmp_path_factory.mktemp("sequence"), name="sequence")
    server.start(wait="ready", timeout=120)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def client(server):
    with grpcclient.InferenceServerClient(f"{server.host}:{server.grpc_port}") as client:
        yield client


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
