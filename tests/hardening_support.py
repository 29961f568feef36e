"""Hostile inputs the hardening tests send: compression bombs, and the server's memory
as /proc tells it."""

from __future__ import annotations

import struct
import zlib

__all__ = ["GZIP_HEADER", "deflate_bomb", "gzip_bomb", "memory_kib", "zlib_bomb"]

GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
_SEGMENT = 1 << 20


def deflate_bomb(size: int) -> bytes:
    """Raw deflate data of `size` zero bytes (a multiple of 1 MiB), made in a moment: a
    full flush after each MiB makes every segment after the first the same bytes, so
    one is compressed and repeated. About 1 kB per MiB."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    block = bytes(_SEGMENT)
    first = compressor.compress(block) + compressor.flush(zlib.Z_FULL_FLUSH)
    again = compressor.compress(block) + compressor.flush(zlib.Z_FULL_FLUSH)
    return first + again * (size // _SEGMENT - 1) + compressor.flush()


def gzip_bomb(size: int, trailer: bool = True) -> bytes:
    """A gzip stream of `size` zero bytes. Without `trailer` its CRC is left 0 (it takes
    seconds for gigabytes): for bombs no reader should inflate to the end."""
    crc = 0
    if trailer:
        block = bytes(_SEGMENT)
        for _ in range(size // _SEGMENT):
            crc = zlib.crc32(block, crc)
    return GZIP_HEADER + deflate_bomb(size) + struct.pack("<II", crc, size & 0xFFFFFFFF)


def zlib_bomb(size: int) -> bytes:
    """The zlib format (HTTP's and gRPC's "deflate") of `size` zero bytes, its Adler-32
    left 1 (that of no data): for bombs no reader should inflate to the end."""
    return b"\x78\xda" + deflate_bomb(size) + struct.pack(">I", 1)


def memory_kib(pid: int, field: str = "VmRSS") -> int:
    """A process's memory figure from /proc/<pid>/status: VmRSS now, VmHWM its peak."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")
