"""seq_echo (and seq_echo_string, the same model with a TYPE_STRING CORRID): TOTAL is
the sum of the sequence's INPUTs since its START, kept here per correlation id; CTRL
echoes [START, END] as received, CORRID_OUT the CORRID control input."""

import numpy as np
import triton_python_backend_utils as pb_utils


def _scalar(request, name):
    return pb_utils.get_input_tensor_by_name(request, name).as_numpy().reshape(-1)[0]


class TritonPythonModel:
    def initialize(self, args):
        self.totals = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            value = int(_scalar(request, "INPUT"))
            start, end = int(_scalar(request, "START")), int(_scalar(request, "END"))
            corrid = _scalar(request, "CORRID")
            corrid = corrid.decode() if isinstance(corrid, bytes) else str(corrid)
            total = value + (0 if start else self.totals.get(corrid, 0))
            self.totals[corrid] = total
            if end:
                del self.totals[corrid]
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("TOTAL", np.array([[total]], dtype=np.int32)),
                        pb_utils.Tensor("CTRL", np.array([[start, end]], dtype=np.int32)),
                        pb_utils.Tensor("CORRID_OUT", np.array([[corrid]], dtype=object)),
                    ]
                )
            )
        return responses
