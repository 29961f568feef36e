"""The Python backend: loading Triton Python models and running their execute()."""

import json
import os
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from naiad import _core
from naiad import triton_python_backend_utils as pb_utils
from naiad.backends import load_backend
from naiad.backends.base import Batch, RequestError, RequestHeader, Response
from naiad.backends.python import ModelLoadError, PythonModelBackend, auto_complete_config

REPOSITORY = Path(__file__).resolve().parent.parent / "model_repository"


def _tensor_config(name, data_type, dims):
    # Triton's JSON form of the model config writes int64 values such as dims as strings.
    return {"name": name, "data_type": data_type, "dims": [str(d) for d in dims]}


ADD_SUB_CONFIG = {
    "name": "add_sub",
    "platform": "",
    "backend": "python",
    "version_policy": {"latest": {"num_versions": 1}},
    "max_batch_size": 64,
    "input": [
        _tensor_config("INPUT0", "TYPE_FP32", [16]),
        _tensor_config("INPUT1", "TYPE_FP32", [16]),
    ],
    "output": [
        _tensor_config("OUTPUT0", "TYPE_FP32", [16]),
        _tensor_config("OUTPUT1", "TYPE_FP32", [16]),
    ],
    "dynamic_batching": {},
    "instance_group": [{"name": "add_sub_0", "kind": "KIND_CPU", "count": 1, "gpus": []}],
    "default_model_filename": "",
    "parameters": {},
}


def _args(model_dir, config, version="1"):
    """The dict Triton's initialize() receives."""
    return {
        "model_config": json.dumps(config),
        "model_instance_kind": "CPU",
        "model_instance_name": f"{config['name']}_0_0",
        "model_instance_device_id": "0",
        "model_repository": str(model_dir),
        "model_version": version,
        "model_name": config["name"],
    }


def _add_sub_request(in0, in1, outputs=("OUTPUT0", "OUTPUT1"), request_id=""):
    return pb_utils.InferenceRequest(
        request_id=request_id,
        model_name="add_sub",
        requested_output_names=list(outputs),
        inputs=[pb_utils.Tensor("INPUT0", in0), pb_utils.Tensor("INPUT1", in1)],
    )


def _write_model(tmp_path, source, name="broken", filename="model.py", config_extra=None):
    model_dir = tmp_path / name
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "1" / filename).write_text(textwrap.dedent(source))
    config = {
        "name": name,
        "backend": "python",
        "max_batch_size": 8,
        "input": [_tensor_config("INPUT0", "TYPE_FP32", [4])],
        "output": [_tensor_config("OUTPUT0", "TYPE_FP32", [4])],
    }
    config.update(config_extra or {})
    return model_dir, config


def _fp32_request(values, outputs=("OUTPUT0",)):
    return pb_utils.InferenceRequest(
        model_name="broken",
        requested_output_names=list(outputs),
        inputs=[pb_utils.Tensor("INPUT0", np.asarray(values, dtype=np.float32))],
    )


@pytest.fixture
def add_sub():
    backend = PythonModelBackend(_args(REPOSITORY / "add_sub", ADD_SUB_CONFIG))
    yield backend
    backend.finalize()


# -- add_sub ----------------------------------------------------------------------------------


def test_add_sub_batch_of_two(add_sub):
    rng = np.random.default_rng(0)
    a0, b0 = rng.random((2, 1, 16), dtype=np.float32)
    a1, b1 = rng.random((2, 3, 16), dtype=np.float32)
    results = add_sub.execute_requests([_add_sub_request(a0, b0), _add_sub_request(a1, b1)])
    assert len(results) == 2
    for (a, b), result in zip([(a0, b0), (a1, b1)], results):
        assert isinstance(result, Response)
        assert [name for name, _ in result.outputs] == ["OUTPUT0", "OUTPUT1"]
        np.testing.assert_allclose(result.outputs[0][1], a + b)
        np.testing.assert_allclose(result.outputs[1][1], a - b)
        assert result.outputs[0][1].dtype == np.float32
        assert result.parameters is None


def test_add_sub_inputs_are_not_copied(add_sub):
    # The worker hands the model numpy views over shared memory; the model must see them.
    arena = bytearray(2 * 16 * 4)
    in0 = np.frombuffer(arena, dtype=np.float32, count=16).reshape(1, 16)
    in1 = np.frombuffer(arena, dtype=np.float32, count=16, offset=64).reshape(1, 16)
    request = _add_sub_request(in0, in1)
    assert pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy() is in0
    in0[:] = 2.0
    in1[:] = 0.5
    [result] = add_sub.execute_requests([request])
    np.testing.assert_allclose(result.outputs[0][1], np.full((1, 16), 2.5))


