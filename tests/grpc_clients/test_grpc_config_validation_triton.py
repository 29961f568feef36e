"""Differential, over gRPC (the HTTP twin: tests/test_config_validation_triton.py):
RepositoryModelLoad of a config Triton 2.51 refuses as it loads a version answers
INVALID_ARGUMENT with "load failed for model 'X': version N is at UNAVAILABLE state:
Invalid argument: ...;\\n" on both servers, and the gRPC repository index lists each
version with that reason; a config refused while polling answers INTERNAL "failed to
load 'X', failed to poll from model repository" (Naiad adding the reason). Skips,
saying why, when Triton is not installed."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from config_validation_support import (
    REFUSED_AT_POLL,
    REFUSED_PER_VERSION,
    clauses,
    refusal_repository,
    version_error,
)
from server_harness import NaiadServer
from triton_peer import TritonPeer, needs_triton
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pbg

pytestmark = [
    pytest.mark.timeout(600),
    needs_triton,
]


def _answers(grpc_port: int, names: list[str]) -> tuple[dict, list]:
    """name -> (status code, message) of RepositoryModelLoad, and the gRPC index's
    entries as (name, version, state, reason)."""
    answers = {}
    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        stub = pbg.GRPCInferenceServiceStub(channel)
        for name in names:
            try:
                stub.RepositoryModelLoad(
                    pb.RepositoryModelLoadRequest(model_name=name), timeout=120
                )
                answers[name] = (grpc.StatusCode.OK, "")
            except grpc.RpcError as exc:
                answers[name] = (exc.code(), exc.details())
        index = stub.RepositoryIndex(pb.RepositoryIndexRequest(), timeout=30)
    entries = [(m.name, m.version, m.state, m.reason) for m in index.models]
    return answers, entries


def test_grpc_loads_are_refused_at_the_same_stage_as_triton(tmp_path: Path):
    repo = refusal_repository(tmp_path)
    args = ["--model-control-mode=explicit"]
    names = [*REFUSED_PER_VERSION, *REFUSED_AT_POLL]
    naiad = NaiadServer(repo, log_dir=tmp_path, extra_args=args).start(wait="live")
    try:
        ours, our_index = _answers(naiad.grpc_port, names)
    finally:
        naiad.stop()
    with TritonPeer(repo, tmp_path, args) as triton:
        theirs, their_index = _answers(triton.grpc_port, names)

    for name, (versions, reason) in REFUSED_PER_VERSION.items():
        expected = version_error(name, versions, reason)
        assert ours[name] == (grpc.StatusCode.INVALID_ARGUMENT, expected), name
        assert theirs[name][0] == grpc.StatusCode.INVALID_ARGUMENT, name
        assert clauses(theirs[name][1]) == clauses(expected), name
        listed = [(name, str(v), "UNAVAILABLE", f"Invalid argument: {reason}") for v in versions]
        assert [e for e in their_index if e[0] == name] == listed
        assert [e for e in our_index if e[0] == name] == listed

    for name in REFUSED_AT_POLL:
        poll_failed = f"failed to load '{name}', failed to poll from model repository"
        assert theirs[name] == (grpc.StatusCode.INTERNAL, poll_failed), name
        assert ours[name][0] == grpc.StatusCode.INTERNAL, name
        assert ours[name][1].startswith(poll_failed + ": "), name  # with the reason
