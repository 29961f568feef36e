"""A response's outcome record: the JSON of each response in a response block
(csrc/ipc/ipc_schema.h), {"outputs": [[name, datatype, shape], ...], "parameters": {...}}
for a success, {"error": message} for a failure (its code is a field of the block), and
{"empty": true} for a decoupled model's final flag without a response. The one Python
writer and reader of it: a worker writes it, the frontend and a worker's BLS calls read
it. (C++ reads it in csrc/ipc/result_block.cc; _core.pyx's WorkerEndpoint writes the
success record of outputs it copies itself.)"""

from __future__ import annotations

import orjson

EMPTY = b'{"empty":true}'


def outputs_record(entries: list, parameters: dict | None = None) -> bytes:
    """A success's record, `entries` its outputs as [name, datatype, shape]."""
    if parameters:
        return orjson.dumps({"outputs": entries, "parameters": parameters})
    return orjson.dumps({"outputs": entries})


def error_record(message: str) -> bytes:
    """A failure's record."""
    return orjson.dumps({"error": message})


class Outcome:
    """A record, read: `outputs` [(name, datatype, shape)] in the order of the
    response's output slots, `parameters` ({} without), `error` (a failure's message,
    else None), `empty` (a final flag without a response)."""

    __slots__ = ("outputs", "parameters", "error", "empty")

    def __init__(self, outputs=(), parameters=None, error=None, empty=False):
        self.outputs = outputs
        self.parameters = parameters or {}
        self.error = error
        self.empty = empty


def read(json) -> Outcome:
    """The Outcome of a record's JSON (bytes or a str; empty reads as no outputs)."""
    record = orjson.loads(json) if json else {}
    return Outcome(
        record.get("outputs") or (),
        record.get("parameters"),
        record.get("error"),
        bool(record.get("empty")),
    )
