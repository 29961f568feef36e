"""A decoupled sequence model with implicit state: per request two responses, the
first sent from execute() (OUTPUT = STATE_IN + INPUT), the second with the final flag
from a thread of its own after execute() returned (OUTPUT = STATE_IN + 2 * INPUT).
Each carries its OUTPUT as OUTPUT_STATE, so the sequence's next request gets the
second one's: the state of the last response sent."""

import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


def _value(request, name):
    return int(pb_utils.get_input_tensor_by_name(request, name).as_numpy().reshape(-1)[0])


def _response(total):
    array = np.array([[total]], dtype=np.int32)
    return pb_utils.InferenceResponse(
        [pb_utils.Tensor("OUTPUT", array), pb_utils.Tensor("OUTPUT_STATE", array)]
    )


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            value = _value(request, "INPUT")
            state = _value(request, "STATE_IN")
            sender = request.get_response_sender()
            sender.send(_response(state + value))

            def later(sender=sender, total=state + 2 * value):
                time.sleep(0.05)
                sender.send(_response(total), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

            threading.Thread(target=later).start()
        return None
