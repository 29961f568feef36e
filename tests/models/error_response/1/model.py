"""error_response: each response carries a TritonError with the code the request asks for."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            code = int(pb_utils.get_input_tensor_by_name(request, "CODE").as_numpy().flat[0])
            error = pb_utils.TritonError(
                f"error_response: the model reports error code {code}", code
            )
            responses.append(pb_utils.InferenceResponse(output_tensors=[], error=error))
        return responses
