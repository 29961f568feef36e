"""Requests answered by a stream of responses (decoupled models).

A front end that streams (gRPC ModelStreamInfer, HTTP generate_stream, or a plain
generate that collects them) submits with a consumer: `on_response(response, error,
final)` is called once per response the model sends, in order, on the event loop:

- `response`: an InferResponse (None with `final` alone: the model sent only the final
  flag, no response);
- `error`: a NaiadError instead (the model sent an error response, the request failed
  or was cancelled); with `final` the request is over;
- `final`: the request's last call.

A StreamPending stays among the requests in flight (scheduling/in_flight.py) until its
final call, which the CompletionRouter (scheduling/completions.py) makes.
"""

from __future__ import annotations

import logging

from naiad import outcome_record
from naiad.errors import error_of_triton_code
from naiad.types import InferResponse, OutputTensor

log = logging.getLogger("naiad")


class StreamPending:
    """A request of the general path whose responses go to a consumer, one by one."""

    __slots__ = (
        "request_id",
        "model",
        "request",
        "batch_size",
        "submit_ns",
        "on_response",
        "responses",
    )
    lane = False
    stream = True

    def __init__(self, request_id, model, request, batch_size, submit_ns, on_response):
        self.request_id = request_id
        self.model = model
        self.request = request
        self.batch_size = batch_size
        self.submit_ns = submit_ns
        self.on_response = on_response
        self.responses = 0

    def fail(self, exc: Exception) -> None:
        self._call(None, exc, True)

    def deliver(self, flags: int, code, json: bytes, slots, arena, final: bool) -> None:
        """One response record of a response block (csrc/ipc/ipc_schema.h), read out of the
        arena at once (the block is freed after)."""
        outcome = outcome_record.read(json)
        if code is not None:
            self._call(None, error_of_triton_code(code, outcome.error or ""), final)
            return
        if outcome.empty:
            self._call(None, None, final)
            return
        model = self.model
        outputs = [
            OutputTensor(name, datatype, shape, bytes(arena[start : start + nbytes]))
            for (name, datatype, shape), (start, nbytes) in zip(outcome.outputs, slots)
        ]
        self.responses += 1
        response = InferResponse(
            model.name,
            str(model.version),
            self.request.id,
            outputs,
            outcome.parameters,
        )
        self._call(response, None, final)

    def _call(self, response, error, final: bool) -> None:
        try:
            self.on_response(response, error, final)
        except Exception:  # that client's connection; the others still get theirs
            log.exception("sending a streamed response of request %d failed", self.request_id)
