"""`naiad serve --http-thread-count 2`: two C++ I/O loops, loop 0 on the event loop and
loop 1 on a thread of its own (naiad/io_engine.py, `_core.IoLoops`). Black-box: HTTP
clients on many connections at once, each connection's loop read back from
GET /v2/naiad/io_loops so that both loops are known to have served; requests the lane
does not take (their connections move to loop 0), system shared memory, control-plane
calls, a stalled half-sent request, and model loads and unloads while both loops serve.
gRPC on two loops: tests/grpc_clients/test_grpc_io_threads.py."""

from __future__ import annotations

import http.client
import json
import shutil
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import requests
from model_control_support import (
    ADD_SUB_MODEL,
    add_sub_binary_request,
    add_sub_json_request,
    add_sub_pbtxt,
    load,
    unload,
    write_model,
)
from server_harness import TEST_MODELS, NaiadServer

pytestmark = pytest.mark.timeout(300)

CONNECTIONS = 16


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("io_threads")
    repo = root / "models"
    write_model(repo, "add_sub", add_sub_pbtxt(), ADD_SUB_MODEL)
    write_model(repo, "other", add_sub_pbtxt("other"), ADD_SUB_MODEL)
    shutil.copytree(TEST_MODELS / "crasher", repo / "crasher")
    # Batches held up to 2 s: requests sent together run together.
    held = add_sub_pbtxt("held").replace(
        "dynamic_batching { }", "dynamic_batching { max_queue_delay_microseconds: 2000000 }"
    )
    write_model(repo, "held", held, ADD_SUB_MODEL)
    args = [
        "--http-thread-count=2",
        "--model-control-mode=explicit",
        "--load-model=add_sub",
        "--load-model=crasher",
        "--load-model=held",
    ]
    with NaiadServer(repo, log_dir=root, extra_args=args) as running:
        yield running


def loops(server) -> list[dict]:
    reply = requests.get(f"{server.url}/v2/naiad/io_loops", timeout=10)
    assert reply.status_code == 200, reply.text
    return reply.json()["loops"]


def _infer_binary(session, url: str, value: float, model: str = "add_sub") -> requests.Response:
    body, headers = add_sub_binary_request(value)
    return session.post(f"{url}/v2/models/{model}/infer", data=body, headers=headers, timeout=30)


def _sums(reply: requests.Response) -> np.ndarray:
    """OUTPUT0 of a binary add_sub answer."""
    size = int(reply.headers["Inference-Header-Content-Length"])
    header = json.loads(reply.content[:size])
    first = header["outputs"][0]
    assert first["name"] == "OUTPUT0"
    length = first["parameters"]["binary_data_size"]
    return np.frombuffer(reply.content[size : size + length], dtype=np.float32)


def test_two_loops_serve_binary_infer_on_many_connections_each_loop_some(server):
    before = loops(server)
    assert len(before) == 2

    def client(index: int) -> int:
        answered = 0
        with requests.Session() as session:  # one keep-alive connection per client
            for n in range(20):
                value = float(index * 100 + n)
                reply = _infer_binary(session, server.url, value)
                assert reply.status_code == 200, reply.text
                assert np.array_equal(_sums(reply), np.full(16, value + 1, dtype=np.float32))
                answered += 1
        return answered

    with ThreadPoolExecutor(CONNECTIONS) as pool:
        assert sum(pool.map(client, range(CONNECTIONS))) == CONNECTIONS * 20
    after = loops(server)
    served = [a["connections_served"] - b["connections_served"] for a, b in zip(after, before)]
    # Round robin: each loop got half of the clients' connections (and the stats GETs,
    # which went to Python: loop 1's moved to loop 0).
    assert served[1] >= CONNECTIONS // 2 - 1, (before, after)
    assert served[0] >= CONNECTIONS // 2, (before, after)
    assert all(loop["in_flight"] == 0 for loop in after)


def test_requests_the_lane_does_not_take_move_to_loop_0_and_are_answered(server):
    """A metadata GET and a JSON infer on every connection: Python's (loop 1's
    connections move to loop 0), then binary infers on the same connections again."""
    before = loops(server)

    def client(index: int) -> None:
        with requests.Session() as session:
            reply = session.get(f"{server.url}/v2/models/add_sub", timeout=30)
            assert reply.status_code == 200 and reply.json()["name"] == "add_sub"
            reply = session.post(
                f"{server.url}/v2/models/add_sub/infer",
                json=add_sub_json_request(float(index)),
                timeout=30,
            )
            assert reply.status_code == 200, reply.text
            assert reply.json()["outputs"][0]["data"] == [index + 1.0] * 16
            for n in range(5):
                reply = _infer_binary(session, server.url, float(n))
                assert reply.status_code == 200, reply.text
                assert np.array_equal(_sums(reply), np.full(16, n + 1.0, dtype=np.float32))

    with ThreadPoolExecutor(CONNECTIONS) as pool:
        list(pool.map(client, range(CONNECTIONS)))
    after = loops(server)
    assert after[1]["connections_moved"] - before[1]["connections_moved"] >= CONNECTIONS // 2 - 1
    assert after[0]["connections_moved"] == 0  # loop 0 is Python's own


