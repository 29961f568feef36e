"""Whether any client could still send a request: the batcher's early-exit hint.

A front end reports its inference connections (those that have sent an inference
request): open, and waiting (a request received, its answer not yet written). When every
open connection is waiting, no request can join a batch held for
`max_queue_delay_microseconds` (an HTTP/1.1 client sends its next request after the
answer), so the batch leaves at once instead of idling out the delay. A client that
pipelines only makes the batch leave a little early. A front end that cannot tell
(multiplexed streams, as gRPC's) counts its inference connections in `multiplexed`,
which keeps `possible()` true while any is open: one more request may always come.
"""

from __future__ import annotations


class ArrivalTracker:
    __slots__ = ("open", "waiting", "multiplexed")

    def __init__(self):
        self.open = 0
        self.waiting = 0
        self.multiplexed = 0  # gRPC connections that have sent an inference call

    def possible(self) -> bool:
        return self.multiplexed > 0 or self.open > self.waiting
