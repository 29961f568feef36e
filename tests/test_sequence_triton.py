"""The sequence batcher against the real Triton 2.51 (tests/triton_peer.py): the same
requests to both servers on the same repository (tests/sequence_models), the same
status codes, error messages, control inputs and statistics.

Not compared, on purpose (README "Differences from Triton"): OUTPUT after a sequence's
first request, since Triton 2.51's Python backend ignores a model's state outputs (its
state input stays the initial state) where Naiad carries them; string correlation ids
(Triton 2.51 fails every request of a TYPE_STRING CORRID model and gives a uint64
CORRID control an undocumented number for a string id).
"""

from __future__ import annotations

import time

import pytest
import requests
from server_harness import NaiadServer, metric_value
from test_sequence import TIMEOUT, backlog_timeout, build_repository, infer, naiad_waiting
from triton_peer import TritonPeer, needs_triton

pytestmark = [
    pytest.mark.timeout(600),
    needs_triton,
]


@pytest.fixture(scope="module")
def peers(tmp_path_factory):
    repository = build_repository(tmp_path_factory.mktemp("sequence-repository"))
    logs = tmp_path_factory.mktemp("sequence-triton")
    with NaiadServer(repository, log_dir=logs, name="naiad") as naiad:
        with TritonPeer(repository, logs, []) as triton:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                if requests.get(triton.url + "/v2/health/ready", timeout=5).status_code == 200:
                    break
                time.sleep(0.2)
            yield naiad, triton


@pytest.fixture(scope="module")
def servers(peers):
    naiad, triton = peers
    return naiad.url, triton.url


def triton_waiting(triton):
    """What Triton holds queued for seq_nobatch (its pending-request gauge: requests in
    the sequence batcher's slots and backlog, not yet executing)."""
    series = 'nv_inference_pending_request_count{model="seq_nobatch",version="1"}'
    url = f"http://127.0.0.1:{triton.metrics_port}/metrics"

    def count() -> int:
        return int(metric_value(requests.get(url, timeout=TIMEOUT).text, series))

    return count


# (label, model, value, parameters): sent in order to both servers.
STEPS = [
    ("no id", "seq_direct", 1, {}),
    ("zero id", "seq_direct", 1, {"sequence_id": 0, "sequence_start": True}),
    ("empty id", "seq_direct", 1, {"sequence_id": "", "sequence_start": True}),
    ("not started", "seq_direct", 1, {"sequence_id": 7}),
    ("start", "seq_direct", 1, {"sequence_id": 7, "sequence_start": True}),
    ("middle", "seq_direct", 2, {"sequence_id": 7}),
    ("end", "seq_direct", 3, {"sequence_id": 7, "sequence_end": True}),
    ("after end", "seq_direct", 4, {"sequence_id": 7}),
    (
        "start and end",
        "seq_direct",
        9,
        {"sequence_id": 8, "sequence_start": True, "sequence_end": True},
    ),
    ("negative id", "seq_direct", 9, {"sequence_id": -3, "sequence_start": True}),
    ("float id", "seq_direct", 9, {"sequence_id": 1.5, "sequence_start": True}),
    ("start not bool", "seq_direct", 9, {"sequence_id": 3, "sequence_start": 1}),
    ("oldest start", "seq_oldest", 5, {"sequence_id": 70, "sequence_start": True}),
    ("oldest end", "seq_oldest", 6, {"sequence_id": 70, "sequence_end": True}),
    ("oldest after end", "seq_oldest", 6, {"sequence_id": 70}),
    ("no batching start", "seq_nobatch", 1, {"sequence_id": 5, "sequence_start": True}),
    ("no batching end", "seq_nobatch", 2, {"sequence_id": 5, "sequence_end": True}),
]

# Outputs compared on success: everything but the running sum after the first request.
COMPARED = ("CTRL", "CORRID_OUT", "SLOTS")


def _comparable(label, result):
    status, body = result
    if status != 200:
        return status, body
    kept = {name: body[name] for name in COMPARED}
    if label.endswith("start") or label == "start and end":
        kept["OUTPUT"] = body["OUTPUT"]
    return status, kept


def test_sequence_requests_answer_as_triton(servers):
    naiad, triton = servers
    for label, model, value, parameters in STEPS:
        ours = _comparable(label, infer(naiad, model, value, **parameters))
        theirs = _comparable(label, infer(triton, model, value, **parameters))
        assert ours == theirs, label