def test_statistics_count_the_requests_both_loops_answered(server):
    def count() -> int:
        reply = requests.get(f"{server.url}/v2/models/add_sub/stats", timeout=10)
        return reply.json()["model_stats"][0]["inference_stats"]["success"]["count"]

    start = count()

    def client(_: int) -> None:
        with requests.Session() as session:
            for n in range(10):
                assert _infer_binary(session, server.url, float(n)).status_code == 200

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(client, range(8)))
    assert count() - start == 80


def test_system_shared_memory_inputs_and_outputs_on_both_loops(server):
    import tritonclient.http as httpclient
    import tritonclient.utils.shared_memory as shm

    key = f"/naiad_io_threads_{id(server)}"
    size = 64 * 4
    handle = shm.create_shared_memory_region("io_threads_region", key, size)
    try:
        shm.set_shared_memory_region(
            handle, [np.full(16, 3.0, dtype=np.float32), np.ones(16, dtype=np.float32)]
        )
        control = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
        control.register_system_shared_memory("io_threads_region", key, size)
        try:

            def client(_: int) -> None:
                # A client of its own: its connection lands on either loop.
                c = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
                try:
                    inputs = [
                        httpclient.InferInput("INPUT0", [1, 16], "FP32"),
                        httpclient.InferInput("INPUT1", [1, 16], "FP32"),
                    ]
                    inputs[0].set_shared_memory("io_threads_region", 64, 0)
                    inputs[1].set_shared_memory("io_threads_region", 64, 64)
                    out = httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)
                    out.set_shared_memory("io_threads_region", 64, 128)
                    for _ in range(5):
                        c.infer("add_sub", inputs, outputs=[out])
                finally:
                    c.close()

            with ThreadPoolExecutor(6) as pool:
                list(pool.map(client, range(6)))
            got = shm.get_contents_as_numpy(handle, np.float32, [16], offset=128)
            assert np.array_equal(got, np.full(16, 4.0, dtype=np.float32))
        finally:
            control.unregister_system_shared_memory("io_threads_region")
            control.close()
    finally:
        shm.destroy_shared_memory_region(handle)


def test_a_stalled_half_sent_request_delays_no_other_connection(server):
    """Half-sent requests held open on connections of both loops (round robin: two in a
    row land on different loops); clients on other connections are answered meanwhile."""
    body, headers = add_sub_binary_request(1.0)
    head = (
        "POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\n"
        + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        + f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    stalled = [socket.create_connection(("127.0.0.1", server.http_port)) for _ in range(2)]
    try:
        for sock in stalled:
            sock.sendall(head + body[: len(body) // 2])

        def client(_: int) -> None:
            with requests.Session() as session:
                for n in range(5):
                    assert _infer_binary(session, server.url, float(n)).status_code == 200

        with ThreadPoolExecutor(4) as pool:
            list(pool.map(client, range(4)))
        # The stalled requests complete once their bodies arrive.
        for sock in stalled:
            sock.settimeout(30)
            sock.sendall(body[len(body) // 2 :])
            received = b""
            while b"\r\n\r\n" not in received:
                received += sock.recv(65536)
            assert received.startswith(b"HTTP/1.1 200 OK"), received
    finally:
        for sock in stalled:
            sock.close()


def test_loads_and_unloads_while_both_loops_serve_lose_no_request(server):
    """Clients infer on add_sub and on `other` over many connections while `other` is
    loaded and unloaded again and again: every request gets an answer, add_sub's all 200,
    other's 200 or Triton's error for a model not loaded or not ready."""
    stop = threading.Event()
    answered = {"add_sub": 0, "other": 0}
    lock = threading.Lock()

    def client(index: int) -> None:
        model = "add_sub" if index % 2 == 0 else "other"
        with requests.Session() as session:
            while not stop.is_set():
                reply = _infer_binary(session, server.url, 1.0, model)
                if model == "add_sub":
                    assert reply.status_code == 200, reply.text
                else:
                    assert reply.status_code in (200, 400, 404, 503), reply.text
                with lock:
                    answered[model] += 1

    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(client, i) for i in range(8)]
        for _ in range(4):
            assert load(server.url, "other").status_code == 200
            assert unload(server.url, "other").status_code == 200
        stop.set()
        for future in futures:
            future.result()  # a hung request would time the test out; a wrong one raises
    assert answered["add_sub"] > 0 and answered["other"] > 0
    assert all(loop["in_flight"] == 0 for loop in loops(server))


def test_a_failed_batch_of_either_loops_request_is_answered_through_its_loop(server):
    """crasher's worker dies on a negative input: the failed batch goes to Python, which
    answers the request through the loop that owns it (loop 1's while it holds loop 1
    paused). Two connections opened back to back are one on each loop."""
    values = np.array([[-1.0]], dtype=np.float32)
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "shape": [1, 1],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": 4},
                }
            ],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
        }
    ).encode()
    headers = {"Inference-Header-Content-Length": str(len(header))}
    connections = [http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=60)]
    connections.append(http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=60))
    for connection in connections:
        connection.connect()
    try:
        for connection in connections:
            connection.request(
                "POST", "/v2/models/crasher/infer", header + values.tobytes(), headers
            )
            reply = connection.getresponse()
            body = reply.read()
            assert reply.status == 500, body
            assert "exited" in json.loads(body)["error"]
            deadline = time.monotonic() + 30  # its worker starts again
            while True:
                connection.request(
                    "POST", "/v2/models/crasher/infer", header + (-values).tobytes(), headers
                )
                reply = connection.getresponse()
                reply.read()
                if reply.status == 200:
                    break
                assert time.monotonic() < deadline, "crasher did not serve again in time"
                time.sleep(0.2)
    finally:
        for connection in connections:
            connection.close()
    assert all(loop["in_flight"] == 0 for loop in loops(server))


