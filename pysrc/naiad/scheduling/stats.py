"""Per-model-version statistics in the shape of Triton's statistics extension.

inference_stats count requests (each request carries its batch's compute times, as
Triton does); batch_stats count executions per batch size. Response cache hits and
misses are counted in C++ (csrc/core/response_cache.h, read through `cache_counters`) and
folded in here, where the statistics and the metrics read them.
"""

from __future__ import annotations

import time

from naiad import _core
from naiad.observability.latency_summary import new_summaries


class Duration:
    __slots__ = ("count", "ns")

    def __init__(self):
        self.count = 0
        self.ns = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.ns += ns

    def to_json(self) -> dict:
        return {"count": self.count, "ns": self.ns}


class BatchStats:
    __slots__ = ("compute_input", "compute_infer", "compute_output")

    def __init__(self):
        self.compute_input = Duration()
        self.compute_infer = Duration()
        self.compute_output = Duration()


class ModelStats:
    def __init__(self, name: str, version: int):
        self.name = name
        self.version = version
        self.last_inference_ms = 0
        self.inference_count = 0
        self.execution_count = 0
        self.success = Duration()
        self.fail = Duration()
        self.queue = Duration()
        self.compute_input = Duration()
        self.compute_infer = Duration()
        self.compute_output = Duration()
        self.batches: dict[int, BatchStats] = {}
        # Failures by Triton's metric reason: REJECTED, CANCELED, BACKEND, OTHER.
        self.failures_by_reason: dict[str, int] = {}
        # Triton's latency summaries (--metrics-config summary_latencies=true), else None.
        self.summaries = new_summaries()
        # The model's response cache counters, when it uses the cache: a callable giving
        # its _core.CacheCounters.
        self.cache_counters = None

    def reported(self) -> tuple[Duration, Duration, Duration, Duration]:
        """(success, queue, cache_hit, cache_miss) as Triton reports them: a hit is a
        success whose queue time ends at its lookup; a miss's lookup and insert add to
        its request's success duration (InferenceStatsAggregator::UpdateSuccessCache*).
        inference_count and execution_count leave hits out."""
        if self.cache_counters is None:
            return self.success, self.queue, Duration(), Duration()
        c = self.cache_counters()
        success, queue, hit, miss = Duration(), Duration(), Duration(), Duration()
        success.add(self.success.ns + c.hit_request_ns + c.miss_ns, self.success.count + c.hits)
        queue.add(self.queue.ns + c.hit_queue_ns, self.queue.count + c.hits)
        hit.add(c.hit_ns, c.hits)
        miss.add(c.miss_ns, c.misses)
        return success, queue, hit, miss

    def record_execution(self, batch_size: int, timings: list[int]) -> None:
        """One batch ran: timings = [start, compute_input, compute_infer, compute_output]."""
        self.execution_count += 1
        stats = self.batches.get(batch_size)
        if stats is None:
            stats = self.batches[batch_size] = BatchStats()
        # Once per batch on the event loop: the fields directly, not Duration.add (a
        # method call each cost more than the rest of the function).
        duration = stats.compute_input
        duration.count += 1
        duration.ns += timings[1]
        duration = stats.compute_infer
        duration.count += 1
        duration.ns += timings[2]
        duration = stats.compute_output
        duration.count += 1
        duration.ns += timings[3]

    def record_success(
        self, batch_size: int, request_ns: int, queue_ns: int, timings: list[int]
    ) -> None:
        self.record_successes(1, batch_size, request_ns, queue_ns, timings)

    def record_successes(
        self,
        count: int,
        inference_count: int,
        request_ns: int,
        queue_ns: int,
        timings: list,
        each: list | None = None,
    ) -> None:
        """`count` requests of one batch succeeded, with `inference_count` batch items and
        these summed durations; each request carries its batch's compute times. `each`:
        the (request ns, queue ns) of every one of them, for the summaries (without it
        they observe the mean `count` times: the routed requests' totals)."""
        summaries = self.summaries
        if summaries is not None:
            if each is None:
                summaries.observe(request_ns // count, queue_ns // count, timings, count)
            else:
                for took_ns, queued_ns in each:
                    summaries.observe(took_ns, queued_ns, timings)
        # Once per batch on the event loop: the fields directly (see record_execution).
        duration = self.success
        duration.count += count
        duration.ns += request_ns
        duration = self.queue
        duration.count += count
        duration.ns += queue_ns
        duration = self.compute_input
        duration.count += count
        duration.ns += timings[1] * count
        duration = self.compute_infer
        duration.count += count
        duration.ns += timings[2] * count
        duration = self.compute_output
        duration.count += count
        duration.ns += timings[3] * count
        self.inference_count += inference_count
        self.last_inference_ms = int(time.time() * 1000)

    def record_failure(self, request_ns: int, reason: str = "BACKEND") -> None:
        self.fail.add(request_ns)
        self.failures_by_reason[reason] = self.failures_by_reason.get(reason, 0) + 1
        self.last_inference_ms = int(time.time() * 1000)

    def to_json(self) -> dict:
        success, queue, cache_hit, cache_miss = self.reported()
        return {
            "name": self.name,
            "version": str(self.version),
            "last_inference": self.last_inference_ms,
            "inference_count": self.inference_count,
            "execution_count": self.execution_count,
            "inference_stats": {
                "success": success.to_json(),
                "fail": self.fail.to_json(),
                "queue": queue.to_json(),
                "compute_input": self.compute_input.to_json(),
                "compute_infer": self.compute_infer.to_json(),
                "compute_output": self.compute_output.to_json(),
                "cache_hit": cache_hit.to_json(),
                "cache_miss": cache_miss.to_json(),
            },
            "response_stats": {},
            "batch_stats": [
                {
                    "batch_size": size,
                    "compute_input": stats.compute_input.to_json(),
                    "compute_infer": stats.compute_infer.to_json(),
                    "compute_output": stats.compute_output.to_json(),
                }
                for size, stats in sorted(self.batches.items())
            ],
            "memory_usage": [],
        }


def record_executions(stats: ModelStats, instance_id: int, batch_sizes: list, timings) -> None:
    """An answered batch's executions: one of all its requests' batch sizes, or, for the
    core's answer to ensemble requests that ended together (no instance), one each, as
    in Triton."""
    if instance_id == _core.NO_INSTANCE:
        for batch_size in batch_sizes:
            stats.record_execution(batch_size, timings)
    else:
        stats.record_execution(sum(batch_sizes), timings)
