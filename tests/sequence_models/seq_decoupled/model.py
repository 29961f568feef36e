"""A decoupled sequence model: per request, INPUT responses (OUTPUT 0, 1, ...), each
with CTRL = [START, END, READY] as the model received them, then the final flag."""

import numpy as np
import triton_python_backend_utils as pb_utils


def _flag(request, name):
    return int(pb_utils.get_input_tensor_by_name(request, name).as_numpy().reshape(-1)[0])


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            count = int(
                pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy().reshape(-1)[0]
            )
            ctrl = np.array(
                [[_flag(request, "START"), _flag(request, "END"), _flag(request, "READY")]],
                dtype=np.int32,
            )
            sender = request.get_response_sender()
            for i in range(count):
                sender.send(
                    pb_utils.InferenceResponse(
                        [
                            pb_utils.Tensor("OUTPUT", np.array([[i]], dtype=np.int32)),
                            pb_utils.Tensor("CTRL", ctrl),
                        ]
                    )
                )
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
