"""Whether any client could still send a request: the batcher's early-exit hint.

A front end reports its inference connections (those that have sent an inference
request): open, and waiting (a request received, its answer not yet written). When every
open connection is waiting, no request can join a batch held for
`max_queue_delay_microseconds` (an HTTP/1.1 client sends its next request after the
answer), so the batch leaves at once instead of idling out the delay. A client that
pipelines only makes the batch leave a little early. A front end that cannot tell
(multiplexed streams, as gRPC's) must keep `possible()` true while it has clients, e.g.
with a count of its own here; none does yet, since HTTP/1.1 is the only front end.
"""

from __future__ import annotations


class ArrivalTracker:
    __slots__ = ("open", "waiting")

    def __init__(self):
        self.open = 0
        self.waiting = 0

    def possible(self) -> bool:
        return self.open > self.waiting
