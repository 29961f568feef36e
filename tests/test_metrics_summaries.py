"""Triton's latency summaries, `--metrics-config`, the pinned memory pool and GPU gauges
(naiad.observability: latency_summary, metrics, gpu_metrics): units with fakes, then a
real `naiad serve` scraped after requests, and a GPU host's NVML readings where one exists."""

from __future__ import annotations

import random
import time
import types

import pytest
import requests
from naiad.memory import gpu
from naiad.observability.gpu_metrics import open_gpus
from naiad.observability.latency_summary import (
    DEFAULT_QUANTILES,
    LatencySummaries,
    MetricsConfig,
    Summary,
    parse_metrics_config,
)
from naiad.observability.metrics import HostGauges, Poller, TritonCollector, render
from naiad.scheduling.stats import ModelStats
from prometheus_client.parser import text_string_to_metric_families
from server_harness import NaiadServer, make_repository
from test_metrics import FakeManager, FakeModel, _add_sub_request, _samples

TIMEOUT = 30


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def _host(**kwargs):
    host = HostGauges(cpu_reader=lambda: (1, 1), memory_reader=lambda: (4 << 30, 1 << 30), **kwargs)
    host.poll()  # what a Poller would have read
    return host


# -- the summary ------------------------------------------------------------------------------


def test_quantiles_of_few_observations_are_tritons():
    # Triton 2.51 answered these for three add_sub requests of 359387, 12079, 15917 us.
    summary = Summary()
    for value in (359387, 12079, 15917):
        summary.observe(value)
    assert (summary.count, summary.sum) == (3, 387383)
    assert summary.values() == [
        (0.5, 12079.0),
        (0.9, 15917.0),
        (0.95, 15917.0),
        (0.99, 15917.0),
        (0.999, 15917.0),
    ]
    one = Summary()
    one.observe(3015)
    assert [value for _, value in one.values()] == [3015.0] * 5
    empty = [value for _, value in Summary().values()]
    assert all(value != value for value in empty)  # NaN: Triton writes "Nan"


def test_window_forgets_after_max_age_but_count_and_sum_stay():
    clock = FakeClock()
    summary = Summary(((0.5, 0.05),), clock)
    for value in range(1, 101):
        summary.observe(value)
    clock.now += 30
    assert summary.values() == [(0.5, 50.0)]
    for value in range(1001, 1101):
        summary.observe(value)
    clock.now += 40  # 70 s after the first hundred: they left the window, not the count
    assert summary.values() == [(0.5, 1050.0)]
    assert summary.count == 200 and summary.sum == sum(range(1, 101)) + sum(range(1001, 1101))
    clock.now += 120
    assert summary.values()[0][1] != summary.values()[0][1]  # nothing left: NaN


def test_thinned_windows_keep_the_error_bounds():
    clock = FakeClock()
    summary = Summary(DEFAULT_QUANTILES, clock)
    rng = random.Random(7)
    observed = []
    for _window in range(4):
        for _ in range(30000):
            value = rng.expovariate(1 / 500.0)
            summary.observe(value)
            observed.append(value)
        clock.now += 12.5
    observed.sort()
    n = len(observed)
    for quantile, value in summary.values():
        rank = sum(1 for v in observed if v <= value)
        error = min(e for _, e in DEFAULT_QUANTILES)
        assert abs(rank - quantile * n) <= max(error * n, 1) + 1, (quantile, rank)


def test_model_stats_feed_the_summaries():
    stats = ModelStats("m", 1)
    stats.summaries = LatencySummaries()
    timings = [0, 2_000, 30_000, 4_000]
    stats.record_success(1, 100_999, 5_000, timings)
    stats.record_successes(2, 2, 300_000, 10_000, timings, [(100_000, 4_000), (200_000, 6_000)])
    stats.record_successes(2, 2, 300_000, 10_000, timings)  # routed totals: the mean, twice
    kept = stats.summaries
    assert kept.request.count == 5
    assert kept.request.sum == 100 + 100 + 200 + 150 + 150  # whole microseconds
    assert kept.queue.sum == 5 + 4 + 6 + 5 + 5
    assert (kept.compute_infer.count, kept.compute_infer.sum) == (5, 150)


# -- --metrics-config ------------------------------------------------------------------------


