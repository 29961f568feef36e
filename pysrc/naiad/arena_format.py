"""The layout of request and result blocks in the shared arena.

Both blocks are `[u32 header length][header JSON][padding][tensor data ...]`, each
tensor 64-byte aligned, offsets relative to the block start. The frontend writes
request blocks (through the core's one copy) and reads result blocks; a worker does
the opposite. JSON carries only names, shapes and offsets: tensor bytes are never
encoded.
"""

from __future__ import annotations

import struct

import numpy as np
import orjson

ALIGN = 64
_LEN = struct.Struct("<I")

# csrc/channel.h RequestRecord
REQUEST_RECORD = np.dtype(
    [("request_id", "<u8"), ("offset", "<u8"), ("size", "<u8"), ("batch_size", "<u4"), ("_", "<u4")]
)


def _align(value: int) -> int:
    return (value + ALIGN - 1) & ~(ALIGN - 1)


def build_block(
    header: dict, entries: list[list], sizes: list[int]
) -> tuple[bytes, list[int], int]:
    """Fills `offset` (entry[-2]) of each tensor entry and returns (prefix, offsets, size).

    The header length changes with the offsets' digits, so the data start is computed
    from an upper bound of the header length: offsets are placed after room for it.
    """
    # Offsets are bounded by the block size; reserve 20 digits per tensor entry.
    bound = len(orjson.dumps(header)) + 20 * len(entries) + _LEN.size
    cursor = _align(bound)
    offsets = []
    for entry, size in zip(entries, sizes):
        entry[-2] = cursor
        offsets.append(cursor)
        cursor = _align(cursor + size)
    encoded = orjson.dumps(header)
    prefix = _LEN.pack(len(encoded)) + encoded
    return prefix, offsets, max(cursor, len(prefix))


def read_header(arena, offset: int) -> dict:
    (length,) = _LEN.unpack_from(arena, offset)
    start = offset + _LEN.size
    return orjson.loads(arena[start : start + length])


def encode_request(request_id: str, inputs, outputs, parameters: dict) -> tuple[int, list]:
    """A request block for the core's submit: (block size, [(offset, buffer), ...]).

    `inputs` are InputTensor records (data in wire layout); `outputs` the requested
    output names or None for all.
    """
    entries = [[t.name, t.datatype, list(t.shape), 0, len(t.data)] for t in inputs]
    header = {"id": request_id, "inputs": entries, "outputs": outputs, "parameters": parameters}
    sizes = [entry[-1] for entry in entries]
    prefix, offsets, size = build_block(header, entries, sizes)
    parts = [(0, prefix)]
    parts.extend((offset, t.data) for offset, t in zip(offsets, inputs))
    return size, parts


def encode_result(responses: list, timings: list[int]) -> tuple[bytes, list, int]:
    """A result block from per-request outcomes, for a worker.

    `responses[i]` is either an error string or a list of (name, datatype, shape,
    buffer) with the buffer in wire layout. Returns (prefix, [(offset, buffer)], size).
    """
    header_responses = []
    entries = []
    buffers = []
    for outcome in responses:
        if isinstance(outcome, str):
            # The TritonError code (INTERNAL = 1 unless the model chose one) picks the
            # status the client sees.
            header_responses.append({"error": str(outcome), "code": getattr(outcome, "code", 1)})
            continue
        tensors = []
        for name, datatype, shape, buffer in outcome:
            entry = [name, datatype, list(shape), 0, len(buffer)]
            tensors.append(entry)
            entries.append(entry)
            buffers.append(buffer)
        header_responses.append({"outputs": tensors})
    header = {"responses": header_responses, "timings": timings}
    prefix, offsets, size = build_block(header, entries, [len(b) for b in buffers])
    return prefix, list(zip(offsets, buffers)), size
