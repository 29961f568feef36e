"""deploy/prometheus, deploy/grafana, deploy/prometheus-adapter and the KServe autoscaling
query, checked against a real Prometheus (Debian's `prometheus` package; `make deploy-tools`
installs it) scraping a real Naiad under inference load.

Every query of the Grafana dashboard, the Prometheus adapter rule behind the HPA, the
InferenceService's scaling query and every alert rule's signal is evaluated through
Prometheus's HTTP API and must return at least one finite sample, so a misspelled metric or
label, or a label the scrape config does not attach, fails here.

How the shipped scrape config (deploy/prometheus/prometheus.yml) is run here, and the only
changes made to it:
- `kubernetes_sd_configs` becomes `file_sd_configs` with the targets Kubernetes' pod discovery
  would hand Prometheus for one pod of deploy/kubernetes/deployment.yaml and one of the KServe
  runtime (deploy/kserve/): one target per container port, with the pod's labels and
  annotations as `__meta_kubernetes_pod_label_*` / `__meta_kubernetes_pod_annotation_*`, the
  namespace and pod name. The address is 127.0.0.1 and the annotated metrics port the free
  port the local Naiad's metrics listen on. The job's relabel rules run unchanged on them.
  (Debian's Prometheus is built without Kubernetes discovery, and there is no cluster here.)
- `scrape_interval` and `evaluation_interval` are 1 s instead of 15 s, so rate() windows
  have samples within seconds.
- `rule_files` names the shipped deploy/prometheus/alerts.yml by its absolute path.
Dashboard variables are set as Grafana would for "All" ($instance, $model: `.*`) and
`$__rate_interval` is 1m.

Exempt, and only these: the dashboard's GPU panels (GPU_PANELS below). Their metrics
(nv_gpu_*) exist only on a server with a GPU, and neither this machine nor CI has one; their
metric names are checked against Triton's list instead.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
import requests
import yaml
from deploy_support import (
    ADAPTER_VALUES,
    DASHBOARD,
    KSERVE,
    KUBERNETES,
    PROMETHEUS,
    container,
    one,
)
from server_harness import EXAMPLE_MODELS, NaiadServer, free_port, make_repository

HOST = "127.0.0.1"
SCRAPE_INTERVAL = "1s"
RATE_INTERVAL = "1m"

# The dashboard panels that need a GPU, and Triton's GPU metric names they may use.
GPU_PANELS = {"GPU utilization", "GPU memory", "GPU power"}
TRITON_GPU_METRICS = {
    "nv_gpu_utilization",
    "nv_gpu_memory_total_bytes",
    "nv_gpu_memory_used_bytes",
    "nv_gpu_power_usage",
    "nv_gpu_power_limit",
    "nv_energy_consumption",
}

# Where the fake pods live: namespace and name as Kubernetes would give them.
DEPLOYMENT_POD = ("naiad", "naiad-5d8f7c9b6-x2k4q")
ISVC_POD_SUFFIX = "-predictor-6c9d8b7f5-q7w2z"


def _prometheus_binary() -> str:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail(
            "the `prometheus` server is not installed: `make deploy-tools` installs Debian's "
            "package (make test runs it)"
        )
    return binary


def _sanitize(name: str) -> str:
    """Kubernetes discovery's label name for a pod label or annotation key."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def _pod_targets(pod_meta: dict, spec: dict, namespace: str, pod: str, ports: dict) -> list[dict]:
    """What Prometheus' Kubernetes pod discovery emits for one pod: a target per container
    port (a container without ports gets one target with the bare address), with the meta
    labels that deploy/prometheus/prometheus.yml relabels. `ports` maps the pod's ports
    (container ports and the annotated metrics port) to local ones."""
    labels = {
        "__meta_kubernetes_namespace": namespace,
        "__meta_kubernetes_pod_name": pod,
        "__meta_kubernetes_pod_node_name": "node-1",
        "__meta_kubernetes_pod_container_name": spec["name"],
    }
    for key, value in pod_meta.get("labels", {}).items():
        labels[f"__meta_kubernetes_pod_label_{_sanitize(key)}"] = value
        labels[f"__meta_kubernetes_pod_labelpresent_{_sanitize(key)}"] = "true"
    for key, value in pod_meta.get("annotations", {}).items():
        if key.endswith("/port"):
            value = str(ports[int(value)])
        labels[f"__meta_kubernetes_pod_annotation_{_sanitize(key)}"] = value
        labels[f"__meta_kubernetes_pod_annotationpresent_{_sanitize(key)}"] = "true"
    container_ports = spec.get("ports") or [None]
    groups = []
    for port in container_ports:
        group_labels = dict(labels)
        if port is None:
            address = HOST
        else:
            address = f"{HOST}:{ports[port['containerPort']]}"
            group_labels["__meta_kubernetes_pod_container_port_name"] = port.get("name", "")
            group_labels["__meta_kubernetes_pod_container_port_number"] = str(port["containerPort"])
        groups.append({"targets": [address], "labels": group_labels})
    return groups