def _lanes(server) -> dict:
    return requests.get(f"{server.url}/v2/naiad/lanes", timeout=10).json()


def test_a_batch_of_loop_1_lane_requests_and_python_requests_is_answered_by_both(server):
    """Requests whose header opens with a UTF-8 byte order mark (Python's general path)
    and plain ones (the lanes of both loops) sent together to a model that holds its
    batches (an idle keep-alive client on each loop could still send): they run in one
    batch, which Python answers, loop 1's requests through loop 1's lane while it holds
    loop 1 paused."""

    def stats() -> dict:
        reply = requests.get(f"{server.url}/v2/models/held/stats", timeout=10)
        return reply.json()["model_stats"][0]

    def successes(entry: dict) -> int:
        return entry["inference_stats"]["success"]["count"]

    def counted(at_least: int) -> dict:
        """The statistics once they count `at_least` successes: loop 1's reach Python
        through loop 0's mailbox, after its clients already have their answers."""
        deadline = time.monotonic() + 30
        while successes(entry := stats()) < at_least:
            assert time.monotonic() < deadline, f"{successes(entry)} of {at_least} counted"
            time.sleep(0.01)
        return entry

    def raw(python: bool, value: float) -> bytes:
        body, headers = add_sub_binary_request(value)
        if python:  # the C++ reader leaves a header after a byte order mark to Python
            size = int(headers["Inference-Header-Content-Length"])
            header = b"\xef\xbb\xbf" + body[:size]
            body = header + body[size:]
            headers["Inference-Header-Content-Length"] = str(len(header))
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        request = (
            f"POST /v2/models/held/infer HTTP/1.1\r\nHost: x\r\n{head}"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        return request + body

    def answer(sock) -> np.ndarray:
        """OUTPUT0 of the binary answer read from `sock`."""
        received = b""
        while b"\r\n\r\n" not in received:
            received += sock.recv(65536)
        head, _, rest = received.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        assert b" 200 OK" in lines[0], received
        fields = {
            k.strip().lower(): v.strip() for k, _, v in (x.partition(b":") for x in lines[1:])
        }
        while len(rest) < int(fields[b"content-length"]):
            rest += sock.recv(65536)
        size = int(fields[b"inference-header-content-length"])
        return np.frombuffer(rest[size : size + 64], dtype=np.float32)

    # Two idle clients, one per loop, that sent a request: the batcher holds for them.
    idle = [socket.create_connection(("127.0.0.1", server.http_port)) for _ in range(2)]
    # One of Python's and two lane connections on each loop (they alternate).
    pythons = [True, True, False, False, False, False]
    sockets = [socket.create_connection(("127.0.0.1", server.http_port)) for _ in pythons]
    try:
        for sock in idle + sockets:
            sock.settimeout(30)
        before = successes(stats())
        general = _lanes(server)["general_requests"]
        for sock in idle:
            sock.sendall(raw(False, 0.0))
            assert np.array_equal(answer(sock), np.full(16, 1.0, dtype=np.float32))
        start = counted(before + len(idle))
        for index, (sock, python) in enumerate(zip(sockets, pythons)):
            sock.sendall(raw(python, float(index)))
        for index, sock in enumerate(sockets):
            assert np.array_equal(answer(sock), np.full(16, index + 1.0, dtype=np.float32))
    finally:
        for sock in idle + sockets:
            sock.close()
    end = counted(successes(start) + len(sockets))
    assert _lanes(server)["general_requests"] - general == sum(pythons)  # the test's premise
    assert successes(end) - successes(start) == len(sockets)
    runs = end["execution_count"] - start["execution_count"]
    assert runs == 1, f"the six requests ran in {runs} batches"
