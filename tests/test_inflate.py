"""naiad/inflate.py: bounded inflation of compressed bodies and gRPC messages, by the
one C++ inflater (csrc/codec/http_compress.h; its memory bound is checked in
tests/csrc/test_lane_inflate.cc, the server's in test_hardening.py)."""

from __future__ import annotations

import gzip
import zlib

import pytest
from naiad.inflate import GZIP, RAW_DEFLATE, ZLIB, InflatedTooLarge, inflate, inflate_body


def _gzip_of_zeros(size: int) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, GZIP)
    block = bytes(1 << 20)
    parts = [compressor.compress(block) for _ in range(size >> 20)]
    return b"".join(parts) + compressor.compress(bytes(size & ((1 << 20) - 1))) + compressor.flush()


@pytest.mark.parametrize("wbits", [GZIP, ZLIB, RAW_DEFLATE])
def test_round_trip_in_each_format(wbits):
    data = bytes(range(256)) * 5000  # more than the output's first buffer
    compressor = zlib.compressobj(6, zlib.DEFLATED, wbits)
    packed = compressor.compress(data) + compressor.flush()
    assert inflate(packed, wbits, len(data)) == data
    # Bytes after the end of the stream are ignored, as zlib.decompress ignores them.
    assert inflate(packed + b"trailing", wbits, len(data)) == data


def test_a_bomb_is_given_up_at_the_limit():
    bomb = _gzip_of_zeros(256 << 20)  # about 250 kB that inflate to 256 MiB
    assert len(bomb) < 1 << 20
    limit = 4 << 20
    with pytest.raises(InflatedTooLarge) as info:
        inflate(bomb, GZIP, limit)
    assert info.value.limit == limit


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


def test_errors_are_worded_as_pythons_zlib():
    for damaged, wbits in ((b"not compressed at all", ZLIB), (zlib.compress(b"abc"), GZIP)):
        with pytest.raises(zlib.error) as ours:
            inflate(damaged, wbits, 1 << 20)
        with pytest.raises(zlib.error) as pythons:
            zlib.decompressobj(wbits).decompress(damaged)
        assert str(ours.value) == str(pythons.value)


def test_http_bodies_read_deflate_in_the_zlib_format_or_raw():
    data = bytes(range(256)) * 100
    raw = zlib.compressobj(6, zlib.DEFLATED, RAW_DEFLATE)
    assert inflate_body(zlib.compress(data), "deflate", len(data)) == data
    assert inflate_body(raw.compress(data) + raw.flush(), "deflate", len(data)) == data
    assert inflate_body(gzip.compress(data), "gzip", len(data)) == data
    with pytest.raises(zlib.error):
        inflate_body(zlib.compress(data), "gzip", len(data))
