"""Ragged batching for the framework backends, as Triton 2.51's backends do it: inputs with
`allow_ragged_batch`, the `batch_input` tensors computed from a batch's requests, and the
`batch_output` tensors scattered back to them.

- A ragged input reaches the model as one 1-D tensor, the requests' elements one after
  another ([total element count], Triton's "non-nested tensor"), whatever their shapes
  (`tensors.ragged_join`).
- Each `batch_input` is a tensor of its own, named by its target, computed from the shapes
  of its source input in the batch's requests (`batch_inputs`).
- A `batch_output` of kind BATCH_SCATTER_WITH_INPUT_SHAPE gives each request the next run
  of elements of the model's output, shaped as the request's source input (`scatter`).

The Python backend needs none of this: each request is its own pb_utils request, and
Triton 2.51's Python backend gives a model no batch inputs (checked against it).
"""

from __future__ import annotations

import numpy as np

_DTYPES = {"TYPE_INT32": np.dtype(np.int32), "TYPE_FP32": np.dtype(np.float32)}
SCATTER_WITH_INPUT_SHAPE = "BATCH_SCATTER_WITH_INPUT_SHAPE"


class BatchIO:
    """A model's ragged inputs, batch inputs and batch outputs, from its config (Triton's
    JSON). Falsy when the model has none of them."""

    __slots__ = ("ragged", "inputs", "scatter_sources")

    def __init__(self, config: dict):
        self.ragged = frozenset(
            io["name"] for io in config.get("input", []) if io.get("allow_ragged_batch")
        )
        # (kind, target name, numpy dtype, source input), in the config's order.
        self.inputs = [
            (
                entry.get("kind", "BATCH_ELEMENT_COUNT"),
                target,
                _DTYPES[entry.get("data_type", "TYPE_INT32")],
                entry["source_input"][0],
            )
            for entry in config.get("batch_input", [])
            for target in entry.get("target_name", [])
        ]
        # Output name -> the input whose shapes it is scattered by.
        self.scatter_sources = {
            target: entry["source_input"][0]
            for entry in config.get("batch_output", [])
            if entry.get("kind", SCATTER_WITH_INPUT_SHAPE) == SCATTER_WITH_INPUT_SHAPE
            for target in entry.get("target_name", [])
        }

    def __bool__(self) -> bool:
        return bool(self.ragged or self.inputs or self.scatter_sources)

    @property
    def input_names(self) -> list[str]:
        return [target for _kind, target, _dtype, _source in self.inputs]

    def batch_inputs(self, headers: list) -> dict:
        """Each batch input's tensor for the requests of `headers`, by target name."""
        return {
            target: _batch_input(kind, dtype, [_shape_of(header, source) for header in headers])
            for kind, target, dtype, source in self.inputs
        }

    def scatter(self, name: str, array: np.ndarray, headers: list) -> list:
        """Batch output `name` of the whole batch cut into each request's piece, shaped as
        its source input; raises ValueError when the elements do not add up."""
        shapes = [_shape_of(header, self.scatter_sources[name]) for header in headers]
        counts = [int(np.prod(shape, dtype=np.int64)) for shape in shapes]
        flat = array.reshape(-1)
        if flat.size != sum(counts):
            raise ValueError(
                f"batch output '{name}' has {flat.size} elements, its source input "
                f"'{self.scatter_sources[name]}' has {sum(counts)} in the batch"
            )
        pieces = []
        start = 0
        for shape, count in zip(shapes, counts):
            pieces.append(flat[start : start + count].reshape(shape))
            start += count
        return pieces


def _shape_of(header, name: str) -> tuple:
    for input_name, _datatype, shape in header.inputs:
        if input_name == name:
            return tuple(shape)
    raise ValueError(f"the request has no input '{name}', the source of a batch input")


def _batch_input(kind: str, dtype: np.dtype, shapes: list) -> np.ndarray:
    """Triton's BackendInputCollector::ProcessBatchInput for one batch input, over the
    shapes (batch dim first) of its source input in each request."""
    counts = np.array([int(np.prod(shape, dtype=np.int64)) for shape in shapes], dtype=np.int64)
    if kind == "BATCH_ELEMENT_COUNT":
        values = counts
    elif kind == "BATCH_ACCUMULATED_ELEMENT_COUNT":
        values = np.cumsum(counts)
    elif kind == "BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO":
        values = np.concatenate([[0], np.cumsum(counts)])
    elif kind == "BATCH_MAX_ELEMENT_COUNT_AS_SHAPE":
        # Only the shape carries meaning (Triton leaves the data uninitialized).
        values = np.zeros(int(counts.max(initial=0)), dtype=np.int64)
    elif kind in ("BATCH_ITEM_SHAPE", "BATCH_ITEM_SHAPE_FLATTEN"):
        # One row per batch item: the source's shape without its batch dim.
        rows = [shape[1:] for shape in shapes for _item in range(shape[0] if shape else 0)]
        width = len(shapes[0]) - 1 if shapes and shapes[0] else 0
        values = np.array(rows, dtype=np.int64).reshape(len(rows), width)
        if kind == "BATCH_ITEM_SHAPE_FLATTEN":
            values = values.reshape(-1)
    else:
        raise ValueError(f"unknown batch input kind '{kind}'")
    return np.ascontiguousarray(values, dtype=dtype)