def _scrape_config(tmp: Path, targets_file: Path) -> Path:
    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    config["global"]["scrape_interval"] = SCRAPE_INTERVAL
    config["global"]["evaluation_interval"] = SCRAPE_INTERVAL
    assert config["rule_files"] == ["alerts.yml"]
    config["rule_files"] = [str(PROMETHEUS / "alerts.yml")]
    (job,) = [job for job in config["scrape_configs"] if job["job_name"] == "naiad"]
    assert job.pop("kubernetes_sd_configs") == [{"role": "pod"}]
    job["file_sd_configs"] = [{"files": [str(targets_file)]}]
    path = tmp / "prometheus.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


class Prometheus:
    def __init__(self, tmp: Path, config: Path):
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        self.log = tmp / "prometheus.log"
        self.command = [
            _prometheus_binary(),
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address={HOST}:{self.port}",
        ]
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                self.command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=self.log.parent
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.process.poll() is None, "prometheus exited:\n" + self.log.read_text()
            with contextlib.suppress(requests.RequestException):
                if requests.get(f"{self.url}/-/ready", timeout=2).status_code == 200:
                    return
            time.sleep(0.2)
        raise TimeoutError("prometheus not ready:\n" + self.log.read_text()[-3000:])

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()  # only the process this test started
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def api(self, path: str, **params) -> dict:
        reply = requests.get(f"{self.url}/api/v1/{path}", params=params, timeout=20)
        body = reply.json()
        assert reply.status_code == 200 and body["status"] == "success", (path, params, body)
        return body["data"]

    def query(self, expr: str) -> list[dict]:
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", (expr, data)
        return data["result"]


def _finite(result: list[dict]) -> list[float]:
    values = [float(sample["value"][1]) for sample in result]
    return [value for value in values if math.isfinite(value)]


class Load:
    """Bounded add_sub inference load from two client threads (so requests share batches):
    stops at `stop()` or after `seconds`, whichever comes first."""

    def __init__(self, url: str, seconds: float = 240.0):
        self.url = url
        self.deadline = time.monotonic() + seconds
        self.done = threading.Event()
        self.count = 0
        self.errors: list[str] = []
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(2)]

    def _run(self) -> None:
        body = {
            "inputs": [
                {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": [1.0] * 16},
                {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": [2.0] * 16},
            ]
        }
        with requests.Session() as session:
            while not self.done.is_set() and time.monotonic() < self.deadline:
                try:
                    reply = session.post(
                        f"{self.url}/v2/models/add_sub/infer", json=body, timeout=10
                    )
                    if reply.status_code != 200:
                        self.errors.append(reply.text)
                    self.count += 1
                except requests.RequestException as error:
                    self.errors.append(str(error))
                time.sleep(0.005)

    def start(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def stop(self) -> None:
        self.done.set()
        for thread in self.threads:
            thread.join(15)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """A Naiad under load, scraped by Prometheus as two pods: one of the Deployment, one of
    the KServe InferenceService (same server, different pod metadata)."""
    tmp = tmp_path_factory.mktemp("observability")
    repository = make_repository(tmp / "models", sorted(p.name for p in EXAMPLE_MODELS.iterdir()))
    server = NaiadServer(repository, log_dir=tmp, name="observed").start(wait="ready")
    prometheus = load = None
    try:
        deployment = one("Deployment", KUBERNETES)
        template = deployment["spec"]["template"]
        naiad = container(template["spec"], "naiad")
        local = {8000: server.http_port, 8001: server.grpc_port, 8002: server.metrics_port}
        groups = _pod_targets(template["metadata"], naiad, *DEPLOYMENT_POD, local)

        runtime = one("ClusterServingRuntime", KSERVE)["spec"]
        isvc = one("InferenceService", KSERVE)
        isvc_pod = isvc["metadata"]["name"] + ISVC_POD_SUFFIX
        pod_meta = {"labels": runtime["labels"], "annotations": runtime["annotations"]}
        groups += _pod_targets(
            pod_meta,
            container(runtime, "kserve-container"),
            isvc["metadata"]["namespace"],
            isvc_pod,
            {8080: server.http_port, 8002: server.metrics_port},
        )
        targets = tmp / "targets.json"
        targets.write_text(json.dumps(groups, indent=1))

        load = Load(server.url).start()
        prometheus = Prometheus(tmp, _scrape_config(tmp, targets))
        prometheus.start()
        _wait_for_data(prometheus)
        state = {
            "prometheus": prometheus,
            "server": server,
            "repository": repository,
            "tmp": tmp,
            "load": load,
            "isvc_namespace": isvc["metadata"]["namespace"],
            "isvc_pod": isvc_pod,
        }
        yield state
        server = state["server"]  # the restart test replaces it
    finally:
        if load is not None:
            load.stop()
        if prometheus is not None:
            prometheus.stop()
        server.stop()


def _wait_for_data(prometheus: Prometheus, timeout: float = 90.0) -> None:
    """Until both pods are scraped and every rate() over 30 s has moved."""
    deadline = time.monotonic() + timeout
    expr = (
        'count(count_over_time(up{job="naiad"}[30s]) >= 6) == 2'
        " and on() sum(rate(nv_inference_request_success[30s])) > 0"
    )
    while time.monotonic() < deadline:
        if prometheus.query(expr):
            return
        time.sleep(0.5)
    raise TimeoutError(
        f"no data in Prometheus after {timeout:.0f}s; targets: {prometheus.api('targets')}"
    )


_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^()]*)\)")
_MATCHER = re.compile(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)\s*\"")


