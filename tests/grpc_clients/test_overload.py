"""Overload: far more requests than a model can run, from many HTTP and gRPC clients.
`max_queue_size` refuses the excess at once with Triton's 503 / UNAVAILABLE
`Exceeds maximum queue size`, every accepted request is answered, the accepted ones'
p99 latency stays within what the queue allows, and memory comes back to where it was.
"""

from __future__ import annotations

import asyncio
import json
import time

import numpy as np
import pytest
import requests
import tritonclient.grpc.aio as grpcaio
from chaos_support import p99
from model_control_support import write_model
from server_harness import TEST_MODELS, NaiadServer
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.timeout(300)

EXECUTION_S = 0.05  # every batch sleeps this long (the sleeper model)
MAX_BATCH = 4
MAX_QUEUE = 8
# The model runs MAX_BATCH / EXECUTION_S = 80 requests/s at most.
SUSTAINABLE_RATE = MAX_BATCH / EXECUTION_S
# An accepted request waits behind at most MAX_QUEUE queued requests (MAX_QUEUE /
# MAX_BATCH batches) and the batch running, then runs: (8/4 + 1 + 1) x 50 ms = 200 ms.
# The bound adds 300 ms for a loaded 2-core machine. Without the queue limit the 64
# clients' requests wait 64/4 x 50 ms = 800 ms each, well past it.
QUEUE_BOUND_S = (MAX_QUEUE / MAX_BATCH + 2) * EXECUTION_S
P99_BOUND_S = QUEUE_BOUND_S + 0.3

CONFIG = f"""
name: "__NAME__"
backend: "python"
max_batch_size: {MAX_BATCH}
input [ {{ name: "SECONDS" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [
  {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] }},
  {{ name: "OUTPUT_PID" data_type: TYPE_INT64 dims: [ 1 ] }}
]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
dynamic_batching {{
  __QUEUEING__
}}
"""
QUEUE = f"default_queue_policy {{ max_queue_size: {MAX_QUEUE} }}"
# Two levels: level 1 queues up to MAX_QUEUE, level 2 (the default) 2; level 1 goes first.
PRIORITIES = (
    "priority_levels: 2 default_priority_level: 2 "
    f"priority_queue_policy {{ key: 1 value {{ max_queue_size: {MAX_QUEUE} }} }} "
    "priority_queue_policy { key: 2 value { max_queue_size: 2 } }"
)


