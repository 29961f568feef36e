"""Prometheus metrics (observability.metrics): Triton 2.51's names, types, labels and help texts.

Unit tests drive TritonCollector with a fake manager; the black-box test starts a real
`naiad serve` and reads /metrics on --metrics-port after inferences.
"""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import numpy as np
import pytest
import requests
from naiad.http.routes import HttpRequest
from naiad.observability.metrics import (
    FAILURE_REASONS,
    MetricsRouter,
    TritonCollector,
    read_cpu_times,
    read_memory,
    render,
    start_metrics_server,
)
from naiad.scheduling.stats import ModelStats
from prometheus_client.parser import text_string_to_metric_families
from server_harness import NaiadServer, make_repository

REPO_ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"

# HELP and TYPE lines exactly as Triton 2.51 (tritonserver --metrics-port) writes them, in order.
TRITON_HEADERS = """\
# HELP nv_inference_request_success Number of successful inference requests, all batch sizes
# TYPE nv_inference_request_success counter
# HELP nv_inference_request_failure Number of failed inference requests, all batch sizes
# TYPE nv_inference_request_failure counter
# HELP nv_inference_count Number of inferences performed (does not include cached requests)
# TYPE nv_inference_count counter
# HELP nv_inference_exec_count Number of model executions performed (does not include cached requests)
# TYPE nv_inference_exec_count counter
# HELP nv_inference_request_duration_us Cumulative inference request duration in microseconds (includes cached requests)
# TYPE nv_inference_request_duration_us counter
# HELP nv_inference_queue_duration_us Cumulative inference queuing duration in microseconds (includes cached requests)
# TYPE nv_inference_queue_duration_us counter
# HELP nv_inference_compute_input_duration_us Cumulative compute input duration in microseconds (does not include cached requests)
# TYPE nv_inference_compute_input_duration_us counter
# HELP nv_inference_compute_infer_duration_us Cumulative compute inference duration in microseconds (does not include cached requests)
# TYPE nv_inference_compute_infer_duration_us counter
# HELP nv_inference_compute_output_duration_us Cumulative inference compute output duration in microseconds (does not include cached requests)
# TYPE nv_inference_compute_output_duration_us counter
# HELP nv_inference_pending_request_count Instantaneous number of pending requests awaiting execution per-model.
# TYPE nv_inference_pending_request_count gauge
# HELP nv_pinned_memory_pool_total_bytes Pinned memory pool total memory size, in bytes
# TYPE nv_pinned_memory_pool_total_bytes gauge
# HELP nv_pinned_memory_pool_used_bytes Pinned memory pool used memory size, in bytes
# TYPE nv_pinned_memory_pool_used_bytes gauge
# HELP nv_cpu_utilization CPU utilization rate [0.0 - 1.0]
# TYPE nv_cpu_utilization gauge
# HELP nv_cpu_memory_total_bytes CPU total memory (RAM), in bytes
# TYPE nv_cpu_memory_total_bytes gauge
# HELP nv_cpu_memory_used_bytes CPU used memory (RAM), in bytes
# TYPE nv_cpu_memory_used_bytes gauge
"""  # noqa: E501

PER_MODEL = (
    "nv_inference_request_success",
    "nv_inference_count",
    "nv_inference_exec_count",
    "nv_inference_request_duration_us",
    "nv_inference_queue_duration_us",
    "nv_inference_compute_input_duration_us",
    "nv_inference_compute_infer_duration_us",
    "nv_inference_compute_output_duration_us",
    "nv_inference_pending_request_count",
)


# -- a fake manager ---------------------------------------------------------------------------


class FakeModel:
    def __init__(self, name, version, ready=True):
        self.name = name
        self.version = version
        self.ready = ready
        self.ready_once = ready
        self.stats = ModelStats(name, version)


class FakeManager:
    def __init__(self, *models):
        self.models = {}
        for model in models:
            self.models.setdefault(model.name, {})[model.version] = model
        self.pending = {}

    def awaiting_execution(self, model):
        return self.pending.get((model.name, model.version), 0)


class FakeCpu:
    def __init__(self, busy=0, idle=0):
        self.busy, self.idle = busy, idle

    def __call__(self):
        return self.busy, self.idle


def _collector(manager, cpu=None, memory=(16 << 30, 3 << 30)):
    return TritonCollector(manager, cpu_reader=cpu or FakeCpu(), memory_reader=lambda: memory)