def names_in(expr: str) -> tuple[set[str], set[str]]:
    """(metric names, label names) an expression uses: `nv_*` and `up` metrics, the labels of
    its matchers and of its by/without/on/ignoring clauses."""
    metrics = set(re.findall(r"\b(nv_\w+|up)\b(?!\s*\()", re.sub(r'"[^"]*"', '""', expr)))
    labels = set(_MATCHER.findall(expr))
    for group in _GROUPING.findall(expr):
        labels |= {label.strip() for label in group.split(",") if label.strip()}
    return metrics, labels


def _check(prometheus: Prometheus, what: str, expr: str, needed_labels=()) -> list[dict]:
    """`expr` returns a finite sample, and every metric and label it names exists in
    Prometheus: a misspelled label in `{modle=~".*"}` or `by (reson)` still returns data,
    so names are checked on their own too."""
    metrics, labels = names_in(expr)
    assert metrics, f"{what}: no metric in {expr}"
    known_metrics = set(prometheus.api("label/__name__/values"))
    known_labels = set(prometheus.api("labels"))
    assert metrics <= known_metrics, f"{what}: unknown metrics {metrics - known_metrics}"
    assert labels <= known_labels, f"{what}: unknown labels {labels - known_labels}"
    result = prometheus.query(expr)
    assert result, f"{what}: no data for {expr}"
    assert _finite(result), f"{what}: only NaN/Inf for {expr}: {result}"
    for label in needed_labels:
        assert all(label in sample["metric"] for sample in result), (
            f"{what}: samples without the label {label!r} it shows: {result}"
        )
    return result


# -- the scrape config ----------------------------------------------------------------------


def test_both_pods_are_scraped_with_namespace_and_pod_labels(stack):
    prometheus = stack["prometheus"]
    active = prometheus.api("targets", state="active")["activeTargets"]
    # Three container ports of the Deployment's pod rewritten to one metrics address, plus
    # the KServe pod: two distinct targets.
    up = [t for t in active if t["health"] == "up"]
    assert len(up) == 2, active
    pods = {(t["labels"]["namespace"], t["labels"]["pod"]) for t in up}
    assert pods == {DEPLOYMENT_POD, (stack["isvc_namespace"], stack["isvc_pod"])}
    assert all(t["scrapeUrl"].endswith(f":{stack['server'].metrics_port}/metrics") for t in up)


def test_a_misspelled_metric_has_no_data(stack):
    """The checks can fail: a misspelled name returns nothing, and _check says so."""
    prometheus = stack["prometheus"]
    assert prometheus.query("nv_inference_request_sucess") == []
    with pytest.raises(AssertionError, match="unknown metrics"):
        _check(prometheus, "misspelled", "rate(nv_inference_queue_duration[1m])")
    with pytest.raises(AssertionError, match="no data"):
        _check(prometheus, "wrong label value", 'nv_inference_count{model="add_subb"}')
    with pytest.raises(AssertionError, match="unknown labels"):
        _check(
            prometheus, "wrong label", 'sum by (reson) (nv_inference_request_failure{modle=~".*"})'
        )
    with pytest.raises(AssertionError, match="without the label"):
        _check(prometheus, "legend", "sum(nv_inference_count)", needed_labels=["model"])


