"""deploy/: every Kubernetes object validates against the Kubernetes API schemas
(`kubernetes-validate`, strict: unknown fields are errors), the KServe objects against KServe's
CRD schemas kept in deploy/kserve/schemas, and the manifests agree with each other and with
`naiad serve` (flags, ports, probes, grace period, autoscaling metric).
"""

from __future__ import annotations

import re

import jsonschema
import kubernetes_validate
import pytest
import yaml
from deploy_support import (
    ADAPTER_VALUES,
    DEPLOY,
    KSERVE,
    KUBERNETES,
    container,
    kserve_schemas,
    load_documents,
    manifest_files,
    objects,
    one,
)
from naiad.cli import build_parser
from server_harness import REPO_ROOT

# The oldest Kubernetes the manifests support and the newest kubernetes-validate knows.
KUBERNETES_VERSIONS = ("1.29.0", kubernetes_validate.latest_version())
KSERVE_GROUP = "serving.kserve.io/"


def _all_objects() -> list[tuple[str, dict]]:
    return [
        (
            f"{path.relative_to(REPO_ROOT)}:{doc.get('kind')}/{doc.get('metadata', {}).get('name')}",
            doc,
        )
        for path in manifest_files()
        for doc in load_documents(path)
    ]


ALL = _all_objects()
KUBE_OBJECTS = [(name, doc) for name, doc in ALL if not doc["apiVersion"].startswith(KSERVE_GROUP)]
KSERVE_OBJECTS = [(name, doc) for name, doc in ALL if doc["apiVersion"].startswith(KSERVE_GROUP)]


def test_the_expected_objects_are_shipped():
    kinds = sorted(doc["kind"] for _, doc in ALL)
    for kind in (
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "HorizontalPodAutoscaler",
        "ClusterServingRuntime",
        "InferenceService",
    ):
        assert kind in kinds, kind


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("name,doc", KUBE_OBJECTS, ids=[name for name, _ in KUBE_OBJECTS])
def test_kubernetes_objects_validate(name, doc, version):
    kubernetes_validate.validate(doc, version, strict=True)


def test_kubernetes_validation_can_fail():
    """The strict schemas reject a misspelled field and a wrong type, so the test above means
    something."""
    deployment = one("Deployment", KUBERNETES)
    version = KUBERNETES_VERSIONS[-1]
    misspelled = yaml.safe_load(yaml.safe_dump(deployment))
    misspelled["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(misspelled, version, strict=True)
    wrong_type = yaml.safe_load(yaml.safe_dump(deployment))
    wrong_type["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = "sixty"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(wrong_type, version, strict=True)


@pytest.mark.parametrize("name,doc", KSERVE_OBJECTS, ids=[name for name, _ in KSERVE_OBJECTS])
def test_kserve_objects_validate_against_kserve_crds(name, doc):
    schemas = kserve_schemas()
    key = (doc["apiVersion"], doc["kind"])
    assert key in schemas, f"no KServe schema kept for {key}"
    jsonschema.validate(doc, schemas[key])


def test_kserve_validation_can_fail():
    schemas = kserve_schemas()
    runtime = one("ClusterServingRuntime", KSERVE)
    schema = schemas[(runtime["apiVersion"], runtime["kind"])]
    bad = yaml.safe_load(yaml.safe_dump(runtime))
    bad["spec"]["protocolVersion"] = ["v2"]  # the field is protocolVersions
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)
    isvc = one("InferenceService", KSERVE)
    schema = schemas[(isvc["apiVersion"], isvc["kind"])]
    bad = yaml.safe_load(yaml.safe_dump(isvc))
    bad["spec"]["predictor"]["autoScaling"]["metrics"][0]["type"] = "QueueTime"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def test_kustomization_lists_every_manifest():
    kustomization = yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text())
    listed = set(kustomization["resources"])
    present = {path.name for path in KUBERNETES.glob("*.yaml") if path.name != "kustomization.yaml"}
    assert listed == present
    image = kustomization["images"][0]["name"]
    assert container(one("Deployment", KUBERNETES)["spec"]["template"]["spec"])["image"] == image


# -- the Deployment against naiad serve ------------------------------------------------------


def _deployment():
    deployment = one("Deployment", KUBERNETES)
    pod = deployment["spec"]["template"]["spec"]
    return deployment, pod, container(pod, "naiad")


def _options(args: list[str]):
    return build_parser().parse_args(["serve", *args])


def test_deployment_args_are_naiad_serve_flags():
    _, _, naiad = _deployment()
    assert naiad["command"] == ["naiad", "serve"]
    options = _options(naiad["args"])
    ports = {p["name"]: p["containerPort"] for p in naiad["ports"]}
    assert ports == {
        "http": options.http_port,
        "grpc": options.grpc_port,
        "metrics": options.metrics_port,
    }
    assert (options.http_port, options.grpc_port, options.metrics_port) == (8000, 8001, 8002)
    mounts = {m["mountPath"] for m in naiad["volumeMounts"]}
    assert options.model_repository[0] in mounts


