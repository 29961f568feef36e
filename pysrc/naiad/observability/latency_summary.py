"""Triton's latency summaries (`--metrics-config summary_latencies=true`) and the
`--metrics-config` settings that shape the per-model latency metrics.

Triton 2.51 (core/src/metric_model_reporter.cc) keeps, per model version, five
prometheus-cpp Summaries of each successful request's durations in microseconds:
request, queue, compute input, compute infer, compute output. Each has a count and a sum
over the server's life and quantiles over a sliding window of 60 s in 5 age buckets
(prometheus-cpp's defaults), with the quantiles {0.5: 0.05, 0.9: 0.01, 0.95: 0.001,
0.99: 0.001, 0.999: 0.001} unless `summary_quantiles=<q>:<error>,...` says otherwise.

`Summary` here keeps the window as five sub-windows of 12 s: observations append to the
newest one (an array of doubles, no sorting on the request path); a sub-window that closes
is sorted once and thinned to what its error budget needs (every k-th value, k = the
smallest error x its count), so memory stays bounded at any request rate. A quantile is
the observed value at rank floor(q x n) of the window (the first for rank 0), which is
what prometheus-cpp's CKMS answers for the small counts it holds exactly.
"""

from __future__ import annotations

import math
import time
from array import array
from collections import deque

import numpy as np

__all__ = [
    "DEFAULT_QUANTILES",
    "MetricsConfig",
    "parse_metrics_config",
    "configure",
    "current",
    "Summary",
    "LatencySummaries",
    "new_summaries",
]

DEFAULT_QUANTILES = ((0.5, 0.05), (0.9, 0.01), (0.95, 0.001), (0.99, 0.001), (0.999, 0.001))
MAX_AGE_SECONDS = 60.0
AGE_BUCKETS = 5


class MetricsConfig:
    __slots__ = ("counter_latencies", "summary_latencies", "quantiles")

    def __init__(self, counter_latencies=True, summary_latencies=False, quantiles=None):
        self.counter_latencies = counter_latencies
        self.summary_latencies = summary_latencies
        self.quantiles = tuple(quantiles or DEFAULT_QUANTILES)


def _format_error(arg: str) -> ValueError:
    return ValueError(f"--metrics-config option format is <setting>=<value>. Got {arg}")


def _parse_quantiles(text: str, warn) -> tuple:
    pairs = []
    for item in text.split(","):
        quantile, colon, error = item.partition(":")
        if not colon:
            warn(
                f"Invalid option: [{item}]. No ':' delimiter found. Expected format is "
                "<quantile>:<error>"
            )
            continue
        try:
            pairs.append((float(quantile), float(error)))
        except ValueError as exc:
            warn(f"Invalid option: [{item}]. Error: {exc}")
    return tuple(pairs)


def parse_metrics_config(args: list[str], warn=lambda message: None) -> MetricsConfig:
    """--metrics-config values as tritonserver reads them; ValueError (Triton's words) for
    one that is not <setting>=<value>. Settings Triton does not know are ignored, as
    there; a bad quantile pair is skipped with `warn`, as Triton logs it."""
    config = MetricsConfig()
    for arg in args:
        setting, equals, value = arg.partition("=")
        if not equals or "," in setting or not setting or not value:
            raise _format_error(arg)
        if setting == "counter_latencies" and value == "false":
            config.counter_latencies = False
        elif setting == "summary_latencies" and value == "true":
            config.summary_latencies = True
        elif setting == "summary_quantiles":
            quantiles = _parse_quantiles(value, warn)
            if quantiles:
                config.quantiles = quantiles
    return config


_config = MetricsConfig()


def configure(config: MetricsConfig) -> None:
    """The server's metrics settings (before any model loads)."""
    global _config
    _config = config


def current() -> MetricsConfig:
    return _config


