"""The sequence batcher, black-box over HTTP: correlation ids, both strategies, control
inputs, implicit state, idle release and Triton's refusals.

One `naiad serve` on tests/sequence_models/ (every model is seq_model.py, an
accumulator: OUTPUT = STATE_IN + INPUT with the state output carried to the sequence's
next request; CTRL echoes START, END, READY, CORRID_OUT the CORRID control input,
INSTANCE the instance that ran it, SLOTS the requests in its execution). Each model has
two instances.
"""

from __future__ import annotations

import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests
from server_harness import NaiadServer

SEQUENCE_MODELS = Path(__file__).resolve().parent / "sequence_models"
TIMEOUT = 20


def build_repository(dest: Path) -> Path:
    """Each model folder's config.pbtxt with seq_model.py as version 1's model.py."""
    for config in sorted(SEQUENCE_MODELS.glob("*/config.pbtxt")):
        version = dest / config.parent.name / "1"
        version.mkdir(parents=True)
        shutil.copy(config, version.parent / "config.pbtxt")
        own = config.parent / "model.py"  # a model of its own, else the accumulator
        shutil.copy(own if own.exists() else SEQUENCE_MODELS / "seq_model.py", version / "model.py")
        if (config.parent / "initial_state").is_dir():
            shutil.copytree(config.parent / "initial_state", version.parent / "initial_state")
    return dest


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repository = build_repository(tmp_path_factory.mktemp("sequence-repository"))
    server = NaiadServer(repository, log_dir=tmp_path_factory.mktemp("sequence"), name="sequence")
    server.start(wait="ready", timeout=120)
    yield server
    server.stop()


def infer(url: str, model: str, value: int, session=requests, batch: int = 1, **parameters):
    body = {
        "inputs": [
            {"name": "INPUT", "shape": [batch, 1], "datatype": "INT32", "data": [value] * batch}
        ]
    }
    if parameters:
        body["parameters"] = parameters
    response = session.post(f"{url}/v2/models/{model}/infer", json=body, timeout=TIMEOUT)
    body = response.json()
    if response.status_code != 200:
        return response.status_code, body["error"]
    return 200, {o["name"]: o["data"] for o in body["outputs"]}


def test_refusals_are_tritons(server):
    url = server.url
    name = "seq_direct"
    assert infer(url, name, 1) == (
        400,
        f"inference request to model '{name}' must specify a non-zero or non-empty correlation ID",
    )
    assert infer(url, name, 1, sequence_id=0, sequence_start=True)[0] == 400
    assert infer(url, name, 1, sequence_id="", sequence_start=True)[0] == 400
    not_started = (
        400,
        f"inference request for sequence 4242 to model '{name}' must specify the START "
        "flag on the first request of the sequence",
    )
    assert infer(url, name, 1, sequence_id=4242) == not_started
    assert infer(url, name, 1, sequence_id=4242, sequence_start=True)[0] == 200
    assert infer(url, name, 1, sequence_id=4242, sequence_end=True)[0] == 200
    assert infer(url, name, 1, sequence_id=4242) == not_started  # after END
    assert infer(url, name, 1, sequence_id="s-1")[1].startswith(
        "inference request for sequence s-1 "
    )
    assert infer(url, name, 1, batch=2, sequence_id=5, sequence_start=True) == (
        400,
        f"inference request to model '{name}' must specify batch-size 1 due to requirements "
        "of sequence batcher",
    )
    assert infer(url, name, 1, sequence_id=-1, sequence_start=True) == (
        500,
        "Unable to parse 'sequence_id': attempt to access JSON non-string as string",
    )
    assert infer(url, name, 1, sequence_id=3, sequence_start=1) == (
        500,
        "Unable to parse 'sequence_start': attempt to access JSON non-boolean as boolean",
    )
    # The state output and the control inputs are the server's, not the client's.
    body = {
        "inputs": [{"name": "INPUT", "shape": [1, 1], "datatype": "INT32", "data": [1]}],
        "outputs": [{"name": "OUTPUT_STATE"}],
        "parameters": {"sequence_id": 6, "sequence_start": True},
    }
    response = requests.post(f"{url}/v2/models/{name}/infer", json=body, timeout=TIMEOUT)
    assert response.status_code == 400
    assert (
        response.json()["error"] == f"unexpected inference output 'OUTPUT_STATE' for model '{name}'"
    )
    # None of these counted as a failure, as in Triton.
    stats = requests.get(f"{url}/v2/models/{name}/stats", timeout=TIMEOUT).json()
    assert stats["model_stats"][0]["inference_stats"]["fail"]["count"] == 0


