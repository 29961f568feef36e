"""A BLS model: answers each request by calling another model (add_sub by default).

The request parameter `mode` picks what it does (so one model exercises every case, on
Naiad and on Triton alike):
  sync (default)  exec() on add_sub
  async           the requests of the batch sent together with async_exec, then awaited
  decoupled       exec(decoupled=True) on add_sub: the iterator's responses
  ensemble        exec() on the ensemble ensemble_add_sub
  self            exec() on this model itself (mode sync), which calls add_sub
  nested          exec() on this model with mode self: three levels deep
  target          exec() on the model named by parameter `target` (version `version`,
                  -1 by default): its error (unknown model, bad version...) is returned
  bad_input       exec() on add_sub without INPUT1: the validator's error is returned
  bad_shape       exec() on add_sub with INPUT1 of 8 elements (16 expected): its error
  raise_target    exec() on int_double with X = -1 (its execute raises): the error
  timeout         exec() on the model `target` with timeout=`timeout` us
  fail            answers with an error of its own (code INVALID_ARG)
  call_fail       exec() on this model with mode fail: the error comes back
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


def _call(model_name, inputs, mode=None, version=-1, timeout=0, outputs=None):
    return pb_utils.InferenceRequest(
        model_name=model_name,
        requested_output_names=outputs or ["OUTPUT0", "OUTPUT1"],
        inputs=inputs,
        model_version=version,
        timeout=timeout,
        parameters={"mode": mode} if mode else None,
    )


def _answer(response):
    if response.has_error():
        return pb_utils.InferenceResponse(
            error=pb_utils.TritonError(response.error().message(), response.error().code())
        )
    out0 = pb_utils.get_output_tensor_by_name(response, "OUTPUT0")
    out1 = pb_utils.get_output_tensor_by_name(response, "OUTPUT1")
    return pb_utils.InferenceResponse(
        output_tensors=[
            pb_utils.Tensor("OUTPUT0", out0.as_numpy()),
            pb_utils.Tensor("OUTPUT1", out1.as_numpy()),
        ]
    )


class TritonPythonModel:
    async def execute(self, requests):
        pending = []
        for request in requests:
            params = json.loads(request.parameters() or "{}")
            mode = params.get("mode", "sync")
            in0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            in1 = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            inputs = [pb_utils.Tensor("INPUT0", in0), pb_utils.Tensor("INPUT1", in1)]
            if mode == "async":
                pending.append(_call("add_sub", inputs).async_exec())
                continue
            if mode == "sync":
                response = _call("add_sub", inputs).exec()
            elif mode == "decoupled":
                got = list(_call("add_sub", inputs).exec(decoupled=True))
                response = next(r for r in got if r.output_tensors() or r.has_error())
            elif mode == "ensemble":
                response = _call("ensemble_add_sub", inputs).exec()
            elif mode == "self":
                response = _call("bls", inputs, mode="sync").exec()
            elif mode == "nested":
                response = _call("bls", inputs, mode="self").exec()
            elif mode == "target":
                response = _call(
                    params.get("target", ""), inputs, version=int(params.get("version", -1))
                ).exec()
            elif mode == "bad_input":
                response = _call("add_sub", inputs[:1]).exec()
            elif mode == "bad_shape":
                short = pb_utils.Tensor("INPUT1", in1[:, :8].copy())
                response = _call("add_sub", [inputs[0], short]).exec()
            elif mode == "raise_target":
                x = pb_utils.Tensor("X", np.array([-1], dtype=np.int32))
                response = pb_utils.InferenceRequest(
                    model_name="int_double", requested_output_names=["Y"], inputs=[x]
                ).exec()
                if not response.has_error():
                    response = pb_utils.InferenceResponse(
                        error=pb_utils.TritonError("int_double did not fail")
                    )
            elif mode == "timeout":
                response = _call(
                    params.get("target", "add_sub"), inputs, timeout=int(params.get("timeout", 1))
                ).exec()
            elif mode == "fail":
                response = pb_utils.InferenceResponse(
                    error=pb_utils.TritonError(
                        "bls failed on purpose", pb_utils.TritonError.INVALID_ARG
                    )
                )
            elif mode == "call_fail":
                response = _call("bls", inputs, mode="fail").exec()
            else:
                response = pb_utils.InferenceResponse(
                    error=pb_utils.TritonError(f"unknown mode {mode}")
                )
            pending.append(response)
        responses = []
        for item in pending:
            if not isinstance(item, pb_utils.InferenceResponse):
                item = await item
            responses.append(_answer(item))
        return responses