def _samples(text: str) -> dict:
    """{'name{labels}': value-string} of every sample line."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            out[key] = value
    return out


def _key(name, model, version="1", reason=None):
    if reason is None:
        return f'{name}{{model="{model}",version="{version}"}}'
    return f'{name}{{model="{model}",reason="{reason}",version="{version}"}}'


# -- unit tests -------------------------------------------------------------------------------


def test_help_and_type_lines_match_triton():
    text = render(_collector(FakeManager(FakeModel("add_sub", 1)))).decode()
    headers = "".join(line + "\n" for line in text.splitlines() if line.startswith("#"))
    assert headers == TRITON_HEADERS


def test_collector_families_types_and_no_total_suffix():
    families = {f.name: f for f in _collector(FakeManager(FakeModel("m", 1))).collect()}
    for name in families:
        assert not name.endswith("_total")
    for family in families.values():
        for sample in family.samples:
            assert sample.name == family.name
    gauges = {
        "nv_inference_pending_request_count",
        "nv_pinned_memory_pool_total_bytes",
        "nv_pinned_memory_pool_used_bytes",
        "nv_cpu_utilization",
        "nv_cpu_memory_total_bytes",
        "nv_cpu_memory_used_bytes",
    }
    for name, family in families.items():
        assert family.type == ("gauge" if name in gauges else "counter"), name
    text = render(_collector(FakeManager(FakeModel("m", 1)))).decode()
    assert not re.search(r"_total[ {]", text)
    assert "_created" not in text


def test_fresh_model_renders_zeros_with_triton_labels():
    text = render(_collector(FakeManager(FakeModel("add_sub", 1)))).decode()
    samples = _samples(text)
    for name in PER_MODEL:
        assert samples[_key(name, "add_sub")] == "0", name
    for reason in FAILURE_REASONS:
        assert samples[_key("nv_inference_request_failure", "add_sub", reason=reason)] == "0"
    assert set(FAILURE_REASONS) == {"OTHER", "BACKEND", "CANCELED", "REJECTED"}
    assert samples["nv_cpu_memory_total_bytes"] == str(16 << 30)
    assert samples["nv_cpu_memory_used_bytes"] == str(3 << 30)
    assert samples["nv_cpu_utilization"] == "0"


def test_counters_move_with_the_stats():
    model = FakeModel("add_sub", 1)
    manager = FakeManager(model, FakeModel("other", 3))
    collector = _collector(manager)
    stats = model.stats
    timings = [0, 2_000, 30_000, 4_000]  # ns
    stats.record_execution(4, timings)
    for _ in range(4):
        stats.record_success(1, 100_000, 5_000, timings)
    stats.record_execution(2, timings)
    stats.record_success(2, 50_500, 1_000, timings)
    stats.record_failure(7_000)  # BACKEND by default
    stats.record_failure(7_000, "CANCELED")
    stats.record_failure(7_000, "CANCELED")
    manager.pending[("add_sub", 1)] = 3

    samples = _samples(render(collector).decode())
    assert samples[_key("nv_inference_request_success", "add_sub")] == "5"
    assert samples[_key("nv_inference_count", "add_sub")] == "6"
    assert samples[_key("nv_inference_exec_count", "add_sub")] == "2"
    assert samples[_key("nv_inference_request_duration_us", "add_sub")] == "450"  # 450.5 us
    assert samples[_key("nv_inference_queue_duration_us", "add_sub")] == "21"
    assert samples[_key("nv_inference_compute_input_duration_us", "add_sub")] == "10"
    assert samples[_key("nv_inference_compute_infer_duration_us", "add_sub")] == "150"
    assert samples[_key("nv_inference_compute_output_duration_us", "add_sub")] == "20"
    assert samples[_key("nv_inference_pending_request_count", "add_sub")] == "3"
    failure = "nv_inference_request_failure"
    assert samples[_key(failure, "add_sub", reason="BACKEND")] == "1"
    assert samples[_key(failure, "add_sub", reason="CANCELED")] == "2"
    assert samples[_key(failure, "add_sub", reason="OTHER")] == "0"
    assert samples[_key(failure, "add_sub", reason="REJECTED")] == "0"
    # Other models and versions are labelled separately and untouched.
    assert samples[_key("nv_inference_request_success", "other", "3")] == "0"

    stats.record_success(1, 1_000, 0, timings)
    manager.pending[("add_sub", 1)] = 0
    samples = _samples(render(collector).decode())
    assert samples[_key("nv_inference_request_success", "add_sub")] == "6"
    assert samples[_key("nv_inference_pending_request_count", "add_sub")] == "0"


def test_models_never_ready_are_not_reported_and_versions_are_separate():
    manager = FakeManager(FakeModel("a", 1), FakeModel("a", 2), FakeModel("broken", 1, ready=False))
    samples = _samples(render(_collector(manager)).decode())
    assert _key("nv_inference_count", "a", "1") in samples
    assert _key("nv_inference_count", "a", "2") in samples
    assert not any('model="broken"' in key for key in samples)


def test_label_values_are_escaped():
    manager = FakeManager(FakeModel('we"ird\\name', 1))
    text = render(_collector(manager)).decode()
    assert 'nv_inference_count{model="we\\"ird\\\\name",version="1"} 0' in text


def test_output_parses_as_prometheus_text():
    model = FakeModel("add_sub", 1)
    model.stats.record_success(1, 1_000_000, 0, [0, 0, 0, 0])
    text = render(_collector(FakeManager(model))).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert "nv_cpu_utilization" in families
    assert families["nv_inference_pending_request_count"].type == "gauge"


def test_cpu_utilization_is_the_busy_ratio_since_the_last_scrape():
    cpu = FakeCpu(busy=100, idle=100)
    collector = _collector(FakeManager(), cpu=cpu)  # baseline taken here
    cpu.busy, cpu.idle = 130, 190  # +30 busy, +90 idle
    assert _samples(render(collector).decode())["nv_cpu_utilization"] == "0.25"
    # No jiffies elapsed: the previous ratio stands.
    assert _samples(render(collector).decode())["nv_cpu_utilization"] == "0.25"
    cpu.busy, cpu.idle = 230, 190
    assert _samples(render(collector).decode())["nv_cpu_utilization"] == "1"


def test_proc_readers(tmp_path):
    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal guest guest_nice
    stat.write_text("cpu  10 2 3 100 5 1 1 1 7 7\ncpu0 1 1 1 1 1 1 1 1 0 0\n")
    assert read_cpu_times(str(stat)) == (10 + 2 + 3 + 1 + 1 + 1, 100 + 5)
    assert read_cpu_times(str(tmp_path / "missing")) is None
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(
        "MemTotal:       24683652 kB\nMemFree:        23855172 kB\n"
        "MemAvailable:   24203496 kB\nBuffers:            4948 kB\n"
    )
    # The numbers Triton 2.51 reported on this machine for that /proc/meminfo.
    assert read_memory(str(meminfo)) == (25276059648, 491679744)
    assert read_memory(str(tmp_path / "missing")) is None
    busy, idle = read_cpu_times()
    assert busy > 0 and idle > 0
    total, used = read_memory()
    assert 0 < used < total


def test_router_serves_only_metrics():
    router = MetricsRouter(_collector(FakeManager(FakeModel("m", 1))))
    reply = router.dispatch(HttpRequest("GET", "/metrics", "", {}, b""))
    assert reply.status == 200
    assert reply.headers == b"Content-Type: text/plain; charset=utf-8\r\n"
    assert b"nv_inference_count" in b"".join(reply.body)
    assert router.dispatch(HttpRequest("GET", "/", "", {}, b"")).status == 404
    assert router.dispatch(HttpRequest("GET", "/v2/health/ready", "", {}, b"")).status == 404
    assert router.dispatch(HttpRequest("POST", "/metrics", "", {}, b"")).status == 405


def test_start_metrics_server_on_the_event_loop():
    async def scenario():
        model = FakeModel("add_sub", 1)
        model.stats.record_success(1, 1_000, 0, [0, 0, 0, 0])
        server = await start_metrics_server(FakeManager(model), HOST, 0)
        port = server.sockets[0].getsockname()[1]
        try:
            answers = []
            for _ in range(2):  # two scrapes, each on its own connection
                reader, writer = await asyncio.open_connection(HOST, port)
                writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                answers.append(await asyncio.wait_for(reader.read(), 10))
                writer.close()
            return answers
        finally:
            server.close()
            await server.wait_closed()

    for answer in asyncio.run(scenario()):
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 OK")
        assert b"Content-Type: text/plain; charset=utf-8" in head
        assert b'nv_inference_request_success{model="add_sub",version="1"} 1\n' in body


# -- black box: a real server ---------------------------------------------------------------

RAISER_CONFIG = """
name: "raiser"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

