"""isolation_echo: each request's F and S back as F_OUT and S_OUT, unchanged."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            f = pb_utils.get_input_tensor_by_name(request, "F").as_numpy()
            s = pb_utils.get_input_tensor_by_name(request, "S").as_numpy()
            responses.append(
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("F_OUT", f.copy()), pb_utils.Tensor("S_OUT", s.copy())]
                )
            )
        return responses
