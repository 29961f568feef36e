"""The requests in flight: accepted by the core and not yet answered, by request id.

Owns the table of pending requests (one `GeneralPending` or `LanePending`, or a
`streaming.StreamPending`, per core request id) and failing those still waiting. Called
only on the event loop (submits, completions, shutdown), so it has no lock.
"""

from __future__ import annotations

import logging

from naiad import _core
from naiad.errors import Internal

log = logging.getLogger("naiad")

# LanePending.grpc: not gRPC, a ModelInfer call, a request on a ModelStreamInfer call.
GRPC_UNARY = 1
GRPC_STREAM = 2

# The failure reason (nv_inference_request_failure's `reason`) of a request that failed
# with a completion status, as Triton gives it; any other status: "OTHER".
QUEUE_FAILURE_REASONS = {
    _core.COMPLETION_CANCELLED: "CANCELED",
    _core.COMPLETION_TIMED_OUT: "REJECTED",
    _core.COMPLETION_SEQUENCE_TIMED_OUT: "REJECTED",
}


class GeneralPending:
    """A request of the general path: its future resolves to an InferResponse."""

    __slots__ = ("request_id", "model", "future", "request", "batch_size", "submit_ns", "cache")
    lane = False
    stream = False

    def __init__(self, request_id, model, future, request, batch_size, submit_ns, cache=None):
        self.request_id = request_id
        self.model = model
        self.future = future
        self.request = request
        self.batch_size = batch_size
        self.submit_ns = submit_ns
        self.cache = cache  # a response cache miss: its _core.CacheLookup, for cache_insert

    def fail(self, exc: Exception) -> None:
        if not self.future.done():
            self.future.set_exception(exc)


class LanePending:
    """A request of the fast lane: `on_done(http_bytes, None)` gets its whole response,
    or `on_done(None, exc)` the error when it never ran. A gRPC request (`grpc`) gets
    its ModelInferResponse bytes, or `on_done(None, exc)` when it failed. `fast_lane`
    (the _core.FastLane that queued it) forgets it when it fails."""

    __slots__ = ("model", "request_id", "batch_size", "submit_ns", "on_done", "fast_lane", "grpc")
    lane = True
    stream = False

    def __init__(self, fast_lane, model, request_id, batch_size, submit_ns, on_done, grpc=False):
        self.fast_lane = fast_lane
        self.model = model
        self.request_id = request_id
        self.batch_size = batch_size
        self.submit_ns = submit_ns
        self.on_done = on_done
        self.grpc = grpc

    def fail(self, exc: Exception) -> None:
        self.fast_lane.forget(self.request_id)
        self.on_done(None, exc)


class InFlight(dict):
    """Pending requests by the core's request id. A request stays here until the moment
    it is answered, so whatever goes wrong while answering, what is left can be failed."""

    def count_of(self, model) -> int:
        """Requests of `model` accepted and not yet answered (queued or executing)."""
        return sum(1 for p in self.values() if p.model is model)

    def fail_unanswered(self, request_ids: list) -> None:
        """Fails the requests among `request_ids` that are still waiting for an answer."""
        end_ns = _core.now_ns()
        pop = self.pop
        for request_id in request_ids:
            pending = pop(request_id, None)
            if pending is None:
                continue
            model = pending.model
            try:
                model.stats.record_failure(end_ns - pending.submit_ns, "OTHER")
                pending.fail(
                    Internal(
                        f"Failed to process the request(s) for model '{model.name}': the "
                        "server could not read the model's result (see the server log)"
                    )
                )
            except Exception:
                log.exception("failing request %d of model '%s' failed", request_id, model.name)

    def fail_lost(self, lost: list, batch: int, adopt=None) -> None:
        """Lane requests whose final response was in the block but got no answer (a codec
        bug): logged and failed. `adopt`: makes them pending first (the I/O loop's)."""
        log.error(
            "the fast lane did not answer %d of a batch's %d requests that have their "
            "final response",
            len(lost),
            batch,
        )
        if adopt is not None:
            adopt(lost)
        self.fail_unanswered(lost)
