"""Tensor datatypes: Triton's wire names, config enum names, numpy dtypes, BYTES layout.

The datatypes themselves are the core's table (csrc/codec/datatype.h), read through
_core: every Python table of datatypes is made from `DATATYPES`."""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from naiad import _core


@dataclass(frozen=True)
class Datatype:
    """One of Triton's tensor datatypes: a row of the core's table (csrc/codec/datatype.h)."""

    name: str  # wire name: "FP32"
    config_name: str  # model_config.proto DataType name: "TYPE_FP32"
    triton_type: int  # TRITONSERVER_DataType value
    size: int  # bytes per element; 0 for BYTES, whose elements vary
    kind: str  # bool, unsigned, signed, float, float16, bfloat16 or bytes
    numpy: np.dtype | None  # little-endian; an object array for BYTES; None for BF16


def _numpy_of(kind: str, size: int) -> np.dtype | None:
    if kind == "bool":
        return np.dtype(np.bool_)
    if kind == "bytes":
        return np.dtype(np.object_)
    if kind == "bfloat16":  # numpy has no bfloat16
        return None
    letter = {"unsigned": "u", "signed": "i", "float": "f", "float16": "f"}[kind]
    return np.dtype(f"<{letter}{size}")


# Wire name -> Datatype, in the table's order.
DATATYPES = {
    row["name"]: Datatype(**row, numpy=_numpy_of(row["kind"], row["size"]))
    for row in _core.datatypes()
}
WIRE_DATATYPES = frozenset(DATATYPES)

_NUMPY_OF_WIRE = {name: d.numpy for name, d in DATATYPES.items() if d.numpy is not None}
_WIRE_OF_CONFIG = {d.config_name: name for name, d in DATATYPES.items()}
_CONFIG_OF_WIRE = {name: d.config_name for name, d in DATATYPES.items()}


def numpy_dtype(wire: str) -> np.dtype:
    """numpy dtype for a wire datatype; KeyError for an unknown one."""
    return _NUMPY_OF_WIRE[wire]


def wire_of_config(config_type: str) -> str:
    """'TYPE_FP32' -> 'FP32', 'TYPE_STRING' -> 'BYTES'."""
    return _WIRE_OF_CONFIG[config_type]


def config_of_wire(wire: str) -> str:
    return _CONFIG_OF_WIRE[wire]


def wire_of_numpy(dtype: np.dtype) -> str:
    dtype = np.dtype(dtype)
    if dtype.kind in ("O", "S", "U"):
        return "BYTES"
    for wire, candidate in _NUMPY_OF_WIRE.items():
        if candidate == dtype.newbyteorder("<") and wire != "BYTES":
            return wire
    raise TypeError(f"no Triton datatype for numpy dtype {dtype}")


def element_size(wire: str) -> int:
    """Bytes per element; 0 for BYTES, whose elements vary."""
    return DATATYPES[wire].size


def element_count(shape) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count


def wire_buffer(array: np.ndarray, wire: str):
    """The bytes of `array` in wire layout for datatype `wire`: BYTES serialized, any
    other C-ordered little-endian (a view when the array already is)."""
    if wire == "BYTES":
        return serialize_bytes(array)
    if not array.flags.c_contiguous or array.dtype.byteorder == ">":
        array = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
    return memoryview(array).cast("B") if array.nbytes else b""


def serialize_bytes(array: np.ndarray) -> bytes:
    """Object/bytes/str array -> Triton's BYTES layout (u32 LE length, then the bytes), C order."""
    parts = []
    for item in np.asarray(array, dtype=np.object_).reshape(-1):
        if isinstance(item, str):
            item = item.encode("utf-8")
        elif not isinstance(item, (bytes, bytearray, memoryview)):
            item = str(item).encode("utf-8")
        parts.append(struct.pack("<I", len(item)))
        parts.append(bytes(item))
    return b"".join(parts)


def deserialize_bytes(buffer, count: int | None = None) -> np.ndarray:
    """Triton's BYTES layout -> 1-D object array of bytes.

    Raises ValueError when the buffer is truncated or, given `count`, holds a different
    number of elements.
    """
    view = memoryview(buffer).cast("B")
    items = []
    offset = 0
    end = len(view)
    while offset < end:
        if offset + 4 > end:
            raise ValueError("BYTES tensor data is truncated inside an element length")
        (length,) = struct.unpack_from("<I", view, offset)
        offset += 4
        if offset + length > end:
            raise ValueError("BYTES tensor data is truncated inside an element")
        items.append(bytes(view[offset : offset + length]))
        offset += length
    if count is not None and len(items) != count:
        raise ValueError(f"BYTES tensor holds {len(items)} elements, expected {count}")
    result = np.empty(len(items), dtype=np.object_)
    result[:] = items
    return result


def bytes_element_count(buffer) -> int:
    """Number of elements in a BYTES buffer; ValueError if it is malformed."""
    return len(deserialize_bytes(buffer))
