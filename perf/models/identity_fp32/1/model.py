"""identity_fp32: OUTPUT0 = INPUT0, an FP32 [3, 224, 224] image-sized tensor (large-tensor path)."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            out_0 = pb_utils.Tensor("OUTPUT0", in_0)
            responses.append(pb_utils.InferenceResponse(output_tensors=[out_0]))
        return responses
