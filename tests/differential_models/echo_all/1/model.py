"""Echoes what the worker received for each request, so a test can compare what two
entry points queued: ECHO is a JSON text of every input (name, datatype, shape, the
bytes in hex), the requested outputs and the request parameters; the model's first
input comes back unchanged as FIRST."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.batching = json.loads(args["model_config"]).get("max_batch_size", 0) > 0

    def execute(self, requests):
        responses = []
        for request in requests:
            inputs = request.inputs()
            seen = [
                [t.name(), t.triton_dtype(), list(t.as_numpy().shape), _hex(t.as_numpy())]
                for t in inputs
            ]
            echo = json.dumps(
                {
                    "inputs": seen,
                    "outputs": sorted(request.requested_output_names()),
                    "parameters": json.loads(request.parameters() or "{}"),
                },
                sort_keys=True,
            ).encode()
            shape = (1, 1) if self.batching else (1,)
            echo_tensor = pb_utils.Tensor("ECHO", np.array([echo], dtype=object).reshape(shape))
            first = pb_utils.Tensor("FIRST", inputs[0].as_numpy())
            responses.append(pb_utils.InferenceResponse(output_tensors=[echo_tensor, first]))
        return responses


def _hex(array) -> str:
    if array.dtype == object:
        return "|".join(bytes(item).hex() for item in array.reshape(-1))
    return np.ascontiguousarray(array).tobytes().hex()
