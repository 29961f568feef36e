"""Dynamic batching, black-box: what a Triton user sees of the scheduling policy.

One `naiad serve` on the models of tests/batching_models/ (each one instance unless its
config says otherwise). They differ only in config: each gets the same `model.py`
(echo_batch_model.py), which echoes INPUT0 and reports SEQ, the instance's execution
number, and BATCH, the number of requests in that execution. Requests go over plain
HTTP/JSON with `requests` (each call its own connection, closed after the answer).

Naiad's early exit (pysrc/naiad/scheduling/arrivals.py): a batch held for
`max_queue_delay_microseconds` leaves at once when every open connection of the HTTP front
end that has sent an inference request is waiting for an answer, since no request could
join it. Tests that need the delay to run as in Triton keep an extra idle keep-alive
client connection open (`idle_connection()`).
"""

from __future__ import annotations

import contextlib
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
from server_harness import NaiadServer

BATCHING_MODELS = Path(__file__).resolve().parent / "batching_models"

TIMEOUT = 15  # seconds: the bound on any single HTTP call


def build_repository(dest: Path) -> Path:
    """Each model folder's config.pbtxt with the one shared model.py as version 1."""
    for config in sorted(BATCHING_MODELS.glob("*/config.pbtxt")):
        version = dest / config.parent.name / "1"
        version.mkdir(parents=True)
        shutil.copy(config, version.parent / "config.pbtxt")
        shutil.copy(BATCHING_MODELS / "echo_batch_model.py", version / "model.py")
    return dest


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repository = build_repository(tmp_path_factory.mktemp("batching-repository"))
    server = NaiadServer(repository, log_dir=tmp_path_factory.mktemp("batching"), name="batching")
    server.start(wait="ready", timeout=120)
    yield server
    server.stop()


class Result:
    """One answered request: status, JSON body, outputs by name, timings (monotonic)."""

    def __init__(self, response: requests.Response, start: float, end: float):
        self.status = response.status_code
        self.body = response.json()
        self.start = start
        self.end = end
        self.elapsed = end - start
        self.outputs = {o["name"]: o["data"] for o in self.body.get("outputs", [])}

    def output(self, name: str) -> int:
        return self.outputs[name][0]

    def __repr__(self) -> str:
        return f"Result({self.status}, {self.body}, elapsed={self.elapsed:.3f})"


def infer(server, model: str, value: int, *, delay_ms: int | None = None, **parameters) -> Result:
    inputs = [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 1], "data": [value]}]
    if delay_ms is not None:
        inputs.append(
            {"name": "DELAY_MS", "datatype": "INT32", "shape": [1, 1], "data": [delay_ms]}
        )
    body: dict = {"inputs": inputs}
    if parameters:
        body["parameters"] = parameters
    start = time.monotonic()
    response = requests.post(f"{server.url}/v2/models/{model}/infer", json=body, timeout=TIMEOUT)
    return Result(response, start, time.monotonic())


def stats(server, model: str) -> dict:
    response = requests.get(f"{server.url}/v2/models/{model}/stats", timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    return response.json()["model_stats"][0]


class Background:
    """Runs infer() in a thread; .result() joins it (bounded)."""

    def __init__(self, server, model: str, value: int, **kwargs):
        self._result: Result | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, args=(server, model, value), kwargs=kwargs
        )
        self._thread.daemon = True
        self._thread.start()

    def _run(self, *args, **kwargs):
        try:
            self._result = infer(*args, **kwargs)
        except BaseException as error:  # noqa: BLE001 - reported by result()
            self._error = error

    def result(self) -> Result:
        self._thread.join(TIMEOUT + 5)
        assert not self._thread.is_alive(), "request did not finish"
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result


