"""sender_plain: OUT = N * 10 + a mark of the way it was answered, as "mode" says:
- "one": the response sent with the final flag (mark 1)
- "split": the response, then the final flag alone (mark 2)
- "thread": sent from a thread after execute returned (mark 3)
- "mixed": sent with the final flag (mark 4) and also returned (mark 5: ignored)
- "return": a sender taken but unused, the response returned (mark 6)
- "two": two responses (the second raises, failing the batch)
- "flag_only": the final flag without a response (raises)
- "after_final": a second send after the final one (raises; caught and logged)
- "error": an error response sent with the final flag
- "none": nothing sent, nothing returned
"""

import json
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def _response(n, mark):
    out = np.array([[n * 10 + mark]], dtype=np.int32)
    return pb_utils.InferenceResponse([pb_utils.Tensor("OUT", out)])


def _later(sender, n):
    time.sleep(0.2)
    sender.send(_response(n, 3), flags=FINAL)


class TritonPythonModel:
    def execute(self, requests):
        returned = []
        for request in requests:
            mode = json.loads(request.parameters()).get("mode", "one")
            n = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy().reshape(-1)[0])
            sender = request.get_response_sender()
            answer = None
            if mode == "one":
                sender.send(_response(n, 1), flags=FINAL)
            elif mode == "split":
                sender.send(_response(n, 2))
                sender.send(flags=FINAL)
            elif mode == "thread":
                threading.Thread(target=_later, args=(sender, n)).start()
            elif mode == "mixed":
                sender.send(_response(n, 4), flags=FINAL)
                answer = _response(n, 5)
            elif mode == "return":
                answer = _response(n, 6)
            elif mode == "two":
                sender.send(_response(n, 7))
                sender.send(_response(n, 8), flags=FINAL)
            elif mode == "flag_only":
                sender.send(flags=FINAL)
            elif mode == "after_final":
                sender.send(_response(n, 9), flags=FINAL)
                try:
                    sender.send(_response(n, 9), flags=FINAL)
                except pb_utils.TritonModelException as exc:
                    pb_utils.Logger.log_error(f"after final: {exc}")
            elif mode == "error":
                error = pb_utils.TritonError("sender_plain failed this request")
                sender.send(pb_utils.InferenceResponse(error=error), flags=FINAL)
            returned.append(answer)
        return None if all(answer is None for answer in returned) else returned
