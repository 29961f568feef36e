"""Write the KServe CRD schemas that tests/test_deploy_manifests.py validates against.

    python tools/trim_kserve_crds.py KSERVE_CHECKOUT [COMMIT]

Reads `config/crd/full/serving.kserve.io_{clusterservingruntimes,inferenceservices}.yaml` from
a KServe checkout and writes the stored version's `openAPIV3Schema` of each to
deploy/kserve/schemas/ as JSON, trimmed to what Naiad's manifests use:

- every `description` is dropped (they are most of the bytes), and so is `status`, which a
  manifest does not set;
- `spec.workerSpec` (multi-node serving), in both, is left open;
- in InferenceService, `spec.canary`, `spec.explainer`, `spec.transformer` and the framework-specific
  predictor fields (`sklearn`, `xgboost`, `tensorflow`, ...) other than `model` become
  `{"type": "object", "x-kubernetes-preserve-unknown-fields": true}`: Naiad's example uses
  `spec.predictor.model`, which keeps its full schema, as do the pod fields of the predictor.

Nothing else changes: types, enums, patterns and required fields are KServe's own.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

OUT = Path(__file__).resolve().parent.parent / "deploy" / "kserve" / "schemas"
OPEN_OBJECT = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
FRAMEWORKS = (
    "huggingface",
    "lightgbm",
    "onnx",
    "paddle",
    "pmml",
    "pytorch",
    "sklearn",
    "tensorflow",
    "triton",
    "xgboost",
)


def _strip(node):
    if isinstance(node, dict):
        return {key: _strip(value) for key, value in node.items() if key != "description"}
    if isinstance(node, list):
        return [_strip(item) for item in node]
    return node


def _stored_schema(path: Path) -> tuple[str, str, str, dict]:
    crd = yaml.safe_load(path.read_text())
    version = next(v for v in crd["spec"]["versions"] if v.get("storage"))
    return (
        crd["spec"]["group"],
        version["name"],
        crd["spec"]["names"]["kind"],
        _strip(version["schema"]["openAPIV3Schema"]),
    )


def main(checkout: str, commit: str = "") -> None:
    crds = Path(checkout) / "config" / "crd" / "full"
    OUT.mkdir(parents=True, exist_ok=True)
    for plural in ("clusterservingruntimes", "inferenceservices"):
        group, version, kind, schema = _stored_schema(crds / f"serving.kserve.io_{plural}.yaml")
        schema["properties"]["status"] = OPEN_OBJECT
        if "workerSpec" in schema["properties"]["spec"]["properties"]:
            schema["properties"]["spec"]["properties"]["workerSpec"] = OPEN_OBJECT
        if kind == "InferenceService":
            spec = schema["properties"]["spec"]["properties"]
            for key in ("canary", "explainer", "transformer"):
                spec[key] = OPEN_OBJECT
            predictor = spec["predictor"]["properties"]
            predictor["workerSpec"] = OPEN_OBJECT
            for key in FRAMEWORKS:
                predictor[key] = OPEN_OBJECT
        document = {
            "source": f"kserve/kserve config/crd/full/serving.kserve.io_{plural}.yaml",
            "commit": commit,
            "apiVersion": f"{group}/{version}",
            "kind": kind,
            "openAPIV3Schema": schema,
        }
        path = OUT / f"{kind.lower()}.{version}.json"
        path.write_text(json.dumps(document, sort_keys=True) + "\n")
        print(f"{path}: {path.stat().st_size} bytes")


if __name__ == "__main__":
    main(*sys.argv[1:])