RAISER_MODEL = """
import triton_python_backend_utils as pb_utils  # noqa: F401


class TritonPythonModel:
    def execute(self, requests):
        raise ValueError("raiser refuses to run")
"""


@pytest.fixture
def server(tmp_path):
    repository = tmp_path / "repository"
    make_repository(repository, ["add_sub"])
    (repository / "raiser" / "1").mkdir(parents=True)
    (repository / "raiser" / "config.pbtxt").write_text(RAISER_CONFIG)
    (repository / "raiser" / "1" / "model.py").write_text(RAISER_MODEL)
    with NaiadServer(repository, log_dir=tmp_path, name="metrics") as naiad:
        metrics_url = f"http://{naiad.host}:{naiad.metrics_port}/metrics"
        deadline = time.monotonic() + 30
        while True:  # the metrics port opens right after the HTTP one
            try:
                if requests.get(metrics_url, timeout=2).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("metrics endpoint did not come up")
            time.sleep(0.1)
        yield f"http://{naiad.host}:{naiad.http_port}", metrics_url


def _scrape(metrics_url) -> dict:
    response = requests.get(metrics_url, timeout=10)
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "text/plain; charset=utf-8"
    return _samples(response.text)


def _add_sub_request(shape=(1, 16)):
    count = int(np.prod(shape))
    data = list(range(count))
    return {
        "inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": list(shape), "data": data},
            {"name": "INPUT1", "datatype": "FP32", "shape": list(shape), "data": data},
        ]
    }


