"""A BLS model for the trace extension: the request parameter `calls` lists the calls it
makes, in order, each "<model>" (traced: trace=request.trace()) or "<model>:untraced";
the last call's outputs are its own. CONTEXT is request.trace().get_context() ("" when
None), the trace context a model sees (Triton gives one in mode opentelemetry only)."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            params = json.loads(request.parameters() or "{}")
            inputs = [
                pb_utils.Tensor(name, pb_utils.get_input_tensor_by_name(request, name).as_numpy())
                for name in ("INPUT0", "INPUT1")
            ]
            response = None
            for call in params.get("calls", "add_sub").split(","):
                model_name, _, how = call.partition(":")
                extra = {} if how == "untraced" else {"trace": request.trace()}
                response = pb_utils.InferenceRequest(
                    model_name=model_name,
                    requested_output_names=["OUTPUT0", "OUTPUT1"],
                    inputs=inputs,
                    **extra,
                ).exec()
                if response.has_error():
                    break
            if response.has_error():
                responses.append(pb_utils.InferenceResponse(error=response.error()))
                continue
            context = request.trace().get_context() or ""
            outputs = [
                pb_utils.Tensor(name, pb_utils.get_output_tensor_by_name(response, name).as_numpy())
                for name in ("OUTPUT0", "OUTPUT1")
            ]
            batch = outputs[0].as_numpy().shape[0]
            outputs.append(
                pb_utils.Tensor("CONTEXT", np.array([[context.encode()]] * batch, dtype=np.object_))
            )
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