def test_requested_output_names_filter(add_sub):
    ones = np.ones((1, 16), dtype=np.float32)
    only_one = _add_sub_request(ones, ones, outputs=["OUTPUT1"])
    all_of_them = _add_sub_request(ones, ones, outputs=[])
    [first, second] = add_sub.execute_requests([only_one, all_of_them])
    assert [name for name, _ in first.outputs] == ["OUTPUT1"]
    np.testing.assert_allclose(first.outputs[0][1], np.zeros((1, 16)))
    assert [name for name, _ in second.outputs] == ["OUTPUT0", "OUTPUT1"]


def test_requested_output_not_produced_is_an_error(add_sub):
    ones = np.ones((1, 16), dtype=np.float32)
    [result] = add_sub.execute_requests(
        [_add_sub_request(ones, ones, outputs=["OUTPUT0", "OUTPUT9"])]
    )
    assert isinstance(result, RequestError)
    assert result.message == (
        "Failed to process the request(s) for model 'add_sub_0_0', message: requested output "
        "'OUTPUT9' not produced by the model"
    )
    assert result.code == pb_utils.TritonError.INTERNAL


def test_initialize_receives_the_args_and_pb_utils_is_importable(add_sub):
    assert sys.modules["triton_python_backend_utils"] is pb_utils
    assert add_sub.model.model_config["name"] == "add_sub"
    assert str(REPOSITORY / "add_sub" / "1") in sys.path
    assert pb_utils.get_model_dir() == str(REPOSITORY / "add_sub" / "1")


def test_identity_bytes():
    config = {
        "name": "identity_bytes",
        "backend": "python",
        "max_batch_size": 8,
        "input": [_tensor_config("INPUT0", "TYPE_STRING", [-1])],
        "output": [_tensor_config("OUTPUT0", "TYPE_STRING", [-1])],
    }
    backend = PythonModelBackend(_args(REPOSITORY / "identity_bytes", config))
    data = np.array([[b"hello", b"", b"\x00\xff"]], dtype=np.object_)
    request = pb_utils.InferenceRequest(
        model_name="identity_bytes",
        requested_output_names=["OUTPUT0"],
        inputs=[pb_utils.Tensor("INPUT0", data)],
    )
    [result] = backend.execute_requests([request])
    [(name, array)] = result.outputs
    assert name == "OUTPUT0"
    assert array.tolist() == data.tolist()
    backend.finalize()


# -- the Backend interface ----------------------------------------------------------------------


def test_load_backend_picks_the_python_backend_by_name():
    backend = load_backend(_args(REPOSITORY / "add_sub", ADD_SUB_CONFIG))
    assert isinstance(backend, PythonModelBackend)
    backend.finalize()


@pytest.mark.parametrize("field", ["backend", "platform"])
def test_load_backend_names_an_unknown_backend(field):
    config = {"name": "net", field: "tensorflow_graphdef"}
    with pytest.raises(RuntimeError) as info:
        load_backend(_args(REPOSITORY / "add_sub", config))
    message = str(info.value)
    assert message.startswith(
        "backend 'tensorflow_graphdef' of model 'net' is not supported yet (supported: "
    )
    for backend in ("python", "onnxruntime", "pytorch", "tensorrt"):
        assert backend in message


def test_execute_over_a_batch_view(add_sub):
    # What a worker hands the backend: shared headers, input arrays viewing the arena.
    arena = np.arange(64, dtype=np.float32)
    header = RequestHeader(
        "r1", (("INPUT0", "FP32", (1, 16)), ("INPUT1", "FP32", (1, 16))), ["OUTPUT1"], {}
    )
    views = [[arena[0:16].reshape(1, 16), arena[16:32].reshape(1, 16)]]
    views.append([arena[32:48].reshape(1, 16), arena[48:64].reshape(1, 16)])
    [first, second] = add_sub.execute(Batch([header, header], views))
    assert [name for name, _ in first.outputs] == ["OUTPUT1"]
    np.testing.assert_allclose(first.outputs[0][1], np.full((1, 16), -16.0))
    np.testing.assert_allclose(second.outputs[0][1], np.full((1, 16), -16.0))


