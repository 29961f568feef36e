"""sequence_override: OUT is INPUT; the response parameters are the request's
`respond_with` parameter (a JSON object), none without it."""

import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            asked = json.loads(request.parameters()).get("respond_with", "{}")
            tensor = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            responses.append(
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUT", tensor)], parameters=json.loads(asked)
                )
            )
        return responses
