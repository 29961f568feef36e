"""Dropping a queued request, the HTTP and gRPC tests' one scenario
(tests/test_decoupled.py, tests/grpc_clients/test_grpc_decoupled.py): the model `held`
(two instances, tests/batching_models/echo_batch_model.py) is held executing requests 1
and 2 with files while request 3 waits in the queue; its client cancels it. The
cancellation must be counted while both are still held (so request 3 was dropped from
the queue, not run); then they are released and answered."""

from __future__ import annotations

import time

import requests
from server_harness import metric_value

__all__ = ["drop_a_queued_held_request", "in_flight", "metrics", "wait_until"]

TIMEOUT = 10
_CANCELED = 'nv_inference_request_failure{model="held",reason="CANCELED",version="1"}'
_SUCCEEDED = 'nv_inference_request_success{model="held",version="1"}'


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def metrics(server) -> str:
    url = f"http://{server.host}:{server.metrics_port}/metrics"
    return requests.get(url, timeout=TIMEOUT).text


def in_flight(server) -> int:
    return requests.get(f"{server.url}/v2/naiad/arena", timeout=TIMEOUT).json()[
        "requests_in_flight"
    ]


def drop_a_queued_held_request(server, send, cancel, assert_answered, settled) -> None:
    """The scenario, over the protocol these give: `send(value)` starts request `value`
    on held and returns its handle, `cancel(handle)` cancels it on the wire (a reset),
    `assert_answered(handle)` checks a released request got its answer. `settled(server)`
    waits until nothing is in flight. Exactly one cancellation and two successes are
    counted."""
    folder = server.repository / "held"
    before = metrics(server)
    for old in folder.glob("execut*-*"):
        old.unlink()
    for value in (1, 2):
        (folder / f"hold-{value}").touch()
    try:
        busy = [send(value) for value in (1, 2)]
        for value in (1, 2):
            wait_until((folder / f"executing-{value}").exists, f"request {value} executing")
        queued = send(3)
        wait_until(lambda: in_flight(server) == 3, "request 3 queued")
        cancel(queued)
        wait_until(
            lambda: metric_value(metrics(server), _CANCELED) > metric_value(before, _CANCELED),
            "the queued request cancelled",
        )
        assert not (folder / "executing-3").exists()
        for value in (1, 2):
            (folder / f"hold-{value}").unlink()
        for handle in busy:
            assert_answered(handle)
    finally:
        for hold in folder.glob("hold-*"):  # never leave an execution held
            hold.unlink()
    settled(server)
    after = metrics(server)
    assert metric_value(after, _CANCELED) - metric_value(before, _CANCELED) == 1
    assert metric_value(after, _SUCCEEDED) - metric_value(before, _SUCCEEDED) == 2
