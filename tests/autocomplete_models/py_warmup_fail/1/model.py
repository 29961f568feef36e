"""Fails every request: its warmup fails, so the model never becomes READY."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(error=pb_utils.TritonError("cold engine")) for _ in requests
        ]
