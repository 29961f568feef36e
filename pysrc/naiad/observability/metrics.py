"""Prometheus metrics on `--metrics-port` at `GET /metrics`, named as Triton 2.51 names them.

Nothing here runs on the inference path: `TritonCollector` reads the per-model statistics the
manager keeps anyway (`LoadedModel.stats`, `manager.awaiting_execution`, and the latency summaries
of observability/latency_summary.py when `--metrics-config summary_latencies=true`) at scrape time.
The host gauges (CPU, memory, pinned memory pool, GPUs through NVML: observability/gpu_metrics.py)
are what `HostGauges.poll()` read last: a `Poller` thread reads them every
`--metrics-interval-ms` / 2, as Triton's polling thread does; without one (a collector made
on its own) each scrape reads them. The Python models' own families (pb_utils.MetricFamily)
are read from the folder their workers share (naiad/observability/custom_metrics.py).

Families come in Triton's order, which is prometheus-cpp's: every counter family, then
every gauge family, then the summaries, each group in the order Triton registers them; a
family without samples (GPU metrics on a host without GPUs, the duration counters with
`counter_latencies=false`) is left out.

It is a `prometheus_client` collector (it can be registered in any `CollectorRegistry`), but
the page is rendered by `render()` rather than `prometheus_client.generate_latest`, because
Triton's counters carry no `_total` suffix (`nv_inference_request_success`, not
`..._success_total`), which generate_latest would add to every counter's HELP and TYPE lines,
and because Triton writes whole numbers without a fraction ("3", not "3.0"). The page is
byte-for-byte Triton's layout: `# HELP`, `# TYPE`, then one sample per model version with the
labels sorted by name (`model`, `reason`, `version`).

The page is served by `naiad.http.protocol.HttpProtocol` on the running event loop (no thread).
"""

from __future__ import annotations

import asyncio
import math
import threading

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from naiad.http.protocol import HttpProtocol
from naiad.http.routes import Reply, error_reply
from naiad.observability import custom_metrics, latency_summary

__all__ = [
    "TritonCollector",
    "HostGauges",
    "Poller",
    "render",
    "MetricsRouter",
    "MetricsServer",
    "start_metrics_server",
    "FAILURE_REASONS",
    "CONTENT_TYPE",
]

CONTENT_TYPE = "text/plain; charset=utf-8"  # what Triton's metrics endpoint answers with

# Triton 2.51's `reason` label values of nv_inference_request_failure, in the order it shows them.
FAILURE_REASONS = ("OTHER", "BACKEND", "CANCELED", "REJECTED")