@contextlib.contextmanager
def idle_connection(server):
    """An extra keep-alive client connection that has sent one inference request and then
    sends nothing: while it is open, a request could still arrive on it, so held batches
    wait out the delay. (Naiad counts only connections that have sent an inference
    request: a monitoring client polling health or stats does not hold batches.)"""
    with requests.Session() as session:
        body = {"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 1], "data": [0]}]}
        # With requests' default Accept-Encoding (gzip): the lane takes it and compresses
        # the answer, as the batching tests count it.
        response = session.post(
            f"{server.url}/v2/models/batch_plain/infer", json=body, timeout=TIMEOUT
        )
        assert response.status_code == 200, response.text
        yield session
    time.sleep(0.05)  # let the server see the close before the next request


# -- 1: concurrent requests are batched ---------------------------------------------------


def test_concurrent_requests_are_batched(server):
    values = list(range(100, 132))
    with ThreadPoolExecutor(len(values)) as pool:
        results = list(pool.map(lambda v: infer(server, "batch_concurrent", v), values))
    for value, result in zip(values, results):
        assert result.status == 200, result
        # Each request gets its own input back, not a neighbour's from the same batch.
        assert result.outputs["OUTPUT0"] == [value], result
    assert max(r.output("BATCH") for r in results) > 1

    model_stats = stats(server, "batch_concurrent")
    assert model_stats["inference_count"] == len(values)
    assert model_stats["execution_count"] < model_stats["inference_count"]
    batch_sizes = {b["batch_size"]: b["compute_infer"]["count"] for b in model_stats["batch_stats"]}
    assert max(batch_sizes) > 1, model_stats["batch_stats"]
    # Every request was executed once: the batch sizes add up.
    assert sum(size * count for size, count in batch_sizes.items()) == len(values)
    assert sum(batch_sizes.values()) == model_stats["execution_count"]


# -- 2: max_queue_delay_microseconds --------------------------------------------------------


def test_lone_request_waits_queue_delay(server):
    """With another connection open (it could send a request that joins the batch), a
    lone request is held for the full 300 ms delay, as in Triton."""
    with idle_connection(server):
        result = infer(server, "batch_delay", 7)
    assert result.status == 200, result
    assert result.outputs["OUTPUT0"] == [7]
    assert 0.3 <= result.elapsed < 0.3 + 0.25, result.elapsed


def test_lone_request_leaves_early_when_no_client_could_add(server):
    """Naiad-specific early exit: the only client connection that has sent inference
    requests is the one waiting for this answer, so no request can join the held batch;
    it leaves at once instead of after 300 ms (arrivals.py). Triton 2.51 holds it for the
    full 300 ms here too (checked: 0.30 s)."""
    infer(server, "batch_delay", 0)  # warm up
    result = infer(server, "batch_delay", 8)
    assert result.status == 200, result
    assert result.outputs["OUTPUT0"] == [8]
    assert result.elapsed < 0.15, result.elapsed


# -- 3: preferred_batch_size -----------------------------------------------------------------


def test_preferred_batch_size_leaves_without_delay(server):
    """preferred_batch_size [4], delay 5 s: four concurrent requests form a preferred
    batch and run at once (the idle connection rules out the early exit)."""
    values = [11, 12, 13, 14]
    with idle_connection(server), ThreadPoolExecutor(len(values)) as pool:
        results = list(pool.map(lambda v: infer(server, "batch_preferred", v), values))
    for value, result in zip(values, results):
        assert result.status == 200, result
        assert result.outputs["OUTPUT0"] == [value]
        assert result.output("BATCH") == 4, result
        assert result.elapsed < 2.0, result.elapsed
    model_stats = stats(server, "batch_preferred")
    assert model_stats["execution_count"] == 1
    assert [(b["batch_size"], b["compute_infer"]["count"]) for b in model_stats["batch_stats"]] == [
        (4, 1)
    ]


# -- 4: max_queue_size ------------------------------------------------------------------------


def test_max_queue_size_rejects_overflow(server):
    """One instance busy 0.5 s per request, max_queue_size 2: of 6 concurrent requests
    one runs, two wait, the others are rejected at once with 503."""
    values = list(range(6))
    with ThreadPoolExecutor(len(values)) as pool:
        results = list(pool.map(lambda v: infer(server, "batch_queue_full", v), values))
    ok = [r for r in results if r.status == 200]
    rejected = [r for r in results if r.status != 200]
    assert rejected, results
    for result in rejected:
        assert result.status == 503, result
        # Naiad: exactly this; Triton 2.51 prefixes "[request id: <id_unknown>] ".
        assert result.body["error"].endswith("Exceeds maximum queue size"), result
        assert result.elapsed < 0.45, result  # rejected on arrival, not after waiting
    assert len(ok) >= 3, results  # the running one and a full queue of 2
    for value, result in zip(values, results):
        if result.status == 200:
            assert result.outputs["OUTPUT0"] == [value]

    # The server keeps serving the model once the queue has room again.
    after = infer(server, "batch_queue_full", 42)
    assert after.status == 200, after
    assert after.outputs["OUTPUT0"] == [42]


# -- 5: queue timeouts ----------------------------------------------------------------------


def test_queue_timeout_reject(server):
    """default_timeout_microseconds 100000, REJECT: a request that waits in the queue more
    than 100 ms behind a 0.5 s execution is rejected with 503."""
    busy = Background(server, "batch_timeout_reject", 1)
    time.sleep(0.1)  # the first request is executing
    queued = infer(server, "batch_timeout_reject", 2)
    assert queued.status == 503, queued
    assert queued.body == {"error": "Request timeout expired"}, queued
    # Rejected once the 100 ms are up, without being executed (that would end >= 0.9 s
    # after sending). Naiad rejects at the deadline (~0.1 s); Triton 2.51 only when the
    # instance frees up (~0.4 s).
    assert 0.09 <= queued.elapsed < 0.8, queued.elapsed
    first = busy.result()
    assert first.status == 200, first
    assert first.outputs["OUTPUT0"] == [1]


def test_queue_timeout_override(server):
    """allow_timeout_override: the request's `timeout` parameter (µs) replaces the 2 s
    default; 50 ms expires behind a 0.5 s execution, the default does not."""
    busy = Background(server, "batch_timeout_override", 1)
    time.sleep(0.1)
    short = infer(server, "batch_timeout_override", 2, timeout=50000)
    assert short.status == 503, short
    assert short.body == {"error": "Request timeout expired"}, short
    assert short.elapsed < 0.8, short.elapsed  # not executed (see test_queue_timeout_reject)
    default = infer(server, "batch_timeout_override", 3)
    assert default.status == 200, default
    assert default.outputs["OUTPUT0"] == [3]
    assert busy.result().status == 200


def test_queue_timeout_delay(server):
    """timeout_action DELAY: the expired request is not rejected; it runs later."""
    busy = Background(server, "batch_timeout_delay", 1)
    time.sleep(0.1)
    queued = infer(server, "batch_timeout_delay", 2)
    assert queued.status == 200, queued
    assert queued.outputs["OUTPUT0"] == [2]
    assert queued.elapsed >= 0.3, queued.elapsed  # it waited for the busy instance
    assert busy.result().status == 200


# -- 6: priorities ---------------------------------------------------------------------------


def test_priority_request_overtakes_queued_low_priority(server):
    """priority_levels 2, default 2; one instance, batch size 1, 0.3 s per execution:
    a priority-1 request queued after three priority-2 ones runs before them."""
    busy = Background(server, "batch_priority", 0)
    time.sleep(0.08)
    low = [Background(server, "batch_priority", v, priority=2) for v in (1, 2, 3)]
    time.sleep(0.08)
    high = Background(server, "batch_priority", 9, priority=1)
    first = busy.result()
    high_result = high.result()
    low_results = [b.result() for b in low]
    for result in [first, high_result, *low_results]:
        assert result.status == 200, result
    assert high_result.outputs["OUTPUT0"] == [9]
    assert [r.output("OUTPUT0") for r in low_results] == [1, 2, 3]
    # Execution order: the busy one, then the priority-1 request, then the rest.
    assert high_result.output("SEQ") == first.output("SEQ") + 1
    assert all(r.output("SEQ") > high_result.output("SEQ") for r in low_results)
    assert all(high_result.end < r.end for r in low_results)


# -- 7: preserve_ordering ------------------------------------------------------------------


def test_preserve_ordering_holds_later_response(server):
    """Two instances, preserve_ordering: a quick request dispatched to the second
    instance while the first runs a slow one is answered only after the slow one."""
    slow = Background(server, "batch_ordered", 1, delay_ms=600)
    time.sleep(0.15)
    fast = infer(server, "batch_ordered", 2)
    slow_result = slow.result()
    assert slow_result.status == 200 and fast.status == 200, (slow_result, fast)
    assert fast.outputs["OUTPUT0"] == [2]
    # Both were the first execution of their instance: they ran on different instances.
    assert fast.output("SEQ") == slow_result.output("SEQ") == 0
    assert fast.end >= slow_result.end - 0.05, (fast, slow_result)
    assert fast.elapsed >= 0.3, fast.elapsed


# -- 8: shapes ------------------------------------------------------------------------------


def _shaped(server, shape: list[int], delay_ms: int | None = None) -> Result:
    count = shape[0] * shape[1]
    inputs = [{"name": "INPUT0", "datatype": "INT32", "shape": shape, "data": list(range(count))}]
    if delay_ms is not None:
        inputs.append(
            {"name": "DELAY_MS", "datatype": "INT32", "shape": [shape[0], 1], "data": [delay_ms]}
        )
    start = time.monotonic()
    # JSON tensors take the fast lane too; a Content-Encoding (identity: the body as it
    # is) keeps these on the general path, beside _shaped_binary's lane requests.
    response = requests.post(
        f"{server.url}/v2/models/batch_shapes/infer",
        json={"inputs": inputs},
        headers={"Content-Encoding": "identity"},
        timeout=TIMEOUT,
    )
    return Result(response, start, time.monotonic())


def _shaped_binary(server, shape: list[int]) -> dict:
    """Binary tensors both ways through tritonclient: the request takes the fast lane."""
    with httpclient.InferenceServerClient(
        f"{server.host}:{server.http_port}", network_timeout=TIMEOUT
    ) as client:
        tensor = httpclient.InferInput("INPUT0", shape, "INT32")
        tensor.set_data_from_numpy(np.arange(shape[0] * shape[1], dtype=np.int32).reshape(shape))
        result = client.infer("batch_shapes", [tensor])
        return {name: result.as_numpy(name).ravel().tolist() for name in ("SEQ", "BATCH")}


def test_only_requests_of_the_same_non_batch_shape_share_a_batch(server):
    lanes_url = f"{server.url}/v2/naiad/lanes"
    lane_before = requests.get(lanes_url, timeout=TIMEOUT).json()["lane_requests"]
    with ThreadPoolExecutor(4) as pool:
        blocker = pool.submit(_shaped, server, [1, 1], 500)  # the instance is busy 0.5 s
        time.sleep(0.1)
        # Queued in this order behind the blocker; the first through the fast lane, the
        # others through the general path: both must key shapes alike.
        first = pool.submit(_shaped_binary, server, [1, 2])
        time.sleep(0.05)
        second = pool.submit(_shaped, server, [2, 2])
        time.sleep(0.05)
        other = pool.submit(_shaped, server, [1, 3])
        first, second, other = first.result(), second.result(), other.result()
    assert blocker.result().status == 200
    for result in (second, other):
        assert result.status == 200, result
    # [1,2] and [2,2] differ only in batch size: one execution of both.
    assert first["SEQ"][0] == second.output("SEQ")
    assert first["BATCH"][0] == second.output("BATCH") == 2
    # [1,3] has another non-batch shape: its own execution.
    assert other.output("SEQ") != second.output("SEQ")
    assert other.output("BATCH") == 1
    assert second.outputs["OUTPUT0"] == [0, 1, 2, 3]
    assert requests.get(lanes_url, timeout=TIMEOUT).json()["lane_requests"] == lane_before + 1
