"""Tensors in and out of the in-process API.

In: numpy arrays, lists (made numpy arrays), objects with `__dlpack__` on the CPU
(torch CPU tensors, ...), or a `Tensor` (an output passed on). They become the
request's InputTensor in Triton's raw layout; the core validates them against the
model config with the one validator, as it does any protocol's request.

Out: `Tensor`, Triton's output class in short: `data_type` (Triton's datatype name,
"FP32"), `shape`, the bytes; `numpy.from_dlpack(tensor)` (or `to_numpy()`) views
the data, `to_bytes_array()` / `to_string_array()` read a BYTES tensor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from naiad.datatypes import deserialize_bytes, numpy_dtype, serialize_bytes, wire_of_numpy
from naiad.inprocess.errors import InvalidArgumentError, UnsupportedError
from naiad.types import InputTensor

_DL_CPU = 1  # DLPack's kDLCPU


@dataclass
class Tensor:
    """A tensor's datatype, shape and data in Triton's layout (little-endian
    elements; for BYTES, each element's 4-byte length before it)."""

    data_type: str
    shape: list[int]
    data: bytes | bytearray | memoryview

    @property
    def size(self) -> int:
        """Bytes of data."""
        return len(self.data)

    def to_numpy(self) -> np.ndarray:
        """A read-only numpy view of the data (BYTES: an object array of bytes)."""
        if self.data_type == "BYTES":
            return self.to_bytes_array()
        try:
            dtype = numpy_dtype(self.data_type)
        except KeyError:
            raise UnsupportedError(
                f"Tensor of data type {self.data_type} has no numpy dtype"
            ) from None
        return np.frombuffer(self.data, dtype=dtype).reshape(self.shape)

    def __dlpack__(self, *, stream=None, **kwargs):
        if self.data_type == "BYTES":
            # As Triton: BYTES has no DLPack type; to_bytes_array() reads it.
            raise UnsupportedError(
                "DLPack does not support tensors of data type BYTES: use to_bytes_array()"
            )
        array = self.to_numpy()
        try:
            # A consumer that speaks DLPack 1.0 (numpy >= 2.1) takes the read-only view.
            return array.__dlpack__(stream=stream, **kwargs)
        except BufferError:
            # Older consumers (torch.from_dlpack) cannot be told it is read-only: a copy.
            return array.copy().__dlpack__(stream=stream, **kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (_DL_CPU, 0)

    def to_bytes_array(self) -> np.ndarray:
        """A BYTES tensor's elements, an object array of bytes in its shape."""
        if self.data_type != "BYTES":
            raise InvalidArgumentError(f"Tensor has data type {self.data_type} not BYTES")
        return deserialize_bytes(self.data).reshape(self.shape)

    def to_string_array(self) -> np.ndarray:
        """A BYTES tensor's elements decoded as UTF-8, in its shape."""
        elements = self.to_bytes_array()
        decoded = np.empty(elements.shape, dtype=np.object_)
        decoded.reshape(-1)[:] = [element.decode("utf-8") for element in elements.reshape(-1)]
        return decoded

    @staticmethod
    def from_bytes_array(array) -> Tensor:
        """A BYTES tensor of strings or bytes (a list or a numpy array)."""
        array = np.asarray(array, dtype=np.object_)
        return Tensor("BYTES", list(array.shape), serialize_bytes(array))

    from_string_array = from_bytes_array

    @staticmethod
    def _from_object(value: Any) -> Tensor:
        """The tensor of an input value (see the module's docstring)."""
        if isinstance(value, Tensor):
            return value
        if isinstance(value, (list, tuple)):
            value = np.asarray(value)
        elif not isinstance(value, (np.ndarray, np.generic)):
            if not hasattr(value, "__dlpack__"):
                raise InvalidArgumentError(
                    f"Input type {type(value)} not supported. Must be one of "
                    "numpy.ndarray, list, Tensor or the type must support __dlpack__"
                )
            try:
                value = np.from_dlpack(value)
            except (BufferError, RuntimeError, TypeError, ValueError) as exc:
                # A device tensor, or a type numpy has no dtype for (bfloat16).
                raise InvalidArgumentError(
                    f"Input of type {type(value)} cannot be read on the host: {exc}"
                ) from None
        array = np.asarray(value)
        try:
            data_type = wire_of_numpy(array.dtype)
        except TypeError as exc:
            raise InvalidArgumentError(str(exc)) from None
        if data_type == "BYTES":
            return Tensor(data_type, list(array.shape), serialize_bytes(array))
        shape = list(array.shape)  # before ascontiguousarray, which makes a 0-d array 1-d
        array = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
        # A view, not a copy: the core copies it into the arena when it is queued.
        return Tensor(data_type, shape, memoryview(array).cast("B"))


def input_tensors(inputs: dict) -> list[InputTensor]:
    """The request's input tensors of `inputs` {name: value}."""
    tensors = []
    for name, value in inputs.items():
        if not isinstance(name, str):
            raise InvalidArgumentError(f"input names must be strings, got {name!r}")
        tensor = Tensor._from_object(value)
        tensors.append(InputTensor(name, tensor.data_type, list(tensor.shape), tensor.data))
    return tensors
