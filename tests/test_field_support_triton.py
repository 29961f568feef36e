"""Differential: configs setting fields that Triton 2.51 refuses, or loads while Naiad only
warns, are loaded or refused alike, with Triton's words where it refuses. Skips, saying
why, when Triton is not installed."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import requests
from checksum_support import CONFIG, IDENTITY
from server_harness import NaiadServer
from triton_peer import TritonPeer, needs_triton

pytestmark = [
    pytest.mark.timeout(600),
    needs_triton,
]

# name -> the extra config lines. Both servers load the first group and refuse the second.
LOADED_BY_BOTH = {
    "plain": "",
    "cuda_graphs": "optimization { cuda { graphs: true } }",
    "priority": "optimization { priority: PRIORITY_MAX }",
    "metric_tags": 'metric_tags { key: "team" value: "a" }',
    "host_policy": 'instance_group [ { count: 1 kind: KIND_CPU host_policy: "numa0" } ]',
    "image_format": (
        'input [ { name: "IMAGE" data_type: TYPE_FP32 format: FORMAT_NCHW dims: [ 3, 2, 2 ] } ]'
    ),
}
REFUSED_BY_BOTH = {
    "shape_tensor": (
        'input [ { name: "S" data_type: TYPE_INT32 dims: [ 1 ] is_shape_tensor: true } ]'
    ),
    "non_linear": (
        'output [ { name: "O2" data_type: TYPE_FP32 dims: [ 1 ] is_non_linear_format_io: true } ]'
    ),
    "profile": 'instance_group [ { count: 1 kind: KIND_CPU profile: "0" } ]',
    "flat_image": (
        'input [ { name: "IMAGE" data_type: TYPE_FP32 format: FORMAT_NHWC dims: [ 1 ] } ]'
    ),
    "model_metrics": ('model_metrics { metric_control [ { metric_identifier { family: "x" } } ] }'),
}
# The reasons both give, Triton's words after its status ("Invalid argument: ").
SAME_WORDS = ["shape_tensor", "non_linear", "profile", "flat_image"]


def _repository(root: Path) -> Path:
    repo = root / "models"
    for name, extra in {**LOADED_BY_BOTH, **REFUSED_BY_BOTH}.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "1" / "model.py").write_text(IDENTITY)
        (repo / name / "config.pbtxt").write_text(CONFIG.format(name=name, extra=extra))
    return repo


def _settled(url: str) -> dict[str, dict]:
    deadline = time.monotonic() + 120
    while True:
        entries = requests.post(url + "/v2/repository/index", timeout=30).json()
        if not any(e.get("state") == "LOADING" for e in entries) or time.monotonic() > deadline:
            return {e["name"]: e for e in entries}
        time.sleep(0.1)


def test_fields_are_loaded_or_refused_as_triton_does(tmp_path):
    repo = _repository(tmp_path)
    args = ["--exit-on-error=false"]
    naiad = NaiadServer(repo, log_dir=tmp_path, extra_args=args).start(wait="live")
    try:
        with TritonPeer(repo, tmp_path, args) as triton:
            ours, theirs = _settled(naiad.url), _settled(triton.url)
    finally:
        naiad.stop()
    for name in LOADED_BY_BOTH:
        assert (ours[name].get("state"), theirs[name].get("state")) == ("READY", "READY"), name
    for name in REFUSED_BY_BOTH:
        assert ours[name].get("state") != "READY", (name, ours[name])
        assert theirs[name].get("state") != "READY", (name, theirs[name])
    for name in SAME_WORDS:
        assert theirs[name]["reason"].startswith("Invalid argument: "), name
        assert ours[name] == theirs[name], name  # the version, its state and reason