# (name, help) of the per-model counters, in Triton's order. Durations are kept in ns and
# reported in whole microseconds.
_COUNTERS = (
    (
        "nv_inference_request_success",
        "Number of successful inference requests, all batch sizes",
    ),
    (
        "nv_inference_request_failure",
        "Number of failed inference requests, all batch sizes",
    ),
    (
        "nv_inference_count",
        "Number of inferences performed (does not include cached requests)",
    ),
    (
        "nv_inference_exec_count",
        "Number of model executions performed (does not include cached requests)",
    ),
    (
        "nv_inference_request_duration_us",
        "Cumulative inference request duration in microseconds (includes cached requests)",
    ),
    (
        "nv_inference_queue_duration_us",
        "Cumulative inference queuing duration in microseconds (includes cached requests)",
    ),
    (
        "nv_inference_compute_input_duration_us",
        "Cumulative compute input duration in microseconds (does not include cached requests)",
    ),
    (
        "nv_inference_compute_infer_duration_us",
        "Cumulative compute inference duration in microseconds (does not include cached requests)",
    ),
    (
        "nv_inference_compute_output_duration_us",
        "Cumulative inference compute output duration in microseconds "
        "(does not include cached requests)",
    ),
)
# The counters --metrics-config counter_latencies=false turns off (Triton's "latency" ones).
_LATENCY_COUNTERS = frozenset(name for name, _ in _COUNTERS[4:])
# (name, help, LatencySummaries attribute) of the summaries, in Triton's order.
_SUMMARIES = (
    (
        "nv_inference_request_summary_us",
        "Summary of inference request duration in microseconds (includes cached requests)",
        "request",
    ),
    (
        "nv_inference_queue_summary_us",
        "Summary of inference queuing duration in microseconds (includes cached requests)",
        "queue",
    ),
    # Triton's help texts of the compute summaries are its counters' ("Cumulative ...").
    ("nv_inference_compute_input_summary_us", _COUNTERS[6][1], "compute_input"),
    ("nv_inference_compute_infer_summary_us", _COUNTERS[7][1], "compute_infer"),
    ("nv_inference_compute_output_summary_us", _COUNTERS[8][1], "compute_output"),
)
# Per-model response cache counters, after the inference counters (Triton's order), for
# the models whose config enables the cache (with or without the server's cache).
_CACHE_COUNTERS = (
    ("nv_cache_num_hits_per_model", "Number of cache hits per model"),
    ("nv_cache_hit_duration_per_model", "Total cache hit duration per model, in microseconds"),
    ("nv_cache_num_misses_per_model", "Number of cache misses per model"),
    (
        "nv_cache_miss_duration_per_model",
        "Total cache miss (insert+lookup) duration per model, in microseconds",
    ),
)
# The local cache's own gauges, last on the page (Triton registers them when it loads
# the cache), when the server has a cache.
_CACHE_GAUGES = (
    ("nv_cache_util", "Cache utilization [0.0 - 1.0]"),
    ("nv_cache_num_entries", "Number of responses stored in response cache"),
    ("nv_cache_num_hits", "Number of cache hits in response cache"),
    ("nv_cache_num_misses", "Number of cache misses in response cache"),
    ("nv_cache_num_lookups", "Number of cache lookups in response cache"),
    ("nv_cache_num_evictions", "Number of cache evictions in response cache"),
    (
        "nv_cache_lookup_duration",
        "Total cache lookup duration (hit and miss), in microseconds",
    ),
    ("nv_cache_insertion_duration", "Total cache insertion duration, in microseconds"),
)
_PENDING_HELP = "Instantaneous number of pending requests awaiting execution per-model."
_PINNED_TOTAL_HELP = "Pinned memory pool total memory size, in bytes"
_PINNED_USED_HELP = "Pinned memory pool used memory size, in bytes"
# (name, help, GpuReading field) of the GPU gauges, in Triton's order.
_GPU_GAUGES = (
    ("nv_gpu_utilization", "GPU utilization rate [0.0 - 1.0)", "utilization"),
    ("nv_gpu_memory_total_bytes", "GPU total memory, in bytes", "memory_total"),
    ("nv_gpu_memory_used_bytes", "GPU used memory, in bytes", "memory_used"),
    ("nv_gpu_power_usage", "GPU power usage in watts", "power_usage"),
    ("nv_gpu_power_limit", "GPU power management limit in watts", "power_limit"),
)
_ENERGY_HELP = "GPU energy consumption in joules since the Triton Server started"
# Triton's --pinned-memory-pool-byte-size default.
DEFAULT_PINNED_POOL_BYTES = 268435456
_CPU_UTIL_HELP = "CPU utilization rate [0.0 - 1.0]"
_MEM_TOTAL_HELP = "CPU total memory (RAM), in bytes"
_MEM_USED_HELP = "CPU used memory (RAM), in bytes"


# -- /proc readers --------------------------------------------------------------------------