class _ResponseSubclass(pb_utils.InferenceResponse):
    pass


class _TensorSubclass(pb_utils.Tensor):
    __slots__ = ()


def _answers_to_check():
    """(label, request, response) pairs covering each case PythonModelBackend._result
    tells apart."""
    row = np.ones((1, 4), dtype=np.float32)

    def out(name, cls=pb_utils.Tensor):
        return cls(name, row.copy())

    def request(outputs=()):
        return _add_sub_request(row, row, outputs=list(outputs))

    rescheduled = request()
    rescheduled.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
    # The constructor drops repeated names; a server request holds its header's tuple.
    twice = request()
    twice._requested_output_names = ("OUTPUT0", "OUTPUT0")
    on_device = pb_utils.Tensor._from_device("OUTPUT1", object(), 0, 11)
    many = [out(f"OUT{i}") for i in range(17)]
    return [
        ("plain", request(), pb_utils.InferenceResponse([out("OUTPUT0"), out("OUTPUT1")])),
        ("no outputs", request(), pb_utils.InferenceResponse([])),
        (
            "parameters",
            request(),
            pb_utils.InferenceResponse([out("OUTPUT0")], parameters={"p": 1}),
        ),
        ("seventeen outputs", request(), pb_utils.InferenceResponse(many)),
        ("model error", request(), pb_utils.InferenceResponse(error=pb_utils.TritonError("no"))),
        (
            "requested",
            request(["OUTPUT1"]),
            pb_utils.InferenceResponse([out("OUTPUT0"), out("OUTPUT1")]),
        ),
        (
            "requested all",
            request(["OUTPUT0", "OUTPUT1"]),
            pb_utils.InferenceResponse([out("OUTPUT0"), out("OUTPUT1")]),
        ),
        (
            "requested all, in another order",
            request(["OUTPUT1", "OUTPUT0"]),
            pb_utils.InferenceResponse([out("OUTPUT0"), out("OUTPUT1")]),
        ),
        (
            "requested one twice",
            twice,
            pb_utils.InferenceResponse([out("OUTPUT0"), out("OUTPUT1")]),
        ),
        ("not produced", request(["OUTPUT9"]), pb_utils.InferenceResponse([out("OUTPUT0")])),
        (
            "one produced, one not",
            request(["OUTPUT0", "OUTPUT9"]),
            pb_utils.InferenceResponse([out("OUTPUT0"), out("OUTPUT1")]),
        ),
        ("rescheduled", rescheduled, pb_utils.InferenceResponse([out("OUTPUT0")])),
        ("duplicate", request(), pb_utils.InferenceResponse([out("OUTPUT0"), out("OUTPUT0")])),
        ("on a device", request(), pb_utils.InferenceResponse([out("OUTPUT0"), on_device])),
        ("response subclass", request(), _ResponseSubclass([out("OUTPUT0")])),
        ("tensor subclass", request(), pb_utils.InferenceResponse([out("A", _TensorSubclass)])),
        ("none", request(), None),
    ]


def _as_comparable(result):
    if isinstance(result, RequestError):
        return ("error", result.message, result.code, result.by_model)
    return (
        "response",
        [(name, id(array)) for name, array in result.outputs],
        result.parameters,
    )


def test_plain_results_lane_answers_as_the_general_path(add_sub):
    # The C lane (_core.plain_python_results) takes the plain answers and leaves the
    # rest to _result: every request gets what _result alone would give it.
    cases = _answers_to_check()
    requests = [request for _label, request, _response in cases]
    returned = [response for _label, _request, response in cases]
    lane = _core.plain_python_results(requests, returned, pb_utils.TRITONSERVER_REQUEST_RELEASE_ALL)
    taken = {label for (label, _r, _s), result in zip(cases, lane) if result is not None}
    assert taken == {
        "plain",
        "no outputs",
        "parameters",
        "requested all",
        "requested all, in another order",
        "requested one twice",
    }
    expected = [_as_comparable(add_sub._result(r, s)) for r, s in zip(requests, returned)]
    got = [_as_comparable(result) for result in add_sub._returned_results(requests, returned)]
    for (label, _r, _s), want, have in zip(cases, expected, got):
        assert have == want, label
    kinds = {label: kind for (label, _r, _s), (kind, *_rest) in zip(cases, got)}
    assert kinds["plain"] == "response" and kinds["duplicate"] == "error"
    assert kinds["requested all"] == "response" and kinds["one produced, one not"] == "error"