@pytest.mark.parametrize("model", ["seq_direct", "seq_oldest"])
def test_a_sequence_carries_state_and_controls(server, model):
    url = server.url
    status, first = infer(url, model, 5, sequence_id=77, sequence_start=True)
    assert status == 200, first
    assert first["OUTPUT"] == [5] and first["CTRL"] == [1, 0, 1]
    assert first["CORRID_OUT"] == ["77"]
    status, second = infer(url, model, 6, sequence_id=77)
    assert second["OUTPUT"] == [11] and second["CTRL"] == [0, 0, 1]
    assert second["INSTANCE"] == first["INSTANCE"]
    status, last = infer(url, model, 7, sequence_id=77, sequence_end=True)
    assert last["OUTPUT"] == [18] and last["CTRL"] == [0, 1, 1]
    # The id is free again: a new sequence starts from the initial state.
    status, again = infer(url, model, 1, sequence_id=77, sequence_start=True, sequence_end=True)
    assert again["OUTPUT"] == [1] and again["CTRL"] == [1, 1, 1]


def test_string_correlation_ids(server):
    url = server.url
    status, first = infer(url, "seq_string", 2, sequence_id="abc", sequence_start=True)
    assert status == 200, first
    assert first["CORRID_OUT"] == ["abc"]
    # "7" the string and 7 the number are two sequences.
    assert infer(url, "seq_string", 1, sequence_id=7)[0] == 400
    status, last = infer(url, "seq_string", 3, sequence_id="abc", sequence_end=True)
    assert last["OUTPUT"] == [5] and last["CORRID_OUT"] == ["abc"]


def test_a_restart_without_end_resets_the_state(server):
    url = server.url
    assert infer(url, "seq_direct", 10, sequence_id=88, sequence_start=True)[1]["OUTPUT"] == [10]
    assert infer(url, "seq_direct", 1, sequence_id=88, sequence_start=True)[1]["OUTPUT"] == [1]
    assert infer(url, "seq_direct", 1, sequence_id=88, sequence_end=True)[1]["OUTPUT"] == [2]


def test_idle_sequence_is_released_and_refused(server):
    url = server.url
    assert infer(url, "seq_idle", 4, sequence_id=99, sequence_start=True)[0] == 200
    assert infer(url, "seq_idle", 4, sequence_id=99)[1]["OUTPUT"] == [8]
    # Time passing is what is tested (max_sequence_idle_microseconds: 300000): Naiad
    # applies the rule when the next request comes (idled_out), not when its reaper looks.
    time.sleep(0.35)
    status, error = infer(url, "seq_idle", 4, sequence_id=99)
    assert status == 400 and "must specify the START flag" in error
    status, fresh = infer(url, "seq_idle", 3, sequence_id=99, sequence_start=True)
    assert fresh["OUTPUT"] == [3]


def _run_sequence(url: str, model: str, corrid, values: list[int], barrier=None):
    """Sends a whole sequence, one request at a time; returns the responses."""
    session = requests.Session()
    out = []
    if barrier is not None:
        barrier.wait(timeout=TIMEOUT)
    for i, value in enumerate(values):
        flags = {}
        if i == 0:
            flags["sequence_start"] = True
        if i == len(values) - 1:
            flags["sequence_end"] = True
        status, body = infer(url, model, value, session=session, sequence_id=corrid, **flags)
        assert status == 200, body
        out.append(body)
    session.close()
    return out


@pytest.mark.parametrize("model", ["seq_slow", "seq_oldest"])
def test_many_sequences_interleave_across_instances(server, model):
    """12 sequences at once on 2 instances of 4 slots each: four wait in the backlog for
    a slot. Each sequence keeps its instance and its running sum; batches mix sequences."""
    count = 12
    barrier = threading.Barrier(count)
    sequences = {1000 + k: [k + 1] * 6 for k in range(count)}
    with ThreadPoolExecutor(count) as pool:
        futures = {
            corrid: pool.submit(_run_sequence, server.url, model, corrid, values, barrier)
            for corrid, values in sequences.items()
        }
        results = {corrid: future.result(timeout=60) for corrid, future in futures.items()}
    instances = set()
    largest = 0
    for corrid, responses in results.items():
        values = sequences[corrid]
        sums = [r["OUTPUT"][0] for r in responses]
        assert sums == [sum(values[: i + 1]) for i in range(len(values))], corrid
        assert {r["INSTANCE"][0] for r in responses} == {responses[0]["INSTANCE"][0]}
        assert all(r["CORRID_OUT"] == [str(corrid)] for r in responses)
        assert all(r["CTRL"][2] == 1 for r in responses)  # READY
        instances.add(responses[0]["INSTANCE"][0])
        largest = max(largest, max(r["SLOTS"][0] for r in responses))
    assert len(instances) == 2
    assert 1 < largest <= 4  # sequences shared executions, at most a batch's slots


