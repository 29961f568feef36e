"""The trace context a model is given: CONTEXT is request.trace().get_context() ("" when
None). With the request parameter `call` naming a model, it first calls that model with
trace=request.trace() (request id "child") and answers that model's CONTEXT as
CHILD_CONTEXT ("" without a call): two instances, so that one can call the other."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


def _text(value: str):
    return np.array([[value.encode()]], dtype=np.object_)


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            params = json.loads(request.parameters() or "{}")
            child = ""
            if params.get("call"):
                response = pb_utils.InferenceRequest(
                    model_name=params["call"],
                    request_id="child",
                    requested_output_names=["CONTEXT"],
                    inputs=[pb_utils.get_input_tensor_by_name(request, "INPUT0")],
                    trace=request.trace(),
                ).exec()
                if response.has_error():
                    responses.append(pb_utils.InferenceResponse(error=response.error()))
                    continue
                child = pb_utils.get_output_tensor_by_name(response, "CONTEXT").as_numpy()
                child = child.reshape(-1)[0].decode()
            context = request.trace().get_context() or ""
            outputs = [
                pb_utils.Tensor("CONTEXT", _text(context)),
                pb_utils.Tensor("CHILD_CONTEXT", _text(child)),
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
