"""identity_bytes: OUTPUT0 echoes INPUT0, a BYTES (TYPE_STRING) tensor."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            out_0 = pb_utils.Tensor("OUTPUT0", in_0.as_numpy())
            responses.append(pb_utils.InferenceResponse(output_tensors=[out_0]))
        return responses
