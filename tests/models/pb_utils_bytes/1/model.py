"""Passes bytes where pb_utils takes a string (Triton's bindings take either, as pybind11
converts both to std::string), and answers what came of it.

PROBE is [probe name, argument]; RESULT is "ok: <value>" or "raised <type>: <message>".
The same model runs on Naiad and on the real Triton (tests/test_pb_utils_bytes.py)."""

import numpy as np
import triton_python_backend_utils as pb_utils


def _add_sub_inputs():
    values = np.arange(16, dtype=np.float32).reshape(1, 16)
    return [pb_utils.Tensor("INPUT0", values), pb_utils.Tensor("INPUT1", values)]


def _bls(argument, **changes):
    """Calls add_sub with `changes` to the arguments; its OUTPUT0[0, 3] (3 + 3) and the
    request's fields, or the error's message."""
    arguments = {
        "model_name": "add_sub",
        "inputs": _add_sub_inputs(),
        "requested_output_names": ["OUTPUT0"],
    }
    arguments.update(changes)
    request = pb_utils.InferenceRequest(**arguments)
    fields = f"{request.request_id()!r} {sorted(request.requested_output_names())!r}"
    response = request.exec()
    if response.has_error():
        return "error: " + response.error().message()
    output = pb_utils.get_output_tensor_by_name(response, "OUTPUT0")
    return f"{output.as_numpy()[0, 3]} {fields}"


def _probe(name, argument, request):
    if name == "tensor_name":
        return pb_utils.Tensor(argument, np.zeros(2, np.float32)).name()
    if name == "bls_model_name":
        # The case real models rely on: the target's name read from a TYPE_STRING input.
        return _bls(argument, model_name=argument)
    if name == "bls_output_names":
        return _bls(argument, requested_output_names=[argument])
    if name == "bls_request_id":
        return _bls(argument, request_id=argument)
    if name == "bls_correlation_id":
        return _bls(argument, correlation_id=argument)
    if name == "error_message":
        return repr(pb_utils.TritonError(argument).message())
    if name == "input_by_name":
        return repr(pb_utils.get_input_tensor_by_name(request, argument))
    if name == "logger":
        pb_utils.Logger.log_info(argument)
        return "logged"
    if name == "is_model_ready":
        return repr(pb_utils.is_model_ready(argument))
    if name == "metric_family":
        family = pb_utils.MetricFamily(
            name=argument, description=b"a counter", kind=pb_utils.MetricFamily.COUNTER
        )
        metric = family.Metric(labels={"probe": "bytes"})
        metric.increment(2)
        return repr(metric.value())
    raise ValueError(f"unknown probe {name!r}")


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            name, argument = pb_utils.get_input_tensor_by_name(request, "PROBE").as_numpy()
            try:
                result = f"ok: {_probe(name.decode(), argument, request)}"
            except Exception as exc:  # the probe reports what was raised
                result = f"raised {type(exc).__name__}: {exc}"
            output = np.array([result.encode()], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("RESULT", output)]))
        return responses
