"""What tests/test_security.py and its gRPC twin share: models that fail to load in
different ways, a secret in the server's environment, and what must never reach a client."""

from __future__ import annotations

import sys
from pathlib import Path

from server_harness import NaiadServer, make_repository

__all__ = ["SECRET_ENV", "SECRET_VALUE", "broken_models", "leaks_in", "server_with_broken_models"]

SECRET_ENV = "NAIAD_TEST_CLOUD_KEY"
SECRET_VALUE = "sk-live-6b0d9f0e1c2a4d7e"


def broken_models(repo: Path) -> None:
    """Models that fail to load, each in its own way."""
    (repo / "bad_config").mkdir()
    (repo / "bad_config" / "config.pbtxt").write_text(
        'name: "bad_config"\nbackend: "python"\nnope {'
    )
    (repo / "no_model_file" / "1").mkdir(parents=True)
    (repo / "no_model_file" / "config.pbtxt").write_text(
        'name: "no_model_file"\nbackend: "python"\nmax_batch_size: 0\n'
        'input [{ name: "X", data_type: TYPE_FP32, dims: [1] }]\n'
        'output [{ name: "Y", data_type: TYPE_FP32, dims: [1] }]\n'
    )
    (repo / "bad_onnx" / "1").mkdir(parents=True)
    (repo / "bad_onnx" / "1" / "model.onnx").write_bytes(b"not an onnx file")
    (repo / "bad_onnx" / "config.pbtxt").write_text('name: "bad_onnx"\nbackend: "onnxruntime"\n')
    (repo / "init_fails" / "1").mkdir(parents=True)
    (repo / "init_fails" / "config.pbtxt").write_text(
        (repo / "no_model_file" / "config.pbtxt").read_text().replace("no_model_file", "init_fails")
    )
    (repo / "init_fails" / "1" / "model.py").write_text(
        "class TritonPythonModel:\n"
        "    def initialize(self, args):\n"
        "        open(args['model_repository'] + '/weights.bin')\n"
        "\n"
        "    def execute(self, requests):\n"
        "        return []\n"
    )


def leaks_in(text: str, host_dir: Path) -> list[str]:
    """What of the host `text` gives away: the folder above the model repository, the
    server's Python, the home folder, the secret, a traceback."""
    needles = [str(host_dir), host_dir.name, SECRET_VALUE, sys.prefix, str(Path.home()) + "/"]
    return [n for n in needles + ["Traceback"] if n in text]


def server_with_broken_models(host_dir: Path, log_dir: Path, monkeypatch) -> NaiadServer:
    """An explicit-mode server (not started) on a repository under `host_dir` holding
    add_sub and the broken models, with the secret in its environment."""
    repo = make_repository(host_dir / "models", ["add_sub"])
    broken_models(repo)
    monkeypatch.setenv(SECRET_ENV, SECRET_VALUE)
    return NaiadServer(
        repo,
        log_dir=log_dir,
        extra_args=["--model-control-mode", "explicit", "--load-model", "add_sub"],
    )
