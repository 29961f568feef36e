"""The request parameters that make a request part of a sequence (`sequence_id`,
`sequence_start`, `sequence_end`: over HTTP, gRPC and a worker's BLS calls alike) and
Triton's messages for the requests the core's sequence batcher
(csrc/core/sequence_batch_scheduler.h) refuses. Shared by the frontend and the workers."""

from __future__ import annotations

from naiad import _core
from naiad.errors import Internal, InvalidArgument, NaiadError

_UINT64_MAX = (1 << 64) - 1
START, END = 1, 2  # csrc/core/submit_request.h kSequenceFlagStart / kSequenceFlagEnd
# Triton's message (UNAVAILABLE) for the requests of a sequence that waited in the
# backlog past a request's `timeout` (the core's kCompletionSequenceTimedOut).
SEQUENCE_TIMEOUT = "timeout of the corresponding sequence has been expired"


class ParameterError(Internal):
    """A sequence parameter of the wrong type: Triton's HTTP front end answers 500."""


def sequence_of(parameters: dict) -> tuple[int, bytes, int]:
    """(numeric correlation id, string correlation id as UTF-8 or b"", START|END flags)
    from the request parameters, as the core's SubmitOptions take them."""
    if not parameters:
        return 0, b"", 0
    corrid = parameters.get("sequence_id", 0)
    number, key = 0, b""
    if type(corrid) is str:
        key = corrid.encode()
    elif type(corrid) is int and 0 <= corrid <= _UINT64_MAX:
        number = corrid
    else:
        raise ParameterError(
            "Unable to parse 'sequence_id': attempt to access JSON non-string as string"
        )
    flags = 0
    for name, flag in (("sequence_start", START), ("sequence_end", END)):
        value = parameters.get(name, False)
        if type(value) is not bool:
            raise ParameterError(
                f"Unable to parse '{name}': attempt to access JSON non-boolean as boolean"
            )
        if value:
            flags |= flag
    return number, key, flags


def refusal(code: int, model_name: str, sequence: tuple[int, bytes, int]) -> NaiadError | None:
    """Triton's error for a request the sequence batcher refused (SUBMIT_* `code`), or
    None when `code` is not one of its refusals."""
    if code == _core.SUBMIT_SEQUENCE_BATCH_SIZE:
        return InvalidArgument(
            f"inference request to model '{model_name}' must specify batch-size 1 due to "
            "requirements of sequence batcher"
        )
    if code == _core.SUBMIT_NO_SEQUENCE_ID:
        return InvalidArgument(
            f"inference request to model '{model_name}' must specify a non-zero or non-empty "
            "correlation ID"
        )
    if code == _core.SUBMIT_SEQUENCE_NOT_STARTED:
        corrid = sequence[1].decode() if sequence[1] else str(sequence[0])
        return InvalidArgument(
            f"inference request for sequence {corrid} to model '{model_name}' must specify "
            "the START flag on the first request of the sequence"
        )
    return None
