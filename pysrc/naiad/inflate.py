"""Bounded inflation of compressed request bodies and gRPC messages, by the one
inflater (csrc/codec/http_compress.h, through _core).

A few megabytes of gzip can inflate to gigabytes, so a body is never inflated whole:
the inflater's output grows as it comes and is given up as soon as it passes the
caller's limit. It releases the GIL, so the front ends run it on a thread
(`inflate_soon`) and their event loop keeps serving meanwhile: one thread for the whole
process, so that bodies inflating at once hold one limit's worth between them, not one
each. (The HTTP lane inflates in C++ on its own: http1/http_framer.h.)
"""

from __future__ import annotations

import zlib
from concurrent.futures import ThreadPoolExecutor

from naiad import _core

__all__ = [
    "GZIP",
    "ZLIB",
    "RAW_DEFLATE",
    "InflatedTooLarge",
    "inflate",
    "inflate_body",
    "inflate_soon",
]

# The formats, named by zlib's window bits (as zlib.decompressobj takes them).
GZIP = 16 + zlib.MAX_WBITS
ZLIB = zlib.MAX_WBITS
RAW_DEFLATE = -zlib.MAX_WBITS
_FORMATS = {
    GZIP: _core.INFLATE_GZIP,
    ZLIB: _core.INFLATE_ZLIB,
    RAW_DEFLATE: _core.INFLATE_RAW_DEFLATE,
}


class InflatedTooLarge(Exception):
    """The data inflates to more than the limit; nothing past it was kept."""

    def __init__(self, limit: int):
        super().__init__(f"inflates to more than {limit} bytes")
        self.limit = limit


def _result(outcome, limit: int) -> bytearray:
    status, value = outcome
    if status == _core.INFLATED:
        return value
    if status == _core.INFLATED_TOO_LARGE:
        raise InflatedTooLarge(limit)
    raise zlib.error(value)


def inflate(data, wbits: int, limit: int) -> bytearray:
    """The inflated bytes of `data` (`wbits`: GZIP, ZLIB or RAW_DEFLATE). Raises
    InflatedTooLarge past `limit` bytes, zlib.error (with zlib's complaint) for a damaged
    or truncated stream; bytes after the end of the stream are ignored, as
    zlib.decompress does."""
    return _result(_core.inflate(data, _FORMATS[wbits], limit), limit)


def inflate_body(data, content_encoding: str, limit: int) -> bytearray:
    """An HTTP body sent with Content-Encoding `content_encoding` ("gzip" or "deflate",
    which HTTP clients send in the zlib format or raw) inflated, as `inflate`."""
    return _result(_core.inflate(data, 0, limit, content_encoding), limit)


_INFLATING = ThreadPoolExecutor(max_workers=1, thread_name_prefix="naiad-inflate")


def inflate_soon(loop, inflating, *args):
    """An asyncio future of `inflating(*args)` (a function that calls `inflate`), run on
    the process's one inflating thread."""
    return loop.run_in_executor(_INFLATING, inflating, *args)
