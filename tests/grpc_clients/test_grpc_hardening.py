"""An attacker with access to the gRPC port: a compressed message that inflates past
the message size limit, and shapes with negative dims."""

from __future__ import annotations

import queue
import struct

import grpc
import hpack
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from hardening_support import gzip_bomb, memory_kib
from server_harness import NaiadServer, make_repository
from test_grpc_server import PREFACE, RawConnection, _frame, _literal, _request_block
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pbg

pytestmark = pytest.mark.timeout(300)

MAX_MESSAGE = 0x7FFFFFFF  # Triton's gRPC message limit, after decompression too
MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"
SERVER_LIVE = "/inference.GRPCInferenceService/ServerLive"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("grpc-hardening")
    repository = make_repository(root / "models", ["add_sub"])
    with NaiadServer(repository, log_dir=root, name="grpc-hardening") as server:
        yield server


def _headers(path: str, encoding: str | None = None) -> bytes:
    block = _request_block(path)
    return block + _literal("grpc-encoding", encoding) if encoding else block


def _data_frames(stream: int, data: bytes, size: int = 16384) -> bytes:
    """`data` as DATA frames of at most `size` bytes, the last ending the stream."""
    pieces = [data[i : i + size] for i in range(0, len(data), size)] or [b""]
    return b"".join(
        _frame(0x0, 0x1 if i == len(pieces) - 1 else 0x0, stream, piece)
        for i, piece in enumerate(pieces)
    )


def _trailers(frames, stream: int) -> dict:
    for kind, flags, on, payload in frames:
        if kind == 0x1 and on == stream and flags & 0x1:
            return dict(hpack.Decoder().decode(payload, raw=True))
    raise AssertionError(f"no trailers for stream {stream}")


def test_a_message_inflating_past_the_limit_is_refused_and_the_connection_serves(server):
    """2 MB of gzip that inflate to more than 2 GiB, their CRC left wrong: INTERNAL as
    Triton 2.51 answers (it finds the damage at the stream's end; the loop inflates on
    to it without keeping what passes the limit), while a call behind it on the same
    connection is answered first (the I/O loop inflates it a step per turn)."""
    bomb = gzip_bomb(MAX_MESSAGE + 1 + (1 << 20), trailer=False)
    peak_before = memory_kib(server.pid, "VmHWM")
    raw = RawConnection(server)
    try:
        raw.send(
            PREFACE
            + _frame(0x1, 0x4, 1, _headers(MODEL_INFER, "gzip"))
            + _data_frames(1, b"\x01" + struct.pack(">I", len(bomb)) + bomb)
            + _frame(0x1, 0x4, 3, _headers(SERVER_LIVE))
            + _data_frames(3, b"\x00" + struct.pack(">I", 0))
        )
        frames, closed = raw.frames(lambda f: f[0] == 0x1 and f[2] == 1 and f[1] & 0x1, limit=120)
    finally:
        raw.close()
    assert not closed
    ends = [on for kind, flags, on, _ in frames if kind == 0x1 and flags & 0x1]
    assert ends == [3, 1]  # ServerLive was answered while the bomb inflated
    assert _trailers(frames, 3)[b"grpc-status"] == b"0"
    refused = _trailers(frames, 1)
    assert refused[b"grpc-status"] == b"13"  # INTERNAL
    assert refused[b"grpc-message"] == b"Unexpected error decompressing data for algorithm gzip"
    # At most the limit was held (and a buffer's slack), never the bomb's inflated size
    # twice over as when it was inflated whole.
    assert (memory_kib(server.pid, "VmHWM") - peak_before) << 10 < MAX_MESSAGE * 1.25


def test_compressed_stream_requests_are_all_answered(server):
    url = f"{server.host}:{server.grpc_port}"
    answers: queue.Queue = queue.Queue()
    rng = np.random.default_rng(46)
    sent = {}
    with grpcclient.InferenceServerClient(url) as client:
        client.start_stream(lambda result, error: answers.put((result, error)))
        for i in range(6):
            a, b = rng.random((1, 16), np.float32), rng.random((1, 16), np.float32)
            inputs = [grpcclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
            inputs[0].set_data_from_numpy(a)
            inputs[1].set_data_from_numpy(b)
            sent[str(i)] = a + b
            client.async_stream_infer("add_sub", inputs, request_id=str(i))
        got = {}
        for _ in range(6):
            result, error = answers.get(timeout=30)
            assert error is None
            got[result.get_response().id] = result.as_numpy("OUTPUT0")
        client.stop_stream()
    assert set(got) == set(sent)
    for key, value in sent.items():
        np.testing.assert_array_equal(got[key], value)


@pytest.mark.parametrize("dims", [[-1, 16], [-3, 16]])
def test_a_negative_dim_is_refused_by_name(server, dims):
    stub = pbg.GRPCInferenceServiceStub(grpc.insecure_channel(f"{server.host}:{server.grpc_port}"))
    request = pb.ModelInferRequest(model_name="add_sub")
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="FP32", shape=dims)
        request.raw_input_contents.append(bytes(64))
    with pytest.raises(grpc.RpcError) as info:
        stub.ModelInfer(request, timeout=30)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details() == (
        "[request id: <id_unknown>] All input dimensions should be specified for input "
        f"'INPUT0' for model 'add_sub', got [{dims[0]},16]"
    )