def test_names_in():
    assert names_in('sum by (model, reason) (rate(nv_x{instance=~"a.*"}[1m])) / up') == (
        {"nv_x", "up"},
        {"model", "reason", "instance"},
    )


# -- Grafana --------------------------------------------------------------------------------


def _dashboard_panels() -> list[dict]:
    dashboard = json.loads(DASHBOARD.read_text())
    panels = []
    for panel in dashboard["panels"]:
        panels += [panel, *panel.get("panels", [])]
    return [panel for panel in panels if panel.get("targets")]


def _grafana_expr(expr: str) -> str:
    expr = expr.replace("$__rate_interval", RATE_INTERVAL)
    expr = expr.replace("$instance", ".*").replace("$model", ".*")
    assert "$" not in expr, f"unhandled dashboard variable in {expr}"
    return expr


def test_dashboard_has_the_panels_asked_for():
    titles = " | ".join(panel["title"].lower() for panel in _dashboard_panels())
    for word in (
        "throughput",
        "queue",
        "compute input",
        "compute infer",
        "compute output",
        "batch size",
        "failures by reason",
        "pending",
        "cpu utilization",
        "cpu memory",
        "gpu",
    ):
        assert word in titles, word
    assert GPU_PANELS <= {panel["title"] for panel in _dashboard_panels()}


def test_dashboard_queries_return_data(stack):
    prometheus = stack["prometheus"]
    checked = 0
    for panel in _dashboard_panels():
        if panel["title"] in GPU_PANELS:
            continue
        for target in panel["targets"]:
            _check(
                prometheus,
                f"panel {panel['title']!r}",
                _grafana_expr(target["expr"]),
                needed_labels=re.findall(r"\{\{\s*(\w+)\s*\}\}", target["legendFormat"]),
            )
            checked += 1
    assert checked >= 12


def test_dashboard_variables_return_data(stack):
    prometheus = stack["prometheus"]
    variables = json.loads(DASHBOARD.read_text())["templating"]["list"]
    queried = [v for v in variables if v["type"] == "query"]
    assert {v["name"] for v in queried} == {"instance", "model"}
    for variable in queried:
        match = re.fullmatch(r"label_values\((.+), (\w+)\)", variable["query"]["query"])
        assert match, variable
        selector, label = match.groups()
        result = prometheus.query(f"count by ({label}) ({_grafana_expr(selector)})")
        assert result and all(sample["metric"].get(label) for sample in result), variable


def test_gpu_panels_use_only_triton_gpu_metrics():
    """The exemption is only for a missing GPU: the names must still be Triton's."""
    for panel in _dashboard_panels():
        if panel["title"] not in GPU_PANELS:
            continue
        for target in panel["targets"]:
            names = set(re.findall(r"\b(nv_\w+)", target["expr"]))
            assert names and names <= TRITON_GPU_METRICS, (panel["title"], names)


# -- autoscaling ----------------------------------------------------------------------------


def test_adapter_rule_returns_data_per_pod(stack):
    """The Prometheus adapter's rule as it renders it for the HPA of the Deployment: the
    series query finds the pod, and the metrics query gives a value for it."""
    prometheus = stack["prometheus"]
    (rule,) = yaml.safe_load(ADAPTER_VALUES.read_text())["rules"]["custom"]
    series = prometheus.api("series", **{"match[]": rule["seriesQuery"]})
    namespace, pod = DEPLOYMENT_POD
    assert any(s.get("namespace") == namespace and s.get("pod") == pod for s in series), series
    resources = rule["resources"]["overrides"]
    assert {"namespace", "pod"} <= set(resources)
    expr = (
        rule["metricsQuery"]
        .replace("<<.LabelMatchers>>", f'namespace="{namespace}",pod=~"{pod}"')
        .replace("<<.GroupBy>>", "pod")
    )
    assert "<<" not in expr
    result = _check(prometheus, "adapter rule", expr)
    assert [sample["metric"] for sample in result] == [{"pod": pod}], result


def test_inference_service_scaling_query_returns_data(stack):
    isvc = one("InferenceService", KSERVE)
    (metric,) = isvc["spec"]["predictor"]["autoScaling"]["metrics"]
    _check(
        stack["prometheus"], "InferenceService autoscaling", metric["external"]["metric"]["query"]
    )


