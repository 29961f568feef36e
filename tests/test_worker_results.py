"""The worker's hot path writes a batch's response block from the backend's results in
C++ (_core.encode_results_block / WorkerEndpoint.respond_results): it must give the same
block, byte for byte, as the general conversion (worker.results.wire_results) does, for
every kind of result, including those it hands back to that conversion."""

import sys

import numpy as np
import pytest
from naiad import _core
from naiad.backends.base import RequestError, Response
from naiad.worker import main as worker
from naiad.worker import results as worker_results

TIMINGS = [1, 2, 3, 4]


def _read(block: bytes):
    """The block's content (padding aside): timings, and per response its record, JSON
    and output bytes."""
    read = _core.read_response_block(b"\0" + block, 1, len(block))
    return read.timings, [
        (
            r.request_index,
            r.flags,
            r.error_code,
            r.json,
            [block[offset - 1 : offset - 1 + size] for offset, size in r.outputs],
        )
        for r in read.responses
    ]


def _fast(results, names=None):
    return _read(
        _core.encode_results_block(
            results,
            TIMINGS,
            worker._FAST_WIRE,
            {} if names is None else names,
            worker_results.wire_one,
        )
    )


def _general(results):
    return _read(_core.encode_response_block(worker_results.wire_results(results), TIMINGS))


NUMERIC = [
    np.float32,
    np.float64,
    np.float16,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.bool_,
]


@pytest.mark.parametrize("dtype", NUMERIC)
def test_numeric_outputs_match_the_general_conversion(dtype):
    rng = np.random.default_rng(3)
    results = [
        Response(
            [
                ("OUTPUT0", (rng.standard_normal((rows, 3)) * 50).astype(dtype)),
                ('OUT"1\\\n', (rng.standard_normal((rows,)) * 9).astype(dtype)),
            ]
        )
        for rows in (1, 2, 5)
    ]
    assert _fast(results) == _general(results)


class _ArraySubclass(np.ndarray):
    pass


def test_every_other_result_kind_matches_the_general_conversion():
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    results = [
        Response([("A", base)]),
        RequestError('boom "quoted"', 3),
        Response([("A", base[:, ::2])]),  # not contiguous
        Response([("A", base.astype(">f4"))]),  # big-endian
        Response([("S", np.array([b"ab", "cd", b""], dtype=np.object_))]),  # BYTES
        Response([("A", base), ("S", np.array([b"x"], dtype=np.object_))]),  # mixed
        Response([("A", base)], {"p": 1, "q": "v"}),  # parameters
        Response([]),  # no outputs
        Response([("E", np.zeros((0, 4), np.float32))]),  # empty tensor
        Response([("Z", np.float32(2.5) * np.ones(()))]),  # rank 0
        Response([("A", np.asfortranarray(np.ones((2, 3), np.int32)))]),
        Response([("A", base), ("B", base[::-1])]),  # second output not contiguous
        Response([("A", base.view(_ArraySubclass))]),  # not exactly an ndarray: its buffer
        Response([("A", base.view(_ArraySubclass)), ("B", base[:, ::2])]),
    ]
    assert _fast(results) == _general(results)
    # The names cache is filled and reused.
    names = {}
    first = _fast(results, names)
    assert names and first == _fast(results, names)


def test_a_fallback_error_fails_the_call_and_releases_the_buffers():
    array = np.ones(4, np.float32)

    def broken(result):
        raise RuntimeError("conversion failed")

    results = [Response([("A", array)]), Response([("A", array)], {"p": 1})]
    references = sys.getrefcount(array)
    with pytest.raises(RuntimeError, match="conversion failed"):
        _core.encode_results_block(results, TIMINGS, worker._FAST_WIRE, {}, broken)
    assert sys.getrefcount(array) == references  # no buffer of it is still held


def test_the_block_holds_its_outputs_only_while_it_is_written():
    arrays = [np.ones(4, np.float32), np.ones(4, np.float32).view(_ArraySubclass)]
    results = [Response([("A", arrays[0]), ("B", arrays[1])]), Response([("A", arrays[0])])]
    references = [sys.getrefcount(array) for array in arrays]
    block = _core.encode_results_block(
        results, TIMINGS, worker._FAST_WIRE, {}, worker_results.wire_one
    )
    assert block and [sys.getrefcount(array) for array in arrays] == references


def test_shapes_of_every_size_are_written_as_the_general_conversion_writes_them():
    # Dimensions of one digit, several, zero, and past 32 bits (arrays of no elements
    # can have any of them).
    results = [
        Response([("OUT", np.zeros(shape, np.float32))])
        for shape in ((7,), (10, 0, 123), (2**40, 0), (0,), (9_876_543, 0, 1))
    ]
    fast = _fast(results)
    assert fast == _general(results)
    assert b'"OUT","FP32",[1099511627776,0]' in fast[1][2][3]
    assert b'"OUT","FP32",[10,0,123]' in fast[1][1][3]
