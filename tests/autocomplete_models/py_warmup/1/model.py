"""COUNT: how many requests this instance executed, warmup included."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.seen = 0

    def execute(self, requests):
        responses = []
        for request in requests:
            self.seen += 1
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            count = np.full(value.shape, self.seen, dtype=np.int32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("COUNT", count)]))
        return responses
