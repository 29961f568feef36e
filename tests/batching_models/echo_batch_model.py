"""Batching test model: echoes INPUT0 per request and tells how it was scheduled.

Sleeps per execution for the config parameter `sleep_seconds` plus the largest optional
DELAY_MS input of the batch (milliseconds). Outputs per request: OUTPUT0 (= INPUT0),
SEQ (this instance's execution number, from 0) and BATCH (requests in that execution).

Tests order events with files in the model's folder: each execution marks
`executing-<v>` for the first INPUT0 value v of each of its requests, waits while a
`hold-<v>` file of one of them exists, and marks `executed-<v>` once it has answered.
"""

import json
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        parameter = config.get("parameters", {}).get("sleep_seconds", {})
        self.sleep_seconds = float(parameter.get("string_value", "0") or 0)
        self.executions = 0
        self.folder = args["model_repository"]

    def _mark(self, kind, values):
        for value in values:
            open(os.path.join(self.folder, f"{kind}-{value}"), "w").close()

    def _wait_while_held(self, values):
        holds = [os.path.join(self.folder, f"hold-{value}") for value in values]
        deadline = time.monotonic() + 120
        while any(os.path.exists(hold) for hold in holds):
            if time.monotonic() > deadline:
                raise RuntimeError("held for 120 s: the test never released it")
            time.sleep(0.002)

    def execute(self, requests):
        seq = self.executions
        self.executions += 1
        delay_ms = 0
        inputs = []
        for request in requests:
            inputs.append(pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy())
            delay = pb_utils.get_input_tensor_by_name(request, "DELAY_MS")
            if delay is not None:
                delay_ms = max(delay_ms, int(delay.as_numpy().max()))
        values = [int(np.asarray(value).flat[0]) for value in inputs]
        self._mark("executing", values)
        self._wait_while_held(values)
        time.sleep(self.sleep_seconds + delay_ms / 1000.0)
        responses = []
        for value in inputs:
            shape = value.shape
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("OUTPUT0", value.astype(np.int32)),
                        pb_utils.Tensor("SEQ", np.full(shape, seq, dtype=np.int64)),
                        pb_utils.Tensor("BATCH", np.full(shape, len(requests), dtype=np.int64)),
                    ]
                )
            )
        self._mark("executed", values)
        return responses
