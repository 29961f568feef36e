"""text_echo: text_input back as text_output, VALUES * 2 as DOUBLED (when given), and
the request parameters (JSON text) as PARAMS."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()
            outputs = [
                pb_utils.Tensor("text_output", text),
                pb_utils.Tensor("PARAMS", np.array([request.parameters()], dtype=np.object_)),
            ]
            values = pb_utils.get_input_tensor_by_name(request, "VALUES")
            if values is not None:
                outputs.append(pb_utils.Tensor("DOUBLED", values.as_numpy() * np.float32(2)))
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
