"""Differential: the same gRPC calls to Naiad and to the real Triton 2.51 get the same
status code and message (and the same answer where both succeed).

Triton is found by tests/triton_peer.py (`make test` installs it). Calls where Naiad differs on purpose (server
metadata's name, shared memory registration, trace and log settings: README, "Not yet")
are not in the list.
"""

from __future__ import annotations

import grpc
import pytest
from server_harness import make_repository
from triton_peer import TritonPeer, needs_triton
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pbg

pytestmark = needs_triton
TIMEOUT = 20


@pytest.fixture(scope="module")
def triton(tmp_path_factory):
    root = tmp_path_factory.mktemp("triton")
    models = ["add_sub", "identity_bytes"]
    with TritonPeer(make_repository(root / "models", models), root, []) as triton:
        triton.wait_ready(models)
        yield f"127.0.0.1:{triton.grpc_port}"


@pytest.fixture(scope="module")
def naiad(example_server):
    return f"{example_server.host}:{example_server.grpc_port}"


def _add_sub(**fields):
    request = pb.ModelInferRequest(model_name="add_sub", **fields)
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="FP32", shape=[1, 16])
        request.raw_input_contents.append(b"\0" * 64)
    return request


def _typed_add_sub(field: str, count1: int = 16):
    # count1: values for INPUT1. (With both inputs short, Triton names INPUT1 and Naiad
    # INPUT0: they check inputs in a different order.)
    request = pb.ModelInferRequest(model_name="add_sub", id="typed")
    for name, count in (("INPUT0", 16), ("INPUT1", count1)):
        tensor = request.inputs.add(name=name, datatype="FP32", shape=[1, 16])
        getattr(tensor.contents, field).extend([1] * count)
    return request


def _short_input1():
    request = _add_sub()
    request.raw_input_contents[1] = b"\0" * 60
    return request


def _mixed():
    request = _add_sub()
    request.inputs[0].contents.fp32_contents.append(1.0)
    return request


def _missing_raw():
    request = _add_sub()
    request.raw_input_contents.pop()
    return request


def _unknown_output():
    request = _add_sub()
    request.outputs.add(name="NOPE")
    return request


CALLS = [
    ("ServerLive", pb.ServerLiveRequest()),
    ("ServerReady", pb.ServerReadyRequest()),
    ("ModelReady", pb.ModelReadyRequest(name="add_sub")),
    ("ModelReady", pb.ModelReadyRequest(name="nope")),
    ("ModelReady", pb.ModelReadyRequest(name="add_sub", version="7")),
    ("ModelMetadata", pb.ModelMetadataRequest(name="add_sub")),
    ("ModelMetadata", pb.ModelMetadataRequest(name="nope")),
    ("ModelMetadata", pb.ModelMetadataRequest(name="add_sub", version="7")),
    ("ModelConfig", pb.ModelConfigRequest(name="nope")),
    ("ModelStatistics", pb.ModelStatisticsRequest(name="nope")),
    ("ModelStatistics", pb.ModelStatisticsRequest(name="add_sub", version="7")),
    ("RepositoryIndex", pb.RepositoryIndexRequest()),
    ("RepositoryModelLoad", pb.RepositoryModelLoadRequest(model_name="add_sub")),
    ("RepositoryModelUnload", pb.RepositoryModelUnloadRequest(model_name="add_sub")),
    ("SystemSharedMemoryStatus", pb.SystemSharedMemoryStatusRequest()),
    ("SystemSharedMemoryStatus", pb.SystemSharedMemoryStatusRequest(name="r")),
    ("SystemSharedMemoryUnregister", pb.SystemSharedMemoryUnregisterRequest(name="r")),
    ("CudaSharedMemoryStatus", pb.CudaSharedMemoryStatusRequest()),
    ("CudaSharedMemoryUnregister", pb.CudaSharedMemoryUnregisterRequest(name="r")),
    ("ModelInfer", pb.ModelInferRequest(model_name="nope")),
    ("ModelInfer", pb.ModelInferRequest(model_name="add_sub")),
    ("ModelInfer", _add_sub(id="same")),
    ("ModelInfer", _typed_add_sub("fp32_contents")),
    ("ModelInfer", _typed_add_sub("int_contents")),
    ("ModelInfer", _typed_add_sub("fp32_contents", 15)),
    ("ModelInfer", _short_input1()),
    ("ModelInfer", _mixed()),
    ("ModelInfer", _missing_raw()),
    ("ModelInfer", _unknown_output()),
]


def _call(url: str, method: str, request):
    with grpc.insecure_channel(url) as channel:
        stub = pbg.GRPCInferenceServiceStub(channel)
        try:
            return "OK", getattr(stub, method)(request, timeout=TIMEOUT)
        except grpc.RpcError as exc:
            return exc.code().name, exc.details()


@pytest.mark.parametrize("method, request_message", CALLS, ids=[c[0] for c in CALLS])
def test_same_answer_as_triton(naiad, triton, method, request_message):
    ours = _call(naiad, method, request_message)
    theirs = _call(triton, method, request_message)
    assert ours[0] == theirs[0]
    if ours[0] != "OK":
        assert ours[1] == theirs[1]
    elif method == "ModelInfer":
        assert [(o.name, o.datatype, list(o.shape)) for o in ours[1].outputs] == [
            (o.name, o.datatype, list(o.shape)) for o in theirs[1].outputs
        ]
        assert list(ours[1].raw_output_contents) == list(theirs[1].raw_output_contents)
        assert ours[1].id == theirs[1].id
    elif method != "RepositoryIndex":  # Triton lists the same models, in its own order
        assert ours[1] == theirs[1]
