"""A model that is not decoupled answering through response senders, as Triton 2.51's
Python backend allows: one response per request, from execute() or a thread after it
(tests/models/sender_plain; tests/test_response_sender_triton.py compares with Triton).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from server_harness import NaiadServer, make_repository

TIMEOUT = 30

_FAILED = "Failed to process the request(s) for model 'sender_plain_0_0', message: "
_RELEASED = (
    _FAILED + "the model released the request without sending a response flagged "
    "TRITONSERVER_RESPONSE_COMPLETE_FINAL"
)

# mode -> (status, OUT for N = 4, or the error's start), as Triton 2.51 answers (for
# "none" Triton never answers; Naiad ends the request with an error).
ANSWERS = {
    "one": (200, 41),
    "split": (200, 42),
    "thread": (200, 43),
    "mixed": (200, 44),
    "return": (200, 46),
    "after_final": (200, 49),
    "error": (500, "sender_plain failed this request"),
    "flag_only": (
        500,
        _FAILED + "TritonModelException: Unable to send response. Non-decoupled model "
        "cannot send complete final before sending a response.",
    ),
    "none": (500, _RELEASED),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("response_sender")
    repository = make_repository(root / "models", ["sender_plain"])
    with NaiadServer(repository, log_dir=root) as server:
        yield server


def answer(url: str, mode: str, n: int = 4) -> tuple:
    """(status, OUT or the error message) of one request in `mode`."""
    body = {
        "inputs": [{"name": "N", "shape": [1, 1], "datatype": "INT32", "data": [n]}],
        "parameters": {"mode": mode},
    }
    r = requests.post(f"{url}/v2/models/sender_plain/infer", json=body, timeout=TIMEOUT)
    payload = r.json()
    if r.status_code == 200:
        return 200, payload["outputs"][0]["data"][0]
    return r.status_code, payload["error"]


def _matches(got: tuple, expected: tuple) -> bool:
    # An error raised in execute() ends with where it was raised (README "Differences").
    status, value = expected
    return got[0] == status and (got[1] == value or str(got[1]).startswith(f"{value} (at "))


@pytest.mark.parametrize("mode", sorted(ANSWERS))
def test_each_way_of_sending_answers_as_triton(server, mode):
    got = answer(server.url, mode)
    assert _matches(got, ANSWERS[mode]), got
    assert answer(server.url, "one") == (200, 41)  # the instance goes on serving


def test_two_responses_fail_the_request(server):
    status, message = answer(server.url, "two")
    assert status == 500
    assert message.startswith(
        _FAILED + "TritonModelException: Unable to send response. Non-decoupled model "
        "cannot send more than one response."
    )


def test_one_batch_mixing_the_ways_answers_each_request(server):
    modes = ["one", "thread", "split", "return", "mixed", "error", "thread", "one"]
    with ThreadPoolExecutor(len(modes)) as pool:
        got = list(pool.map(lambda k: answer(server.url, modes[k], n=k), range(len(modes))))
    marks = {"one": 1, "thread": 3, "split": 2, "return": 6, "mixed": 4}
    for k, mode in enumerate(modes):
        if mode == "error":
            assert got[k] == ANSWERS["error"]
        else:
            assert got[k] == (200, k * 10 + marks[mode]), (mode, got[k])
    arena = requests.get(f"{server.url}/v2/naiad/arena", timeout=TIMEOUT).json()
    assert arena["requests_in_flight"] == 0
    # The batcher's 20 ms delay put requests of different ways in one batch.
    stats = requests.get(f"{server.url}/v2/models/sender_plain/stats", timeout=TIMEOUT).json()
    assert max(b["batch_size"] for b in stats["model_stats"][0]["batch_stats"]) > 1