class Summary:
    """Count and sum since start, quantiles over the last 48-60 s (see the module doc)."""

    __slots__ = ("quantiles", "count", "sum", "_clock", "_span", "_opened", "_open", "_closed")

    def __init__(self, quantiles=DEFAULT_QUANTILES, clock=time.monotonic):
        self.quantiles = tuple(quantiles)
        self.count = 0
        self.sum = 0
        self._clock = clock
        self._span = MAX_AGE_SECONDS / AGE_BUCKETS
        self._opened = clock()
        self._open = array("d")
        self._closed: deque = deque()  # (sorted values, weights) of closed sub-windows

    def observe(self, value, times: int = 1, now: float | None = None) -> None:
        if now is None:
            now = self._clock()
        if now - self._opened >= self._span:
            self._rotate(now)
        self.count += times
        self.sum += value * times
        if times == 1:
            self._open.append(value)
        else:
            self._open.extend([value] * times)

    def _rotate(self, now: float) -> None:
        if now - self._opened < self._span:
            return
        if now - self._opened >= MAX_AGE_SECONDS + self._span:  # idle past the window
            self._closed.clear()
            self._open = array("d")
            self._opened = now
            return
        while now - self._opened >= self._span:
            self._closed.append(self._thin(self._open))
            while len(self._closed) >= AGE_BUCKETS:
                self._closed.popleft()
            self._open = array("d")
            self._opened += self._span

    def _thin(self, values: array):
        ordered = np.sort(np.frombuffer(values, dtype=np.float64))
        n = len(ordered)
        step = max(1, int(min(error for _q, error in self.quantiles) * n)) if self.quantiles else n
        if step == 1 or n == 0:
            return ordered, np.ones(n)
        kept = ordered[step - 1 :: step]
        weights = np.full(len(kept), float(step))
        rest = n - len(kept) * step
        if rest:
            kept = np.append(kept, ordered[-1])
            weights = np.append(weights, float(rest))
        return kept, weights

    def values(self) -> list[tuple[float, float]]:
        """(quantile, value) for each configured quantile; NaN with nothing in the window."""
        self._rotate(self._clock())
        parts = [values for values, _ in self._closed]
        weights = [w for _, w in self._closed]
        if self._open:
            parts.append(np.frombuffer(self._open, dtype=np.float64).copy())
            weights.append(np.ones(len(self._open)))
        if not parts:
            return [(q, math.nan) for q, _ in self.quantiles]
        values = np.concatenate(parts)
        if not len(values):
            return [(q, math.nan) for q, _ in self.quantiles]
        order = np.argsort(values, kind="stable")
        values = values[order]
        ranks = np.cumsum(np.concatenate(weights)[order])
        total = ranks[-1]
        out = []
        for quantile, _error in self.quantiles:
            wanted = max(int(quantile * total), 1)
            index = min(int(np.searchsorted(ranks, wanted - 1e-9)), len(values) - 1)
            out.append((quantile, float(values[index])))
        return out


class LatencySummaries:
    """The five summaries of one model version (Triton's names in observability/metrics.py)."""

    __slots__ = ("request", "queue", "compute_input", "compute_infer", "compute_output", "_clock")

    def __init__(self, quantiles=DEFAULT_QUANTILES, clock=time.monotonic):
        self._clock = clock
        for name in self.__slots__[:5]:
            setattr(self, name, Summary(quantiles, clock))

    def observe(self, request_ns: int, queue_ns: int, timings, times: int = 1) -> None:
        """One successful request (or `times` alike); timings = [_, input, infer, output]
        ns of its batch. Whole microseconds, as Triton observes them. One clock reading
        serves the five."""
        now = self._clock()
        self.request.observe(request_ns // 1000, times, now)
        self.queue.observe(queue_ns // 1000, times, now)
        self.compute_input.observe(timings[1] // 1000, times, now)
        self.compute_infer.observe(timings[2] // 1000, times, now)
        self.compute_output.observe(timings[3] // 1000, times, now)


def new_summaries() -> LatencySummaries | None:
    """A model version's summaries under the server's settings; None when they are off."""
    if not _config.summary_latencies:
        return None
    return LatencySummaries(_config.quantiles)