def _rss_kib(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


class _Tally:
    def __init__(self):
        self.sent = 0
        self.started = time.monotonic()
        self.latencies: list[float] = []
        self.rejected: dict[str, int] = {}
        self.other: list[str] = []

    def reject(self, key: str) -> None:
        self.rejected[key] = self.rejected.get(key, 0) + 1


def _queue_full(message: str) -> bool:
    # Triton's words, after its request id prefix.
    return message == "[request id: <id_unknown>] Exceeds maximum queue size"


def _body(priority: int) -> bytes:
    request = {
        "inputs": [{"name": "SECONDS", "shape": [1, 1], "datatype": "FP32", "data": [EXECUTION_S]}]
    }
    if priority:
        request["parameters"] = {"priority": priority}
    return json.dumps(request).encode()


async def _http_client(port, model: str, priority: int, tally: _Tally, stop) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = _body(priority)
    head = (
        b"POST /v2/models/%s/infer HTTP/1.1\r\nHost: x\r\n" % model.encode()
        + b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
    )
    try:
        while not stop.is_set():
            tally.sent += 1
            start = time.monotonic()
            writer.write(head + body)
            status = int((await asyncio.wait_for(reader.readline(), 30)).split()[1])
            length = 0
            while (line := await reader.readline()) != b"\r\n":
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            payload = await reader.readexactly(length)
            if status == 200:
                tally.latencies.append(time.monotonic() - start)
            elif status == 503 and _queue_full(json.loads(payload)["error"]):
                tally.reject("http 503")
            else:
                tally.other.append(f"http {status} {payload[:200]!r}")
    finally:
        writer.close()


async def _grpc_client(port, model: str, priority: int, tally: _Tally, stop) -> None:
    client = grpcaio.InferenceServerClient(f"127.0.0.1:{port}")
    tensor = grpcaio.InferInput("SECONDS", [1, 1], "FP32")
    tensor.set_data_from_numpy(np.array([[EXECUTION_S]], dtype=np.float32))
    try:
        while not stop.is_set():
            tally.sent += 1
            start = time.monotonic()
            try:
                await client.infer(model, [tensor], client_timeout=30, priority=priority)
                tally.latencies.append(time.monotonic() - start)
            except InferenceServerException as exc:
                if str(exc.status()) == "StatusCode.UNAVAILABLE" and _queue_full(exc.message()):
                    tally.reject("grpc UNAVAILABLE")
                else:
                    tally.other.append(f"grpc {exc.status()} {exc.message()}")
    finally:
        await client.close()


SLEEPER_MODEL = (TEST_MODELS / "sleeper" / "1" / "model.py").read_text()


async def _overload(server, model: str, seconds: float, priorities=(0,)) -> dict[int, _Tally]:
    """48 HTTP and 16 gRPC clients, spread over `priorities`, for `seconds`."""
    tallies, stop = {p: _Tally() for p in priorities}, asyncio.Event()
    clients = [
        _http_client(
            server.http_port,
            model,
            priorities[i % len(priorities)],
            tallies[priorities[i % len(priorities)]],
            stop,
        )
        for i in range(48)
    ]
    clients += [
        _grpc_client(
            server.grpc_port,
            model,
            priorities[i % len(priorities)],
            tallies[priorities[i % len(priorities)]],
            stop,
        )
        for i in range(16)
    ]
    tasks = [asyncio.ensure_future(c) for c in clients]
    await asyncio.sleep(seconds)
    stop.set()
    await asyncio.wait_for(asyncio.gather(*tasks), 60)  # each one's last answered
    return tallies


def _lone_latency(server) -> float:
    """Median latency of requests sent one at a time (a batch of one, no queue)."""
    body = _body(0)
    latencies = []
    with requests.Session() as session:
        for _ in range(9):
            start = time.monotonic()
            reply = session.post(f"{server.url}/v2/models/queued/infer", data=body, timeout=30)
            assert reply.status_code == 200, reply.text
            latencies.append(time.monotonic() - start)
    return sorted(latencies)[len(latencies) // 2]


def test_ten_times_the_sustainable_rate_is_refused_cleanly(tmp_path):
    repo = tmp_path / "models"
    write_model(
        repo,
        "queued",
        CONFIG.replace("__NAME__", "queued").replace("__QUEUEING__", QUEUE),
        SLEEPER_MODEL,
    )
    with NaiadServer(repo, log_dir=tmp_path) as server:

        async def overload(seconds: float) -> tuple[_Tally, float]:
            return (await _overload(server, "queued", seconds))[0], seconds

        asyncio.run(overload(1.0))  # warm up: connections, layouts, allocator pools
        lone = _lone_latency(server)
        arena_before = requests.get(server.url + "/v2/naiad/arena", timeout=10).json()
        rss_before = _rss_kib(server.pid)
        tally, seconds = asyncio.run(overload(6.0))
        rss_growth = _rss_kib(server.pid) - rss_before
        arena_after = requests.get(server.url + "/v2/naiad/arena", timeout=10).json()
        stats = requests.get(server.url + "/v2/models/queued/stats", timeout=10).json()
    served = len(tally.latencies)
    rejected = sum(tally.rejected.values())
    offered_rate = tally.sent / seconds
    latency_p99 = p99(tally.latencies)
    # On a loaded machine a batch takes longer than EXECUTION_S: the bound scales with
    # a lone request's latency measured just before (twice the queue's worth of it),
    # still well under the 16 batches the clients would wait without the queue limit.
    bound = max(P99_BOUND_S, 2 * (MAX_QUEUE / MAX_BATCH + 2) * lone)
    print(
        f"overload: offered {offered_rate:.0f}/s = {offered_rate / SUSTAINABLE_RATE:.0f}x the "
        f"sustainable {SUSTAINABLE_RATE:.0f}/s; sent {tally.sent}, served {served}, "
        f"rejected {tally.rejected}, other {len(tally.other)}; accepted p99 "
        f"{latency_p99 * 1000:.0f} ms (bound {bound * 1000:.0f} ms, lone {lone * 1000:.0f} ms); "
        f"frontend RSS "
        f"{rss_growth:+d} KiB; arena {arena_before['bytes_in_use']} -> {arena_after['bytes_in_use']} B"
    )
    assert tally.other == [], tally.other[:3]
    assert tally.sent == served + rejected  # every request answered, one way or the other
    # 10x what the model sustained here (at most SUSTAINABLE_RATE, less when loaded).
    assert tally.sent >= 10 * served, (tally.sent, served)
    assert set(tally.rejected) == {"http 503", "grpc UNAVAILABLE"}, tally.rejected
    assert served > 0.5 * SUSTAINABLE_RATE * seconds  # the model kept working
    assert latency_p99 < bound, (latency_p99, bound)
    assert rss_growth < 20 << 10, rss_growth
    assert arena_after["bytes_in_use"] == arena_before["bytes_in_use"], (arena_before, arena_after)
    assert arena_after["requests_in_flight"] == 0
    # Triton counts a queue-full refusal as no failure of the model.
    model_stats = stats["model_stats"][0]["inference_stats"]
    assert model_stats["fail"]["count"] == 0, model_stats["fail"]


def test_priorities_under_overload(tmp_path):
    """Half the clients at priority 1, half at the default level 2, both queues full:
    each level refuses its excess with 503 / UNAVAILABLE, level 1 is served first (far
    more of its requests, within the same bound), nothing is lost."""
    repo = tmp_path / "models"
    write_model(
        repo,
        "ranked",
        CONFIG.replace("__NAME__", "ranked").replace("__QUEUEING__", PRIORITIES),
        SLEEPER_MODEL,
    )
    with NaiadServer(repo, log_dir=tmp_path) as server:
        asyncio.run(_overload(server, "ranked", 1.0, (1, 2)))
        tallies = asyncio.run(_overload(server, "ranked", 4.0, (1, 2)))
    high, low = tallies[1], tallies[2]
    print(
        f"priorities: level 1 sent {high.sent}, served {len(high.latencies)}, rejected "
        f"{sum(high.rejected.values())}, p99 {p99(high.latencies) * 1000:.0f} ms; level 2 "
        f"sent {low.sent}, served {len(low.latencies)}, rejected {sum(low.rejected.values())}"
    )
    for tally in (high, low):
        assert tally.other == [], tally.other[:3]
        assert tally.sent == len(tally.latencies) + sum(tally.rejected.values())
        assert set(tally.rejected) == {"http 503", "grpc UNAVAILABLE"}, tally.rejected
    assert len(high.latencies) > 3 * len(low.latencies), (len(high.latencies), len(low.latencies))
