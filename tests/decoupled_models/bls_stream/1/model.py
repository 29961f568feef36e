"""bls_stream: N responses from the decoupled model "repeat" (BLS, decoupled=True),
their OUT values answered as VALUES. The request parameter "target" names another
model to call the same way (ens_repeat: a decoupled ensemble of repeat)."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            n = pb_utils.get_input_tensor_by_name(request, "N").as_numpy()
            target = json.loads(request.parameters()).get("target", "repeat")
            call = pb_utils.InferenceRequest(
                model_name=target,
                requested_output_names=["OUT"],
                inputs=[pb_utils.Tensor("N", n)],
                parameters={"mode": "thread"},
            )
            values = []
            for response in call.exec(decoupled=True):
                if response.has_error():
                    raise pb_utils.TritonModelException(response.error().message())
                out = pb_utils.get_output_tensor_by_name(response, "OUT")
                if out is not None:
                    values.append(int(out.as_numpy()[0]))
            array = np.array(values, dtype=np.int32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("VALUES", array)]))
        return responses
