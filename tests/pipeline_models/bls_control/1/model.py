"""Model management from a model (pb_utils.load_model, unload_model, is_model_ready).

Each request's COMMAND is a JSON object; RESULT is the JSON of what happened, so one
model drives every case on Naiad and on Triton alike:
  {"op": "load", "name": N, "config": JSON text (optional),
   "files": {"file:<path>": base64} (optional)}      pb_utils.load_model
  {"op": "unload", "name": N}                       pb_utils.unload_model
  {"op": "ready", "name": N, "version": "V"}        pb_utils.is_model_ready
  {"op": "infer", "name": N, "value": x}            a BLS call with INPUT0 = INPUT1 = x
                                                    (16 floats); RESULT has OUTPUT0
  {"op": "load_and_infer", "name": N, "value": x}   load_model then the call
  {"op": "unload_self"}                             unload_model of this model itself
  {"op": "load_bad_files"}                          load_model with files not a dict
RESULT: {"ok": true, ...} or {"ok": false, "type": exception class, "error": message}.
"""

import base64
import json

import numpy as np
import triton_python_backend_utils as pb_utils


def _infer(name, value):
    data = np.full([1, 16], value, dtype=np.float32)
    request = pb_utils.InferenceRequest(
        model_name=name,
        requested_output_names=["OUTPUT0"],
        inputs=[pb_utils.Tensor("INPUT0", data), pb_utils.Tensor("INPUT1", data)],
    )
    response = request.exec()
    if response.has_error():
        return {"ok": False, "type": "TritonError", "error": response.error().message()}
    out = pb_utils.get_output_tensor_by_name(response, "OUTPUT0").as_numpy()
    return {"ok": True, "output0": [float(x) for x in out.flatten()]}


def _run(command, model_name):
    op = command["op"]
    if op == "load":
        files = command.get("files")
        if files is not None:
            files = {key: base64.b64decode(value) for key, value in files.items()}
        pb_utils.load_model(command["name"], config=command.get("config", ""), files=files)
        return {"ok": True}
    if op == "unload":
        pb_utils.unload_model(command["name"])
        return {"ok": True}
    if op == "unload_self":
        pb_utils.unload_model(model_name)
        return {"ok": True}
    if op == "ready":
        return {
            "ok": True,
            "ready": pb_utils.is_model_ready(command["name"], command.get("version", "")),
        }
    if op == "infer":
        return _infer(command["name"], command["value"])
    if op == "load_and_infer":
        pb_utils.load_model(command["name"])
        return _infer(command["name"], command["value"])
    if op == "load_bad_files":
        pb_utils.load_model(command["name"], config=command.get("config", ""), files=["x"])
        return {"ok": True}
    raise ValueError(f"unknown op {op!r}")


class TritonPythonModel:
    def initialize(self, args):
        self.model_name = args["model_name"]

    def execute(self, requests):
        responses = []
        for request in requests:
            raw = pb_utils.get_input_tensor_by_name(request, "COMMAND").as_numpy().flatten()[0]
            command = json.loads(raw.decode() if isinstance(raw, bytes) else raw)
            try:
                result = _run(command, self.model_name)
            except Exception as exc:  # what the model sees, reported to the test
                result = {"ok": False, "type": type(exc).__name__, "error": str(exc)}
            out = np.array([json.dumps(result).encode()], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("RESULT", out)]))
        return responses
