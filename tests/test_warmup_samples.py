"""worker/warmup.py in-process: how samples become requests (Triton's rules: batch_size
requests of one row each, count runs, zero / random / file data, batch_size 0 skipped) and
its refusals, with a backend that records what it was given."""

from __future__ import annotations

import json

import numpy as np
import pytest
from naiad import datatypes
from naiad.backends.base import Backend, RequestError, Response
from naiad.worker.warmup import WarmupError, run_warmup


class Recorder(Backend):
    batch_tensors = True

    def __init__(self, fail: str | None = None):
        self.batches = []
        self.fail = fail

    def execute(self, batch):
        self.batches.append(batch)
        if self.fail:
            return [RequestError(self.fail)] * len(batch)
        return [Response([]) for _ in range(len(batch))]


def _args(tmp_path, warmup, max_batch_size=4):
    config = {"name": "m", "max_batch_size": max_batch_size, "model_warmup": warmup}
    return {"model_config": json.dumps(config), "model_repository": str(tmp_path)}


def test_samples_become_requests_of_one_row(tmp_path):
    (tmp_path / "warmup").mkdir()
    (tmp_path / "warmup" / "text").write_bytes(
        datatypes.serialize_bytes(np.array([b"hi", b"yo"], dtype=object))
    )
    (tmp_path / "warmup" / "raw").write_bytes(np.arange(3, dtype=np.int32).tobytes() + b"extra")
    warmup = [
        {
            "name": "s",
            "batch_size": 3,
            "count": 2,
            "inputs": {
                "A": {"data_type": "TYPE_FP32", "dims": [2], "zero_data": True},
                "B": {"data_type": "TYPE_BOOL", "dims": [5], "random_data": True},
                "C": {"data_type": "TYPE_STRING", "dims": [2], "input_data_file": "text"},
                "D": {"data_type": "TYPE_INT32", "dims": [3], "input_data_file": "raw"},
                "E": {"data_type": "TYPE_STRING", "dims": [1], "random_data": True},
            },
        },
        {"name": "skipped", "batch_size": 0, "inputs": {}},
    ]
    backend = Recorder()
    assert run_warmup(backend, _args(tmp_path, warmup)) == 2
    batch = backend.batches[0]
    assert len(backend.batches) == 2 and len(batch) == 3
    header = batch.headers[0]
    assert [(n, d, s) for n, d, s in header.inputs] == [
        ("A", "FP32", (1, 2)),
        ("B", "BOOL", (1, 5)),
        ("C", "BYTES", (1, 2)),
        ("D", "INT32", (1, 3)),
        ("E", "BYTES", (1, 1)),
    ]
    a, b, c, d, e = batch.arrays[0]
    assert not a.any() and b.dtype == np.bool_
    assert c.tolist() == [[b"hi", b"yo"]] and e.tolist() == [[b""]]
    assert d.tolist() == [[0, 1, 2]]
    assert batch.tensors["A"].shape == (3, 2)  # batch-major, as the worker gives them


def test_a_model_without_batching_gets_the_dims_as_they_are(tmp_path):
    warmup = [
        {
            "name": "s",
            "batch_size": 1,
            "inputs": {"A": {"data_type": "TYPE_INT8", "dims": [4], "zero_data": True}},
        }
    ]
    backend = Recorder()
    run_warmup(backend, _args(tmp_path, warmup, max_batch_size=0))
    assert backend.batches[0].headers[0].inputs[0][2] == (4,)
    assert backend.batches[0].tensors == {}


@pytest.mark.parametrize(
    "spec, message",
    [
        (
            {"data_type": "TYPE_FP32", "dims": [-1], "zero_data": True},
            "warmup setting expects all variable-size dimensions are specified for input 'A'",
        ),
        (
            {"data_type": "TYPE_FP32", "dims": [2]},
            "warmup setting expects input 'A' to have input_data_type set",
        ),
        (
            {"data_type": "TYPE_FP32", "dims": [4], "input_data_file": "nope"},
            "failed to read warmup data file",
        ),
        (
            {"data_type": "TYPE_FP32", "dims": [4], "input_data_file": "short"},
            "warmup setting expects 16 bytes, but the data provided from short only has 3 bytes",
        ),
    ],
)
def test_bad_samples_are_refused(tmp_path, spec, message):
    (tmp_path / "warmup").mkdir()
    (tmp_path / "warmup" / "short").write_bytes(b"abc")
    warmup = [{"name": "s", "batch_size": 1, "inputs": {"A": spec}}]
    with pytest.raises(WarmupError) as info:
        run_warmup(Recorder(), _args(tmp_path, warmup))
    assert message in info.value.message


def test_a_failing_sample_stops_warmup_with_tritons_message(tmp_path):
    warmup = [
        {
            "name": "first",
            "batch_size": 2,
            "inputs": {"A": {"data_type": "TYPE_FP32", "dims": [1], "zero_data": True}},
        },
        {
            "name": "second",
            "batch_size": 1,
            "inputs": {"A": {"data_type": "TYPE_FP32", "dims": [1], "zero_data": True}},
        },
    ]
    backend = Recorder(fail="boom")
    with pytest.raises(WarmupError) as info:
        run_warmup(backend, _args(tmp_path, warmup))
    assert info.value.message == "failed to run warmup sample 'first': boom; boom; "
    assert len(backend.batches) == 1
