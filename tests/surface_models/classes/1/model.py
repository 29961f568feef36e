"""Echoes every input IN_X as output OUT_X (the classification tests rank them), and
ECHO: the request's parameters as JSON (the header-forwarding tests read them)."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            parameters = json.loads(request.parameters() or "{}")
            echo = json.dumps(parameters, sort_keys=True).encode()
            tensors = [pb_utils.Tensor("ECHO", np.array([echo], dtype=object))]
            for tensor in request.inputs():
                tensors.append(pb_utils.Tensor("OUT_" + tensor.name()[3:], tensor.as_numpy()))
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        return responses
