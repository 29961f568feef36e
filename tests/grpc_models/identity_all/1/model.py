"""identity_all: OUT_<TYPE> echoes IN_<TYPE> for every datatype (OUT_FP16 is empty
when the optional IN_FP16 is absent)."""

import numpy as np
import triton_python_backend_utils as pb_utils

TYPES = "BOOL UINT8 UINT16 UINT32 UINT64 INT8 INT16 INT32 INT64 FP16 FP32 FP64 STRING".split()


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            outputs = []
            for t in TYPES:
                tensor = pb_utils.get_input_tensor_by_name(request, f"IN_{t}")
                data = tensor.as_numpy() if tensor is not None else np.zeros(0, np.float16)
                outputs.append(pb_utils.Tensor(f"OUT_{t}", data))
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
