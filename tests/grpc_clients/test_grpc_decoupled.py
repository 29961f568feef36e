"""Decoupled models over gRPC with tritonclient.grpc: ModelStreamInfer carries each
request's 0..N responses in order (many requests in flight on one stream),
`triton_final_response` on every response (and an empty final response when asked
for with `enable_empty_final_response`), errors as `error_message` with the stream
kept open; ModelInfer answers UNIMPLEMENTED; a stream
the client cancels cancels its requests (the model sees request.is_cancelled()).
"""

from __future__ import annotations

import queue
import shutil
import time
from pathlib import Path

import grpc
import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
from held_support import drop_a_queued_held_request
from held_support import in_flight as _in_flight
from held_support import metrics as _metrics
from held_support import wait_until as _wait_until
from server_harness import NaiadServer, make_repository, metric_value
from shm_support import Region
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pbg
from tritonclient.utils import InferenceServerException

DECOUPLED_MODELS = Path(__file__).resolve().parent.parent / "decoupled_models"
BATCHING_MODELS = Path(__file__).resolve().parent.parent / "batching_models"
TIMEOUT = 10
# Two instances, no batching; an execution waits while `hold-<INPUT0>` exists in the
# model's folder and marks `executing-<INPUT0>` first (echo_batch_model.py).
HELD_CONFIG = """
name: "held"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [
  { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "SEQ" data_type: TYPE_INT64 dims: [ 1 ] },
  { name: "BATCH" data_type: TYPE_INT64 dims: [ 1 ] }
]
instance_group [ { count: 2 kind: KIND_CPU } ]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("grpc_decoupled")
    repository = make_repository(
        root / "models",
        {
            "repeat": DECOUPLED_MODELS / "repeat",
            "text_echo": DECOUPLED_MODELS / "text_echo",
        },
    )
    held = repository / "held" / "1"
    held.mkdir(parents=True)
    (held.parent / "config.pbtxt").write_text(HELD_CONFIG)
    shutil.copy(BATCHING_MODELS / "echo_batch_model.py", held / "model.py")
    server = NaiadServer(repository, log_dir=root).start()
    # What the arena holds with nothing in flight (instance channels, tables).
    server.arena_baseline = requests.get(f"{server.url}/v2/naiad/arena", timeout=TIMEOUT).json()[
        "blocks_in_use"
    ]
    yield server
    server.stop()


@pytest.fixture
def client(server):
    with grpcclient.InferenceServerClient(f"{server.host}:{server.grpc_port}") as client:
        yield client


def _n(value: int):
    tensor = grpcclient.InferInput("N", [1], "INT32")
    tensor.set_data_from_numpy(np.array([value], dtype=np.int32))
    return [tensor]


class Stream:
    """A started stream to a model taking N (repeat, or an ensemble around it) and what
    its callback received: (value of `output` or None, triton_final_response or None,
    id) or ("error", message)."""

    def __init__(self, client, model: str = "repeat", output: str = "OUT", timeout=TIMEOUT):
        self.client = client
        self.model = model
        self.output = output
        self.timeout = timeout
        self.queue = queue.Queue()
        client.start_stream(callback=lambda result, error: self.queue.put((result, error)))

    def send(self, n: int, mode: str = "thread", request_id: str = "", empty: bool = False):
        self.client.async_stream_infer(
            self.model,
            _n(n),
            request_id=request_id,
            parameters={"mode": mode},
            enable_empty_final_response=empty,
        )

    def take(self, count: int) -> list:
        out = []
        for _ in range(count):
            result, error = self.queue.get(timeout=self.timeout)
            if error is not None:
                out.append(("error", error.message()))
                continue
            response = result.get_response()
            values = result.as_numpy(self.output)
            final = response.parameters.get("triton_final_response")
            out.append(
                (
                    None if values is None else int(values[0]),
                    None if final is None else final.bool_param,
                    response.id,
                )
            )
        return out

    def nothing_more(self, wait: float = 0.3) -> bool:
        try:
            self.queue.get(timeout=wait)
        except queue.Empty:
            return True
        return False


def _settled(server) -> None:
    # 5 blocks at rest: the models' channels and the shm registry's region table
    # (csrc/shm/shm_registry.cc), as tests/test_decoupled.py counts them.
    deadline = time.monotonic() + 5
    while True:
        arena = requests.get(f"{server.url}/v2/naiad/arena", timeout=TIMEOUT).json()
        if arena["requests_in_flight"] == 0 and arena["blocks_in_use"] == server.arena_baseline:
            return
        assert time.monotonic() < deadline, arena
        time.sleep(0.05)


def test_model_infer_on_a_decoupled_model_is_unimplemented(client, server):
    with pytest.raises(InferenceServerException) as info:
        client.infer("repeat", _n(3))
    assert info.value.status() == "StatusCode.UNIMPLEMENTED"
    assert info.value.message() == (
        "ModelInfer RPC doesn't support models with decoupled transaction policy"
    )
    _settled(server)


@pytest.mark.parametrize("mode", ["thread", "inline"])
def test_stream_responses_in_order(client, server, mode):
    stream = Stream(client)
    stream.send(30, mode, "r1")
    assert stream.take(30) == [(i, i == 29 and mode == "inline", "r1") for i in range(30)]
    assert stream.nothing_more()  # the final flag alone is not sent unless asked for
    client.stop_stream()
    _settled(server)


def test_empty_final_response_when_asked(client, server):
    stream = Stream(client)
    stream.send(2, "thread", "a", empty=True)
    assert stream.take(3) == [(0, False, "a"), (1, False, "a"), (None, True, "a")]
    stream.send(2, "inline", "b", empty=True)
    assert stream.take(2) == [(0, False, "b"), (1, True, "b")]
    stream.send(0, "inline", "c", empty=True)
    assert stream.take(1) == [(None, True, "c")]
    assert stream.nothing_more()
    client.stop_stream()


def test_many_requests_in_flight_on_one_stream(client, server):
    stream = Stream(client)
    for k in range(8):
        stream.send(20, "thread", f"q{k}")
    got = stream.take(8 * 20)
    for k in range(8):
        mine = [value for value, _, rid in got if rid == f"q{k}"]
        assert mine == list(range(20))
    client.stop_stream()
    _settled(server)


@pytest.mark.parametrize(
    "mode, error",
    [
        ("error_last", "bad things"),
        ("raise", "RuntimeError: the model failed mid-stream"),
        ("no_final", "without sending a response flagged TRITONSERVER_RESPONSE_COMPLETE_FINAL"),
    ],
)
def test_a_stream_that_goes_wrong_ends_with_an_error_and_the_stream_stays_usable(
    client, server, mode, error
):
    stream = Stream(client)
    stream.send(3, mode, "bad")
    got = stream.take(4)
    assert got[:3] == [(i, False, "bad") for i in range(3)]
    assert got[3][0] == "error" and error in got[3][1]
    stream.send(2, "inline", "next")
    assert stream.take(2) == [(0, False, "next"), (1, True, "next")]
    client.stop_stream()
    _settled(server)


def test_unknown_model_on_a_stream_is_an_error_message(client):
    stream = Stream(client)
    client.async_stream_infer("nosuch", _n(1), request_id="z")
    assert stream.take(1) == [("error", "Request for unknown model: 'nosuch' is not found")]
    client.stop_stream()


def test_a_model_that_is_not_decoupled_streams_one_response(client):
    stream = Stream(client)
    text = grpcclient.InferInput("text_input", [1], "BYTES")
    text.set_data_from_numpy(np.array([b"hi"], dtype=np.object_))
    client.async_stream_infer("text_echo", [text], request_id="t")
    result, error = stream.queue.get(timeout=TIMEOUT)
    assert error is None
    assert result.as_numpy("text_output").tolist() == [b"hi"]
    client.stop_stream()


def _cancelled_count(client) -> int:
    stream = Stream(client)
    stream.send(0, "cancelled")
    count = stream.take(1)[0][0]
    client.stop_stream()
    return count


def test_cancelling_the_stream_cancels_its_running_request(client, server):
    before = _cancelled_count(client)
    stream = Stream(client)
    stream.send(0, "until_cancelled", "long")
    assert stream.take(1)[0][0] == 0  # it is streaming
    client.stop_stream(cancel_requests=True)  # RST_STREAM
    deadline = time.monotonic() + 5
    while _cancelled_count(client) == before:
        assert time.monotonic() < deadline, "the model never saw the cancellation"
        time.sleep(0.05)
    _settled(server)


def _executed(client) -> int:
    stream = Stream(client)
    stream.send(0, "executed")
    count = stream.take(1)[0][0]
    client.stop_stream()
    return count


def _cancelled(model: str) -> str:
    return f'nv_inference_request_failure{{model="{model}",reason="CANCELED",version="1"}}'


def test_a_queued_request_of_a_cancelled_stream_never_runs(server):
    """repeat's one instance is held (mode "hold") while a request of another stream
    waits in the queue; that stream is cancelled, and the drop is counted while the
    instance is still held."""
    url = f"{server.host}:{server.grpc_port}"
    folder = server.repository / "repeat"
    cancelled = _cancelled("repeat")
    before_metrics = _metrics(server)
    (folder / "executing").unlink(missing_ok=True)
    (folder / "hold").touch()
    try:
        with (
            grpcclient.InferenceServerClient(url) as busy,
            grpcclient.InferenceServerClient(url) as other,
        ):
            before = _executed(busy)
            blocking = Stream(busy)
            blocking.send(0, "hold", "busy")
            _wait_until((folder / "executing").exists, "the blocking request executing")
            queued = Stream(other)
            queued.send(3, "inline", "queued")
            _wait_until(lambda: _in_flight(server) == 2, "the request queued")
            other.stop_stream(cancel_requests=True)  # RST_STREAM: the core drops it
            _wait_until(
                lambda: (
                    metric_value(_metrics(server), cancelled)
                    > metric_value(before_metrics, cancelled)
                ),
                "the queued request cancelled",
            )
            (folder / "hold").unlink()
            assert blocking.take(1) == [(0, True, "busy")]
            busy.stop_stream()
            # Only the blocking request and the two counting ones ran.
            assert _executed(busy) == before + 2
    finally:
        (folder / "hold").unlink(missing_ok=True)  # never leave the instance held
    _settled(server)
    after = _metrics(server)
    assert metric_value(after, cancelled) - metric_value(before_metrics, cancelled) == 1


def _held_call(stub, value: int, raw: bool):
    """A ModelInfer call on held: typed contents (the general path) or raw contents (the
    C++ fast path)."""
    request = pb.ModelInferRequest(model_name="held")
    tensor = request.inputs.add(name="INPUT0", datatype="INT32", shape=[1, 1])
    if raw:
        request.raw_input_contents.append(np.array([[value]], dtype=np.int32).tobytes())
    else:
        tensor.contents.int_contents.append(value)
    return stub.ModelInfer.future(request, timeout=TIMEOUT)


def _reset_drops_a_queued_call(server, raw: bool) -> None:
    """held_support's scenario over ModelInfer calls: the queued call is reset
    (RST_STREAM) while it waits in the queue."""
    with grpc.insecure_channel(f"{server.host}:{server.grpc_port}") as channel:
        stub = pbg.GRPCInferenceServiceStub(channel)

        def cancel(call):
            assert call.cancel()

        def assert_answered(call):
            assert call.result().outputs[0].name == "OUTPUT0"

        drop_a_queued_held_request(
            server, lambda value: _held_call(stub, value, raw), cancel, assert_answered, _settled
        )


def test_a_reset_model_infer_call_drops_its_queued_request(server):
    _reset_drops_a_queued_call(server, raw=False)


def test_a_reset_fast_path_call_drops_its_queued_request(server):
    lane_before = requests.get(f"{server.url}/v2/naiad/lanes", timeout=TIMEOUT).json()
    _reset_drops_a_queued_call(server, raw=True)
    lane_after = requests.get(f"{server.url}/v2/naiad/lanes", timeout=TIMEOUT).json()
    assert lane_after["lane_requests"] - lane_before["lane_requests"] == 3, lane_after


def shm_stream(url: str, mode: str, byte_size: int) -> tuple[list, list]:
    """One request on a stream (repeat, N = 3) with OUT placed in a client region of
    byte_size bytes at offset 8: what each response brought (outputs' names and shapes,
    raw contents, final flag; or the error message) until the final one, and the
    region's first four int32 afterwards."""
    with grpcclient.InferenceServerClient(url) as client, Region("g_dec", 64) as region:
        region.write([np.full([16], -1, np.int32)])
        client.unregister_system_shared_memory("dec")
        client.register_system_shared_memory("dec", region.key, 64)
        try:
            answers: queue.Queue = queue.Queue()
            client.start_stream(callback=lambda result, error: answers.put((result, error)))
            out = grpcclient.InferRequestedOutput("OUT")
            out.set_shared_memory("dec", byte_size, offset=8)
            client.async_stream_infer(
                "repeat",
                _n(3),
                request_id="s",
                parameters={"mode": mode},
                outputs=[out],
                enable_empty_final_response=True,
            )
            got = []
            # An error response carries no final flag the client can read: 3 of them
            # (inline: the last one was final) or 3 and the final flag alone (thread).
            while len(got) < 4:
                try:
                    result, error = answers.get(timeout=1 if len(got) >= 3 else TIMEOUT)
                except queue.Empty:
                    break
                if error is not None:
                    got.append(("error", error.message()))
                    continue
                response = result.get_response()
                final = response.parameters["triton_final_response"].bool_param
                outputs = [(o.name, list(o.shape)) for o in response.outputs]
                got.append((outputs, list(response.raw_output_contents), final))
                if final:
                    break
            client.stop_stream()
            return got, region.read(np.int32, [4]).tolist()
        finally:
            client.unregister_system_shared_memory("dec")


_TOO_SMALL = (
    "error",
    "shared memory size specified with the request for output 'OUT' (2 bytes) should be at "
    "least 4 bytes to hold the results",
)


@pytest.mark.parametrize("mode", ["inline", "thread"])
def test_outputs_in_a_client_region_are_written_there_response_by_response(server, mode):
    """Issue 10: each response a decoupled model sends writes OUT into the client's
    region and carries its metadata only (raw contents empty), as Triton 2.51 does
    (tests/grpc_clients/test_grpc_decoupled_triton.py compares); a region too small
    makes each response Triton's error and the stream still ends."""
    url = f"{server.host}:{server.grpc_port}"
    got, region = shm_stream(url, mode, 4)
    metadata = ([("OUT", [1])], [b""])
    expected = [(*metadata, False), (*metadata, False), (*metadata, mode == "inline")]
    if mode == "thread":
        expected.append(([], [], True))  # the final flag alone, asked for
    assert got == expected
    assert region == [-1, -1, 2, -1]  # the last response's OUT, at offset 8
    got, region = shm_stream(url, mode, 2)
    assert got == [_TOO_SMALL] * 3 + ([([], [], True)] if mode == "thread" else [])
    assert region == [-1, -1, -1, -1]
    _settled(server)
