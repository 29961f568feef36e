"""request_echo: returns INPUT0, and what it saw of the request as response parameters."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            seen = {
                "request_id": request.request_id(),
                "correlation_id": request.correlation_id(),
                "timeout": request.timeout(),
                "flags": request.flags(),
                "request_parameters": request.parameters(),
            }
            responses.append(
                pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)], parameters=seen)
            )
        return responses
