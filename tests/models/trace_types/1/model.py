"""Echoes each input it gets as OUT_<type>, with the input's own array."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            outputs = [
                pb_utils.Tensor("OUT_" + tensor.name()[3:], tensor.as_numpy())
                for tensor in request.inputs()
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
