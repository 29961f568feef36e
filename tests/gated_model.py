"""A Python test model whose executions wait for the test: a gate, so that how many
requests are held, queued or refused follows from the server's rules, not from how fast the
machine is (tests/grpc_clients/test_overload.py, test_chaos.py).

Execution n first creates `<gate>/executing-<n>`, then waits until `<gate>/open` exists
(120 s at most, then it fails rather than hang a run whose test died). It answers the
outputs its config declares, from INPUT0: OUTPUT0 (INPUT0 itself), OUTPUT_ORDER (n, in
INPUT0's shape: the order batches ran in), DIGEST (the sha256 hex of INPUT0's bytes, to
check a request's input arrived intact).
"""

from __future__ import annotations

GATED_MODEL = """
import hashlib
import json
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.gate = config["parameters"]["gate"]["string_value"]
        self.outputs = [output["name"] for output in config["output"]]
        self.executions = 0

    def execute(self, requests):
        self.executions += 1
        open(os.path.join(self.gate, f"executing-{self.executions}"), "w").close()
        deadline = time.monotonic() + 120
        while not os.path.exists(os.path.join(self.gate, "open")):
            if time.monotonic() > deadline:
                raise RuntimeError("gate: closed for 120 s, the test never opened it")
            time.sleep(0.005)
        return [self._answer(request) for request in requests]

    def _answer(self, request):
        value = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
        made = {
            "OUTPUT0": lambda: value,
            "OUTPUT_ORDER": lambda: np.full(value.shape, self.executions, dtype=np.int64),
            "DIGEST": lambda: np.array(
                [hashlib.sha256(value.tobytes()).hexdigest().encode()], dtype=np.object_
            ),
        }
        return pb_utils.InferenceResponse(
            output_tensors=[pb_utils.Tensor(name, made[name]()) for name in self.outputs]
        )
"""


def gate_parameter(gate) -> str:
    """The config line that names the model's gate folder."""
    return f'parameters: {{ key: "gate" value: {{ string_value: "{gate}" }} }}'