def test_deployment_probes():
    _, _, naiad = _deployment()
    assert naiad["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert naiad["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    startup = naiad["startupProbe"]
    assert startup["httpGet"]["path"].startswith("/v2/health/")
    # Slow model loads: at least five minutes before the kubelet gives up.
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 300
    port_names = {p["name"] for p in naiad["ports"]}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert naiad[probe]["httpGet"]["port"] == "http" and "http" in port_names


def test_graceful_termination_outlasts_exit_timeout():
    _, pod, naiad = _deployment()
    exit_timeout = _options(naiad["args"]).exit_timeout_secs
    pre_stop = naiad["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    assert pod["terminationGracePeriodSeconds"] > int(pre_stop[1]) + exit_timeout


def test_deployment_runs_as_non_root_with_resources_and_model_volume():
    _, pod, naiad = _deployment()
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert naiad["resources"]["requests"]["cpu"] and naiad["resources"]["limits"]["memory"]
    volumes = {v["name"] for v in pod["volumes"]}
    models = next(m for m in naiad["volumeMounts"] if m["mountPath"] == "/models")
    assert models["name"] in volumes
    init = pod["initContainers"][0]
    assert any(m["name"] == models["name"] for m in init["volumeMounts"])
    assert "/models" in init["args"]
    annotations = one("Deployment", KUBERNETES)["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert int(annotations["prometheus.io/port"]) == _options(naiad["args"]).metrics_port


def test_service_pdb_and_hpa_select_the_deployment():
    deployment, _, _ = _deployment()
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    service = one("Service", KUBERNETES)
    assert service["spec"]["selector"].items() <= labels.items()
    ports = {p["name"]: (p["port"], p["targetPort"]) for p in service["spec"]["ports"]}
    assert ports == {
        "http": (8000, "http"),
        "grpc": (8001, "grpc"),
        "metrics": (8002, "metrics"),
    }
    pdb = one("PodDisruptionBudget", KUBERNETES)
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    hpa = one("HorizontalPodAutoscaler", KUBERNETES)
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": deployment["metadata"]["name"],
    }
    assert hpa["spec"]["minReplicas"] >= 2  # with maxUnavailable 1, a drain keeps one serving


def test_hpa_metric_is_served_by_the_adapter_rule():
    rules = yaml.safe_load(ADAPTER_VALUES.read_text())["rules"]["custom"]
    served = {rule["name"]["as"] for rule in rules}
    for hpa in objects("HorizontalPodAutoscaler"):
        for metric in hpa["spec"]["metrics"]:
            assert metric["type"] == "Pods"
            assert metric["pods"]["metric"]["name"] in served
    (rule,) = rules
    assert "nv_inference_queue_duration_us" in rule["seriesQuery"]
    assert re.search(
        r"delta\(nv_inference_queue_duration_us\{<<\.LabelMatchers>>\}\[30s\]\)\s*/\s*"
        r"\(1\+delta\(nv_inference_request_success\{<<\.LabelMatchers>>\}\[30s\]\)\)",
        rule["metricsQuery"],
    )


# -- KServe ---------------------------------------------------------------------------------

# What KServe's own kserve-tritonserver ClusterServingRuntime passes to tritonserver
# (config/runtimes/kserve-tritonserver.yaml in kserve/kserve), and what KServe adds to a
# Triton predictor without a storageUri (SetTritonDefaults).
KSERVE_TRITON_ARGS = [
    "--model-store=/mnt/models",
    "--grpc-port=9000",
    "--http-port=8080",
    "--allow-grpc=true",
    "--allow-http=true",
]


def test_naiad_serve_accepts_kserve_triton_runtime_flags():
    options = _options(KSERVE_TRITON_ARGS)
    assert options.model_repository == ["/mnt/models"]
    assert (options.grpc_port, options.http_port) == (9000, 8080)
    assert options.allow_grpc is True and options.allow_http is True
    # Parsed with Triton's meaning; `explicit` mode is accepted by the parser, refused at start
    # (deploy/README.md: give the InferenceService a storageUri).
    assert _options([*KSERVE_TRITON_ARGS, "--model-control-mode=explicit"]).model_control_mode == (
        "explicit"
    )


def test_serving_runtime_matches_kserve_triton_runtime():
    runtime = one("ClusterServingRuntime", KSERVE)
    spec = runtime["spec"]
    assert spec["protocolVersions"] == ["v2", "grpc-v2"]
    formats = {f["name"] for f in spec["supportedModelFormats"]}
    assert formats == {"triton", "onnx", "pytorch", "python"}
    kserve_container = container(spec, "kserve-container")
    assert kserve_container["command"] == ["naiad", "serve"]
    args = kserve_container["args"]
    assert args[: len(KSERVE_TRITON_ARGS)] == KSERVE_TRITON_ARGS
    options = _options(args)
    annotations = spec["annotations"]
    assert int(annotations["prometheus.kserve.io/port"]) == options.metrics_port
    assert int(annotations["prometheus.io/port"]) == options.metrics_port
    for probe in ("readinessProbe", "livenessProbe"):
        assert kserve_container[probe]["httpGet"]["port"] == options.http_port
    assert kserve_container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert kserve_container["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"


def test_inference_service_uses_the_runtime():
    runtime = one("ClusterServingRuntime", KSERVE)
    isvc = one("InferenceService", KSERVE)
    model = isvc["spec"]["predictor"]["model"]
    assert model["runtime"] == runtime["metadata"]["name"]
    assert model["modelFormat"]["name"] in {
        f["name"] for f in runtime["spec"]["supportedModelFormats"]
    }
    assert model["protocolVersion"] in runtime["spec"]["protocolVersions"]
    # A storageUri, so KServe does not add --model-control-mode=explicit.
    assert model["storageUri"]
    assert isvc["spec"]["predictor"]["minReplicas"] >= 2


def test_deploy_readme_names_every_file():
    readme = (DEPLOY / "README.md").read_text()
    for path in sorted(DEPLOY.rglob("*")):
        if path.is_file() and "schemas" not in path.parts and path.name != "README.md":
            assert str(path.relative_to(DEPLOY)) in readme, path
