"""slow_add_sub: add_sub whose executions a test can hold. Each execution marks its start
with the file `executing` in the model's folder and waits while `hold` exists there."""

import os
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.folder = args["model_repository"]

    def execute(self, requests):
        open(os.path.join(self.folder, "executing"), "w").close()
        deadline = time.monotonic() + 120
        while os.path.exists(os.path.join(self.folder, "hold")):
            if time.monotonic() > deadline:
                raise RuntimeError("held for 120 s: the test never released it")
            time.sleep(0.002)
        responses = []
        for request in requests:
            in0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            in1 = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("OUTPUT0", in0 + in1),
                        pb_utils.Tensor("OUTPUT1", in0 - in1),
                    ]
                )
            )
        return responses
