"""auto_complete_config refuses: the model is UNAVAILABLE with its message."""


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        auto_complete_model_config.add_input({"name": "IN", "data_type": "TYPE_INT32"})
        return auto_complete_model_config

    def execute(self, requests):
        return []
