"""The inputs of a batch as whole [N, ...] arrays, for framework backends that run a batch
in one call (pytorch, tensorrt).

The core lays a batch's rows out one request after another in the arena (batch-major
assembly), so the requests' input arrays are usually consecutive slices of one tensor:
`batch_major` gives that tensor as a view, without a copy, and copies only when the
rows are not consecutive. Where the worker hands the batch's tensors over itself
(`Batch.tensors`, by input name), those are used as they are. `device_pieces` gives a
GPU backend the parts of an input some requests placed in CUDA shared memory.
"""

from __future__ import annotations

import numpy as np

from naiad.backends.base import Batch


def batch_major(batch: Batch, batching: bool, ragged: frozenset = frozenset()) -> list:
    """Each input of the batch (in the first request's order) as one array: for a batching
    model the [N, ...] concatenation of the requests' rows, without a copy where the core
    laid them out one after another (the common case); else the one request's arrays.
    An input named in `ragged` (allow_ragged_batch) is the 1-D run of every request's
    elements (`ragged_join`)."""
    first = batch.arrays[0]
    names = batch.headers[0].input_names
    if len(batch.arrays) == 1 or not batching:
        return [
            ragged_join(array, ()) if name in ragged else array for name, array in zip(names, first)
        ]
    tensors = getattr(batch, "tensors", None)
    if tensors and all(name in tensors for name in names):
        return [
            ragged_join(tensors[name], ()) if name in ragged else tensors[name] for name in names
        ]
    per_request = batch.arrays
    if any(header.input_names != names for header in batch.headers):
        # A request that named its inputs in another order: its arrays by the first's order.
        per_request = [
            arrays
            if header.input_names == names
            else [arrays[header.input_names.index(name)] for name in names]
            for header, arrays in zip(batch.headers, batch.arrays)
        ]
    columns = [[arrays[index] for arrays in per_request] for index in range(len(first))]
    return [
        ragged_join(None, parts) if name in ragged else _rows_together(parts)
        for name, parts in zip(names, columns)
    ]


def ragged_join(whole, parts) -> np.ndarray:
    """A ragged input as Triton's backends give it to the model: one 1-D array of the
    requests' elements, one request after another. `whole`: the batch tensor over the
    arena (any shape) when there is one, else the requests' arrays `parts` are joined
    (a view where they lie one after another)."""
    if whole is not None:
        return whole.reshape(-1)
    return _rows_together([part.reshape(-1) for part in parts])


def _rows_together(parts: list) -> np.ndarray:
    """One [N, ...] array of consecutive row blocks: a view when each part starts where the
    previous one ends in the same buffer, else a copy."""
    head = parts[0]
    if head.dtype != object and all(part.flags.c_contiguous for part in parts):
        base = head.base
        address = head.__array_interface__["data"][0]
        end = address + head.nbytes
        for part in parts[1:]:
            if part.base is not base or part.__array_interface__["data"][0] != end:
                break
            end += part.nbytes
        else:
            if base is not None:
                rows = sum(part.shape[0] for part in parts)
                origin = np.frombuffer(base, np.uint8).__array_interface__["data"][0]
                return np.ndarray((rows, *head.shape[1:]), head.dtype, base, address - origin)
    return np.concatenate(parts)


def device_pieces(batch: Batch, index: int, name: str) -> list | None:
    """Input `name` (the first request's input `index`) of each request, when at least one
    request placed it in CUDA shared memory on the backend's device: that request's
    DeviceArray, the others' host arrays (contiguous). None when none did."""
    device_inputs = batch.device_inputs
    if not device_inputs:
        return None
    pieces = []
    found = False
    for k, (header, arrays) in enumerate(zip(batch.headers, batch.arrays)):
        names = header.input_names
        position = index if index < len(names) and names[index] == name else names.index(name)
        piece = device_inputs.get((k, position))
        if piece is None:
            piece = np.ascontiguousarray(arrays[position])
        else:
            found = True
        pieces.append(piece)
    return pieces if found else None
