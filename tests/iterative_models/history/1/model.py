"""An iterative sequence in a model that is not decoupled (Triton's request
rescheduling): each request runs IN times, rescheduled until its last run, whose
response (the only one) carries what the model saw in each run: HISTORY, seven values
per run (the START, END, READY and CORRID controls, request.flags(),
request.correlation_id(), the number of requests in that execute)."""

import numpy as np
import triton_python_backend_utils as pb_utils

CONTROLS = ("START", "END", "READY", "CORRID")


def _value(request, name):
    return int(pb_utils.get_input_tensor_by_name(request, name).as_numpy().reshape(-1)[0])


class TritonPythonModel:
    def initialize(self, args):
        # Request id -> (runs left, history): a rescheduled request is the same request
        # (in Triton a new Python object each run, so it is looked up by its id).
        self.running = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            key = request.request_id()
            left, history = self.running.pop(key, (_value(request, "IN"), []))
            history += [_value(request, name) for name in CONTROLS]
            history += [request.flags(), request.correlation_id(), len(requests)]
            if left > 1:
                self.running[key] = (left - 1, history)
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                responses.append(None)  # Triton's Python backend asks for None here
                continue
            outputs = [
                pb_utils.Tensor("OUT", np.array([[len(history) // 7]], np.int32)),
                pb_utils.Tensor("HISTORY", np.array([history], np.int64)),
            ]
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
