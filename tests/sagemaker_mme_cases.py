"""The SageMaker multi-model endpoint's story (http/sagemaker_models.py) for the
black-box and differential tests: model folders made by the test, and the requests that
load, list, describe, invoke and unload them, answered as (status, content type, body)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from endpoint_cases import INFER, send_all
from server_harness import EXAMPLE_MODELS

__all__ = ["BROKEN_CONFIG", "make_folders", "mme_story", "run_story"]

_ENSEMBLE = Path(__file__).resolve().parent / "pipeline_models" / "ensemble_add_sub"
_TARGET = "X-Amzn-SageMaker-Target-Model"
# A config whose field has the wrong type: the load fails, for Naiad as for Triton.
BROKEN_CONFIG = 'name: "add_sub"\nbackend: "python"\nmax_batch_size: "many"\n'


def make_folders(root: Path) -> dict[str, Path]:
    """The `url` folders: plain (add_sub alone), ens (ensemble_add_sub with add_sub, its
    composing model), broken (add_sub with a config that cannot load) and other (add_sub
    again)."""
    folders = {}
    for name, models in (
        ("plain", {"add_sub": EXAMPLE_MODELS / "add_sub"}),
        ("ens", {"ensemble_add_sub": _ENSEMBLE, "add_sub": EXAMPLE_MODELS / "add_sub"}),
        ("broken", {"add_sub": EXAMPLE_MODELS / "add_sub"}),
        ("other", {"add_sub": EXAMPLE_MODELS / "add_sub"}),
    ):
        folder = root / name
        for model, source in models.items():
            shutil.copytree(source, folder / model, ignore=shutil.ignore_patterns("__pycache__"))
        folders[name] = folder
    (folders["broken"] / "add_sub" / "config.pbtxt").write_text(BROKEN_CONFIG)
    return folders


def _load(name: str, url: Path, headers=None) -> tuple:
    body = json.dumps({"model_name": name, "url": str(url)}).encode()
    return ("POST", "/models", body, headers or {})


def mme_story(folders: dict[str, Path]) -> list[tuple]:
    """(case, method, path, body, headers), in order; "fix broken" (no request) marks
    where the broken folder's config is made good again."""
    infer = json.dumps(INFER).encode()
    wrong = infer.replace(b"INPUT1", b"INPUT9")
    return [
        ("load plain", *_load("plain_hash", folders["plain"])),
        ("load ens", *_load("ens_hash", folders["ens"])),
        ("list", "GET", "/models", b"", {}),
        ("describe plain", "GET", "/models/plain_hash", b"", {}),
        ("describe unknown", "GET", "/models/nothing", b"", {}),
        ("invoke plain", "POST", "/models/plain_hash/invoke", infer, {}),
        ("invoke ens", "POST", "/models/ens_hash/invoke", infer, {}),
        ("invoke unknown", "POST", "/models/nothing/invoke", infer, {}),
        # The target model header names the model an invoke infers, as in Triton.
        ("invoke plain as ens", "POST", "/models/plain_hash/invoke", infer, {_TARGET: "ens_hash"}),
        ("invoke plain as unknown", "POST", "/models/plain_hash/invoke", infer, {_TARGET: "nothing"}),
        ("invoke plain bad input", "POST", "/models/plain_hash/invoke", wrong, {}),
        ("load plain again", *_load("plain_hash", folders["plain"])),
        ("load ens name again", *_load("ens_hash", folders["plain"])),
        ("load ens name from another folder", *_load("ens_hash", folders["other"])),
        ("load without a body", "POST", "/models", b"", {}),
        ("load broken", *_load("broken_hash", folders["broken"])),
        ("describe broken", "GET", "/models/broken_hash", b"", {}),
        ("fix broken", "", "", b"", {}),
        ("load broken fixed", *_load("broken_hash", folders["broken"])),
        ("invoke broken fixed", "POST", "/models/broken_hash/invoke", infer, {}),
        ("unload ens", "DELETE", "/models/ens_hash", b"", {}),
        ("invoke ens unloaded", "POST", "/models/ens_hash/invoke", infer, {}),
        ("describe ens unloaded", "GET", "/models/ens_hash", b"", {}),
        ("unload ens again", "DELETE", "/models/ens_hash", b"", {}),
        ("load ens again", *_load("ens_hash", folders["ens"])),
        ("invoke ens loaded again", "POST", "/models/ens_hash/invoke", infer, {}),
        ("unload all ens", "DELETE", "/models/ens_hash", b"", {}),
        ("unload plain", "DELETE", "/models/plain_hash", b"", {}),
        ("unload broken fixed", "DELETE", "/models/broken_hash", b"", {}),
        ("list empty", "GET", "/models", b"", {}),
    ]  # fmt: skip


def run_story(port: int, folders: dict[str, Path]) -> dict:
    """Each case's answer on the endpoint at `port`, in order; the list's models and an
    answer's outputs sorted by name (Triton's come in its hash table's order, an
    ensemble's outputs in the order its steps wrote them)."""
    answers = {}
    for case in mme_story(folders):
        if case[0] == "fix broken":
            config = EXAMPLE_MODELS / "add_sub" / "config.pbtxt"
            shutil.copy(config, folders["broken"] / "add_sub" / "config.pbtxt")
            continue
        answers.update(send_all(port, [case]))
    for _, _, body in answers.values():
        if isinstance(body, dict) and isinstance(body.get("models"), list):
            body["models"].sort(key=lambda model: model.get("modelName", ""))
        if isinstance(body, dict) and isinstance(body.get("outputs"), list):
            body["outputs"].sort(key=lambda output: output["name"])
    return answers
