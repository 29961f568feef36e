"""sleeper: sleeps SECONDS per execution, echoes SECONDS and reports its worker's PID."""

import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        seconds = [pb_utils.get_input_tensor_by_name(r, "SECONDS").as_numpy() for r in requests]
        time.sleep(max(float(s.max()) for s in seconds))
        responses = []
        for value in seconds:
            pid = np.full(value.shape, os.getpid(), dtype=np.int64)
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("OUTPUT0", value.astype(np.float32)),
                        pb_utils.Tensor("OUTPUT_PID", pid),
                    ]
                )
            )
        return responses
