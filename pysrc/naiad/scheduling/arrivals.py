"""Whether any client could still send a request: the batcher's early-exit hint.

A front end reports its inference connections (those that have sent an inference
request): open, and waiting (a request received, its answer not yet written). When every
open connection is waiting, no request can join a batch held for
`max_queue_delay_microseconds` (an HTTP/1.1 client sends its next request after the
answer), so the batch leaves at once instead of idling out the delay. A client that
pipelines only makes the batch leave a little early. A gRPC connection multiplexes
calls, so it cannot know; it reports itself waiting while it has as many inference calls
in flight as it ever had at once (its high-water mark): a client that keeps N calls
going (perf_analyzer at concurrency N, a pool of N threads) sends the next only after
an answer. A client that grows its concurrency only makes a batch leave early, once.
"""

from __future__ import annotations


class ArrivalTracker:
    """The counts of the connections Python keeps; `io`, the HTTP front end's C++ I/O
    loop (_core.HttpIo), keeps those of the connections in its lane mode."""

    __slots__ = ("open", "waiting", "io")

    def __init__(self):
        self.open = 0
        self.waiting = 0
        self.io = None

    def possible(self) -> bool:
        io = self.io
        if io is None:
            return self.open > self.waiting
        return self.open + io.open_count > self.waiting + io.waiting_count
