"""The sequence batcher with framework backends from gRPC clients
(tests/test_sequence_framework.py has the HTTP side, and the pytorch model): onnxruntime
sequence models under many sequences interleaved over one channel, with tritonclient.grpc's
sequence_id / sequence_start / sequence_end, and HTTP and gRPC requests of one sequence.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import sequence_framework
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from server_harness import NaiadServer
from tritonclient.utils import InferenceServerException

TIMEOUT = 20


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    # The ONNX models only: the pytorch one has its HTTP tests, and torch workers are
    # slow to start.
    repository = sequence_framework.build_repository(
        tmp_path_factory.mktemp("seq-framework"), torch=False
    )
    server = NaiadServer(repository, log_dir=tmp_path_factory.mktemp("seqfw"), name="seqfw")
    server.start(wait="ready", timeout=180)
    yield server
    server.stop()


def _input(module, model, value):
    name = "INPUT__0" if model.startswith("seq_pt") else "INPUT"
    tensor = module.InferInput(name, [1, 1], "FP32")
    tensor.set_data_from_numpy(np.array([[value]], dtype=np.float32))
    return tensor


def _output(result, model):
    name = "OUTPUT__0" if model.startswith("seq_pt") else "OUTPUT"
    return result.as_numpy(name).reshape(-1).tolist()[0]


@pytest.mark.parametrize("model", ["seq_onnx_direct", "seq_onnx_oldest"])
def test_grpc_many_sequences_interleaved(client, model):
    """8 sequences from threads sharing one gRPC channel: each keeps its own sum."""

    def run(corrid):
        sums = []
        for step in range(4):
            flags = {"sequence_start": step == 0, "sequence_end": step == 3}
            result = client.infer(
                model,
                [_input(grpcclient, model, corrid % 5 + 1)],
                sequence_id=corrid,
                client_timeout=TIMEOUT,
                **flags,
            )
            sums.append(_output(result, model))
        return sums

    with ThreadPoolExecutor(8) as pool:
        results = dict(zip(range(3000, 3008), pool.map(run, range(3000, 3008))))
    for corrid, sums in results.items():
        value = corrid % 5 + 1
        assert sums == [float(value * (i + 1)) for i in range(4)], corrid


def test_grpc_refusals_are_tritons(client):
    with pytest.raises(InferenceServerException) as info:
        client.infer("seq_onnx_direct", [_input(grpcclient, "seq_onnx_direct", 1)], sequence_id=777)
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert info.value.message() == (
        "inference request for sequence 777 to model 'seq_onnx_direct' must specify the START "
        "flag on the first request of the sequence"
    )


def test_http_and_grpc_requests_of_one_sequence(server, client):
    model = "seq_onnx_oldest"
    http = httpclient.InferenceServerClient(f"{server.host}:{server.http_port}")
    try:
        first = http.infer(
            model, [_input(httpclient, model, 1)], sequence_id=9, sequence_start=True
        )
        assert _output(first, model) == 1.0
        second = client.infer(model, [_input(grpcclient, model, 2)], sequence_id=9)
        assert _output(second, model) == 3.0
        assert second.as_numpy("STATE_OUT").reshape(-1).tolist() == [3.0]
        last = http.infer(model, [_input(httpclient, model, 3)], sequence_id=9, sequence_end=True)
        assert _output(last, model) == 6.0
    finally:
        http.close()
