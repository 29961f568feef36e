"""OUTPUTi = INPUTi for every input; a request parameter `delay_ms` sleeps first (load tests)."""

import json
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.names = [(i["name"], o["name"]) for i, o in zip(config["input"], config["output"])]

    def execute(self, requests):
        responses = []
        for request in requests:
            delay = json.loads(request.parameters() or "{}").get("delay_ms", 0)
            if delay:
                time.sleep(delay / 1000.0)
            outputs = []
            for in_name, out_name in self.names:
                tensor = pb_utils.get_input_tensor_by_name(request, in_name)
                if tensor is not None:
                    outputs.append(pb_utils.Tensor(out_name, tensor.as_numpy()))
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
