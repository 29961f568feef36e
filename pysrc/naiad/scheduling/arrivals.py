"""Whether any client could still send a request: the batcher's early-exit hint.

A front end reports its inference connections (those that have sent an inference
request): open, and waiting (a request received, its answer not yet written). When every open connection is waiting, no request can join a batch
held for `max_queue_delay_microseconds` (an HTTP/1.1 client sends its next request after
the answer), so the batch leaves at once instead of idling out the delay. A client
that pipelines only makes the batch leave a little early; a front end that cannot tell
(multiplexed streams) reports nothing and the delay runs as in Triton.
"""

from __future__ import annotations


class ArrivalTracker:
    __slots__ = ("open", "waiting", "opaque")

    def __init__(self):
        self.open = 0
        self.waiting = 0
        self.opaque = 0  # sources that cannot tell (e.g. gRPC streams): always possible

    def possible(self) -> bool:
        return self.opaque > 0 or self.open > self.waiting
