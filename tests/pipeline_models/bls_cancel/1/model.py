"""bls_cancel: calls "repeat" (mode until_cancelled: a response every 10 ms until the
request is cancelled) with exec(decoupled=True), or async_exec when the request
parameter `async` is true, and calls cancel() on the response iterator once N responses
came (N = 0: before reading any). It reads the stream to its end and answers RECEIVED,
the responses with an output, and ERROR, the last error response's message ("" when
none)."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


def _call(n):
    return pb_utils.InferenceRequest(
        model_name="repeat",
        requested_output_names=["OUT"],
        inputs=[pb_utils.Tensor("N", np.array([n], dtype=np.int32))],
        parameters={"mode": "until_cancelled"},
    )


def _drain(stream, n):
    received, error = 0, ""
    if n == 0:
        stream.cancel()
    for response in stream:
        if response.has_error():
            error = response.error().message()
        elif response.output_tensors():
            received += 1
            if received == n:
                stream.cancel()
    return received, error


def _answer(received, error):
    return pb_utils.InferenceResponse(
        [
            pb_utils.Tensor("RECEIVED", np.array([received], dtype=np.int32)),
            pb_utils.Tensor("ERROR", np.array([error], dtype=object)),
        ]
    )


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy()[0])
            if json.loads(request.parameters() or "{}").get("async"):
                stream = await _call(n).async_exec(decoupled=True)
            else:
                stream = _call(n).exec(decoupled=True)
            responses.append(_answer(*_drain(stream, n)))
        return responses
