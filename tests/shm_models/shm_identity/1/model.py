"""OUTPUTi = INPUTi for every input; a request parameter `delay_ms` sleeps first (load tests).

A request parameter `truncate` names a shm key whose object the model truncates to 0
bytes before it reads its inputs: a client shrinking a region while the request runs,
made certain (tests/test_shm_hostile.py); `copy` answers copies of the inputs rather
than the inputs themselves (views of a region read in place).
"""

import json
import os
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.names = [(i["name"], o["name"]) for i, o in zip(config["input"], config["output"])]

    def execute(self, requests):
        responses = []
        for request in requests:
            parameters = json.loads(request.parameters() or "{}")
            delay = parameters.get("delay_ms", 0)
            if delay:
                time.sleep(delay / 1000.0)
            if parameters.get("truncate"):
                os.truncate("/dev/shm" + parameters["truncate"], 0)
            outputs = []
            for in_name, out_name in self.names:
                tensor = pb_utils.get_input_tensor_by_name(request, in_name)
                if tensor is not None:
                    array = tensor.as_numpy()
                    if parameters.get("copy"):
                        array = array.copy()
                    outputs.append(pb_utils.Tensor(out_name, array))
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
