"""naiad/inflate.py: bounded inflation of compressed bodies and gRPC messages."""

from __future__ import annotations

import gzip
import tracemalloc
import zlib

import pytest
from naiad.inflate import CHUNK, GZIP, RAW_DEFLATE, ZLIB, InflatedTooLarge, inflate


def _gzip_of_zeros(size: int) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, GZIP)
    block = bytes(1 << 20)
    parts = [compressor.compress(block) for _ in range(size >> 20)]
    return b"".join(parts) + compressor.compress(bytes(size & ((1 << 20) - 1))) + compressor.flush()


@pytest.mark.parametrize("wbits", [GZIP, ZLIB, RAW_DEFLATE])
def test_round_trip_in_each_format(wbits):
    data = bytes(range(256)) * 5000  # more than one CHUNK of output
    compressor = zlib.compressobj(6, zlib.DEFLATED, wbits)
    packed = compressor.compress(data) + compressor.flush()
    assert inflate(packed, wbits, len(data)) == data
    # Bytes after the end of the stream are ignored, as zlib.decompress ignores them.
    assert inflate(packed + b"trailing", wbits, len(data)) == data


def test_a_bomb_is_given_up_at_the_limit_holding_no_more_than_it():
    bomb = _gzip_of_zeros(256 << 20)  # about 250 kB that inflate to 256 MiB
    assert len(bomb) < 1 << 20
    limit = 4 << 20
    tracemalloc.start()
    try:
        with pytest.raises(InflatedTooLarge) as info:
            inflate(bomb, GZIP, limit)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info.value.limit == limit
    # The limit, one more chunk, the buffer's slack and zlib's state: never the 256 MiB.
    assert peak < limit + 2 * CHUNK + (1 << 20), peak


def test_exactly_the_limit_is_served():
    assert inflate(gzip.compress(bytes(1000)), GZIP, 1000) == bytes(1000)
    with pytest.raises(InflatedTooLarge):
        inflate(gzip.compress(bytes(1001)), GZIP, 1000)


def test_a_damaged_or_truncated_stream_is_a_zlib_error():
    packed = gzip.compress(b"x" * 100000)
    with pytest.raises(zlib.error, match="truncated"):
        inflate(packed[: len(packed) // 2], GZIP, 1 << 20)
    with pytest.raises(zlib.error):
        inflate(b"not compressed at all", GZIP, 1 << 20)
    with pytest.raises(zlib.error):
        inflate(b"", GZIP, 1 << 20)