def test_metrics_config_as_tritonserver_reads_it():
    config = parse_metrics_config([])
    assert (config.counter_latencies, config.summary_latencies) == (True, False)
    assert config.quantiles == DEFAULT_QUANTILES
    warnings = []
    config = parse_metrics_config(
        [
            "summary_latencies=true",
            "counter_latencies=false",
            "summary_quantiles=0.5:0.05,bad,0.75:x,0.9:0.01",
            "unknown_setting=1",
        ],
        warn=warnings.append,
    )
    assert (config.counter_latencies, config.summary_latencies) == (False, True)
    assert config.quantiles == ((0.5, 0.05), (0.9, 0.01))
    assert warnings[0].startswith("Invalid option: [bad]. No ':' delimiter found.")
    assert warnings[1].startswith("Invalid option: [0.75:x]. Error:")
    for bad in ("summary_latencies", "a,b=c", "=true", "summary_latencies="):
        with pytest.raises(ValueError) as caught:
            parse_metrics_config([bad])
        assert (
            str(caught.value) == f"--metrics-config option format is <setting>=<value>. Got {bad}"
        )


# -- the page --------------------------------------------------------------------------------


def test_summaries_render_as_triton_writes_them():
    model = FakeModel("add_sub", 1)
    model.stats.summaries = LatencySummaries(((0.5, 0.05), (0.9, 0.01)))
    model.stats.record_success(1, 12_079_000, 70_000, [0, 41_000, 11_706_000, 225_000])
    config = MetricsConfig(summary_latencies=True, quantiles=((0.5, 0.05), (0.9, 0.01)))
    text = render(TritonCollector(FakeManager(model), config=config, host=_host())).decode()
    block = text[text.index("# HELP nv_inference_request_summary_us") :]
    assert block.splitlines()[:6] == [
        "# HELP nv_inference_request_summary_us Summary of inference request duration in "
        "microseconds (includes cached requests)",
        "# TYPE nv_inference_request_summary_us summary",
        'nv_inference_request_summary_us_count{model="add_sub",version="1"} 1',
        'nv_inference_request_summary_us_sum{model="add_sub",version="1"} 12079',
        'nv_inference_request_summary_us{model="add_sub",version="1",quantile="0.5"} 12079',
        'nv_inference_request_summary_us{model="add_sub",version="1",quantile="0.9"} 12079',
    ]
    # Summaries come last (prometheus-cpp: counters, gauges, summaries), in Triton's order.
    names = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]
    assert names[-6:] == [
        "nv_cpu_memory_used_bytes",
        "nv_inference_request_summary_us",
        "nv_inference_queue_summary_us",
        "nv_inference_compute_input_summary_us",
        "nv_inference_compute_infer_summary_us",
        "nv_inference_compute_output_summary_us",
    ]
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["nv_inference_queue_summary_us"].type == "summary"


def test_counter_latencies_false_leaves_the_duration_counters_out():
    config = MetricsConfig(counter_latencies=False)
    text = render(TritonCollector(FakeManager(FakeModel("m", 1)), config=config, host=_host()))
    assert b"nv_inference_request_success{" in text
    assert b"nv_inference_exec_count{" in text
    assert b"_duration_us" not in text
    assert b"_summary_us" not in text  # summaries are off by default


def test_pinned_pool_gauges():
    text = render(TritonCollector(FakeManager(), host=_host(pinned_pool_bytes=1 << 20))).decode()
    assert "nv_pinned_memory_pool_total_bytes 1048576\n" in text
    assert "nv_pinned_memory_pool_used_bytes 0\n" in text
    # No model: the per-model families are left out whole, as Triton leaves them.
    assert "nv_inference_request_success" not in text


class FakeNvml(types.SimpleNamespace):
    """pynvml's API over two made-up devices."""

    class NVMLError(Exception):
        pass

    def __init__(self):
        super().__init__(energy=[5_000_000, 9_000_000])

    def nvmlInit(self):
        pass

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetName(self, handle):
        return b"NVIDIA H200"

    def nvmlDeviceGetUUID(self, handle):
        return f"GPU-0000000{handle}-aaaa-bbbb-cccc-dddddddddddd"

    def nvmlDeviceGetUtilizationRates(self, handle):
        return types.SimpleNamespace(gpu=37 + handle, memory=0)

    def nvmlDeviceGetMemoryInfo(self, handle):
        return types.SimpleNamespace(total=80 << 30, used=(3 << 30) + 12345, free=0)

    def nvmlDeviceGetPowerUsage(self, handle):
        if handle == 1:
            raise self.NVMLError("not supported")
        return 123_456  # mW

    def nvmlDeviceGetPowerManagementLimit(self, handle):
        return 700_000

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        return self.energy[handle]


