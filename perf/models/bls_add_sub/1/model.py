"""bls_add_sub: answers each request by calling add_sub through BLS, the requests of a
batch sent together (async_exec) and awaited together."""

import asyncio

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        pending = []
        for request in requests:
            inputs = [
                pb_utils.get_input_tensor_by_name(request, "INPUT0"),
                pb_utils.get_input_tensor_by_name(request, "INPUT1"),
            ]
            pending.append(
                pb_utils.InferenceRequest(
                    model_name="add_sub",
                    requested_output_names=["OUTPUT0", "OUTPUT1"],
                    inputs=inputs,
                ).async_exec()
            )
        responses = []
        for response in await asyncio.gather(*pending):
            if response.has_error():
                responses.append(pb_utils.InferenceResponse(error=response.error()))
            else:
                responses.append(
                    pb_utils.InferenceResponse(output_tensors=response.output_tensors())
                )
        return responses
