"""One datatype table: the core's (csrc/codec/datatype.h). Python's view of it
(naiad.datatypes) is the same rows, every Triton datatype is there with its size and
numpy type, and pb_utils' tables are made of it."""

import numpy as np
from naiad import _core, datatypes
from naiad import triton_python_backend_utils as pb_utils

# Triton's datatypes as its documentation and tritonclient.utils state them: wire name,
# model-config name, TRITONSERVER_DataType value, bytes per element, numpy dtype.
TRITON = [
    ("BOOL", "TYPE_BOOL", 1, 1, np.bool_),
    ("UINT8", "TYPE_UINT8", 2, 1, np.uint8),
    ("UINT16", "TYPE_UINT16", 3, 2, np.uint16),
    ("UINT32", "TYPE_UINT32", 4, 4, np.uint32),
    ("UINT64", "TYPE_UINT64", 5, 8, np.uint64),
    ("INT8", "TYPE_INT8", 6, 1, np.int8),
    ("INT16", "TYPE_INT16", 7, 2, np.int16),
    ("INT32", "TYPE_INT32", 8, 4, np.int32),
    ("INT64", "TYPE_INT64", 9, 8, np.int64),
    ("FP16", "TYPE_FP16", 10, 2, np.float16),
    ("FP32", "TYPE_FP32", 11, 4, np.float32),
    ("FP64", "TYPE_FP64", 12, 8, np.float64),
    ("BYTES", "TYPE_STRING", 13, 0, np.object_),
    ("BF16", "TYPE_BF16", 14, 2, None),  # numpy has no bfloat16
]


def test_the_python_view_is_the_cores_table():
    rows = _core.datatypes()
    assert [row["name"] for row in rows] == list(datatypes.DATATYPES)
    for row in rows:
        found = datatypes.DATATYPES[row["name"]]
        assert (found.name, found.config_name, found.triton_type, found.size, found.kind) == (
            row["name"],
            row["config_name"],
            row["triton_type"],
            row["size"],
            row["kind"],
        )


def test_every_triton_datatype_is_there_with_its_size_and_numpy_type():
    assert set(datatypes.DATATYPES) == {name for name, *_ in TRITON}
    for name, config_name, triton_type, size, numpy_type in TRITON:
        found = datatypes.DATATYPES[name]
        assert (found.config_name, found.triton_type, found.size) == (
            config_name,
            triton_type,
            size,
        ), name
        assert datatypes.element_size(name) == size
        assert datatypes.wire_of_config(config_name) == name
        assert datatypes.config_of_wire(name) == config_name
        if numpy_type is None:
            assert found.numpy is None
            continue
        assert found.numpy == np.dtype(numpy_type)
        assert datatypes.numpy_dtype(name) == np.dtype(numpy_type)
        if name != "BYTES":
            assert found.numpy.itemsize == size
            assert datatypes.wire_of_numpy(np.dtype(numpy_type)) == name


def test_pb_utils_tables_are_made_of_it():
    for name, config_name, triton_type, _size, numpy_type in TRITON:
        assert getattr(pb_utils, f"TRITONSERVER_TYPE_{name}") == triton_type
        assert pb_utils.WIRE_OF_TRITON_TYPE[triton_type] == name
        assert pb_utils.TRITON_TYPE_OF_WIRE[name] == triton_type
        assert pb_utils.triton_to_numpy_type(triton_type) is numpy_type
        if numpy_type is not None:
            expected = bool if name == "BOOL" else numpy_type  # Triton's table says bool
            assert pb_utils.triton_string_to_numpy(config_name) is expected
            assert pb_utils.numpy_to_triton_type(numpy_type) == triton_type
