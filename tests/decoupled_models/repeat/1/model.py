"""N responses per request, OUT = 0..N-1, as the request parameter "mode" says:

- "thread" (default): from a thread, after execute returned; then the final flag alone
- "inline": during execute, the final flag on the last response (none for N = 0)
- "error_last": N responses, then an error response flagged final
- "no_final": N responses, then the request is released without the final flag
- "raise": N responses, then execute raises
- "after_final": one response flagged final, then a second send (which raises)
- "until_cancelled": a response every 10 ms until request.is_cancelled(), then the
  final flag alone; "cancelled" answers how many requests saw is_cancelled()
- "return_list": returns a list from execute (a decoupled model must return None)
- "block": sleeps N ms inside execute (the instance is busy), then answers OUT = 0
- "executed": answers how many requests execute() has seen (this one included)
- "hold": marks `executing` in the model's folder, waits while `hold` exists there
  (tests order events with them), then answers OUT = 0
"""

import json
import os
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def _out(i):
    return pb_utils.InferenceResponse(
        output_tensors=[pb_utils.Tensor("OUT", np.array([i], dtype=np.int32))]
    )


class TritonPythonModel:
    def initialize(self, args):
        self.cancelled = 0
        self.executed = 0
        self.threads = []
        self.folder = args["model_repository"]

    def execute(self, requests):
        for request in requests:
            self.executed += 1
            n = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy()[0])
            mode = json.loads(request.parameters()).get("mode", "thread")
            sender = request.get_response_sender()
            if mode == "thread":
                thread = threading.Thread(target=self._stream, args=(sender, n))
                thread.start()
                self.threads.append(thread)
            elif mode == "inline":
                for i in range(n):
                    sender.send(_out(i), flags=FINAL if i == n - 1 else 0)
                if n == 0:
                    sender.send(flags=FINAL)
            elif mode == "error_last":
                for i in range(n):
                    sender.send(_out(i))
                sender.send(
                    pb_utils.InferenceResponse(error=pb_utils.TritonError("bad things")),
                    flags=FINAL,
                )
            elif mode == "no_final":
                for i in range(n):
                    sender.send(_out(i))
            elif mode == "raise":
                for i in range(n):
                    sender.send(_out(i))
                raise RuntimeError("the model failed mid-stream")
            elif mode == "after_final":
                sender.send(_out(0), flags=FINAL)
                sender.send(_out(1))
            elif mode == "until_cancelled":
                thread = threading.Thread(target=self._until_cancelled, args=(request, sender))
                thread.start()
                self.threads.append(thread)
            elif mode == "cancelled":
                sender.send(_out(self.cancelled), flags=FINAL)
            elif mode == "return_list":
                return [None]
            elif mode == "block":
                time.sleep(n / 1000)
                sender.send(_out(0), flags=FINAL)
            elif mode == "hold":
                self._hold()
                sender.send(_out(0), flags=FINAL)
            elif mode == "executed":
                sender.send(_out(self.executed), flags=FINAL)
        self.threads = [t for t in self.threads if t.is_alive()]
        return None

    def _hold(self):
        open(os.path.join(self.folder, "executing"), "w").close()
        deadline = time.monotonic() + 120
        while os.path.exists(os.path.join(self.folder, "hold")):
            if time.monotonic() > deadline:
                raise RuntimeError("held for 120 s: the test never released it")
            time.sleep(0.002)

    def _stream(self, sender, n):
        for i in range(n):
            sender.send(_out(i))
        sender.send(flags=FINAL)

    def _until_cancelled(self, request, sender):
        deadline = time.monotonic() + 10
        i = 0
        while not request.is_cancelled() and time.monotonic() < deadline:
            sender.send(_out(i))
            i += 1
            time.sleep(0.01)
        if request.is_cancelled():
            self.cancelled += 1
        sender.send(flags=FINAL)

    def finalize(self):
        for thread in self.threads:
            thread.join()