def test_gpu_families_from_nvml(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    nvml = FakeNvml()
    host = _host(gpus=open_gpus(nvml))
    collector = TritonCollector(FakeManager(FakeModel("m", 1)), host=host)
    Poller(host, 2000).start().stop()  # the first reading: energy counts from here
    nvml.energy = [5_500_000, 9_000_250]  # mJ
    host.poll()
    text = render(collector).decode()
    uuid0 = 'gpu_uuid="GPU-00000000-aaaa-bbbb-cccc-dddddddddddd"'
    uuid1 = 'gpu_uuid="GPU-00000001-aaaa-bbbb-cccc-dddddddddddd"'
    for line in (
        f"nv_gpu_utilization{{{uuid0}}} 0.37",
        f"nv_gpu_utilization{{{uuid1}}} 0.38",
        f"nv_gpu_memory_total_bytes{{{uuid0}}} {80 << 30}",
        f"nv_gpu_memory_used_bytes{{{uuid0}}} {3 << 30}",  # whole MiB, as DCGM's FB_USED
        f"nv_gpu_power_usage{{{uuid0}}} 123.456",
        f"nv_gpu_power_usage{{{uuid1}}} 0",  # a reading the device refuses: 0, as Triton
        f"nv_gpu_power_limit{{{uuid0}}} 700",
        f"nv_energy_consumption{{{uuid0}}} 500",
        f"nv_energy_consumption{{{uuid1}}} 0.25",
    ):
        assert line + "\n" in text, line
    names = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]
    # Energy is the last counter; the GPU gauges sit between the pinned pool and the CPU.
    assert (
        names.index("nv_energy_consumption")
        == names.index("nv_inference_pending_request_count") - 1
    )
    assert names[names.index("nv_pinned_memory_pool_used_bytes") + 1] == "nv_gpu_utilization"
    assert names[names.index("nv_gpu_power_limit") + 1] == "nv_cpu_utilization"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert open_gpus(FakeNvml()).uuids == ["GPU-00000001-aaaa-bbbb-cccc-dddddddddddd"]


def test_no_gpu_no_gpu_families():
    class NoDriver(FakeNvml):
        def nvmlInit(self):
            raise self.NVMLError("Driver Not Loaded")

    assert open_gpus(NoDriver()) is None
    text = render(TritonCollector(FakeManager(FakeModel("m", 1)), host=_host(gpus=None)))
    assert b"nv_gpu_" not in text and b"nv_energy_consumption" not in text


# -- black box -------------------------------------------------------------------------------


def _add_sub(url: str) -> None:
    response = requests.post(
        url + "/v2/models/add_sub/infer", json=_add_sub_request(), timeout=TIMEOUT
    )
    assert response.ok


def test_real_server_summaries_count_the_requests(tmp_path):
    repository = make_repository(tmp_path / "models", ["add_sub"])
    args = [
        "--metrics-config=summary_latencies=true",
        "--metrics-config",
        "counter_latencies=false",
        "--metrics-config=summary_quantiles=0.5:0.05,0.99:0.001",
        "--metrics-interval-ms=100",
        "--pinned-memory-pool-byte-size=1048576",
    ]
    with NaiadServer(repository, log_dir=tmp_path, extra_args=args) as server:
        for _ in range(7):
            _add_sub(server.url)
        metrics = f"http://127.0.0.1:{server.metrics_port}/metrics"
        text = requests.get(metrics, timeout=TIMEOUT).text
        stats = requests.get(server.url + "/v2/models/add_sub/stats", timeout=TIMEOUT).json()
    samples = _samples(text)
    labels = '{model="add_sub",version="1"}'
    inference_stats = stats["model_stats"][0]["inference_stats"]
    for name, phase in (
        ("nv_inference_request_summary_us", "success"),
        ("nv_inference_queue_summary_us", "queue"),
        ("nv_inference_compute_input_summary_us", "compute_input"),
        ("nv_inference_compute_infer_summary_us", "compute_infer"),
        ("nv_inference_compute_output_summary_us", "compute_output"),
    ):
        assert samples[f"{name}_count{labels}"] == "7", name
        total = int(samples[f"{name}_sum{labels}"])
        # Each request's whole microseconds: at most the statistics' total, at most 7 less.
        assert (
            inference_stats[phase]["ns"] // 1000 - 7
            <= total
            <= inference_stats[phase]["ns"] // 1000
        )
        low = float(samples[f'{name}{{model="add_sub",version="1",quantile="0.5"}}'])
        high = float(samples[f'{name}{{model="add_sub",version="1",quantile="0.99"}}'])
        assert 0 <= low <= high <= total
        assert f'{name}{{model="add_sub",version="1",quantile="0.9"}}' not in samples
    assert "_duration_us" not in text  # counter_latencies=false
    assert samples['nv_inference_request_success{model="add_sub",version="1"}'] == "7"
    assert samples["nv_pinned_memory_pool_total_bytes"] == "1048576"
    assert samples["nv_pinned_memory_pool_used_bytes"] == "0"


