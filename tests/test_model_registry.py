"""Models leave the core, the fast lane and the manager when released: after a failed
load, and at unload with requests still queued (they fail with Triton's error)."""

import asyncio
import json
import textwrap

import pytest
from naiad import _core
from naiad.errors import Unavailable
from naiad.scheduling.manager import ModelManager
from naiad.types import InferRequest, InputTensor
from server_harness import make_repository

BAD_INIT_CONFIG = """
name: "bad_init"
backend: "python"
max_batch_size: 4
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
"""

BAD_INIT_MODEL = """
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("no weights")
"""

ADD_SUB_URL = b"/v2/models/add_sub/versions/1/infer"


def _repository(tmp_path):
    repo = make_repository(tmp_path / "models", ["add_sub"])
    (repo / "bad_init" / "1").mkdir(parents=True)
    (repo / "bad_init" / "config.pbtxt").write_text(BAD_INIT_CONFIG)
    (repo / "bad_init" / "1" / "model.py").write_text(textwrap.dedent(BAD_INIT_MODEL))
    return repo


def _add_sub_request() -> InferRequest:
    inputs = [InputTensor(name, "FP32", [1, 16], bytes(64)) for name in ("INPUT0", "INPUT1")]
    return InferRequest("add_sub", "", "", inputs)


def _add_sub_lane_body() -> tuple[bytes, int]:
    """A binary infer body as tritonclient sends it: (body, JSON header length)."""
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": name,
                    "shape": [1, 16],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": 64},
                }
                for name in ("INPUT0", "INPUT1")
            ],
            "parameters": {"binary_data_output": True},
        },
        separators=(",", ":"),
    ).encode()
    return header + bytes(128), len(header)


def _blocks(manager: ModelManager) -> int:
    return manager.core.arena_stats()["blocks_in_use"]


def test_failed_load_leaves_nothing_registered(tmp_path):
    async def main():
        manager = ModelManager(_repository(tmp_path), arena_bytes=1 << 24)
        # What the arena holds before any model (the shared-memory region table).
        baseline = _blocks(manager)
        assert not await manager.load_all()
        bad = manager.models["bad_init"][1]
        good = manager.models["add_sub"][1]
        assert not bad.ready
        assert bad.core_model is None and bad.lane_model is None
        assert list(manager.table.lane_models.values()) == [good]
        # Only add_sub's instance channel is left in the arena.
        assert _blocks(manager) - baseline == len(good.instances) == 1
        await manager.shutdown(5.0)
        assert _blocks(manager) == baseline
        assert manager.table.lane_models == {}

    asyncio.run(main())


def test_release_fails_queued_requests_and_drops_lane_routes(tmp_path):
    async def main():
        manager = ModelManager(_repository(tmp_path), arena_bytes=1 << 24)
        baseline = _blocks(manager)
        await manager.load_all()
        model = manager.get("add_sub")
        handle = model.core_model
        body, header_length = _add_sub_lane_body()
        answers = []
        assert manager.submit_fast(
            ADD_SUB_URL,
            body,
            header_length,
            lambda _request_id: lambda http, exc: answers.append(exc),
        )
        futures = [model.submit(_add_sub_request()) for _ in range(3)]
        # Released before the event loop runs the flush: all four are still queued.
        model.release()
        for future in futures:
            with pytest.raises(Unavailable, match="version 1 is not at ready state"):
                await asyncio.wait_for(future, 5.0)
        assert len(answers) == 1 and isinstance(answers[0], Unavailable)
        # The lane no longer routes to it: it refuses the request itself, as Triton
        # answers a model that is not served, and the stale handle queues nothing.
        refused = []
        assert manager.submit_fast(
            ADD_SUB_URL, body, header_length, lambda *answer: refused.append(answer)
        )
        [(request_id, reply)] = refused
        assert request_id == 0 and reply.startswith(b"HTTP/1.1 503 ")
        assert reply.endswith(b"'add_sub' version 1 is not at ready state\"}"), reply
        assert manager.lane.in_flight() == 0
        with pytest.raises(Unavailable, match="version 1 is not ready"):
            model.submit(_add_sub_request())
        assert manager.core.submit(handle, 1, b"{}", [bytes(8)], 1) == _core.SUBMIT_MODEL_GONE
        await manager.shutdown(5.0)
        assert _blocks(manager) == baseline

    asyncio.run(main())
