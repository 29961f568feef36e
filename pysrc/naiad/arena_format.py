"""The layout of request and result blocks in the shared arena.

Both blocks are `[u32 header length][header JSON][padding][tensor data ...]`, the
tensors in header order, each 64-byte aligned (so offsets follow from the header). The
frontend writes request blocks (csrc/request_block.h, for the lane and the general path
alike, through the core's one copy) and reads result blocks; a worker does the
opposite. JSON carries only names, shapes and offsets: tensor bytes are never encoded.
"""

from __future__ import annotations

import struct

import orjson

ALIGN = 64
_LENGTH = struct.Struct("<I")  # the header length that starts a block
LENGTH_SIZE = _LENGTH.size


def build_block(header: dict, sizes: list[int]) -> tuple[bytes, list[int], int]:
    """Encodes `header` and places tensors of `sizes` after it: (prefix, offsets, size).

    Offsets are not written into the header: readers derive them the same way, from
    the header's length and each tensor's byte size in order (`tensor_offsets`).
    """
    encoded = orjson.dumps(header)
    prefix = _LENGTH.pack(len(encoded)) + encoded
    offsets = tensor_offsets(len(prefix), sizes)
    end = offsets[-1] + sizes[-1] if sizes else len(prefix)
    return prefix, offsets, max(end, len(prefix))


def tensor_offsets(prefix_length: int, sizes) -> list[int]:
    """Offsets (from the block start) of consecutive tensors of `sizes`, 64-byte aligned."""
    offsets = []
    cursor = prefix_length
    for size in sizes:
        cursor = (cursor + ALIGN - 1) & -ALIGN
        offsets.append(cursor)
        cursor += size
    return offsets


def header_text(arena, offset: int):
    """The JSON header of the block at `offset`, as a view of the arena."""
    (length,) = _LENGTH.unpack_from(arena, offset)
    start = offset + LENGTH_SIZE
    return arena[start : start + length]


def read_header(arena, offset: int) -> tuple[dict, int]:
    """(header, prefix length) of the block at `offset`."""
    text = header_text(arena, offset)
    return orjson.loads(text), LENGTH_SIZE + len(text)


def encode_result(responses: list, buffers: list, timings: list[int]) -> tuple[bytes, list, int]:
    """A result block, for a worker: (prefix, [(offset, buffer)], size).

    `responses[i]` is request i's outcome: {"outputs": [[name, datatype, shape, nbytes],
    ...]} or {"error": message, "code": TritonError code}; `buffers` hold every output's
    bytes in wire layout, in the same order.
    """
    header = {"responses": responses, "timings": timings}
    prefix, offsets, size = build_block(header, [len(b) for b in buffers])
    return prefix, list(zip(offsets, buffers)), size
