"""An iterative sequence in a decoupled model: each request runs IN times, rescheduled
until its last run, and each run streams a response: OUT the runs left, HISTORY what
the model saw in that run (the START, END, READY and CORRID controls, request.flags(),
request.correlation_id(), the number of requests in that execute). The last run's
response is final."""

import numpy as np
import triton_python_backend_utils as pb_utils

CONTROLS = ("START", "END", "READY", "CORRID")


def _value(request, name):
    return int(pb_utils.get_input_tensor_by_name(request, name).as_numpy().reshape(-1)[0])


class TritonPythonModel:
    def initialize(self, args):
        self.left = {}  # request id -> runs left (Triton: a new object each run)

    def execute(self, requests):
        for request in requests:
            key = request.request_id()
            left = self.left.pop(key, _value(request, "IN")) - 1
            seen = [_value(request, name) for name in CONTROLS]
            seen += [request.flags(), request.correlation_id(), len(requests)]
            response = pb_utils.InferenceResponse(
                [
                    pb_utils.Tensor("OUT", np.array([[left]], np.int32)),
                    pb_utils.Tensor("HISTORY", np.array([seen], np.int64)),
                ]
            )
            sender = request.get_response_sender()
            if left > 0:
                self.left[key] = left
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                sender.send(response)
            else:
                sender.send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
