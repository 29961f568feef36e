"""view_probe: reports how its input reached execute(): whether the numpy array owns its
data (a copy) and whether it is a view over a memory-mapped buffer (the shared arena)."""

import numpy as np
import triton_python_backend_utils as pb_utils


def _root(array):
    base = array
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    return base


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            array = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            owns = np.array([[int(array.flags.owndata)]], dtype=np.int32)
            mapped = np.array([[int(isinstance(_root(array), memoryview))]], dtype=np.int32)
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("OWNS_DATA", owns),
                        pb_utils.Tensor("OVER_SHARED_MEMORY", mapped),
                    ]
                )
            )
        return responses