def test_batch_of_two_and_unexpected_outputs_answer_as_triton(servers):
    naiad, triton = servers
    assert infer(naiad, "seq_direct", 1, batch=2, sequence_id=13, sequence_start=True) == infer(
        triton, "seq_direct", 1, batch=2, sequence_id=13, sequence_start=True
    )
    body = {
        "inputs": [{"name": "INPUT", "shape": [1, 1], "datatype": "INT32", "data": [1]}],
        "outputs": [{"name": "OUTPUT_STATE"}],
        "parameters": {"sequence_id": 11, "sequence_start": True},
    }
    answers = [
        requests.post(f"{url}/v2/models/seq_direct/infer", json=body, timeout=TIMEOUT)
        for url in (naiad, triton)
    ]
    assert answers[0].status_code == answers[1].status_code == 400
    assert answers[0].json() == answers[1].json()


def _wait_until_triton_reaped(triton) -> None:
    """Returns once Triton's reaper released every seq_idle sequence whose last request
    came before this call. Triton releases an idle sequence only when its reaper thread
    looks (it may look late on a loaded host), so the test waits on what Triton shows,
    not on a sleep: a probe sequence started now, idle past the limit, then ended. While
    the reaper has not looked, the END is served (200) and another probe is tried; once
    Triton refuses the END as not started, the reaper released the probe, and with it
    every sequence idle longer (one pass releases all that are past the limit)."""
    deadline = time.monotonic() + TIMEOUT
    probe = 2100
    while True:
        probe += 1
        assert infer(triton, "seq_idle", 1, sequence_id=probe, sequence_start=True)[0] == 200
        time.sleep(0.35)  # lets the probe idle past max_sequence_idle_microseconds (300 ms)
        if infer(triton, "seq_idle", 1, sequence_id=probe, sequence_end=True)[0] == 400:
            return
        assert time.monotonic() < deadline, "Triton's reaper never released an idle sequence"


def test_idle_release_answers_as_triton(servers):
    # Naiad releases a sequence idle past the limit when its next request comes, whether
    # or not its reaper looked (SequenceBatchScheduler::idled_out); Triton when its reaper
    # looks, waited for here.
    naiad, triton = servers
    for url in (naiad, triton):
        assert infer(url, "seq_idle", 1, sequence_id=21, sequence_start=True)[0] == 200
    _wait_until_triton_reaped(triton)
    assert infer(naiad, "seq_idle", 1, sequence_id=21) == infer(
        triton, "seq_idle", 1, sequence_id=21
    )
    for url in (naiad, triton):
        assert infer(url, "seq_idle", 1, sequence_id=21, sequence_start=True)[0] == 200


def _failures(url: str, model: str) -> int:
    stats = requests.get(f"{url}/v2/models/{model}/stats", timeout=TIMEOUT).json()
    return stats["model_stats"][0]["inference_stats"]["fail"]["count"]


def test_backlog_timeout_answers_as_triton(peers, servers):
    """A backlogged sequence past a request's timeout: the same answers, and the same
    failures counted."""
    naiad, triton = servers
    before = [_failures(url, "seq_nobatch") for url in (naiad, triton)]
    ours = backlog_timeout(naiad, naiad_waiting(peers[0]))
    assert ours == backlog_timeout(triton, triton_waiting(peers[1]))
    after = [_failures(url, "seq_nobatch") for url in (naiad, triton)]
    assert after[0] - before[0] == after[1] - before[1] == 2


def test_statistics_count_as_triton(servers):
    naiad, triton = servers
    counts = []
    for url in (naiad, triton):
        stats = requests.get(f"{url}/v2/models/seq_direct/stats", timeout=TIMEOUT).json()
        entry = stats["model_stats"][0]
        counts.append(
            (
                entry["inference_count"],
                entry["execution_count"],
                entry["inference_stats"]["success"]["count"],
                entry["inference_stats"]["fail"]["count"],
            )
        )
    assert counts[0] == counts[1]


def test_an_ensemble_with_a_sequence_step_answers_as_triton(servers):
    # The ensemble request's correlation id and flags reach its sequence step on both.
    naiad, triton = servers
    for value, parameters in [
        (1, {}),
        (1, {"sequence_id": 31}),
        (4, {"sequence_id": 31, "sequence_start": True}),
    ]:
        ours = infer(naiad, "seq_ensemble", value, **parameters)
        theirs = infer(triton, "seq_ensemble", value, **parameters)
        assert ours == theirs, parameters
