"""No config.pbtxt: auto_complete_config gives max_batch_size, tensors and batching."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        auto_complete_model_config.set_max_batch_size(8)
        auto_complete_model_config.add_input({"name": "IN", "data_type": "TYPE_INT32", "dims": [2]})
        auto_complete_model_config.add_output(
            {"name": "OUT", "data_type": "TYPE_INT32", "dims": [2]}
        )
        auto_complete_model_config.set_dynamic_batching()
        return auto_complete_model_config

    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", value * 2)]))
        return responses