# -- alerts ---------------------------------------------------------------------------------

_COMPARISONS = ("==", "!=", ">=", "<=", ">", "<")


def split_comparison(expr: str) -> tuple[str, str, str]:
    """(signal, operator, threshold) of `signal OP threshold`, the last comparison outside
    any (), {} or [] and any string."""
    depth = 0
    quote = None
    found = None
    i = 0
    while i < len(expr):
        char = expr[i]
        if quote:
            if char == "\\":
                i += 1
            elif char == quote:
                quote = None
        elif char in "\"'`":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif depth == 0:
            for op in _COMPARISONS:
                if expr.startswith(op, i) and not expr.startswith("=~", i):
                    found = (i, op)
                    i += len(op) - 1
                    break
        i += 1
    assert found, f"no top-level comparison in {expr!r}"
    at, op = found
    return expr[:at].strip(), op, expr[at + len(op) :].strip()


def test_split_comparison():
    assert split_comparison('up{job="a>b"} == 0') == ('up{job="a>b"}', "==", "0")
    assert split_comparison("sum(x > 1) / y\n> 0.05") == ("sum(x > 1) / y", ">", "0.05")
    with pytest.raises(AssertionError):
        split_comparison("rate(x[5m])")


def _alert_rules() -> list[dict]:
    groups = yaml.safe_load((PROMETHEUS / "alerts.yml").read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def test_alert_rules_cover_errors_queue_time_and_restarts():
    names = {rule["alert"] for rule in _alert_rules()}
    assert {
        "NaiadHighErrorRate",
        "NaiadHighQueueTime",
        "NaiadInstanceDown",
        "NaiadInstanceRestarted",
    } <= names


@pytest.mark.parametrize("rule", _alert_rules(), ids=lambda rule: rule["alert"])
def test_alert_signal_returns_data(stack, rule):
    prometheus = stack["prometheus"]
    signal, _, threshold = split_comparison(rule["expr"])
    float(threshold)
    shown = set(re.findall(r"\$labels\.(\w+)", json.dumps(rule.get("annotations", {}))))
    _check(prometheus, f"alert {rule['alert']}", signal, needed_labels=sorted(shown))
    prometheus.query(rule["expr"])  # the whole rule parses and evaluates


def test_prometheus_loaded_and_evaluates_the_alert_rules(stack):
    prometheus = stack["prometheus"]
    deadline = time.monotonic() + 30
    while True:
        groups = prometheus.api("rules", type="alert")["groups"]
        rules = [rule for group in groups for rule in group["rules"]]
        evaluated = [rule for rule in rules if rule.get("lastEvaluation", "").startswith("20")]
        if len(evaluated) == len(rules) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert {rule["name"] for rule in rules} == {rule["alert"] for rule in _alert_rules()}
    assert all(rule["health"] == "ok" for rule in rules), rules
    # Under a healthy load nothing fires.
    assert [rule["name"] for rule in rules if rule["state"] == "firing"] == []
    assert not stack["load"].errors[:3]


def test_restart_alert_fires_when_the_server_restarts(stack):
    """The restart alert's proxy works: stop Naiad and start it again on the same ports (as
    a restarted container would be) under the same load, and NaiadInstanceRestarted fires
    for the pod. Runs last: it replaces the stack's server."""
    prometheus = stack["prometheus"]
    (rule,) = [r for r in _alert_rules() if r["alert"] == "NaiadInstanceRestarted"]
    assert prometheus.query(rule["expr"]) == []
    old = stack["server"]
    assert old.stop() == 0
    new = NaiadServer(stack["repository"], log_dir=stack["tmp"], name="restarted")
    new.http_port, new.grpc_port, new.metrics_port = old.http_port, old.grpc_port, old.metrics_port
    new.url = old.url
    stack["server"] = new
    new.start(wait="ready")
    deadline = time.monotonic() + 60
    pods = set()
    while time.monotonic() < deadline:
        alerts = prometheus.api("alerts")["alerts"]
        firing = [
            a["labels"]
            for a in alerts
            if a["labels"]["alertname"] == rule["alert"] and a["state"] == "firing"
        ]
        # Both scraped pods are this one server, so their alerts fire one after the
        # other: wait for the Deployment's rather than the first.
        pods = {(labels["namespace"], labels["pod"]) for labels in firing}
        if DEPLOYMENT_POD in pods:
            break
        time.sleep(0.5)
    assert DEPLOYMENT_POD in pods, alerts
