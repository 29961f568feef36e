"""A Python-based backend and a repository of models naming it, written by the tests
(tests/test_python_based_backends.py, and against Triton in
tests/test_python_based_backends_triton.py).

The backend `scale` (<backends>/scale/model.py) fills in each model's input by
auto-complete, multiplies X by the `factor` parameter of the model's own config, and answers
WHO: what it was given (model_name, model_repository), pb_utils.get_model_dir() and a
value from a module beside its model.py (so its folder is on sys.path).

- `double`: factor 2, no batching, and no model.py of its own;
- `triple`: factor 3, max_batch_size 8, with a model.py of its own that fails if imported
  (Triton runs the backend's file, never the model's);
- `ghost`: names a backend that no folder provides.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

BACKEND = "scale"
HELPER_TAG = "scale_helpers"

BACKEND_MODEL = textwrap.dedent(
    """
    import json

    import numpy as np
    import triton_python_backend_utils as pb_utils

    import scale_helpers  # beside this file: the backend's folder is on sys.path


    class TritonPythonModel:
        @staticmethod
        def auto_complete_config(config):
            config.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [-1]})
            return config

        def initialize(self, args):
            self.args = args
            config = json.loads(args["model_config"])
            self.factor = float(config["parameters"]["factor"]["string_value"])
            self.batching = config["max_batch_size"] > 0

        def execute(self, requests):
            responses = []
            for request in requests:
                x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
                who = np.array(
                    [
                        self.args["model_name"],
                        self.args["model_repository"],
                        pb_utils.get_model_dir(),
                        scale_helpers.TAG,
                    ],
                    dtype=object,
                )
                if self.batching:
                    who = np.tile(who, (x.shape[0], 1))
                outputs = [
                    pb_utils.Tensor("Y", (x * self.factor).astype(np.float32)),
                    pb_utils.Tensor("WHO", who),
                ]
                responses.append(pb_utils.InferenceResponse(outputs))
            return responses
    """
)

_OUTPUTS = """
output [
  { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] },
  { name: "WHO" data_type: TYPE_STRING dims: [ 4 ] }
]
"""


def _config(factor: int, max_batch_size: int) -> str:
    return (
        f'backend: "{BACKEND}"\nmax_batch_size: {max_batch_size}\n{_OUTPUTS}'
        f'parameters {{ key: "factor" value {{ string_value: "{factor}" }} }}\n'
    )


def write_backend(backends: Path) -> Path:
    """<backends>/scale/model.py and its helper module; returns the model.py."""
    folder = backends / BACKEND
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.py").write_text(BACKEND_MODEL)
    (folder / "scale_helpers.py").write_text(f'TAG = "{HELPER_TAG}"\n')
    return folder / "model.py"


def write_repository(repository: Path) -> Path:
    for name, factor, max_batch_size in (("double", 2, 0), ("triple", 3, 8)):
        (repository / name / "1").mkdir(parents=True)
        (repository / name / "config.pbtxt").write_text(_config(factor, max_batch_size))
    (repository / "triple" / "1" / "model.py").write_text(
        'raise RuntimeError("the model folder\'s own model.py must not run")\n'
    )
    (repository / "ghost" / "1").mkdir(parents=True)
    (repository / "ghost" / "config.pbtxt").write_text('backend: "nosuch"\nmax_batch_size: 0\n')
    return repository


def infer_body(model: str) -> dict:
    """An HTTP/JSON request for `model` (a batch of one for the batching model)."""
    shape = [1, 3] if model == "triple" else [3]
    return {"inputs": [{"name": "X", "datatype": "FP32", "shape": shape, "data": [1, 2, 3]}]}
