"""The worker's view of a batch over the arena (csrc/ipc/ipc_schema.h through _core):
per-request inputs are views into the batch-major [N, ...] tensors."""

import os

import numpy as np
import orjson
import pytest
from naiad import _core
from naiad.protos import model_config_pb2 as mc
from naiad.worker.main import _batch, batch_inputs


def _metadata(request_id, shape):
    return orjson.dumps(
        {
            "id": request_id,
            "inputs": [["INPUT0", "FP32", shape], ["INPUT1", "INT32", shape]],
            "outputs": None,
            "parameters": {},
        }
    )


def _batching_model():
    """A core with one dynamically batching model and its instance's worker endpoint."""
    core = _core.Core(1 << 22)
    config = mc.ModelConfig(name="m", max_batch_size=8)
    config.dynamic_batching.SetInParent()
    model = core.add_model(config)
    channel = core.add_instance(model)
    endpoint = _core.WorkerEndpoint(
        os.dup(core.arena_fd),
        channel.channel_offset,
        os.dup(channel.wake_fd),
        os.dup(core.notify_fd),
    )
    return core, model, channel.instance_id, endpoint


def test_requests_are_views_of_the_batch_tensors():
    core, model, instance, endpoint = _batching_model()
    order = _core.input_order_key([0, 1])
    sent = []
    for k, rows in enumerate((1, 2, 1)):
        a = np.arange(rows * 4, dtype=np.float32).reshape(rows, 4) + 100 * k
        b = np.full((rows, 4), k, dtype=np.int32)
        sent.append((a, b))
        result = core.submit(
            model, k + 1, _metadata(f"r{k}", [rows, 4]), [a, b], rows, input_order=order
        )
        assert result == _core.SUBMIT_OK
    core.instance_up(instance)
    core.flush()
    message = endpoint.next()
    blocks, tensors = message.requests, message.tensors
    assert message.kind == _core.MESSAGE_BATCH and len(blocks) == 3 and len(tensors) == 2
    # Each its own metadata (another id and shape), though the first and last are equal
    # but for the id.
    assert [m for m, _ in blocks] == [
        _metadata(f"r{k}", [rows, 4]) for k, rows in enumerate((1, 2, 1))
    ]
    arrays = batch_inputs(endpoint.arena, blocks, tensors)
    assert arrays["INPUT0"].shape == (4, 4)
    np.testing.assert_array_equal(arrays["INPUT0"], np.concatenate([a for a, _ in sent]))
    np.testing.assert_array_equal(arrays["INPUT1"], np.concatenate([b for _, b in sent]))
    batch = _batch(endpoint.arena, blocks)
    for request, (a, b) in zip(batch.requests, sent):
        view = request.arrays[0]
        np.testing.assert_array_equal(view, a)
        assert np.shares_memory(view, arrays["INPUT0"])
        np.testing.assert_array_equal(request.arrays[1], b)
        assert np.shares_memory(request.arrays[1], arrays["INPUT1"])
    endpoint.complete(message.tag, 0, 0, _core.COMPLETION_OK)
    assert [c.request_ids for c in core.poll()] == [[1, 2, 3]]
    del batch, request, arrays, view


