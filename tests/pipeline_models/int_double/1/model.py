"""int_double: Y = 2 * X; raises for a negative X (so a BLS caller meets a model whose
execute fails: tests/pipeline_models/bls, mode raise_target)."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            if (x < 0).any():
                raise pb_utils.TritonModelException("int_double takes no negative X")
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", 2 * x)]))
        return responses