def read_cpu_times(path: str = "/proc/stat") -> tuple[int, int] | None:
    """(busy, idle) jiffies of all CPUs, as Triton counts them, or None if unreadable.

    busy = user + nice + system + irq + softirq + steal; idle = idle + iowait
    (guest time is already inside user/nice)."""
    try:
        with open(path, "rb") as f:
            line = f.readline()
    except OSError:
        return None
    fields = line.split()
    if not fields or fields[0] != b"cpu":
        return None
    values = [int(v) for v in fields[1:9]]
    values += [0] * (8 - len(values))
    user, nice, system, idle, iowait, irq, softirq, steal = values
    return user + nice + system + irq + softirq + steal, idle + iowait


def read_memory(path: str = "/proc/meminfo") -> tuple[int, int] | None:
    """(total, used) bytes of RAM as Triton reports them: used = MemTotal - MemAvailable."""
    total = available = None
    try:
        with open(path, "rb") as f:
            for line in f:
                if line.startswith(b"MemTotal:"):
                    total = int(line.split()[1]) * 1024
                elif line.startswith(b"MemAvailable:"):
                    available = int(line.split()[1]) * 1024
                if total is not None and available is not None:
                    break
    except (OSError, ValueError, IndexError):
        return None
    if total is None:
        return None
    if available is None:
        available = total
    return total, total - available


class _CpuUtilization:
    """CPU busy ratio between the previous reading and now (Triton: between metric polls)."""

    def __init__(self, reader=read_cpu_times):
        self._reader = reader
        self._last = reader()
        self.value = 0.0

    def update(self) -> float:
        now = self._reader()
        if now is None:
            return self.value
        last = self._last
        if last is not None:
            busy = now[0] - last[0]
            idle = now[1] - last[1]
            if busy + idle > 0:
                self.value = busy / (busy + idle)
            else:
                return self.value  # too soon to tell: keep the previous ratio and baseline
        self._last = now
        return self.value


# -- the collector --------------------------------------------------------------------------


def _family(name: str, documentation: str, typ: str) -> Metric:
    # Metric (not CounterMetricFamily, which insists on a `_total` sample) keeps the name as is.
    return Metric(name, documentation, typ)


def _reported_models(manager):
    """(name, version, LoadedModel) of every model version that has been served, by name."""
    for name in sorted(manager.models):
        versions = manager.models[name]
        for version in sorted(versions):
            model = versions[version]
            if getattr(model, "ready", False) or getattr(model, "ready_once", False):
                yield name, str(version), model


def _custom_families() -> dict[int, list[Metric]]:
    """The models' pb_utils metric families (naiad/observability/custom_metrics.py) by kind, in the
    order they were created."""
    by_kind: dict[int, list[Metric]] = {kind: [] for kind in custom_metrics.KIND_NAMES}
    for snapshot in custom_metrics.read_families(custom_metrics.server_folder()):
        kind = custom_metrics.KIND_NAMES[snapshot.kind]
        family = _family(snapshot.name, snapshot.description, kind)
        for suffix, labels, value in snapshot.samples:
            if "le" in labels:
                labels = {**labels, "le": _format_value(labels["le"])}
            family.add_sample(snapshot.name + suffix, labels, value)
        by_kind[snapshot.kind].append(family)
    return by_kind


def _uses_cache(model) -> bool:
    """Whether the model's config enables the response cache (Triton then reports its
    per-model cache counters, zero without the server's cache)."""
    config = getattr(model, "config", None)
    return config is not None and config.response_cache.enable


class HostGauges:
    """The gauges Triton polls rather than counts: CPU, memory, pinned pool, GPUs.

    Naiad has no pinned memory pool of its own (host<->device copies go through the
    shared arena, page-locked in GPU workers): the pool's total is the configured
    --pinned-memory-pool-byte-size and nothing is ever used from it, which is what Triton
    2.51 reports on a host where its pool could not be allocated."""

    def __init__(
        self,
        *,
        cpu_reader=read_cpu_times,
        memory_reader=read_memory,
        pinned_pool_bytes: int = DEFAULT_PINNED_POOL_BYTES,
        gpus=None,
    ):
        self._cpu = _CpuUtilization(cpu_reader)
        self._memory_reader = memory_reader
        self.pinned_total = pinned_pool_bytes
        self.gpus = gpus  # gpu_metrics.NvmlGpus or None
        self.cpu_utilization = 0.0
        self.memory = None
        self.gpu_readings = []
        self._lock = threading.Lock()

    def poll(self) -> None:
        utilization = self._cpu.update()
        memory = self._memory_reader()
        readings = self.gpus.read() if self.gpus is not None else []
        with self._lock:
            self.cpu_utilization = utilization
            self.memory = memory
            self.gpu_readings = readings

    def snapshot(self):
        with self._lock:
            return self.cpu_utilization, self.memory, self.gpu_readings


