"""The JSON part of a request block: the worker's view of the request.

Every block in the shared arena (request blocks, batch descriptors, response blocks)
is laid out by csrc/ipc_schema.h and read or written only through `_core`; JSON
carries only names, datatypes, shapes and parameters, never offsets, sizes or tensor
bytes.
"""

from __future__ import annotations

import orjson


def request_metadata(request_id: str, inputs, outputs, parameters: dict) -> bytes:
    """The worker's view of a request (csrc/ipc_schema.h, request block metadata) for
    the core's submit. `inputs` are InputTensor records, in the order their buffers
    are submitted; `outputs` the requested output names or None for all."""
    entries = [[t.name, t.datatype, t.shape] for t in inputs]
    return orjson.dumps(
        {"id": request_id, "inputs": entries, "outputs": outputs, "parameters": parameters}
    )