def test_requests_of_one_layout_are_rows_of_the_batch_tensors():
    # A client sending the same request again and again: the requests share one layout
    # and the worker cuts their views from the batch tensors in one call each.
    core, model, instance, endpoint = _batching_model()
    order = _core.input_order_key([0, 1])
    sent = []
    for k in range(3):
        a = np.arange(8, dtype=np.float32).reshape(2, 4) + 100 * k
        b = np.full((2, 4), k, dtype=np.int32)
        sent.append((a, b))
        result = core.submit(model, k + 1, _metadata("same", [2, 4]), [a, b], 2, input_order=order)
        assert result == _core.SUBMIT_OK
    core.instance_up(instance)
    core.flush()
    message = endpoint.next()
    blocks, tensors = message.requests, message.tensors
    assert message.kind == _core.MESSAGE_BATCH and len(blocks) == 3 and len(tensors) == 2
    arrays = batch_inputs(endpoint.arena, blocks, tensors)
    # One client's same request: one metadata object for the batch, parsed once.
    assert blocks[0][0] is blocks[1][0] is blocks[2][0]
    batch = _batch(endpoint.arena, blocks, tensors)
    assert batch.headers[0] is batch.headers[2]
    for request, (a, b) in zip(batch.requests, sent):
        assert request.arrays[0].shape == (2, 4) and request.arrays[0].dtype == np.float32
        np.testing.assert_array_equal(request.arrays[0], a)
        np.testing.assert_array_equal(request.arrays[1], b)
        assert np.shares_memory(request.arrays[0], arrays["INPUT0"])
        assert np.shares_memory(request.arrays[1], arrays["INPUT1"])
    # The same views as the per-request path gives.
    for mine, theirs in zip(batch.arrays, _batch(endpoint.arena, blocks).arrays):
        for view, other in zip(mine, theirs):
            assert view.__array_interface__ == other.__array_interface__
    endpoint.complete(message.tag, 0, 0, _core.COMPLETION_OK)
    assert [c.request_ids for c in core.poll()] == [[1, 2, 3]]
    del batch, request, arrays


def test_rows_by_request_gives_each_request_its_row_of_every_column():
    buffer = bytearray(4096)
    first = np.ndarray((3, 2, 4), np.float32, buffer, 64)
    first[...] = np.arange(24, dtype=np.float32).reshape(3, 2, 4)
    second = np.frombuffer(bytes(range(48)), np.uint8).reshape(3, 16)  # read-only
    names = [b"a", b"bc", b""]
    rows = _core.rows_by_request([first, names, second], 3)
    assert len(rows) == 3
    for i, (view, name, other) in enumerate(rows):
        # The views numpy's own indexing gives: same memory, shape, strides and flags.
        assert view.__array_interface__ == first[i].__array_interface__
        assert other.__array_interface__ == second[i].__array_interface__
        assert view.flags.writeable and not other.flags.writeable
        assert np.shares_memory(view, first) and np.shares_memory(other, second)
        assert name is names[i]
    view = rows[2][0]
    del rows, first
    # The row keeps its column's memory alive.
    np.testing.assert_array_equal(view, np.arange(16, 24, dtype=np.float32).reshape(2, 4))
    assert _core.rows_by_request([], 2) == [[], []]
    assert _core.rows_by_request([np.zeros((0, 4))], 0) == []


def test_rows_by_request_refuses_columns_of_another_length():
    with pytest.raises(ValueError, match="column 1 holds 2 inputs, not 3"):
        _core.rows_by_request([np.zeros((3, 1)), [1, 2]], 3)
    with pytest.raises(ValueError, match="column 0 is not an ndarray of 3 rows"):
        _core.rows_by_request([np.zeros((2, 1))], 3)
    with pytest.raises(ValueError, match="column 0 is not an ndarray of 3 rows"):
        _core.rows_by_request([np.zeros(3)], 3)  # rows of no dimension: numpy scalars
    with pytest.raises(ValueError, match="column 0 is not an ndarray of 3 rows"):
        _core.rows_by_request([np.zeros((3, 1)).view(np.matrix)], 3)


def test_layouts_of_parses_each_run_of_one_metadata_object_once():
    calls = []

    def layout(metadata):
        calls.append(metadata)
        return ("layout", metadata)

    shared, other = b'{"id":"a"}', b'{"id":"b"}'
    equal_copy = bytes(bytearray(shared))  # equal bytes, another object: parsed again
    blocks = [(shared, ()), (shared, ()), (other, ()), (equal_copy, ()), (shared, ())]
    layouts = _core.layouts_of(blocks, layout)
    assert layouts == [("layout", m) for m, _ in blocks]
    assert layouts[0] is layouts[1]
    assert calls == [shared, other, equal_copy, shared]
    assert _core.layouts_of([], layout) == []
