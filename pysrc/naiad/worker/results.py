"""A backend's results as the worker's responses: each one's outcome record
(naiad/outcome_record.py) and its outputs' bytes in wire layout.

The worker loop (worker/main.py) and decoupled streams (worker/decoupled.py) both answer
through it; WorkerEndpoint.respond_results writes the same record in C++ for outputs it
can copy as they are, and calls `wire_one` for the rest. Worker thread or a model's own
threads; no state but a cache of dtype names.
"""

from __future__ import annotations

import numpy as np

from naiad import _core, datatypes, outcome_record
from naiad.backends.base import RequestError
from naiad.memory import cuda_ipc

FINAL = _core.RESPONSE_FINAL
FINAL_ERROR = _core.RESPONSE_FINAL | _core.RESPONSE_ERROR
FINAL_MODEL_ERROR = FINAL_ERROR | _core.RESPONSE_MODEL_ERROR

# numpy dtype -> wire datatype, filled as outputs show them.
_WIRE_OF_DTYPE: dict = {}


def _wire_datatype(dtype: np.dtype) -> str:
    """The wire datatype of an output dtype not in _WIRE_OF_DTYPE yet; remembered there."""
    wire = _WIRE_OF_DTYPE[dtype] = datatypes.wire_of_numpy(dtype)
    return wire


def wire_one(result) -> tuple:
    """One backend Response or RequestError -> (flags, error_code, JSON, output buffers
    in wire layout) of its final response, the code in the record."""
    if isinstance(result, RequestError):
        flags = FINAL_MODEL_ERROR if result.by_model else FINAL_ERROR
        return flags, result.code, outcome_record.error_record(result.message), ()
    wire_of = _WIRE_OF_DTYPE.get
    entries = []
    buffers = []
    for name, array in result.outputs:
        datatype = wire_of(array.dtype) or _wire_datatype(array.dtype)
        entries.append([name, datatype, array.shape])
        if type(array) is cuda_ipc.DeviceArray:  # for a CUDA region: shm_outputs copies it
            buffers.append(array)
        else:
            buffers.append(datatypes.wire_buffer(array, datatype))
    return FINAL, 0, outcome_record.outputs_record(entries, result.parameters), buffers


def wire_results(results: list) -> list:
    """The backend's Responses and RequestErrors -> responses for
    `WorkerEndpoint.respond`: one final response per request, (request_index, flags,
    error_code, JSON, output buffers in wire layout), as `wire_one` converts them."""
    return [(index, *wire_one(result)) for index, result in enumerate(results)]
