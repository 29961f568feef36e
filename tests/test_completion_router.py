"""CompletionRouter.on_completions: every request of every completion gets an answer,
whatever one completion or one request does.

The router's core and lane are stand-ins whose arena is a bytearray, so a test can put
any result block (well formed or not) in front of it and see what each client would
get.
"""

import asyncio
from types import SimpleNamespace

import numpy as np
import orjson
import pytest
from naiad import _core
from naiad.errors import Internal, InvalidArgument
from naiad.scheduling.completions import CompletionRouter
from naiad.scheduling.in_flight import GeneralPending, InFlight, LanePending
from naiad.scheduling.manager import ModelManager
from naiad.scheduling.stats import ModelStats
from naiad.types import InferRequest

BLOCK = 4096  # room for each test result block in the stand-in arena


class _Core:
    """The part of _core.Core that answering completions uses."""

    def __init__(self):
        self.arena = memoryview(bytearray(16 * BLOCK))
        self.freed = []

    def free(self, offset):
        self.freed.append(offset)


class _Lane:
    """The part of _core.FastLane that answering completions uses, its LaneCompletion's
    fields: it replies b'lane <id>' to each request id it knows that has a final response
    in the block."""

    def __init__(self, known):
        self.known = set(known)
        self.forgotten = []

    def complete(self, offset, size, request_ids, dispatch_ns, end_ns):
        # As _core.FastLane: the ids with a final response in the block, and a reply for
        # each of those the lane knows.
        block = _core.read_response_block(self.arena, offset, size)
        responses = block.responses if block else []
        finals = [request_ids[r.request_index] for r in responses if r.flags & _core.RESPONSE_FINAL]
        replies = [
            SimpleNamespace(
                request_id=rid,
                status=_core.REPLY_OK,
                batch_size=1,
                request_ns=1000,
                queue_ns=10,
                payload=b"lane %d" % rid,
                view=None,
                error_kind=0,
                error_message=None,
            )
            for rid in finals
            if rid in self.known
        ]
        return SimpleNamespace(timings=[0, 1, 2, 3], replies=replies, finals=finals, partials=[])

    def forget(self, request_id):
        self.forgotten.append(request_id)


class _Model:
    def __init__(self):
        self.name = "m"
        self.version = 1
        self.stats = ModelStats("m", 1)


@pytest.fixture
def setup(tmp_path):
    loop = asyncio.new_event_loop()
    manager = ModelManager(tmp_path, arena_bytes=1 << 20)  # its table, traces and relays
    core = _Core()
    lane = _Lane(())
    lane.arena = core.arena
    in_flight = InFlight()
    router = CompletionRouter(
        core,
        lane,
        manager.grpc_lane,
        in_flight,
        manager.table,
        manager.traces,
        manager.routed_stats,
        manager.control_relay,
        manager.io_link,
        manager.arrivals,
        manager.server_live,
    )
    model = _Model()

    def general(request_id):
        future = loop.create_future()
        request = InferRequest("m", "", f"req-{request_id}", [])
        in_flight[request_id] = GeneralPending(request_id, model, future, request, 1, 0)
        return future

    def lane_request(request_id):
        answers = []
        in_flight[request_id] = LanePending(
            lane, model, request_id, 1, 0, lambda http, exc: answers.append((http, exc))
        )
        lane.known.add(request_id)
        return answers

    yield router, model, general, lane_request
    loop.close()


