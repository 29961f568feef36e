"""The outcome record (naiad/outcome_record.py): what a worker writes is what the
frontend, a BLS call and the core read back."""

import numpy as np
from naiad import _core, outcome_record
from naiad.backends.base import RequestError, Response
from naiad.worker import results


def test_a_success_reads_back_as_written():
    json = outcome_record.outputs_record([["OUT", "FP32", [2, 3]]], {"p": 1})
    read = outcome_record.read(json)
    assert [tuple(o) for o in read.outputs] == [("OUT", "FP32", [2, 3])]
    assert read.parameters == {"p": 1} and read.error is None and not read.empty
    assert outcome_record.read(outcome_record.outputs_record([])).parameters == {}


def test_a_failure_and_an_empty_final_flag_read_back():
    failed = outcome_record.read(outcome_record.error_record("no such input"))
    assert failed.error == "no such input" and list(failed.outputs) == []
    assert outcome_record.read(outcome_record.EMPTY).empty
    assert outcome_record.read(b"").error is None  # a response with no JSON at all


def test_the_worker_writes_it_and_the_core_reads_it():
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    responses = results.wire_results(
        [Response([("OUT", array)], parameters={"k": "v"}), RequestError("bad", 3)]
    )
    block = _core.encode_response_block(responses, [1, 2, 3, 4])
    records = _core.read_response_block(b"\0" + block, 1, len(block)).responses
    ok, failed = [outcome_record.read(r.json) for r in records]
    assert [tuple(o) for o in ok.outputs] == [("OUT", "FP32", [2, 3])]
    assert ok.parameters == {"k": "v"}
    assert failed.error == "bad" and records[1].error_code == 3