_ECHO_REQUEST_PROPERTIES = """
    import json
    import numpy as np
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def execute(self, requests):
            responses = []
            for request in requests:
                seen = {
                    "id": request.request_id(),
                    "correlation_id": request.correlation_id(),
                    "timeout": request.timeout(),
                    "flags": request.flags(),
                    "parameters": json.loads(request.parameters()),
                    "inputs": [t.name() for t in request.inputs()],
                }
                out = pb_utils.Tensor("OUTPUT0", np.zeros(4, dtype=np.float32))
                responses.append(pb_utils.InferenceResponse([out], parameters=seen_as(seen)))
            return responses

    def seen_as(seen):
        # Response parameters hold bool/int/str: nest the rest as JSON text.
        return {key: value if isinstance(value, (bool, int, str)) else json.dumps(value)
                for key, value in seen.items()}
"""


@pytest.fixture
def request_properties(tmp_path):
    """parameters -> what the model saw of a request that carried them."""
    model_dir, config = _write_model(tmp_path, _ECHO_REQUEST_PROPERTIES)
    backend = PythonModelBackend(_args(model_dir, config))

    def run(parameters):
        header = RequestHeader("req-7", (("INPUT0", "FP32", (4,)),), [], parameters)
        [result] = backend.execute(Batch([header], [[np.zeros(4, dtype=np.float32)]]))
        return result.parameters

    yield run
    backend.finalize()


def test_request_properties_come_from_the_parameters_triton_consumes(request_properties):
    seen = request_properties(
        {
            "sequence_id": 42,
            "sequence_start": True,
            "sequence_end": False,
            "timeout": 1500,
            "priority": 2,
            "binary_data_output": True,
            "custom": "kept",
            "n": 3,
        },
    )
    assert seen == {
        "id": "req-7",
        "correlation_id": 42,
        "timeout": 1500,
        "flags": pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START,
        # As in Triton, the model sees only the parameters the server did not consume.
        "parameters": json.dumps({"custom": "kept", "n": 3}),
        "inputs": json.dumps(["INPUT0"]),
    }


def test_string_correlation_id_and_defaults(request_properties):
    seen = request_properties({"sequence_id": "session-a", "sequence_end": True})
    assert seen["correlation_id"] == "session-a"
    assert seen["timeout"] == 0
    assert seen["flags"] == pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END
    assert seen["parameters"] == "{}"
    seen = request_properties({})
    assert (seen["correlation_id"], seen["timeout"], seen["flags"]) == (0, 0, 0)


def test_response_parameters_reach_the_result(tmp_path):
    model_dir, config = _write_model(
        tmp_path,
        """
        import numpy as np
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                out = pb_utils.Tensor("OUTPUT0", np.ones(4, dtype=np.float32))
                return [
                    pb_utils.InferenceResponse([out], parameters={"tokens": 7, "done": True}),
                    pb_utils.InferenceResponse([out], parameters='{"label": "cat"}'),
                    pb_utils.InferenceResponse([out]),
                ]
        """,
    )
    backend = PythonModelBackend(_args(model_dir, config))
    results = backend.execute_requests([_fp32_request([1, 2, 3, 4])] * 3)
    assert [r.parameters for r in results] == [{"tokens": 7, "done": True}, {"label": "cat"}, None]


# -- execute failures -------------------------------------------------------------------------


def test_execute_raising_fails_every_request(tmp_path):
    model_dir, config = _write_model(
        tmp_path,
        """
        class TritonPythonModel:
            def execute(self, requests):
                raise ValueError("boom")
        """,
    )
    backend = PythonModelBackend(_args(model_dir, config))
    results = backend.execute_requests([_fp32_request([1, 2, 3, 4]), _fp32_request([5, 6, 7, 8])])
    assert len(results) == 2
    for result in results:
        assert isinstance(result, RequestError)
        assert result.message.startswith(
            "Failed to process the request(s) for model 'broken_0_0', message: ValueError: boom"
        )
        assert result.code == pb_utils.TritonError.INTERNAL


def test_execute_returning_the_wrong_count(tmp_path):
    model_dir, config = _write_model(
        tmp_path,
        """
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                return [pb_utils.InferenceResponse([])]
        """,
    )
    backend = PythonModelBackend(_args(model_dir, config))
    results = backend.execute_requests([_fp32_request([1, 2, 3, 4])] * 3)
    assert len(results) == 3
    assert all(isinstance(r, RequestError) for r in results)
    assert "Number of InferenceResponse objects do not match" in results[0].message
    assert "InferenceRequest(s) size is:3, and InferenceResponse(s) size is:1" in results[0].message


