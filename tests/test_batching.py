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

    def done(self) -> bool:
        return not self._thread.is_alive()

    def result(self) -> Result:
        self._thread.join(TIMEOUT + 5)
        assert not self._thread.is_alive(), "request did not finish"
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result


def wait_until(condition, what: str, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"never happened in {timeout}s: {what}"
        time.sleep(0.005)


def in_flight(server) -> int:
    """Inference requests the server has accepted and not answered (queued or running)."""
    response = requests.get(f"{server.url}/v2/naiad/arena", timeout=TIMEOUT)
    return response.json()["requests_in_flight"]


def wait_in_flight(server, count: int) -> None:
    wait_until(lambda: in_flight(server) == count, f"{count} requests in flight")


class Gate:
    """Holds the executions of `model` that run a request whose INPUT0 starts with a held
    value, and tells which have started or finished (echo_batch_model.py's files)."""

    def __init__(self, server, model: str):
        self.folder = server.repository / model
        for old in self.folder.glob("execut*-*"):
            old.unlink()

    def __enter__(self) -> Gate:
        return self

    def __exit__(self, *exc) -> None:
        for hold in self.folder.glob("hold-*"):  # never leave an execution held
            hold.unlink()

    def hold(self, value: int) -> None:
        (self.folder / f"hold-{value}").touch()

    def release(self, value: int) -> None:
        (self.folder / f"hold-{value}").unlink()

    def started(self, value: int) -> bool:
        return (self.folder / f"executing-{value}").exists()

    def wait_started(self, value: int) -> None:
        wait_until(lambda: self.started(value), f"request {value} executing")

    def wait_finished(self, value: int) -> None:
        wait_until(lambda: (self.folder / f"executed-{value}").exists(), f"{value} executed")


def queue_ns(server, model: str) -> tuple[int, int]:
    """(requests, total ns) the statistics report waiting in `model`'s queue."""
    queue = stats(server, model)["inference_stats"]["queue"]
    return queue["count"], queue["ns"]


@contextlib.contextmanager
def idle_connection(server):
    """An extra keep-alive client connection that has sent one inference request and then
    sends nothing: while it is open, a request could still arrive on it, so held batches
    wait out the delay. (Naiad counts only connections that have sent an inference
    request: a monitoring client polling health or stats does not hold batches.)"""
    before = _inference_connections(server)
    with requests.Session() as session:
        body = {"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 1], "data": [0]}]}
        # With requests' default Accept-Encoding (gzip): the lane takes it and compresses
        # the answer, as the batching tests count it.
        response = session.post(
            f"{server.url}/v2/models/batch_plain/infer", json=body, timeout=TIMEOUT
        )
        assert response.status_code == 200, response.text
        yield session
        del response  # it holds the socket open past the session's close while it lives
    # The server has seen the close once it no longer counts the connection: only then
    # can the next test's batch leave early.
    deadline = time.monotonic() + TIMEOUT
    while _inference_connections(server) > before:
        assert time.monotonic() < deadline, "the server still counts the closed connection"
        time.sleep(0.01)


def _inference_connections(server) -> int:
    lanes = requests.get(f"{server.url}/v2/naiad/lanes", timeout=TIMEOUT).json()
    return lanes["inference_connections"]


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
    assert result.output("BATCH") == 1, result
    assert result.elapsed >= 0.3, result.elapsed  # how long after it is perf/'s concern


def test_lone_request_leaves_early_when_no_client_could_add(server):
    """Naiad-specific early exit: the only client connection that has sent inference
    requests is the one waiting for this answer, so no request can join the held batch;
    it leaves at once instead of after the 5 s delay (arrivals.py). Triton 2.51 holds it
    for the full delay here (checked with 300 ms: 0.30 s)."""
    with requests.Session() as session:

        def infer_on_session(value: int) -> requests.Response:
            body = {"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 1]}]}
            body["inputs"][0]["data"] = [value]
            url = f"{server.url}/v2/models/batch_early/infer"
            return session.post(url, json=body, timeout=TIMEOUT)

        # The first answer on this connection: the server has seen every earlier
        # test's connection close (a batch held by one of them leaves at its delay).
        assert infer_on_session(0).status_code == 200
        before = queue_ns(server, "batch_early")
        response = infer_on_session(8)
    assert response.status_code == 200, response.text
    outputs = {o["name"]: o["data"] for o in response.json()["outputs"]}
    assert outputs["OUTPUT0"] == [8] and outputs["BATCH"] == [1], outputs
    count, ns = queue_ns(server, "batch_early")
    # Dispatched before its 5 s deadline: the server's own account of its wait.
    assert count - before[0] == 1 and ns - before[1] < 5_000_000_000, (count, ns, before)


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
    model_stats = stats(server, "batch_preferred")
    # Left as the fourth came, before the 5 s delay of the first: the four waits add up
    # to less than one delay.
    queue = model_stats["inference_stats"]["queue"]
    assert queue["count"] == 4 and queue["ns"] < 5_000_000_000, queue
    assert model_stats["execution_count"] == 1
    assert [(b["batch_size"], b["compute_infer"]["count"]) for b in model_stats["batch_stats"]] == [
        (4, 1)
    ]


# -- 4: max_queue_size ------------------------------------------------------------------------


def test_max_queue_size_rejects_overflow(server):
    """One instance busy, max_queue_size 2: of 6 requests one runs, two wait, the others
    are rejected on arrival with 503."""
    with Gate(server, "batch_queue_full") as gate:
        gate.hold(0)
        running = Background(server, "batch_queue_full", 0)
        gate.wait_started(0)
        queued = []
        for value in (1, 2):
            queued.append(Background(server, "batch_queue_full", value))
            wait_in_flight(server, 1 + len(queued))
        rejected = [infer(server, "batch_queue_full", value) for value in (3, 4, 5)]
        # Answered while the running one is still held: on arrival, not after waiting.
        assert not running.done() and not any(b.done() for b in queued)
        gate.release(0)
        served = [running.result()] + [b.result() for b in queued]
    for result in rejected:
        assert result.status == 503, result
        # Triton 2.51's words, its request-id prefix included (these requests have no id).
        assert result.body == {"error": "[request id: <id_unknown>] Exceeds maximum queue size"}
    for value, result in enumerate(served):
        assert result.status == 200, result
        assert result.outputs["OUTPUT0"] == [value]
    # The running one, then the queue in arrival order.
    seq = served[0].output("SEQ")
    assert [r.output("SEQ") for r in served] == [seq, seq + 1, seq + 2], served

    # The server keeps serving the model once the queue has room again.
    after = infer(server, "batch_queue_full", 42)
    assert after.status == 200, after
    assert after.outputs["OUTPUT0"] == [42]


# -- 5: queue timeouts ----------------------------------------------------------------------


def test_queue_timeout_reject(server):
    """default_timeout_microseconds 100000, REJECT: a request that waits in the queue more
    than 100 ms behind a running execution is rejected with 503, without being run."""
    with Gate(server, "batch_timeout_reject") as gate:
        gate.hold(1)
        busy = Background(server, "batch_timeout_reject", 1)
        gate.wait_started(1)
        queued = infer(server, "batch_timeout_reject", 2)
        # Rejected while the first still runs: it never reached the instance. Naiad
        # rejects at the deadline; Triton 2.51 only when the instance frees up.
        assert not busy.done() and not gate.started(2)
    assert queued.status == 503, queued
    assert queued.body == {"error": "Request timeout expired"}, queued
    assert queued.elapsed >= 0.1, queued.elapsed  # not before its timeout
    first = busy.result()
    assert first.status == 200, first
    assert first.outputs["OUTPUT0"] == [1]


def test_queue_timeout_override(server):
    """allow_timeout_override: the request's `timeout` parameter (µs) replaces the 2 s
    default; 50 ms expires behind a running execution, the default does not."""
    with Gate(server, "batch_timeout_override") as gate:
        gate.hold(1)
        busy = Background(server, "batch_timeout_override", 1)
        gate.wait_started(1)
        short = infer(server, "batch_timeout_override", 2, timeout=50000)
        assert not busy.done() and not gate.started(2)  # see test_queue_timeout_reject
        default = Background(server, "batch_timeout_override", 3)
        wait_in_flight(server, 2)
        gate.release(1)
        default = default.result()
    assert short.status == 503, short
    assert short.body == {"error": "Request timeout expired"}, short
    assert short.elapsed >= 0.05, short.elapsed
    assert default.status == 200, default
    assert default.outputs["OUTPUT0"] == [3]
    assert busy.result().status == 200


def test_queue_timeout_delay(server):
    """timeout_action DELAY: the expired request is not rejected; it runs later."""
    with Gate(server, "batch_timeout_delay") as gate:
        gate.hold(1)
        busy = Background(server, "batch_timeout_delay", 1)
        gate.wait_started(1)
        queued = Background(server, "batch_timeout_delay", 2)
        wait_in_flight(server, 2)
        # Queued before this point: its 100 ms timeout is past once this sleep is over
        # (a lower bound on the time spent queued, which is what it needs).
        time.sleep(0.2)
        assert not queued.done(), queued.result()  # not rejected
        gate.release(1)
        queued = queued.result()
    assert queued.status == 200, queued
    assert queued.outputs["OUTPUT0"] == [2]
    first = busy.result()
    assert first.status == 200
    assert queued.output("SEQ") == first.output("SEQ") + 1  # it waited for the busy instance


# -- 6: priorities ---------------------------------------------------------------------------


def test_priority_request_overtakes_queued_low_priority(server):
    """priority_levels 2, default 2; one instance, batch size 1: a priority-1 request
    queued after three priority-2 ones runs before them."""
    with Gate(server, "batch_priority") as gate:
        gate.hold(0)
        busy = Background(server, "batch_priority", 0)
        gate.wait_started(0)
        low = []
        for value in (1, 2, 3):
            low.append(Background(server, "batch_priority", value, priority=2))
            wait_in_flight(server, 1 + len(low))
        high = Background(server, "batch_priority", 9, priority=1)
        wait_in_flight(server, 5)
        gate.release(0)
        first = busy.result()
        high_result = high.result()
        low_results = [b.result() for b in low]
    for result in [first, high_result, *low_results]:
        assert result.status == 200, result
    assert high_result.outputs["OUTPUT0"] == [9]
    assert [r.output("OUTPUT0") for r in low_results] == [1, 2, 3]
    # Execution order: the busy one, then the priority-1 request, then the rest in order.
    seq = first.output("SEQ")
    assert high_result.output("SEQ") == seq + 1
    assert [r.output("SEQ") for r in low_results] == [seq + 2, seq + 3, seq + 4]


# -- 7: preserve_ordering ------------------------------------------------------------------


def test_preserve_ordering_holds_later_response(server):
    """Two instances, preserve_ordering: a quick request dispatched to the second
    instance while the first runs a slow one is answered only after the slow one."""
    with Gate(server, "batch_ordered") as gate:
        gate.hold(1)
        gate.hold(3)
        slow = Background(server, "batch_ordered", 1)
        gate.wait_started(1)
        fast = Background(server, "batch_ordered", 2)
        gate.wait_finished(2)
        # The second instance takes a third request only once the core has the quick
        # one's completion: from then on its answer is due and held back.
        third = Background(server, "batch_ordered", 3)
        gate.wait_started(3)
        assert not fast.done(), fast.result()
        gate.release(1)
        slow_result = slow.result()
        fast_result = fast.result()
        gate.release(3)
        third_result = third.result()
    for result, value in ((slow_result, 1), (fast_result, 2), (third_result, 3)):
        assert result.status == 200, result
        assert result.outputs["OUTPUT0"] == [value]
    # Both were the first execution of their instance: they ran on different instances.
    assert fast_result.output("SEQ") == slow_result.output("SEQ") == 0
    assert third_result.output("SEQ") == 1


# -- 8: shapes ------------------------------------------------------------------------------


def _shaped(server, shape: list[int], delay_ms: int | None = None) -> Result:
    count = shape[0] * shape[1]
    inputs = [{"name": "INPUT0", "datatype": "INT32", "shape": shape, "data": list(range(count))}]
    if delay_ms is not None:
        inputs.append(
            {"name": "DELAY_MS", "datatype": "INT32", "shape": [shape[0], 1], "data": [delay_ms]}
        )
    start = time.monotonic()
    response = requests.post(
        f"{server.url}/v2/models/batch_shapes/infer", json={"inputs": inputs}, timeout=TIMEOUT
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
    with ThreadPoolExecutor(4) as pool, Gate(server, "batch_shapes") as gate:
        gate.hold(0)  # every request here starts with 0: the first one holds the instance
        blocker = pool.submit(_shaped, server, [1, 1])
        gate.wait_started(0)
        # Queued in this order behind the blocker; the first with binary tensors, the
        # others with JSON ones: both must key shapes alike.
        first = pool.submit(_shaped_binary, server, [1, 2])
        wait_in_flight(server, 2)
        second = pool.submit(_shaped, server, [2, 2])
        wait_in_flight(server, 3)
        other = pool.submit(_shaped, server, [1, 3])
        wait_in_flight(server, 4)
        gate.release(0)
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
    assert requests.get(lanes_url, timeout=TIMEOUT).json()["lane_requests"] == lane_before + 4
