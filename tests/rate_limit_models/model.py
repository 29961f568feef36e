"""Sleeps in execute and answers with its execution window (CLOCK_MONOTONIC, the same
clock in every process of the host), so a test sees which executions overlapped. The
config's parameter SLEEP_S sets the sleep (default 0.15 s)."""

import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils

SLEEP_S = 0.15


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"]).get("parameters", {})
        self.sleep_s = float(parameters.get("SLEEP_S", {}).get("string_value", SLEEP_S))

    def execute(self, requests):
        start = time.monotonic()
        time.sleep(self.sleep_s)
        end = time.monotonic()
        window = np.array([start, end], dtype=np.float64)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("WINDOW", window)]) for _ in requests]
