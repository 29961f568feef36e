"""What Python keeps of the front end's C++ I/O loop (naiad/io_engine.py's Engine).

Owns the link to the loop once it is attached: whether C++ may take the lanes' requests
itself (not while tracing needs Python at each take), the statistics of the completions
the loop answered, and the loop's requests that Python answers after all (adopted into
the requests in flight). Called only on the event loop, which also runs loop 0's turns,
so it has no lock; loops 1..N-1 are reached through the engine while owned (LoopLane).
"""

from __future__ import annotations

from naiad.io_engine import LoopLane
from naiad.observability.latency_summary import new_summaries
from naiad.scheduling.in_flight import GRPC_UNARY, LanePending
from naiad.scheduling.stats import record_executions


class IoLoopLink:
    def __init__(self, lane, in_flight, table, traces):
        self.lane = lane  # _core.FastLane: the lane pendings of adopted requests forget there
        self.in_flight = in_flight  # scheduling/in_flight.py
        self.table = table  # scheduling/model_table.py: each lane_model's model, removed ones too
        self.traces = traces  # scheduling/request_traces.py: whether tracing is on
        self.engine = None  # the Engine, once attached
        self.io = None  # its _core.HttpIo

    def attach(self, engine) -> None:
        """`engine`'s loop polls the core from now on and answers its own requests."""
        self.engine = engine
        self.io = engine.io
        each = new_summaries() is not None
        engine.each(lambda io: io.set_each(each))
        self.update_taking()

    def update_taking(self) -> None:
        # Traced requests need Python at their take (tracing/): while any tracing is on,
        # the lane's requests go through the protocols.
        if self.engine is not None:
            self.engine.set_taking(not self.traces.active)

    @property
    def in_flight_count(self) -> int:
        """The loops' own requests not answered yet (none before one is attached)."""
        if self.engine is None:
            return 0
        return sum(self.engine.each(lambda io: io.in_flight))

    def owned_ids(self) -> list:
        """The loops' requests in flight."""
        if self.engine is None:
            return []
        return [i for ids in self.engine.each(lambda io: io.owned_ids()) for i in ids]

    def loop_stats(self) -> list:
        """Per I/O loop: connections served (accepted or handed to it), moved to loop 0
        (they needed Python), requests in flight."""
        if self.engine is None:
            return []

        def stats(io) -> dict:
            served, moved = io.connections()
            return {
                "connections_served": served,
                "connections_moved": moved,
                "in_flight": io.in_flight,
            }

        return self.engine.each(stats)

    def lane_in_flight_of(self, lane_model: int) -> int:
        """Requests of `lane_model` in flight on the lanes of loops 1..N-1 (loop 0's lane
        is the manager's)."""
        loops = self.engine.loops if self.engine is not None else None
        if loops is None:
            return 0
        return sum(LoopLane(self.engine, k).in_flight_of(lane_model) for k in range(1, loops.size))

    def record_answered(self, answered: list) -> None:
        """The statistics of the completions the I/O loop answered (one record each)."""
        models = self.table.lane_models_ever
        for record in answered:
            model = models.get(record.lane_model)
            if model is None:
                continue
            stats = model.stats
            timings = record.timings
            if record.successes:
                stats.record_successes(
                    record.successes,
                    record.inferences,
                    record.request_ns,
                    record.queue_ns,
                    timings,
                    record.each,
                )
            for took_ns in record.failed_ns:
                stats.record_failure(took_ns)
            if timings[0]:
                record_executions(stats, record.instance_id, record.batch_sizes, timings)
            if record.lost:
                batch = len(record.batch_sizes) + len(record.lost)
                self.in_flight.fail_lost(record.lost, batch, self.adopt)

    def pendings(self, request_ids) -> list:
        """The I/O loop's requests among `request_ids`, as lane pendings Python answers:
        their answers go back through the loop (Engine.on_done_of)."""
        out = []
        io = self.io
        engine = self.engine
        loops = engine.loops
        lanes = {}  # loop index -> its LoopLane
        for request_id in request_ids:
            index = 0 if loops is None else max(loops.owner_of(request_id), 0)
            if index:
                lane = lanes.get(index) or lanes.setdefault(index, LoopLane(engine, index))
                owned = lane.owned(request_id)
            else:
                lane = self.lane
                owned = io.owned(request_id)
            if owned is None:
                continue
            lane_model, batch_size, submit_ns, _, stream = owned
            model = self.table.lane_models_ever.get(lane_model)
            if model is None:
                continue
            on_done = engine.on_done_of(request_id, owned, index)
            if on_done is None:  # a gRPC call whose client is gone
                continue
            grpc = GRPC_UNARY if stream else False
            out.append(LanePending(lane, model, request_id, batch_size, submit_ns, on_done, grpc))
        return out

    def adopt(self, request_ids) -> dict:
        """The I/O loop's requests among `request_ids`, pending from now on as every
        request Python answers (by request id)."""
        theirs = {p.request_id: p for p in self.pendings(request_ids)}
        self.in_flight.update(theirs)
        return theirs