@pytest.mark.parametrize(
    "returned, expected",
    [
        ("None", "returned None"),
        ("{}", "Expected a list in the execute return, found type '<class 'dict'>'"),
        ("['x' for _ in requests]", "Expected an 'InferenceResponse' object"),
    ],
)
def test_execute_returning_the_wrong_kind(tmp_path, returned, expected):
    model_dir, config = _write_model(
        tmp_path,
        f"""
        class TritonPythonModel:
            def execute(self, requests):
                return {returned}
        """,
    )
    backend = PythonModelBackend(_args(model_dir, config))
    results = backend.execute_requests([_fp32_request([1, 2, 3, 4]), _fp32_request([1, 2, 3, 4])])
    assert len(results) == 2
    for result in results:
        assert result.message.startswith("Failed to process the request(s) for model 'broken_0_0'")
        assert expected in result.message


def test_response_error_reaches_only_its_request(tmp_path):
    model_dir, config = _write_model(
        tmp_path,
        """
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                responses = []
                for request in requests:
                    data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
                    if data.sum() < 0:
                        error = pb_utils.TritonError(
                            "negative input", pb_utils.TritonError.INVALID_ARG
                        )
                        responses.append(pb_utils.InferenceResponse(error=error))
                    else:
                        out = pb_utils.Tensor("OUTPUT0", data * 2)
                        responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
                return responses
        """,
    )
    backend = PythonModelBackend(_args(model_dir, config))
    good, bad = backend.execute_requests(
        [_fp32_request([1, 2, 3, 4]), _fp32_request([-1, -2, -3, -4])]
    )
    np.testing.assert_allclose(good.outputs[0][1], [2, 4, 6, 8])
    assert bad.message == "negative input"
    assert bad.code == pb_utils.TritonError.INVALID_ARG


def test_async_execute_and_finalize(tmp_path):
    marker = tmp_path / "finalized"
    model_dir, config = _write_model(
        tmp_path,
        f"""
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            async def execute(self, requests):
                return [
                    pb_utils.InferenceResponse(
                        [pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(
                            r, "INPUT0").as_numpy() + 1)]
                    )
                    for r in requests
                ]

            def finalize(self):
                open({str(marker)!r}, "w").close()
        """,
    )
    backend = PythonModelBackend(_args(model_dir, config))
    [result] = backend.execute_requests([_fp32_request([0, 0, 0, 0])])
    np.testing.assert_allclose(result.outputs[0][1], [1, 1, 1, 1])
    backend.finalize()
    assert marker.exists()
    backend.finalize()  # a second call is a no-op


def test_default_model_filename_and_relative_imports(tmp_path):
    model_dir, config = _write_model(
        tmp_path,
        """
        import triton_python_backend_utils as pb_utils
        from .helpers import scale

        class TritonPythonModel:
            def execute(self, requests):
                return [
                    pb_utils.InferenceResponse([pb_utils.Tensor(
                        "OUTPUT0",
                        scale(pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()),
                    )])
                    for r in requests
                ]
        """,
        name="custom_file",
        filename="my_model.py",
        config_extra={"default_model_filename": "my_model.py"},
    )
    (model_dir / "1" / "helpers.py").write_text("def scale(x):\n    return x * 3\n")
    backend = PythonModelBackend(_args(model_dir, config))
    [result] = backend.execute_requests([_fp32_request([1, 1, 1, 1])])
    np.testing.assert_allclose(result.outputs[0][1], [3, 3, 3, 3])


# -- load failures ----------------------------------------------------------------------------


def test_missing_model_file(tmp_path):
    model_dir = tmp_path / "ghost"
    (model_dir / "1").mkdir(parents=True)
    with pytest.raises(ModelLoadError) as info:
        PythonModelBackend(_args(model_dir, {"name": "ghost", "backend": "python"}))
    message = str(info.value)
    assert "'ghost'" in message
    assert "Python model file not found in" in message
    assert os.path.join(str(model_dir), "1", "model.py") in message