def test_real_server_metrics(server):
    http_url, metrics_url = server
    infer = http_url + "/v2/models/add_sub/infer"
    raiser = http_url + "/v2/models/raiser/infer"

    before = _scrape(metrics_url)
    for name in PER_MODEL:
        assert before[_key(name, "add_sub")] == "0"
    for reason in FAILURE_REASONS:
        assert before[_key("nv_inference_request_failure", "raiser", reason=reason)] == "0"
    assert int(before["nv_cpu_memory_total_bytes"]) > int(before["nv_cpu_memory_used_bytes"]) > 0
    assert 0.0 <= float(before["nv_cpu_utilization"]) <= 1.0

    for _ in range(3):
        assert requests.post(infer, json=_add_sub_request(), timeout=30).status_code == 200
    assert requests.post(infer, json=_add_sub_request((2, 16)), timeout=30).status_code == 200
    # Requests refused before they reach the model count nowhere, as in Triton.
    assert requests.post(infer, json=_add_sub_request((1, 15)), timeout=30).status_code == 400
    bad = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]}]}
    assert requests.post(raiser, json=bad, timeout=30).status_code == 400
    # An execute() that raises is a failure with reason BACKEND.
    one = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 1], "data": [1]}]}
    assert requests.post(raiser, json=one, timeout=30).status_code == 500

    after = _scrape(metrics_url)
    assert after[_key("nv_inference_request_success", "add_sub")] == "4"
    assert after[_key("nv_inference_count", "add_sub")] == "5"
    assert 1 <= int(after[_key("nv_inference_exec_count", "add_sub")]) <= 4
    # The duration counters are the statistics extension's, in microseconds; each of the
    # four requests spent some time in every phase.
    stats = requests.get(http_url + "/v2/models/add_sub/stats", timeout=30).json()
    inference_stats = stats["model_stats"][0]["inference_stats"]
    for name, phase in (
        ("nv_inference_request_duration_us", "success"),
        ("nv_inference_queue_duration_us", "queue"),
        ("nv_inference_compute_input_duration_us", "compute_input"),
        ("nv_inference_compute_infer_duration_us", "compute_infer"),
        ("nv_inference_compute_output_duration_us", "compute_output"),
    ):
        microseconds = int(after[_key(name, "add_sub")])
        assert microseconds == inference_stats[phase]["ns"] // 1000, name
        assert microseconds > 0, name
    assert after[_key("nv_inference_pending_request_count", "add_sub")] == "0"
    for reason in FAILURE_REASONS:
        assert after[_key("nv_inference_request_failure", "add_sub", reason=reason)] == "0"
    failure = "nv_inference_request_failure"
    assert after[_key(failure, "raiser", reason="BACKEND")] == "1"
    for reason in ("OTHER", "CANCELED", "REJECTED"):
        assert after[_key(failure, "raiser", reason=reason)] == "0"
    assert after[_key("nv_inference_request_success", "raiser")] == "0"
    assert after[_key("nv_inference_count", "raiser")] == "0"

    # Every sample line is `name{labels} value` with Triton's names only.
    text = requests.get(metrics_url, timeout=10).text
    for line in text.splitlines():
        if not line.startswith("#"):
            assert re.fullmatch(r'nv_[a-z_]+(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? \S+', line)
    assert not re.search(r"_total[ {]", text)
    assert requests.get(metrics_url.replace("/metrics", "/"), timeout=10).status_code == 404
