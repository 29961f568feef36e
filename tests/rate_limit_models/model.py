"""Sleeps in execute and answers with its execution window (CLOCK_MONOTONIC, the same
clock in every process of the host), so a test sees which executions overlapped. The
config's parameter SLEEP_S sets the sleep (default 0.15 s).

With the config parameter HOLD (any value) it is held instead: each execution marks an
`executing` file in the model's folder and waits while a `hold` file is there, so a
test orders events by what the model is doing, not by sleeps."""

import json
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils

SLEEP_S = 0.15


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"]).get("parameters", {})
        self.sleep_s = float(parameters.get("SLEEP_S", {}).get("string_value", SLEEP_S))
        self.held = "HOLD" in parameters
        self.folder = args["model_repository"]

    def _wait_while_held(self):
        open(os.path.join(self.folder, "executing"), "w").close()
        deadline = time.monotonic() + 120
        while os.path.exists(os.path.join(self.folder, "hold")):
            if time.monotonic() > deadline:
                raise RuntimeError("held for 120 s: the test never released it")
            time.sleep(0.002)

    def execute(self, requests):
        start = time.monotonic()
        if self.held:
            self._wait_while_held()
        else:
            time.sleep(self.sleep_s)
        end = time.monotonic()
        window = np.array([start, end], dtype=np.float64)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("WINDOW", window)]) for _ in requests]