def test_syntax_error(tmp_path):
    model_dir, config = _write_model(
        tmp_path,
        """
        class TritonPythonModel:
            def execute(self, requests)
                return []
        """,
    )
    with pytest.raises(ModelLoadError) as info:
        PythonModelBackend(_args(model_dir, config))
    message = str(info.value)
    assert "'broken'" in message
    assert "SyntaxError" in message
    assert "model.py, line 3" in message


def test_missing_class(tmp_path):
    model_dir, config = _write_model(tmp_path, "class SomethingElse:\n    pass\n")
    with pytest.raises(ModelLoadError, match="'broken'.*does not define class TritonPythonModel"):
        PythonModelBackend(_args(model_dir, config))


def test_import_error_in_model(tmp_path):
    model_dir, config = _write_model(tmp_path, "import no_such_module_for_naiad_tests\n")
    with pytest.raises(ModelLoadError, match="ModuleNotFoundError.*no_such_module_for_naiad"):
        PythonModelBackend(_args(model_dir, config))


def test_initialize_raising(tmp_path):
    model_dir, config = _write_model(
        tmp_path,
        """
        class TritonPythonModel:
            def initialize(self, args):
                raise RuntimeError("no weights at " + args["model_repository"])

            def execute(self, requests):
                return []
        """,
    )
    with pytest.raises(ModelLoadError) as info:
        PythonModelBackend(_args(model_dir, config))
    message = str(info.value)
    assert "'broken'" in message
    assert "initialize() raised RuntimeError: no weights at " + str(model_dir) in message
    assert "model.py:4 in initialize" in message


def test_missing_execute(tmp_path):
    model_dir, config = _write_model(tmp_path, "class TritonPythonModel:\n    pass\n")
    with pytest.raises(ModelLoadError, match="does not implement `execute` method"):
        PythonModelBackend(_args(model_dir, config))


# -- auto-complete ----------------------------------------------------------------------------


def test_auto_complete_config(tmp_path):
    model_dir, _ = _write_model(
        tmp_path,
        """
        class TritonPythonModel:
            @staticmethod
            def auto_complete_config(auto_complete_model_config):
                auto_complete_model_config.set_max_batch_size(4)
                auto_complete_model_config.add_input(
                    {"name": "IN", "data_type": "TYPE_INT32", "dims": [2]})
                auto_complete_model_config.add_output(
                    {"name": "OUT", "data_type": "TYPE_INT32", "dims": [2]})
                auto_complete_model_config.set_dynamic_batching()
                return auto_complete_model_config

            def execute(self, requests):
                return []
        """,
        name="auto",
    )
    completed = auto_complete_config(str(model_dir), "1", json.dumps({"name": "auto"}))
    assert completed["max_batch_size"] == 4
    assert completed["input"] == [{"name": "IN", "data_type": "TYPE_INT32", "dims": [2]}]
    assert completed["output"] == [{"name": "OUT", "data_type": "TYPE_INT32", "dims": [2]}]
    assert completed["dynamic_batching"] == {}


# -- response senders of a model that is not decoupled ----------------------------------------

SENDER_PLAIN = Path(__file__).resolve().parent / "models" / "sender_plain"
SENDER_PLAIN_CONFIG = {
    "name": "sender_plain",
    "backend": "python",
    "max_batch_size": 8,
    "input": [_tensor_config("N", "TYPE_INT32", [1])],
    "output": [_tensor_config("OUT", "TYPE_INT32", [1])],
}


def _sender_request(n, mode):
    return pb_utils.InferenceRequest(
        model_name="sender_plain",
        requested_output_names=[],
        inputs=[pb_utils.Tensor("N", np.array([[n]], dtype=np.int32))],
        parameters={"mode": mode},
    )


def test_a_batch_answered_through_response_senders_and_returns():
    backend = PythonModelBackend(_args(SENDER_PLAIN, SENDER_PLAIN_CONFIG))
    try:
        modes = ["one", "thread", "return", "mixed", "none"]
        results = backend.execute_requests([_sender_request(k, m) for k, m in enumerate(modes)])
        values = [r.outputs[0][1].tolist() if isinstance(r, Response) else r for r in results]
        assert values[:4] == [[[1]], [[13]], [[26]], [[34]]]
        assert isinstance(values[4], RequestError)
        assert "released the request without sending a response" in values[4].message
        # Outside execute() there is no request to make a sender for.
        with pytest.raises(pb_utils.TritonModelException, match="while it runs"):
            _sender_request(1, "one").get_response_sender()
    finally:
        backend.finalize()
