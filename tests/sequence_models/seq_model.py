"""Sequence test model: an accumulator with implicit state, echoing its control inputs.

Per request: OUTPUT = STATE_IN + INPUT (STATE_IN is the implicit state input: the
previous request's OUTPUT_STATE, or the initial state at START), and the same value as
the state output. CTRL echoes [START, END, READY] as the model received them, CORRID the
correlation id control input, SLOTS the number of requests in the execution and
INSTANCE this instance's name hashed to a small number. Null requests (READY false)
are answered too; the server drops their responses.
"""

import json
import time
import zlib

import numpy as np
import triton_python_backend_utils as pb_utils


def _scalar(request, name, default=0):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return default
    return tensor.as_numpy().reshape(-1)[0]


class TritonPythonModel:
    def initialize(self, args):
        self.config = json.loads(args["model_config"])
        self.instance = zlib.crc32(args["model_instance_name"].encode()) % 1000
        parameter = self.config.get("parameters", {}).get("sleep_ms", {})
        self.sleep_ms = float(parameter.get("string_value", "0") or 0)
        self.batched = self.config.get("max_batch_size", 0) > 0

    def execute(self, requests):
        if self.sleep_ms:
            time.sleep(self.sleep_ms / 1000.0)
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            state = pb_utils.get_input_tensor_by_name(request, "STATE_IN")
            state = state.as_numpy() if state is not None else np.zeros_like(value)
            total = (state + value).astype(np.int32)
            ctrl = np.array(
                [_scalar(request, "START"), _scalar(request, "END"), _scalar(request, "READY")],
                dtype=np.int32,
            )
            corrid = _scalar(request, "CORRID")
            if isinstance(corrid, bytes):
                corrid = corrid.decode()
            corrid = np.array([str(corrid)], dtype=object)
            extra = [
                pb_utils.Tensor("SLOTS", np.array([len(requests)], dtype=np.int32)),
                pb_utils.Tensor("INSTANCE", np.array([self.instance], dtype=np.int32)),
            ]
            if self.batched:
                ctrl = ctrl.reshape(1, -1)
                corrid = corrid.reshape(1, -1)
                extra = [pb_utils.Tensor(t.name(), t.as_numpy().reshape(1, -1)) for t in extra]
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("OUTPUT", total),
                        pb_utils.Tensor("OUTPUT_STATE", total),
                        pb_utils.Tensor("CTRL", ctrl),
                        pb_utils.Tensor("CORRID_OUT", corrid),
                        *extra,
                    ]
                )
            )
        return responses
