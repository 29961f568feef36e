"""bls_sequence: each request calls the model named by parameter `target` (seq_echo by
default) with correlation_id = parameter `corrid` (an int or a str; absent: none) and
the START / END flags of parameters `start` / `end`; the called model's outputs, or its
error message, are the answer."""

import json

import triton_python_backend_utils as pb_utils

OUTPUTS = ["TOTAL", "CTRL", "CORRID_OUT"]


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            params = json.loads(request.parameters() or "{}")
            flags = 0
            if params.get("start"):
                flags |= pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START
            if params.get("end"):
                flags |= pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END
            call = pb_utils.InferenceRequest(
                model_name=params.get("target", "seq_echo"),
                requested_output_names=OUTPUTS,
                inputs=[pb_utils.get_input_tensor_by_name(request, "INPUT")],
                correlation_id=params.get("corrid", 0),
                flags=flags,
            )
            answer = call.exec()
            if answer.has_error():
                # The message only (code INTERNAL): Triton 2.51's BLS errors carry no code.
                error = pb_utils.TritonError(answer.error().message())
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            responses.append(
                pb_utils.InferenceResponse(
                    [pb_utils.get_output_tensor_by_name(answer, name) for name in OUTPUTS]
                )
            )
        return responses
