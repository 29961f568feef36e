"""What the deploy/ tests share: loading the shipped manifests, KServe's CRD schemas, and
turning a manifest's container into the `naiad serve` command a test can run here.

The manifests are read from the files users apply, never copied into the tests, so a change
to deploy/ is what the tests check.
"""

from __future__ import annotations

import copy
import json
import re
import shlex
import shutil
import sys
from pathlib import Path

import yaml
from server_harness import REPO_ROOT, NaiadServer

DEPLOY = REPO_ROOT / "deploy"
KUBERNETES = DEPLOY / "kubernetes"
KSERVE = DEPLOY / "kserve"
KSERVE_SCHEMAS = KSERVE / "schemas"
PROMETHEUS = DEPLOY / "prometheus"
ADAPTER_VALUES = DEPLOY / "prometheus-adapter" / "values.yaml"
DASHBOARD = DEPLOY / "grafana" / "naiad-dashboard.json"

# Files under deploy/ that are Kubernetes objects (kustomization.yaml and Helm values are not).
NOT_OBJECTS = {"kustomization.yaml", "values.yaml", "prometheus.yml", "alerts.yml"}


def load_documents(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def manifest_files() -> list[Path]:
    """Every YAML file under deploy/ that holds Kubernetes objects."""
    return sorted(
        path
        for path in DEPLOY.rglob("*.y*ml")
        if path.suffix in (".yaml", ".yml") and path.name not in NOT_OBJECTS
    )


def objects(kind: str, directory: Path = DEPLOY) -> list[dict]:
    found = []
    for path in sorted(directory.rglob("*.yaml")):
        if path.name in NOT_OBJECTS:
            continue
        found += [doc for doc in load_documents(path) if doc.get("kind") == kind]
    return found


def one(kind: str, directory: Path = DEPLOY) -> dict:
    found = objects(kind, directory)
    assert len(found) == 1, f"expected one {kind} under {directory}, found {len(found)}"
    return found[0]


# -- KServe CRD schemas ---------------------------------------------------------------------


def _closed(schema):
    """KServe's structural schema with unknown fields rejected, as the API server's strict
    field validation (kubectl's default) does: an object schema that lists `properties` and
    neither preserves unknown fields nor says `additionalProperties` gets
    `additionalProperties: false`. Without this a misspelled field would pass jsonschema."""
    if isinstance(schema, list):
        return [_closed(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    schema = {key: _closed(value) for key, value in schema.items()}
    if (
        "properties" in schema
        and "additionalProperties" not in schema
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        schema["additionalProperties"] = False
    return schema


def kserve_schemas() -> dict[tuple[str, str], dict]:
    """(apiVersion, kind) -> JSON schema, from the CRD schemas kept in deploy/kserve/schemas."""
    schemas = {}
    for path in sorted(KSERVE_SCHEMAS.glob("*.json")):
        document = json.loads(path.read_text())
        schema = _closed(copy.deepcopy(document["openAPIV3Schema"]))
        # metadata is the API server's ObjectMeta, which the CRD leaves open: ask for a name.
        schema["properties"]["metadata"] = {
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"}
            },
        }
        schema["required"] = sorted({*schema.get("required", ()), "apiVersion", "kind", "spec"})
        schemas[(document["apiVersion"], document["kind"])] = schema
    return schemas


# -- running a manifest's container here ----------------------------------------------------


def container(pod_spec: dict, name: str | None = None) -> dict:
    containers = pod_spec["containers"]
    if name is None:
        assert len(containers) == 1
        return containers[0]
    return next(c for c in containers if c["name"] == name)


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion in command and args."""
    return re.sub(
        r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), text
    )


def local_command(
    spec: dict,
    *,
    model_path: str,
    repository: Path,
    ports: dict[int, int],
) -> tuple[list[str], dict[str, str]]:
    """The container's command + args + env, made runnable on this machine.

    The substitutions, and nothing else:
    - `naiad` (the image's console script on PATH) is this checkout's `naiad` console script,
      the same entry point `pip install` writes into the image's /opt/naiad/bin;
    - the model repository path the container mounts (`model_path`) is `repository`, a
      temporary copy of model_repository/;
    - every port number in an argument (`--http-port=8000`, ...) is the free local port
      `ports` maps it to, since the container's ports may be taken on a shared machine;
    - `--host=127.0.0.1` is appended: a pod listens on all of its own addresses (0.0.0.0),
      a test server only on loopback.
    Environment variables are the container's `env` values, on top of this process's
    environment."""
    assert all("value" in item for item in spec.get("env", [])), "env from references"
    env = {item["name"]: item["value"] for item in spec.get("env", [])}
    argv = [expand(part, env) for part in [*spec.get("command", []), *spec.get("args", [])]]
    assert argv, "the container states no command or args"
    executable = shutil.which(argv[0], path=str(Path(sys.executable).parent))
    assert executable, f"{argv[0]} is not a console script of this environment"
    result = [executable]
    pending_flag = None  # `--flag value` spelled as two arguments
    for part in argv[1:]:
        if part.startswith("--"):
            flag, equals, value = part.partition("=")
            if not equals:
                result.append(part)
                pending_flag = flag
                continue
            joined = True
        else:
            flag, value, joined = pending_flag, part, False
        pending_flag = None
        if value == model_path:
            value = str(repository)
        elif flag is not None and flag.endswith("-port"):
            value = str(ports[int(value)])
        result.append(f"{flag}={value}" if joined else value)
    result.append("--host=127.0.0.1")
    return result, env


def describe(argv: list[str]) -> str:
    return shlex.join(argv)


class ManifestServer(NaiadServer):
    """A NaiadServer (tests/server_harness.py: logs, waiting, stop by PID) whose command line
    is given (a manifest's, an installed image's), not the harness's own."""

    chooses_its_ports = False

    def __init__(self, argv, *, http_port, metrics_port, repository, log_dir, name):
        super().__init__(repository, log_dir=log_dir, name=name)
        self.argv = argv
        self.http_port = http_port
        self.metrics_port = metrics_port
        self.url = f"http://{self.host}:{http_port}"

    @property
    def command(self) -> list[str]:
        return self.argv