def _write_result(router, slot, outcomes, buffers=(), final=True) -> tuple[int, int]:
    """Writes a response block (csrc/ipc/ipc_schema.h) into arena slot `slot`: outcome i is
    request i's response, {"outputs": [[name, datatype, shape, nbytes], ...]} with its
    tensors next in `buffers`, or {"error": message, "code": TritonError code}. Returns
    its (offset, size)."""
    buffers = iter(buffers)
    responses = []
    for index, outcome in enumerate(outcomes):
        flags = _core.RESPONSE_FINAL if final else 0
        if "error" in outcome:
            json = orjson.dumps({"error": outcome["error"]})
            flags |= _core.RESPONSE_ERROR
            responses.append((index, flags, outcome.get("code", 1), json, []))
            continue
        entries = [entry[:3] for entry in outcome["outputs"]]
        body = {"outputs": entries}
        if "parameters" in outcome:
            body["parameters"] = outcome["parameters"]
        outputs = [next(buffers) for _ in entries]
        responses.append((index, flags, 0, orjson.dumps(body), outputs))
    block = _core.encode_response_block(responses, [0, 1, 2, 3])
    assert len(block) <= BLOCK
    offset = (slot + 1) * BLOCK
    router.core.arena[offset : offset + len(block)] = block
    return offset, len(block)


def _completion(offset, size, request_ids, status=_core.COMPLETION_OK):
    return _core.CoreCompletion(7, status, 0, offset, size, 0, request_ids)


def _ok(value: float, parameters=None) -> tuple[dict, bytes]:
    data = np.full(2, value, dtype=np.float32).tobytes()
    outcome = {"outputs": [["OUT", "FP32", [2], len(data)]]}
    if parameters is not None:
        outcome["parameters"] = parameters
    return outcome, data


def _value(future) -> list:
    [output] = future.result().outputs
    return np.frombuffer(output.data, dtype=np.float32).tolist()


def _internal_error(future) -> str:
    exc = future.exception()
    assert isinstance(exc, Internal), exc
    return exc.message


def test_an_unreadable_result_block_fails_its_requests_and_no_other(setup):
    router, model, general, _ = setup
    first, second, third = general(1), general(2), general(3)
    (o1, d1), (o3, d3) = _ok(1.0), _ok(3.0)
    good_offset, good_size = _write_result(router, 0, [o1], [d1])
    bad_offset = 2 * BLOCK
    router.core.arena[bad_offset : bad_offset + 8] = b"\x04\x00\x00\x00{{{{"  # not a response block
    last_offset, last_size = _write_result(router, 2, [o3], [d3])

    router.on_completions(
        [
            _completion(good_offset, good_size, [1]),
            _completion(bad_offset, 8, [2]),
            _completion(last_offset, last_size, [3]),
        ]
    )

    assert _value(first) == [1.0, 1.0]
    assert _internal_error(second) == (
        "Failed to process the request(s) for model 'm': the server could not read the "
        "model's result (see the server log)"
    )
    assert _value(third) == [3.0, 3.0]
    assert router.in_flight == {}
    assert sorted(router.core.freed) == [good_offset, bad_offset, last_offset]
    assert model.stats.fail.count == 1
    assert model.stats.success.count == 2


def test_a_result_block_naming_a_request_beyond_the_batch_fails_the_whole_batch(setup):
    router, model, general, _ = setup
    first, second = general(1), general(2)
    outcomes, buffers = zip(*(_ok(float(i)) for i in (1, 2, 3)))
    offset, size = _write_result(router, 0, list(outcomes), list(buffers))
    router.on_completions([_completion(offset, size, [1, 2])])
    assert "could not read the model's result" in _internal_error(first)
    assert "could not read the model's result" in _internal_error(second)
    assert router.in_flight == {}
    assert router.core.freed == [offset]


def test_a_request_without_a_final_response_waits_for_the_end_of_its_batch(setup):
    # Responses are messages (0..N per request): a block may answer some requests of a
    # batch; the core fails the others when the batch ends, in a completion of its own.
    router, model, general, lane = setup
    first, second, third = general(1), general(2), lane(3)
    outcome, data = _ok(1.0)
    offset, size = _write_result(router, 0, [outcome], [data])
    router.on_completions([_completion(offset, size, [1, 2, 3])])
    assert _value(first) == [1.0, 1.0]
    assert not second.done() and third == []
    assert sorted(router.in_flight) == [2, 3]
    router.on_completions([_completion(0, 0, [2, 3], _core.COMPLETION_WORKER_FAILED)])
    assert "could not run the batch" in _internal_error(second)
    [(http, exc)] = third
    assert http is None and "could not run the batch" in exc.message
    assert router.in_flight == {}
    assert router.core.freed == [offset]


