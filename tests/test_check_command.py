"""`naiad check REPOSITORY`: per model, would it load, be refused or warned, and why; exit
status 0 only when every model would load. Run as a user runs it (python -m naiad check)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

from checksum_support import CONFIG
from server_harness import REPO_ROOT

# Running it would leave this file behind: check must run no model code.
MODEL_PY = """
import pathlib
pathlib.Path(__file__).with_name("ran").write_text("model code ran")

class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        pathlib.Path(__file__).with_name("ran").write_text("auto-complete ran")
        return config

    def execute(self, requests):
        return []
"""


def _model(repo: Path, name: str, extra: str = "", versions=(1,)) -> Path:
    folder = repo / name
    folder.mkdir(parents=True)
    (folder / "config.pbtxt").write_text(CONFIG.format(name=name, extra=extra))
    for version in versions:
        (folder / str(version)).mkdir()
        (folder / str(version) / "model.py").write_text(MODEL_PY)
    return folder


def _checksum(value: str) -> str:
    return (
        'model_repository_agents { agents [ { name: "checksum" '
        f'parameters {{ key: "MD5:1/model.py" value: "{value}" }} }} ] }}'
    )


def _check(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "naiad", "check", *map(str, args)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _mixed_repository(root: Path) -> Path:
    repo = root / "models"
    good_md5 = hashlib.md5(MODEL_PY.encode()).hexdigest()
    _model(repo, "good")
    _model(repo, "good_checksum", _checksum(good_md5))
    _model(repo, "bad_checksum", _checksum("0" * 32))
    _model(repo, "unknown_field", "bogus_field: 1")
    _model(repo, "refused_field", "instance_group [ { count: 1 kind: KIND_CPU passive: true } ]")
    _model(repo, "hinted", "optimization { cuda { graphs: true } }")
    _model(repo, "no_version", versions=())
    return repo


def _lines(stdout: str) -> dict[str, str]:
    """model name -> its line, warnings appended."""
    lines: dict[str, str] = {}
    last = None
    for line in stdout.splitlines():
        if line.startswith(" ") and last:
            lines[last] += "\n" + line.strip()
        elif line.split() and not line.endswith("would load"):
            last = line.split()[0]
            lines[last] = line
    return lines


def test_check_lists_each_model_and_fails_when_one_would_not_load(tmp_path):
    repo = _mixed_repository(tmp_path)
    result = _check(repo)
    assert result.returncode == 1, result.stdout + result.stderr
    lines = _lines(result.stdout)
    assert sorted(lines) == sorted(p.name for p in repo.iterdir())
    assert lines["good"].split()[1:] == ["LOAD", "versions", "1"]
    assert lines["good_checksum"].split()[1] == "LOAD"
    assert "REFUSED" in lines["bad_checksum"]
    assert "Mismatched MD5 hash for file 1/model.py, expect: " + "0" * 32 in lines["bad_checksum"]
    assert "REFUSED" in lines["unknown_field"]
    assert "unknown field 'bogus_field' in inference.ModelConfig" in lines["unknown_field"]
    assert "REFUSED" in lines["refused_field"]
    assert "field 'instance_group.passive'" in lines["refused_field"]
    # A hint loads, with its warning under the model's line.
    assert lines["hinted"].split()[1] == "LOAD"
    assert "warning  field 'optimization.cuda' of model 'hinted' is ignored" in lines["hinted"]
    assert "at least one version must be available" in lines["no_version"]
    assert result.stdout.rstrip().endswith("3 of 7 models would load")
    # Nothing was loaded or run: no model code wrote its marker.
    assert not list(repo.rglob("ran"))


def test_check_succeeds_when_every_model_would_load(tmp_path):
    repo = tmp_path / "models"
    _model(repo, "good")
    _model(repo, "hinted", "metric_tags { key: 'team' value: 'a' }")
    result = _check(repo)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 of 2 models would load" in result.stdout


def test_check_json_is_one_document_for_pipelines(tmp_path):
    repo = _mixed_repository(tmp_path)
    result = _check(repo, "--json")
    assert result.returncode == 1
    verdicts = {v["name"]: v for v in json.loads(result.stdout)}
    assert verdicts["good"] == {
        "name": "good",
        "status": "LOAD",
        "versions": [1],
        "reason": "",
        "warnings": [],
    }
    assert verdicts["bad_checksum"]["status"] == "REFUSED"
    assert verdicts["bad_checksum"]["reason"].startswith("Mismatched MD5 hash for file 1/model.py")
    assert verdicts["hinted"]["status"] == "LOAD"
    assert verdicts["hinted"]["warnings"][0].startswith("field 'optimization.cuda'")


def test_check_sees_a_name_in_two_repositories_and_a_missing_step(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    _model(first, "twice")
    _model(second, "twice")
    ensemble = second / "pipeline"
    (ensemble / "1").mkdir(parents=True)
    (ensemble / "config.pbtxt").write_text(
        'name: "pipeline" platform: "ensemble" max_batch_size: 8\n'
        'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'ensemble_scheduling { step [ { model_name: "absent" model_version: -1 '
        'input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "OUT" } } ] }\n'
    )
    result = _check(first, second)
    assert result.returncode == 1
    lines = _lines(result.stdout)
    assert "not unique across all model repositories" in lines["twice"]
    assert "step on model 'absent'" in lines["pipeline"]


def test_check_refuses_a_folder_that_is_not_there(tmp_path):
    result = _check(tmp_path / "nowhere")
    assert result.returncode == 1
    assert "not a model repository folder" in result.stderr


def test_check_reads_the_custom_config_that_model_config_name_selects(tmp_path):
    repo = tmp_path / "models"
    folder = _model(repo, "custom")
    (folder / "configs").mkdir()
    (folder / "configs" / "edge.pbtxt").write_text(
        CONFIG.format(
            name="custom", extra="instance_group [ { count: 1 kind: KIND_CPU passive: true } ]"
        )
    )
    assert _check(repo).returncode == 0
    result = _check(repo, "--model-config-name", "edge")
    assert result.returncode == 1
    assert "field 'instance_group.passive'" in _lines(result.stdout)["custom"]
