"""Tensor datatypes: Triton's wire names, config enum names, numpy dtypes, BYTES layout."""

from __future__ import annotations

import struct

import numpy as np

# Wire datatype -> numpy dtype (little-endian). BYTES is an object array of bytes.
_NUMPY_OF_WIRE = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype("<u1"),
    "UINT16": np.dtype("<u2"),
    "UINT32": np.dtype("<u4"),
    "UINT64": np.dtype("<u8"),
    "INT8": np.dtype("<i1"),
    "INT16": np.dtype("<i2"),
    "INT32": np.dtype("<i4"),
    "INT64": np.dtype("<i8"),
    "FP16": np.dtype("<f2"),
    "FP32": np.dtype("<f4"),
    "FP64": np.dtype("<f8"),
    "BYTES": np.dtype(np.object_),
}

# model_config.proto DataType enum name (TYPE_FP32) <-> wire name (FP32). TYPE_STRING is BYTES.
_WIRE_OF_CONFIG = {f"TYPE_{name}": name for name in _NUMPY_OF_WIRE if name != "BYTES"}
_WIRE_OF_CONFIG["TYPE_STRING"] = "BYTES"
_WIRE_OF_CONFIG["TYPE_BF16"] = "BF16"
_CONFIG_OF_WIRE = {wire: cfg for cfg, wire in _WIRE_OF_CONFIG.items()}

WIRE_DATATYPES = frozenset(_NUMPY_OF_WIRE) | {"BF16"}


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
    if wire == "BYTES":
        return 0
    if wire == "BF16":
        return 2
    return _NUMPY_OF_WIRE[wire].itemsize


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