class Poller:
    """Polls `host` every `interval_ms` / 2 on a daemon thread (Triton's polling loop
    sleeps half the metrics interval between two reads)."""

    def __init__(self, host: HostGauges, interval_ms: int):
        self.host = host
        self.seconds = max(interval_ms, 1) / 2000.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="naiad-metrics-poll", daemon=True)

    def start(self) -> Poller:
        self.host.poll()
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.seconds):
            try:
                self.host.poll()
            except Exception:  # a reading that failed once: the next poll tries again
                pass

    def stop(self) -> None:
        self._stop.set()


def _cpu_families(utilization: float, memory):
    """Triton's CPU gauges (--allow-cpu-metrics): utilization and, where the host's
    memory could be read, its total and used bytes."""
    family = _family("nv_cpu_utilization", _CPU_UTIL_HELP, "gauge")
    family.add_sample("nv_cpu_utilization", {}, utilization)
    yield family
    if memory is not None:
        total, used = memory
        family = _family("nv_cpu_memory_total_bytes", _MEM_TOTAL_HELP, "gauge")
        family.add_sample("nv_cpu_memory_total_bytes", {}, total)
        yield family
        family = _family("nv_cpu_memory_used_bytes", _MEM_USED_HELP, "gauge")
        family.add_sample("nv_cpu_memory_used_bytes", {}, used)
        yield family


