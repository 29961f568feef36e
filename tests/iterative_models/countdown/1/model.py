"""An iterative sequence (Triton's request rescheduling): each request counts down from
its IN, one response per execution, and is rescheduled until it reaches 0, whose
response is final. FLAGS: the request's flags in that execution (START on the first)."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        # Request id -> what is left to count: a rescheduled request is the same request
        # (in Triton a new Python object each time, so it is looked up by its id).
        self.left = {}

    def execute(self, requests):
        for request in requests:
            key = request.request_id()
            if key not in self.left:
                self.left[key] = int(
                    pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0][0]
                )
            self.left[key] -= 1
            left = self.left[key]
            response = pb_utils.InferenceResponse(
                [
                    pb_utils.Tensor("OUT", np.array([[left]], np.int32)),
                    pb_utils.Tensor("FLAGS", np.array([[request.flags()]], np.int32)),
                ]
            )
            sender = request.get_response_sender()
            if left <= 0:
                del self.left[key]
                sender.send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            else:
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                sender.send(response)
        return None
