"""Calls seq_direct through BLS with correlation id 7, START and END (a sequence of one
request, so no slot stays taken) and returns the error it gets ("" when none)."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            call = pb_utils.InferenceRequest(
                model_name="seq_direct",
                requested_output_names=["OUTPUT"],
                inputs=[pb_utils.Tensor("INPUT", value.reshape(1, 1))],
                correlation_id=7,
                flags=pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START
                | pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END,
            )
            answer = call.exec()
            error = answer.error().message() if answer.has_error() else ""
            responses.append(
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("ERROR", np.array([error], dtype=object))]
                )
            )
        return responses
