"""Models for the config-field and checksum-agent tests over HTTP (tests/) and gRPC
(tests/grpc_clients/): an identity Python model, its MD5, and the agent's config block."""

from __future__ import annotations

import hashlib
from pathlib import Path

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
{extra}
"""

IDENTITY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]
            )
            for r in requests
        ]
"""
GOOD_MD5 = hashlib.md5(IDENTITY.encode()).hexdigest()
WRONG_MD5 = "0123456789abcdef0123456789abcdef"


def checksum(file: str, value: str) -> str:
    """The config block of Triton's checksum agent for one file."""
    return (
        'model_repository_agents { agents [ { name: "checksum" '
        f'parameters {{ key: "MD5:{file}" value: "{value}" }} }} ] }}'
    )


def write_model(repo: Path, name: str, extra: str = "") -> Path:
    """An identity model `name` (version 1) with `extra` config lines."""
    folder = repo / name
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.py").write_text(IDENTITY)
    (folder / "config.pbtxt").write_text(CONFIG.format(name=name, extra=extra))
    return folder


def int32_echo_repository(root: Path) -> Path:
    """A repository under `root` with one identity model, echo: INT32 [-1] in and out,
    no batching."""
    folder = root / "models" / "echo"
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.py").write_text(IDENTITY)
    (folder / "config.pbtxt").write_text(
        'name: "echo"\nbackend: "python"\nmax_batch_size: 0\n'
        'input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]\n'
        "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
    )
    return root / "models"
