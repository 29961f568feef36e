"""stream_repeat: N responses per request, OUT = 0..N-1, the last flagged final."""

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy()[0])
            sender = request.get_response_sender()
            for i in range(n):
                out = pb_utils.Tensor("OUT", np.array([i], dtype=np.int32))
                sender.send(
                    pb_utils.InferenceResponse(output_tensors=[out]),
                    flags=FINAL if i == n - 1 else 0,
                )
        return None
