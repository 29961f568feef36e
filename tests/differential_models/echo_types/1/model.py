"""Echoes every input as the output of the same datatype (IN_X -> OUT_X), and ECHO: a
JSON text of what the worker received (as echo_all's), so that two entry points that
queued the same request give the same answer."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
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
            tensors = [pb_utils.Tensor("ECHO", np.array([echo], dtype=object).reshape(1, 1))]
            for tensor in inputs:
                name = "OUT_" + tensor.name()[3:]
                tensors.append(pb_utils.Tensor(name, tensor.as_numpy()))
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        return responses


def _hex(array) -> str:
    if array.dtype == object:
        return "|".join(bytes(item).hex() for item in array.reshape(-1))
    return np.ascontiguousarray(array).tobytes().hex()
