"""Overload: far more requests than a model can hold, from many HTTP and gRPC clients at
once. A gated model holds its first execution until the test opens the gate, so every
count below follows from the queue's rules, not from how fast the machine is: exactly the
executing request plus `max_queue_size` queued ones are accepted, every other request is
refused while the gate is still closed (at once) with Triton's 503 / UNAVAILABLE
`Exceeds maximum queue size`, every accepted request is answered once the gate opens,
and the arena comes back to where it was.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

import numpy as np
import pytest
import requests
import tritonclient.grpc.aio as grpcaio
from gated_model import GATED_MODEL, gate_parameter
from model_control_support import write_model
from server_harness import NaiadServer, metric_value
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.timeout(300)

MAX_BATCH = 4
MAX_QUEUE = 8
LOW_QUEUE = 2  # level 2's max_queue_size in the priorities test
HTTP_CLIENTS = 48
GRPC_CLIENTS = 16  # more than MAX_QUEUE: some gRPC requests are refused whatever the race
WAIT_S = 60.0  # generous: conditions are waited for, never slept on

CONFIG = f"""
name: "__NAME__"
backend: "python"
max_batch_size: {MAX_BATCH}
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [
  {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] }},
  {{ name: "OUTPUT_ORDER" data_type: TYPE_INT64 dims: [ 1 ] }}
]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
__GATE__
dynamic_batching {{
  __QUEUEING__
}}
"""
QUEUE = f"default_queue_policy {{ max_queue_size: {MAX_QUEUE} }}"
# Two levels: level 1 queues up to MAX_QUEUE, level 2 (the default) LOW_QUEUE; level 1
# goes first.
PRIORITIES = (
    "priority_levels: 2 default_priority_level: 2 "
    f"priority_queue_policy {{ key: 1 value {{ max_queue_size: {MAX_QUEUE} }} }} "
    f"priority_queue_policy {{ key: 2 value {{ max_queue_size: {LOW_QUEUE} }} }}"
)
# Triton's words, after its request id prefix.
QUEUE_FULL = "[request id: <id_unknown>] Exceeds maximum queue size"


def _write(repo, gate, name: str, queueing: str) -> None:
    config = CONFIG.replace("__NAME__", name).replace("__GATE__", gate_parameter(gate))
    write_model(repo, name, config.replace("__QUEUEING__", queueing), GATED_MODEL)


class _Answers:
    """The answers to one level's requests: (value, execution order) of each served one,
    refusals by protocol, and anything else as text."""

    def __init__(self):
        self.sent = 0
        self.served: list[tuple[float, int]] = []
        self.refused: dict[str, int] = {}
        self.other: list[str] = []

    def refuse(self, protocol: str) -> None:
        self.refused[protocol] = self.refused.get(protocol, 0) + 1

    @property
    def refused_count(self) -> int:
        return sum(self.refused.values())


def _body(value: float, priority: int) -> bytes:
    request = {"inputs": [{"name": "INPUT0", "shape": [1, 1], "datatype": "FP32", "data": [value]}]}
    if priority:
        request["parameters"] = {"priority": priority}
    return json.dumps(request).encode()


async def _http_infer(port, model: str, value: float, priority: int, answers: _Answers) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = _body(value, priority)
    head = (
        b"POST /v2/models/%s/infer HTTP/1.1\r\nHost: x\r\n" % model.encode()
        + b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
    )
    try:
        answers.sent += 1
        writer.write(head + body)
        status = int((await reader.readline()).split()[1])
        length = 0
        while (line := await reader.readline()) != b"\r\n":
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        payload = json.loads(await reader.readexactly(length))
        if status == 200:
            outputs = {o["name"]: o["data"][0] for o in payload["outputs"]}
            answers.served.append((outputs["OUTPUT0"], outputs["OUTPUT_ORDER"]))
        elif status == 503 and payload["error"] == QUEUE_FULL:
            answers.refuse("http 503")
        else:
            answers.other.append(f"http {status} {payload}")
    finally:
        writer.close()


async def _grpc_infer(client, model: str, value: float, priority: int, answers: _Answers) -> None:
    tensor = grpcaio.InferInput("INPUT0", [1, 1], "FP32")
    tensor.set_data_from_numpy(np.array([[value]], dtype=np.float32))
    answers.sent += 1
    try:
        result = await client.infer(model, [tensor], client_timeout=WAIT_S, priority=priority)
    except InferenceServerException as exc:
        if str(exc.status()) == "StatusCode.UNAVAILABLE" and exc.message() == QUEUE_FULL:
            answers.refuse("grpc UNAVAILABLE")
        else:
            answers.other.append(f"grpc {exc.status()} {exc.message()}")
        return
    answers.served.append(
        (float(result.as_numpy("OUTPUT0")[0, 0]), int(result.as_numpy("OUTPUT_ORDER")[0, 0]))
    )


async def _until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"never happened in {WAIT_S}s: {what}"
        await asyncio.sleep(0.01)


def _pending(server, model: str) -> float:
    text = requests.get(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).text
    return metric_value(text, f'nv_inference_pending_request_count{{model="{model}",version="1"}}')


def _arena(server) -> dict:
    return requests.get(server.url + "/v2/naiad/arena", timeout=10).json()


class _Flood:
    """Holds the model's first execution on one request at `first_priority`, then sends
    `per_level` requests at each priority level at once, split over HTTP_CLIENTS HTTP
    connections and GRPC_CLIENTS gRPC calls per level."""

    def __init__(self, server, gate, model: str, levels: tuple[int, ...]):
        self.server, self.gate, self.model, self.levels = server, gate, model, levels
        self.first = _Answers()
        self.answers = {level: _Answers() for level in levels}
        self.tasks: list[asyncio.Task] = []

    async def hold_first(self, priority: int) -> None:
        task = _http_infer(self.server.http_port, self.model, -1.0, priority, self.first)
        self.tasks.append(asyncio.ensure_future(task))
        await _until(lambda: (self.gate / "executing-1").exists(), "the first execution")

    def send(self, client) -> None:
        for level in self.levels:
            answers = self.answers[level]
            for i in range(HTTP_CLIENTS):
                task = _http_infer(self.server.http_port, self.model, i, level, answers)
                self.tasks.append(asyncio.ensure_future(task))
            for i in range(GRPC_CLIENTS):
                task = _grpc_infer(client, self.model, HTTP_CLIENTS + i, level, answers)
                self.tasks.append(asyncio.ensure_future(task))

    async def finish(self) -> None:
        (self.gate / "open").touch()
        await asyncio.wait_for(asyncio.gather(*self.tasks), WAIT_S)


async def _flood(server, gate, model: str, first: int, capacity: dict[int, int]) -> _Flood:
    """Holds one request at priority `first` executing, floods each level of `capacity`
    (level -> its max_queue_size), waits for every refusal beyond that while the gate is
    still closed, then opens it and waits for every answer."""
    run = _Flood(server, gate, model, tuple(capacity))
    client = grpcaio.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    try:
        await run.hold_first(first)
        run.send(client)
        for level, answers in run.answers.items():
            expected = HTTP_CLIENTS + GRPC_CLIENTS - capacity[level]
            await _until(
                lambda a=answers, n=expected: a.refused_count >= n,
                f"level {level}: {expected} refusals",
            )
        # All refused while the first execution is still held: on arrival.
        assert not (gate / "open").exists()
        assert run.first.served == [] and all(a.served == [] for a in run.answers.values())
        pending = await asyncio.to_thread(_pending, server, model)
        assert pending == sum(capacity.values()), pending
        await run.finish()
    finally:
        await client.close()
    return run


def _gated(tmp_path, name: str, queueing: str):
    repo, gate = tmp_path / "models", tmp_path / "gate"
    gate.mkdir()
    _write(repo, gate, name, queueing)
    return NaiadServer(repo, log_dir=tmp_path), gate


def test_far_more_than_the_queue_holds_is_refused_at_once(tmp_path):
    server, gate = _gated(tmp_path, "queued", QUEUE)
    sent = HTTP_CLIENTS + GRPC_CLIENTS
    # One execution held plus a full queue; the rest is refused.
    refused = sent - MAX_QUEUE
    # A failing check must not leave the held requests waiting out the gate's deadline.
    with server, contextlib.ExitStack() as opened:
        opened.callback((gate / "open").touch)
        arena_before = _arena(server)
        run = asyncio.run(_flood(server, gate, "queued", 0, {0: MAX_QUEUE}))
        arena_after = _arena(server)
        stats = requests.get(server.url + "/v2/models/queued/stats", timeout=10).json()
    answers = run.answers[0]
    print(
        f"overload: sent {answers.sent} while one execution was held: served "
        f"{len(answers.served)}, refused {answers.refused}, other {answers.other[:3]}; arena "
        f"{arena_before['bytes_in_use']} -> {arena_after['bytes_in_use']} B"
    )
    assert answers.other == [] and run.first.other == [], (answers.other[:3], run.first.other)
    assert answers.sent == sent
    assert len(answers.served) == MAX_QUEUE, answers.served
    assert answers.refused_count == refused, answers.refused
    assert set(answers.refused) == {"http 503", "grpc UNAVAILABLE"}, answers.refused
    assert run.first.served == [(-1.0, 1)]
    # Queued behind the held execution, they run after it in batches of MAX_BATCH.
    orders = sorted(order for _, order in answers.served)
    assert orders == [2 + i // MAX_BATCH for i in range(MAX_QUEUE)], orders
    assert arena_after["bytes_in_use"] == arena_before["bytes_in_use"], (arena_before, arena_after)
    assert arena_after["requests_in_flight"] == 0, arena_after
    model_stats = stats["model_stats"][0]["inference_stats"]
    # Triton counts a queue-full refusal as no failure of the model.
    assert model_stats["fail"]["count"] == 0, model_stats["fail"]
    assert model_stats["success"]["count"] == 1 + MAX_QUEUE, model_stats["success"]


def test_priorities_under_overload(tmp_path):
    """Both levels flooded while one execution is held: each level accepts its own
    max_queue_size and refuses the rest with 503 / UNAVAILABLE; once the gate opens every
    queued level-1 request runs before any queued level-2 one."""
    server, gate = _gated(tmp_path, "ranked", PRIORITIES)
    capacity = {1: MAX_QUEUE, 2: LOW_QUEUE}
    per_level = HTTP_CLIENTS + GRPC_CLIENTS
    with server, contextlib.ExitStack() as opened:
        opened.callback((gate / "open").touch)
        run = asyncio.run(_flood(server, gate, "ranked", 1, capacity))
        arena = _arena(server)
    high, low = run.answers[1], run.answers[2]
    print(
        f"priorities: level 1 sent {high.sent}, served {len(high.served)}, refused "
        f"{high.refused}; level 2 sent {low.sent}, served {len(low.served)}, refused {low.refused}"
    )
    for level, answers in run.answers.items():
        assert answers.other == [], answers.other[:3]
        assert answers.sent == per_level
        assert len(answers.served) == capacity[level], (level, answers.served)
        assert answers.refused_count == per_level - capacity[level], (level, answers.refused)
        assert set(answers.refused) == {"http 503", "grpc UNAVAILABLE"}, (level, answers.refused)
    assert run.first.served == [(-1.0, 1)]
    high_orders = [order for _, order in high.served]
    low_orders = [order for _, order in low.served]
    assert max(high_orders) < min(low_orders), (sorted(high_orders), sorted(low_orders))
    assert arena["requests_in_flight"] == 0, arena