class TritonCollector(Collector):
    """Triton's inference, pinned memory, GPU and CPU families, read from `manager`."""

    def __init__(
        self,
        manager,
        *,
        cpu_reader=read_cpu_times,
        memory_reader=read_memory,
        config: latency_summary.MetricsConfig | None = None,
        host: HostGauges | None = None,
        cpu: bool = True,
    ):
        self.manager = manager
        self.cpu = cpu  # --allow-cpu-metrics
        self.config = config or latency_summary.current()
        # Without a host given (and a Poller on it), every scrape reads the host itself.
        self._poll_on_collect = host is None
        self.host = host or HostGauges(cpu_reader=cpu_reader, memory_reader=memory_reader)

    def collect(self):
        models = list(_reported_models(self.manager))
        counter_latencies = self.config.counter_latencies
        families = {
            name: _family(name, doc, "counter")
            for name, doc in _COUNTERS
            if counter_latencies or name not in _LATENCY_COUNTERS
        }
        pending = _family("nv_inference_pending_request_count", _PENDING_HELP, "gauge")
        summaries = {name: _family(name, doc, "summary") for name, doc, _ in _SUMMARIES}
        cache_families = [_family(name, doc, "counter") for name, doc in _CACHE_COUNTERS]
        for name, version, model in models:
            labels = {"model": name, "version": version}
            stats = model.stats
            success, queue, cache_hit, cache_miss = stats.reported()
            families["nv_inference_request_success"].add_sample(
                "nv_inference_request_success", labels, success.count
            )
            by_reason = stats.failures_by_reason
            failure = families["nv_inference_request_failure"]
            for reason in FAILURE_REASONS:
                failure.add_sample(
                    "nv_inference_request_failure",
                    {"model": name, "reason": reason, "version": version},
                    by_reason.get(reason, 0),
                )
            for reason in sorted(set(by_reason) - set(FAILURE_REASONS)):
                failure.add_sample(
                    "nv_inference_request_failure",
                    {"model": name, "reason": reason, "version": version},
                    by_reason[reason],
                )
            for metric, value in (
                ("nv_inference_count", stats.inference_count),
                ("nv_inference_exec_count", stats.execution_count),
                ("nv_inference_request_duration_us", success.ns // 1000),
                ("nv_inference_queue_duration_us", queue.ns // 1000),
                ("nv_inference_compute_input_duration_us", stats.compute_input.ns // 1000),
                ("nv_inference_compute_infer_duration_us", stats.compute_infer.ns // 1000),
                ("nv_inference_compute_output_duration_us", stats.compute_output.ns // 1000),
            ):
                family = families.get(metric)
                if family is not None:
                    family.add_sample(metric, labels, value)
            if _uses_cache(model):
                values = (
                    cache_hit.count,
                    cache_hit.ns // 1000,
                    cache_miss.count,
                    cache_miss.ns // 1000,
                )
                for family, value in zip(cache_families, values):
                    family.add_sample(family.name, labels, value)
            pending.add_sample(
                "nv_inference_pending_request_count", labels, self.manager.awaiting_execution(model)
            )
            kept = getattr(stats, "summaries", None)
            if kept is not None:
                for metric, _doc, attr in _SUMMARIES:
                    _add_summary(summaries[metric], metric, labels, getattr(kept, attr))

        if self._poll_on_collect:
            self.host.poll()
        cpu_utilization, memory, gpus = self.host.snapshot()
        # Triton's registry lists counters, then gauges, then histograms, then summaries,
        # each in the order registered: the models' own families come after the server's.
        custom = _custom_families()
        yield from families.values()
        yield from (family for family in cache_families if family.samples)
        if gpus:
            energy = _family("nv_energy_consumption", _ENERGY_HELP, "counter")
            for reading in gpus:
                energy.add_sample(
                    "nv_energy_consumption", {"gpu_uuid": reading.uuid}, reading.energy
                )
            yield energy
        yield from custom[custom_metrics.COUNTER]
        yield pending
        for metric, doc, value in (
            ("nv_pinned_memory_pool_total_bytes", _PINNED_TOTAL_HELP, self.host.pinned_total),
            ("nv_pinned_memory_pool_used_bytes", _PINNED_USED_HELP, 0),
        ):
            family = _family(metric, doc, "gauge")
            family.add_sample(metric, {}, value)
            yield family
        for metric, doc, field in _GPU_GAUGES if gpus else ():
            family = _family(metric, doc, "gauge")
            for reading in gpus:
                family.add_sample(metric, {"gpu_uuid": reading.uuid}, getattr(reading, field))
            yield family

        if self.cpu:
            yield from _cpu_families(cpu_utilization, memory)
        lane = getattr(self.manager, "lane", None)
        totals = lane.cache_totals() if lane is not None else None
        if totals is not None:
            capacity = totals["capacity"]
            # The Redis cache's size, entries and evictions are Redis's: not reported.
            remote = totals["remote"]
            values = (
                None if remote else totals["used"] / capacity if capacity else 0.0,
                None if remote else totals["entries"],
                totals["hits"],
                totals["misses"],
                totals["lookups"],
                None if remote else totals["evictions"],
                totals["lookup_ns"] // 1000,
                totals["insert_ns"] // 1000,
            )
            for (name, documentation), value in zip(_CACHE_GAUGES, values):
                if value is None:
                    continue
                family = _family(name, documentation, "gauge")
                family.add_sample(name, {}, value)
                yield family
        yield from custom[custom_metrics.GAUGE]
        yield from custom[custom_metrics.HISTOGRAM]
        for family in summaries.values():
            if family.samples:
                yield family


def _add_summary(family: Metric, name: str, labels: dict, summary) -> None:
    # prometheus-cpp's order: _count, _sum, then one sample per quantile.
    family.add_sample(name + "_count", labels, summary.count)
    family.add_sample(name + "_sum", labels, summary.sum)
    for quantile, value in summary.values():
        family.add_sample(name, {**labels, "quantile": _format_value(quantile)}, value)


# -- text exposition, as Triton (prometheus-cpp) writes it -----------------------------------


def _format_value(value) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "Nan"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _label_order(item) -> tuple:
    # Labels by name, as Triton's std::map keeps them; a summary's quantile and a
    # histogram bucket's le come last, as prometheus-cpp adds them.
    return (item[0] in ("quantile", "le"), item[0])


def render(collector) -> bytes:
    """The Prometheus text exposition of `collector` (or a registry), names kept exactly."""
    out = []
    for family in collector.collect():
        if not family.samples:
            continue  # prometheus-cpp writes no HELP/TYPE for a family without samples
        out.append(f"# HELP {family.name} {_escape_help(family.documentation)}\n")
        typ = "untyped" if family.type == "unknown" else family.type
        out.append(f"# TYPE {family.name} {typ}\n")
        for sample in family.samples:
            if sample.labels:
                labels = ",".join(
                    f'{key}="{_escape_label(str(value))}"'
                    for key, value in sorted(sample.labels.items(), key=_label_order)
                )
                out.append(f"{sample.name}{{{labels}}} {_format_value(sample.value)}\n")
            else:
                out.append(f"{sample.name} {_format_value(sample.value)}\n")
    return "".join(out).encode()


# -- the HTTP endpoint ----------------------------------------------------------------------

_HEADERS = b"Content-Type: " + CONTENT_TYPE.encode() + b"\r\n"


class MetricsRouter:
    """The router HttpProtocol calls: GET/HEAD /metrics, everything else 404/405."""

    def __init__(self, collector):
        self.collector = collector

    def dispatch(self, request) -> Reply:
        path = request.path.rstrip("/") or "/"
        if path != "/metrics":
            return error_reply(404, "Not Found", _HEADERS)
        if request.method not in ("GET", "HEAD"):
            return error_reply(405, "Method Not Allowed", _HEADERS)
        return Reply(200, _HEADERS, (render(self.collector),))


async def start_metrics_server(
    manager,
    host: str,
    port: int,
    *,
    collector: TritonCollector | None = None,
    interval_ms: int | None = None,
    pinned_pool_bytes: int = DEFAULT_PINNED_POOL_BYTES,
    gpus=None,
    cpu: bool = True,
) -> MetricsServer:
    """Serve Triton's metrics for `manager` at http://host:port/metrics on the running loop.

    With `interval_ms`, a Poller thread reads the host gauges (and `gpus`, the
    `gpu_metrics.open_gpus()` the caller opened, if any) at that interval; it stops with
    the server."""
    loop = asyncio.get_running_loop()
    poller = None
    if collector is None:
        gauges = None
        if interval_ms is not None:
            gauges = HostGauges(pinned_pool_bytes=pinned_pool_bytes, gpus=gpus)
            poller = Poller(gauges, interval_ms).start()
        collector = TritonCollector(manager, host=gauges, cpu=cpu)
    router = MetricsRouter(collector)

    def factory() -> HttpProtocol:
        return HttpProtocol(router, loop, max_body_size=1 << 16)

    server = await loop.create_server(factory, host, port, reuse_address=True)
    return MetricsServer(server, poller, collector)


class MetricsServer:
    """The metrics port's asyncio server, with its Poller (closing it stops the polling
    too) and `text()`, the page it serves (the Vertex AI endpoint serves it too)."""

    def __init__(self, server, poller: Poller | None, collector):
        self._server = server
        self._poller = poller
        self._collector = collector

    def text(self) -> bytes:
        return render(self._collector)

    def close(self) -> None:
        if self._poller is not None:
            self._poller.stop()
        self._server.close()

    def __getattr__(self, name):
        return getattr(self._server, name)