def test_direct_fills_empty_slots_with_not_ready_requests(server):
    """Under direct, a sequence keeps its batch slot: when slot 0 has no request and slot
    1 has one, the model sees two requests, the first not ready (and its response goes
    nowhere)."""
    url = server.url
    # Two sequences on instance A's slots 0 and 1 (the other instance takes one too).
    firsts = {}
    for corrid in (501, 502, 503):
        firsts[corrid] = infer(url, "seq_direct", 1, sequence_id=corrid, sequence_start=True)[1]
    by_instance = {}
    for corrid, body in firsts.items():
        by_instance.setdefault(body["INSTANCE"][0], []).append(corrid)
    pair = next(corrids for corrids in by_instance.values() if len(corrids) == 2)
    # The sequence in the higher slot alone: the model sees a not-ready request before it.
    status, body = infer(url, "seq_direct", 1, sequence_id=pair[1])
    assert status == 200 and body["OUTPUT"] == [2] and body["SLOTS"] == [2]
    status, body = infer(url, "seq_direct", 1, sequence_id=pair[0])
    assert body["SLOTS"] == [1]
    for corrid in firsts:
        assert infer(url, "seq_direct", 0, sequence_id=corrid, sequence_end=True)[0] == 200


def test_server_metadata_lists_sequence(server):
    extensions = requests.get(f"{server.url}/v2", timeout=TIMEOUT).json()["extensions"]
    assert "sequence" in extensions


def test_http_sequences_take_the_fast_lane(server):
    """tritonclient.http's binary requests with sequence parameters go through the C++
    lane; its refusals are answered by the general path with Triton's message."""
    import numpy as np
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    def lanes():
        return requests.get(f"{server.url}/v2/naiad/lanes", timeout=TIMEOUT).json()

    tensor = httpclient.InferInput("INPUT", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.array([[3]], dtype=np.int32))
    client = httpclient.InferenceServerClient(f"{server.host}:{server.http_port}")
    try:
        before = lanes()
        for step, flags in enumerate(({"sequence_start": True}, {}, {"sequence_end": True})):
            result = client.infer("seq_direct", [tensor], sequence_id=321, **flags)
            assert result.as_numpy("OUTPUT").reshape(-1).tolist() == [3 * (step + 1)]
        after = lanes()
        assert after["lane_requests"] - before["lane_requests"] == 3
        assert after["general_requests"] == before["general_requests"]
        with pytest.raises(InferenceServerException) as info:
            client.infer("seq_direct", [tensor], sequence_id=321)
        assert info.value.status() == "400"
        assert "must specify the START flag" in info.value.message()
    finally:
        client.close()


def test_a_model_without_batching_and_a_data_file_initial_state(server):
    """max_batch_size 0: one slot per instance, control inputs without a batch dimension;
    the initial state comes from initial_state/hundred (an INT32 100)."""
    url = server.url
    status, first = infer(url, "seq_nobatch", 1, sequence_id=1, sequence_start=True)
    assert status == 200, first
    assert first["OUTPUT"] == [101] and first["CTRL"] == [1, 0, 1]
    assert infer(url, "seq_nobatch", 2, sequence_id=1)[1]["OUTPUT"] == [103]
    # Its one slot is taken: a second sequence waits in the backlog until the first ends.
    with ThreadPoolExecutor(1) as pool:
        second = pool.submit(infer, url, "seq_nobatch", 5, sequence_id=2, sequence_start=True)
        waiting = naiad_waiting(server)
        deadline = time.monotonic() + TIMEOUT
        while waiting() != 1:  # held in the backlog, not answered
            assert time.monotonic() < deadline, "sequence 2's START never arrived"
            time.sleep(0.005)
        assert not second.done()
        assert infer(url, "seq_nobatch", 0, sequence_id=1, sequence_end=True)[1]["OUTPUT"] == [103]
        assert second.result(timeout=TIMEOUT)[1]["OUTPUT"] == [105]
    assert infer(url, "seq_nobatch", 0, sequence_id=2, sequence_end=True)[0] == 200