def test_bad_metrics_config_stops_the_server(tmp_path):
    repository = make_repository(tmp_path / "models", ["add_sub"])
    server = NaiadServer(repository, log_dir=tmp_path, extra_args=["--metrics-config=oops"])
    server.start(wait=None)
    assert server.process.wait(60) == 1
    assert "--metrics-config option format is <setting>=<value>. Got oops" in server.stderr_text()


@pytest.mark.skipif(gpu.device_count() == 0, reason="no CUDA device on this host")
def test_gpu_metrics_on_a_gpu_host(tmp_path):
    pytest.importorskip("pynvml", reason="nvidia-ml-py (the gpu extra) is not installed")
    repository = make_repository(tmp_path / "models", ["add_sub"])
    with NaiadServer(
        repository, log_dir=tmp_path, extra_args=["--metrics-interval-ms=200"]
    ) as server:
        text = requests.get(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=TIMEOUT).text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name in (
        "nv_gpu_utilization",
        "nv_gpu_memory_total_bytes",
        "nv_gpu_memory_used_bytes",
        "nv_gpu_power_usage",
        "nv_gpu_power_limit",
        "nv_energy_consumption",
    ):
        samples = families[name].samples
        assert len(samples) == gpu.device_count(), name
        for sample in samples:
            assert set(sample.labels) == {"gpu_uuid"} and sample.labels["gpu_uuid"].startswith(
                "GPU-"
            )
    for sample in families["nv_gpu_memory_total_bytes"].samples:
        assert sample.value > 0


def test_metrics_flags_parse_as_tritonservers():
    from naiad.cli import build_parser

    parse = build_parser().parse_args
    options = parse(["serve", "--model-repository=m"])
    assert options.metrics_config == [] and options.metrics_interval_ms == 2000
    assert options.pinned_memory_pool_byte_size == 268435456
    options = parse(
        [
            "serve",
            "--model-repository=m",
            "--metrics-config=summary_latencies=true",
            "--metrics-config",
            "summary_quantiles=0.5:0.05,0.9:0.01",
            "--metrics-interval-ms=250",
            "--pinned-memory-pool-byte-size=0",
        ]
    )
    assert options.metrics_config == [
        "summary_latencies=true",
        "summary_quantiles=0.5:0.05,0.9:0.01",
    ]
    assert (options.metrics_interval_ms, options.pinned_memory_pool_byte_size) == (250, 0)
    config = parse_metrics_config(options.metrics_config)
    assert config.summary_latencies and config.quantiles == ((0.5, 0.05), (0.9, 0.01))


def test_poller_reads_every_half_interval():
    reads = []
    host = HostGauges(
        cpu_reader=lambda: reads.append(1) or (len(reads), 1), memory_reader=lambda: None
    )
    reads.clear()
    start = time.monotonic()
    poller = Poller(host, 40).start()  # --metrics-interval-ms=40: a read every 20 ms
    try:
        deadline = start + 30
        while len(reads) < 5:  # a loaded machine reads less often: wait for them
            assert time.monotonic() < deadline, len(reads)
            time.sleep(0.01)
    finally:
        poller.stop()
    elapsed = time.monotonic() - start
    count = len(reads)
    assert poller.seconds == 0.02
    # Never more often: start()'s read, then one per 20 ms at most.
    assert count <= 1 + elapsed / 0.02, (count, elapsed)
    time.sleep(0.1)
    assert len(reads) <= count + 1  # stopped