def test_one_request_that_cannot_be_resolved_leaves_the_others_answered(setup, monkeypatch):
    router, model, general, _ = setup
    futures = [general(request_id) for request_id in (1, 2, 3)]
    outcomes, buffers = zip(*(_ok(float(i)) for i in (1, 2, 3)))
    offset, size = _write_result(router, 0, list(outcomes), list(buffers))
    later = general(4)
    o4, d4 = _ok(4.0)
    later_offset, later_size = _write_result(router, 1, [o4], [d4])

    resolve = CompletionRouter._resolve

    def resolve_but_not_request_2(self, pending, *args):
        if pending.request_id == 2:
            raise KeyError("a bug")
        return resolve(self, pending, *args)

    monkeypatch.setattr(CompletionRouter, "_resolve", resolve_but_not_request_2)
    router.on_completions(
        [_completion(offset, size, [1, 2, 3]), _completion(later_offset, later_size, [4])]
    )

    assert _value(futures[0]) == [1.0, 1.0]
    assert "could not read the model's result" in _internal_error(futures[1])
    # Request 3 came after the failure in the same batch: it is failed, not left waiting.
    assert "could not read the model's result" in _internal_error(futures[2])
    assert _value(later) == [4.0, 4.0]
    assert router.in_flight == {}


def test_a_lane_callback_that_raises_does_not_stop_the_others(setup):
    router, model, general, lane = setup
    answers = [lane(1), lane(2)]
    broken = router.in_flight[1]

    def explode(http, exc):
        raise OSError("connection reset")

    broken.on_done = explode
    mixed = general(3)
    outcomes, buffers = zip(*(_ok(float(i)) for i in (1, 2, 3)))
    offset, size = _write_result(router, 0, list(outcomes), list(buffers))
    router.on_completions([_completion(offset, size, [1, 2, 3])])
    assert answers[1] == [(b"lane 2", None)]
    assert _value(mixed) == [3.0, 3.0]
    assert router.in_flight == {}


def test_a_lane_request_the_lane_does_not_answer_is_failed(setup):
    router, model, general, lane = setup
    answered, unknown = lane(1), lane(2)
    router.lane.known.discard(2)
    offset, size = _write_result(router, 0, [_ok(1.0)[0], _ok(2.0)[0]], [b"\0" * 8] * 2)
    router.on_completions([_completion(offset, size, [1, 2])])
    assert answered == [(b"lane 1", None)]
    [(http, exc)] = unknown
    assert http is None and isinstance(exc, Internal)
    assert router.lane.forgotten == [2]


def test_error_outcomes_keep_their_kind(setup):
    router, model, general, _ = setup
    future = general(1)
    offset, size = _write_result(router, 0, [{"error": "negative input", "code": 3}])
    router.on_completions([_completion(offset, size, [1])])
    exc = future.exception()
    assert isinstance(exc, InvalidArgument)
    assert exc.message == "negative input"


def test_response_parameters_reach_the_response(setup):
    router, model, general, _ = setup
    with_parameters, without = general(1), general(2)
    (o1, d1), (o2, d2) = _ok(1.0, {"tokens": 7, "done": True, "label": "cat"}), _ok(2.0)
    offset, size = _write_result(router, 0, [o1, o2], [d1, d2])
    router.on_completions([_completion(offset, size, [1, 2])])
    assert with_parameters.result().parameters == {"tokens": 7, "done": True, "label": "cat"}
    assert without.result().parameters == {}


def test_a_failed_batch_answers_every_request(setup):
    router, model, general, lane = setup
    future, answers = general(1), lane(2)
    router.on_completions([_completion(0, 0, [1, 2], _core.COMPLETION_INSTANCE_DIED)])
    assert "worker process exited" in _internal_error(future)
    [(http, exc)] = answers
    assert http is None and "worker process exited" in exc.message
    assert router.in_flight == {}
    assert router.core.freed == []
