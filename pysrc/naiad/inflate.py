"""Bounded inflation of compressed request bodies and gRPC messages.

A few megabytes of gzip can inflate to gigabytes, so a body is never inflated whole:
it is inflated a chunk at a time into one growing buffer, and given up as soon as it
passes the caller's limit. At most `limit` bytes (plus the buffer's slack) are ever
held. zlib releases the GIL while it inflates, so the front ends run it on a thread
(`inflate_soon`) and their event loop keeps serving meanwhile: one thread for the whole
process, so that bodies inflating at once hold one limit's worth between them, not one
each.
"""

from __future__ import annotations

import zlib
from concurrent.futures import ThreadPoolExecutor

__all__ = ["GZIP", "ZLIB", "RAW_DEFLATE", "InflatedTooLarge", "inflate", "inflate_soon"]

GZIP = 16 + zlib.MAX_WBITS
ZLIB = zlib.MAX_WBITS
RAW_DEFLATE = -zlib.MAX_WBITS

# Output asked of zlib per call: the buffer grows by at most this much past the limit.
CHUNK = 1 << 20


class InflatedTooLarge(Exception):
    """The data inflates to more than the limit; nothing past it was kept."""

    def __init__(self, limit: int):
        super().__init__(f"inflates to more than {limit} bytes")
        self.limit = limit


def inflate(data, wbits: int, limit: int) -> bytearray:
    """The inflated bytes of `data` (zlib's `wbits` says the format). Raises
    InflatedTooLarge past `limit` bytes, zlib.error for a damaged or truncated stream;
    bytes after the end of the stream are ignored, as zlib.decompress does."""
    inflater = zlib.decompressobj(wbits)
    out = bytearray()
    pending = data
    while True:
        room = limit - len(out) + 1  # one byte past the limit tells it is exceeded
        chunk = inflater.decompress(pending, min(CHUNK, room))
        out += chunk
        if len(out) > limit:
            raise InflatedTooLarge(limit)
        pending = inflater.unconsumed_tail
        if inflater.eof:
            return out
        if not pending and not chunk:
            raise zlib.error("incomplete or truncated stream")


_INFLATING = ThreadPoolExecutor(max_workers=1, thread_name_prefix="naiad-inflate")


def inflate_soon(loop, inflating, *args):
    """An asyncio future of `inflating(*args)` (a function that calls `inflate`), run on
    the process's one inflating thread."""
    return loop.run_in_executor(_INFLATING, inflating, *args)