def naiad_waiting(server):
    """What Naiad holds unanswered (queued or executing), all models: the backlog of
    seq_nobatch in backlog_timeout, where nothing else is in flight."""

    def count() -> int:
        arena = requests.get(f"{server.url}/v2/naiad/arena", timeout=TIMEOUT).json()
        return arena["requests_in_flight"]

    return count


def backlog_timeout(url: str, waiting) -> list:
    """On seq_nobatch (one slot): sequence 31 holds the slot; sequence 32 waits in the
    backlog with a 2 s `timeout` on its START (a second request of it joins without
    one), sequence 33 behind it without. What each request answered, in order.

    Each request is sent once the server holds the one before it (`waiting()`: the
    requests it holds unanswered), so they arrive in that order on any machine: a
    continuation before its START would be refused as not started. The timeout is what
    is tested: the second request must join before it expires, which the wait for the
    START gives it 2 s to do."""

    def answer(*args, **parameters):
        status, body = infer(url, "seq_nobatch", *args, **parameters)
        return status, body if status != 200 else "ok"

    def wait_for(count: int, what: str) -> None:
        deadline = time.monotonic() + TIMEOUT
        while waiting() != count:
            assert time.monotonic() < deadline, f"the server never held {what}"
            time.sleep(0.005)

    out = [answer(1, sequence_id=31, sequence_start=True)]
    with ThreadPoolExecutor(3) as pool:
        first = pool.submit(answer, 1, sequence_id=32, sequence_start=True, timeout=2000000)
        wait_for(1, "sequence 32's START")
        second = pool.submit(answer, 1, sequence_id=32)
        wait_for(2, "sequence 32's second request")
        behind = pool.submit(answer, 1, sequence_id=33, sequence_start=True)
        out += [first.result(timeout=TIMEOUT), second.result(timeout=TIMEOUT)]
        wait_for(1, "sequence 33's START")
        out.append(answer(1, sequence_id=32))  # its id is forgotten
        assert not behind.done()
        out.append(answer(1, sequence_id=31, sequence_end=True))
        out.append(behind.result(timeout=TIMEOUT))  # the freed slot is its
    out.append(answer(1, sequence_id=33, sequence_end=True))
    return out


def test_a_sequence_waiting_past_its_timeout_fails_whole(server):
    """Triton 2.51's backlog timeout (tests/test_sequence_triton.py compares): every
    request of the sequence gets 503, its id is forgotten, the one behind goes on."""
    expired = (503, "timeout of the corresponding sequence has been expired")
    not_started = (
        400,
        "inference request for sequence 32 to model 'seq_nobatch' must specify the START "
        "flag on the first request of the sequence",
    )
    ok = (200, "ok")
    answers = backlog_timeout(server.url, naiad_waiting(server))
    assert answers == [ok, expired, expired, not_started, ok, ok, ok]


def test_a_bls_call_reaches_a_sequence_model(server):
    """seq_caller's call to seq_direct carries its correlation id and flags (BLS calls
    to sequence models in full: tests/test_pipelines.py)."""
    body = {"inputs": [{"name": "INPUT", "shape": [1, 1], "datatype": "INT32", "data": [1]}]}
    response = requests.post(f"{server.url}/v2/models/seq_caller/infer", json=body, timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    assert response.json()["outputs"][0]["data"][0] == ""


def test_an_ensemble_carries_its_correlation_id_and_flags_to_a_sequence_step(server):
    # seq_ensemble's one step is seq_direct: the ensemble request's sequence_id and
    # START/END reach it, so the step's state carries from request to request.
    url = server.url
    status, error = infer(url, "seq_ensemble", 1)
    assert status == 400 and "must specify a non-zero or non-empty correlation ID" in error
    assert infer(url, "seq_ensemble", 4, sequence_id=31, sequence_start=True) == (
        200,
        {"OUTPUT": [4]},
    )
    assert infer(url, "seq_ensemble", 2, sequence_id=31) == (200, {"OUTPUT": [6]})
    assert infer(url, "seq_ensemble", 3, sequence_id=31, sequence_end=True) == (
        200,
        {"OUTPUT": [9]},
    )
    status, error = infer(url, "seq_ensemble", 1, sequence_id=31)  # after END
    assert status == 400 and "must specify the START flag" in error
