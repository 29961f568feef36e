"""crasher: doubles its input; dies (os._exit(1)) on a negative value."""

import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            if (value < 0).any():
                os._exit(1)
            out = pb_utils.Tensor("OUTPUT0", (value * 2).astype(np.float32))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
