"""Triton's Python model API: naiad.triton_python_backend_utils."""

import inspect
import json
import struct

import numpy as np
import pytest
from naiad import triton_python_backend_utils as pb_utils

# -- Tensor -----------------------------------------------------------------------------------


def test_tensor_name_and_dtype():
    tensor = pb_utils.Tensor("OUTPUT0", np.zeros((2, 3), dtype=np.float32))
    assert tensor.name() == "OUTPUT0"
    assert tensor.triton_dtype() == pb_utils.TRITONSERVER_TYPE_FP32 == 11
    assert tensor.shape() == [2, 3]
    assert tensor.is_cpu()


def test_tensor_keeps_the_array_without_copy():
    backing = bytearray(64)
    view = np.frombuffer(backing, dtype=np.float32).reshape(4, 4)  # like a view over shm
    tensor = pb_utils.Tensor("INPUT0", view)
    assert tensor.as_numpy() is view
    assert np.shares_memory(tensor.as_numpy(), view)
    view[0, 0] = 7.0
    assert tensor.as_numpy()[0, 0] == 7.0


def test_tensor_makes_non_contiguous_arrays_contiguous():
    base = np.arange(16, dtype=np.int32).reshape(4, 4)
    tensor = pb_utils.Tensor("T", base[:, ::2])
    assert tensor.as_numpy().flags.c_contiguous
    np.testing.assert_array_equal(tensor.as_numpy(), base[:, ::2])


def test_tensor_rejects_empty_name_and_unicode_arrays():
    with pytest.raises(pb_utils.TritonModelException, match="empty string"):
        pb_utils.Tensor("", np.zeros(1))
    with pytest.raises(pb_utils.TritonModelException, match="np.object_"):
        pb_utils.Tensor("T", np.array(["a", "b"]))


class _ArraySubclass(np.ndarray):
    pass


@pytest.mark.parametrize(
    "given, triton_dtype, kept",
    [
        # The constructor's common case (in C, naiad._core.TensorFields) ...
        (np.zeros((2, 3), dtype=np.float32), pb_utils.TRITONSERVER_TYPE_FP32, True),
        (np.zeros(3, dtype=np.bool_), pb_utils.TRITONSERVER_TYPE_BOOL, True),
        (np.zeros((), dtype=np.int64), pb_utils.TRITONSERVER_TYPE_INT64, True),
        # ... and what it leaves to the checked path in Python.
        (np.zeros(3, dtype=np.float16).view(_ArraySubclass), pb_utils.TRITONSERVER_TYPE_FP16, True),
        (np.array([b"a"], dtype=np.object_), pb_utils.TRITONSERVER_TYPE_BYTES, True),
        ([1.5, 2.5], pb_utils.TRITONSERVER_TYPE_FP64, False),
        (np.zeros((4, 4), dtype=np.uint8)[:, ::2], pb_utils.TRITONSERVER_TYPE_UINT8, False),
    ],
)
def test_tensor_constructor_takes_every_kind_of_array(given, triton_dtype, kept):
    tensor = pb_utils.Tensor("T", given)
    assert tensor.name() == "T"
    assert tensor.triton_dtype() == triton_dtype
    assert tensor.is_cpu() and tensor._device_id == 0
    assert (tensor.as_numpy() is given) == kept
    assert tensor.as_numpy().flags.c_contiguous
    np.testing.assert_array_equal(tensor.as_numpy(), np.asarray(given))


def test_tensor_rejects_a_name_that_is_not_a_str():
    with pytest.raises(TypeError, match="Tensor name must be a str, got int"):
        pb_utils.Tensor(7, np.zeros(1, dtype=np.float32))


def test_tensor_is_a_plain_python_class_to_its_users():
    import copy
    import inspect
    import pickle

    assert str(inspect.signature(pb_utils.Tensor)) == "(name, numpy_array)"
    tensor = pb_utils.Tensor(numpy_array=np.arange(3, dtype=np.int32), name="T")
    for twin in (pickle.loads(pickle.dumps(tensor)), copy.copy(tensor), copy.deepcopy(tensor)):
        assert type(twin) is pb_utils.Tensor
        assert twin.name() == "T" and twin.triton_dtype() == pb_utils.TRITONSERVER_TYPE_INT32
        np.testing.assert_array_equal(twin.as_numpy(), [0, 1, 2])

    class Named(pb_utils.Tensor):
        def __init__(self, array):
            super().__init__("NAMED", array)

    assert Named(np.ones(2)).name() == "NAMED"
    with pytest.raises(AttributeError):
        tensor.anything = 1


def test_tensor_on_a_device_is_not_numpy():
    tensor = pb_utils.Tensor._from_device("G", object(), 0, pb_utils.TRITONSERVER_TYPE_FP32)
    assert not tensor.is_cpu()
    with pytest.raises(pb_utils.TritonModelException, match="stored in GPU"):
        tensor.as_numpy()


def test_bytes_tensor_is_an_object_array_of_bytes():
    array = np.array([b"hello", b"", b"\x00world"], dtype=np.object_)
    tensor = pb_utils.Tensor("TEXT", array)
    assert tensor.triton_dtype() == pb_utils.TRITONSERVER_TYPE_BYTES
    assert tensor.as_numpy() is array
    assert tensor.as_numpy().dtype == np.object_
    with pytest.raises(pb_utils.TritonModelException, match="string tensors"):
        tensor.to_dlpack()


def test_tensor_dlpack_roundtrip_shares_memory():
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    tensor = pb_utils.Tensor("T", array)
    assert tensor.__dlpack_device__() == (1, 0)
    back = np.from_dlpack(tensor)
    assert np.shares_memory(back, array)

    from_capsule = pb_utils.Tensor.from_dlpack("C", tensor.to_dlpack())
    assert from_capsule.name() == "C"
    assert np.shares_memory(from_capsule.as_numpy(), array)
    np.testing.assert_array_equal(from_capsule.as_numpy(), array)

    from_object = pb_utils.Tensor.from_dlpack("O", array)
    assert np.shares_memory(from_object.as_numpy(), array)
    assert from_object.triton_dtype() == pb_utils.TRITONSERVER_TYPE_FP32

    with pytest.raises(pb_utils.TritonModelException, match="not supported"):
        pb_utils.Tensor.from_dlpack("X", [1, 2, 3])


# -- datatypes and BYTES ----------------------------------------------------------------------


def test_dtype_helpers():
    assert pb_utils.triton_string_to_numpy("TYPE_FP32") is np.float32
    assert pb_utils.triton_string_to_numpy("TYPE_STRING") is np.object_
    assert pb_utils.triton_string_to_numpy("TYPE_BOOL") is bool
    assert pb_utils.numpy_to_triton_type(np.float32) == 11
    assert pb_utils.numpy_to_triton_type(np.dtype("int64")) == 9
    assert pb_utils.numpy_to_triton_type(np.bool_) == 1
    assert pb_utils.numpy_to_triton_type(np.object_) == 13
    assert pb_utils.numpy_to_triton_type(np.bytes_) == 13
    assert pb_utils.numpy_to_triton_type(np.complex64) is None
    for value in range(1, 14):
        assert pb_utils.numpy_to_triton_type(pb_utils.triton_to_numpy_type(value)) == value
    assert pb_utils.triton_to_numpy_type(10) is np.float16
    assert pb_utils.triton_to_numpy_type(99) is None
    with pytest.raises(KeyError):
        pb_utils.triton_string_to_numpy("TYPE_NOPE")


def test_serialize_and_deserialize_bytes():
    array = np.array([[b"ab", "c\u00e9"], [b"", 42]], dtype=np.object_)
    encoded = pb_utils.serialize_byte_tensor(array)
    expected = b"".join(
        struct.pack("<I", len(item)) + item for item in [b"ab", "c\u00e9".encode(), b"", b"42"]
    )
    assert encoded == expected
    decoded = pb_utils.deserialize_bytes_tensor(encoded)
    assert decoded.dtype == np.object_
    assert list(decoded) == [b"ab", "c\u00e9".encode(), b"", b"42"]
    assert pb_utils.serialize_byte_tensor(np.zeros(3, dtype=np.float32)) is None
    assert pb_utils.serialize_byte_tensor(np.array([], dtype=np.object_)) == b""
    assert len(pb_utils.deserialize_bytes_tensor(b"")) == 0


# -- errors -----------------------------------------------------------------------------------


def test_triton_error_codes_and_accessors():
    codes = [
        pb_utils.TritonError.UNKNOWN,
        pb_utils.TritonError.INTERNAL,
        pb_utils.TritonError.NOT_FOUND,
        pb_utils.TritonError.INVALID_ARG,
        pb_utils.TritonError.UNAVAILABLE,
        pb_utils.TritonError.UNSUPPORTED,
        pb_utils.TritonError.ALREADY_EXISTS,
        pb_utils.TritonError.CANCELLED,
    ]
    assert codes == list(range(8))
    error = pb_utils.TritonError("bad input")
    assert error.message() == "bad input"
    assert error.code() == pb_utils.TritonError.INTERNAL
    error = pb_utils.TritonError("nope", pb_utils.TritonError.INVALID_ARG)
    assert error.code() == pb_utils.TritonError.INVALID_ARG
    assert str(error) == "nope"


def test_triton_model_exception():
    with pytest.raises(pb_utils.TritonModelException) as info:
        raise pb_utils.TritonModelException("it broke")
    assert str(info.value) == "it broke"
    assert info.value.message() == "it broke"
    assert isinstance(info.value, Exception)


# -- requests and responses -------------------------------------------------------------------


def _request(**kwargs):
    inputs = [pb_utils.Tensor("INPUT0", np.ones(4, dtype=np.float32))]
    return pb_utils.InferenceRequest(
        model_name="m", requested_output_names=["OUTPUT0"], inputs=inputs, **kwargs
    )


def test_inference_request_accessors():
    request = _request(request_id="r1", correlation_id=7, flags=1, timeout=5)
    assert request.request_id() == "r1"
    assert request.correlation_id() == 7
    assert request.flags() == pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START
    assert request.timeout() == 5
    assert request.model_name() == "m"
    assert request.requested_output_names() == {"OUTPUT0"}
    assert [t.name() for t in request.inputs()] == ["INPUT0"]
    assert pb_utils.get_input_tensor_by_name(request, "INPUT0") is request.inputs()[0]
    assert pb_utils.get_input_tensor_by_name(request, "MISSING") is None
    assert request.parameters() == "{}"
    assert request.is_cancelled() is False
    assert request.trace().get_context() is None


def test_get_input_tensor_by_name_reads_any_request_through_its_inputs():
    # A model may pass its own request objects and tensors (a test double, a subclass):
    # they are read through inputs() and name(), as Triton's pb_utils reads them.
    class Named:
        def __init__(self, name):
            self._label = name

        def name(self):
            return self._label

    class Holder:
        def __init__(self, inputs):
            self._held = inputs

        def inputs(self):
            return self._held

    class Narrowed(pb_utils.InferenceRequest):
        def inputs(self):
            return super().inputs()[1:]

    first, second = Named("A"), Named("B")
    assert pb_utils.get_input_tensor_by_name(Holder((first, second)), "B") is second
    assert pb_utils.get_input_tensor_by_name(Holder([first]), "B") is None
    tensors = [pb_utils.Tensor(n, np.zeros(1, np.float32)) for n in ("INPUT0", "INPUT0")]
    narrowed = Narrowed(model_name="m", requested_output_names=[], inputs=tensors)
    assert pb_utils.get_input_tensor_by_name(narrowed, "INPUT0") is tensors[1]
    plain = pb_utils.InferenceRequest(model_name="m", requested_output_names=[], inputs=tensors)
    assert pb_utils.get_input_tensor_by_name(plain, "INPUT0") is tensors[0]  # the first
    assert pb_utils.get_input_tensor_by_name(plain, name="INPUT0") is tensors[0]
    assert str(inspect.signature(pb_utils.get_input_tensor_by_name)) == (
        "(inference_request, name)"
    )


def test_inference_request_parameters_as_json_string():
    assert json.loads(_request(parameters={"a": 1, "b": "x", "c": True}).parameters()) == {
        "a": 1,
        "b": "x",
        "c": True,
    }
    assert json.loads(_request(parameters='{"k": "v"}').parameters()) == {"k": "v"}
    with pytest.raises(pb_utils.TritonModelException, match="bool/int/str"):
        _request(parameters={"a": 1.5})


def test_inference_request_validation():
    with pytest.raises(pb_utils.TritonModelException, match="should not be empty"):
        pb_utils.InferenceRequest(model_name="m", requested_output_names=[""], inputs=[])
    with pytest.raises(pb_utils.TritonModelException, match="Correlation ID"):
        _request(correlation_id=1.5)
    assert _request(correlation_id="seq-1").correlation_id() == "seq-1"


def test_bls_and_decoupled_are_reported_unsupported():
    request = _request()
    # Outside a worker there is no server to send a BLS request to.
    with pytest.raises(pb_utils.TritonModelException, match="running in a Naiad worker"):
        request.exec()
    with pytest.raises(pb_utils.TritonModelException, match="running in a Naiad worker"):
        request.async_exec()
    with pytest.raises(
        pb_utils.TritonModelException,
        match=r"available on the requests a model.s execute\(\) receives",
    ):
        request.get_response_sender()


def test_inference_response_accessors():
    out = pb_utils.Tensor("OUTPUT0", np.arange(3, dtype=np.int32))
    response = pb_utils.InferenceResponse(output_tensors=[out])
    assert response.output_tensors() == [out]
    assert not response.has_error()
    assert response.error() is None
    assert pb_utils.get_output_tensor_by_name(response, "OUTPUT0") is out
    assert pb_utils.get_output_tensor_by_name(response, "OUTPUT1") is None

    failed = pb_utils.InferenceResponse(
        output_tensors=[], error=pb_utils.TritonError("bad", pb_utils.TritonError.INVALID_ARG)
    )
    assert failed.has_error()
    assert failed.error().message() == "bad"
    assert failed.error().code() == pb_utils.TritonError.INVALID_ARG
    assert pb_utils.InferenceResponse().output_tensors() == []
    assert json.loads(pb_utils.InferenceResponse(parameters={"p": 1}).parameters()) == {"p": 1}
    with pytest.raises(pb_utils.TritonModelException, match="must be a list"):
        pb_utils.InferenceResponse(output_tensors=out)


def test_responses_and_tensors_take_no_attributes_of_a_models_own():
    # As Triton 2.51's (pybind11 classes): a model's `response.note = 1` raises there
    # (checked against it, with a Python model doing just that).
    response = pb_utils.InferenceResponse(output_tensors=[])
    tensor = pb_utils.Tensor("OUTPUT0", np.zeros(1, dtype=np.float32))
    for made in (response, tensor):
        with pytest.raises(AttributeError, match="has no attribute 'note'"):
            made.note = 1


class _TensorKind(pb_utils.Tensor):
    __slots__ = ()


def test_inference_response_constructor_every_way():
    import inspect

    out = pb_utils.Tensor("OUTPUT0", np.arange(3, dtype=np.int32))
    sub = _TensorKind("OUTPUT1", np.zeros(1, dtype=np.float32))
    assert str(inspect.signature(pb_utils.InferenceResponse)) == (
        "(output_tensors=None, error=None, parameters=None)"
    )
    outputs = [out]
    # The common case (in C, naiad._core.ResponseFields): the list is copied, not kept.
    plain = pb_utils.InferenceResponse(outputs)
    assert plain.output_tensors() == [out] and plain.output_tensors() is not outputs
    assert plain.error() is None and plain.parameters() == "{}"
    # What it leaves to the checked path in Python.
    assert pb_utils.InferenceResponse((out, sub)).output_tensors() == [out, sub]
    assert pb_utils.InferenceResponse([sub]).output_tensors() == [sub]
    with_error = pb_utils.InferenceResponse([out], "as text")
    assert with_error.error().message() == "as text" and with_error.output_tensors() == [out]
    assert json.loads(pb_utils.InferenceResponse([out], None, {"k": "v"}).parameters()) == {
        "k": "v"
    }
    with pytest.raises(pb_utils.TritonModelException, match="must hold pb_utils.Tensor"):
        pb_utils.InferenceResponse([out, np.zeros(1)])
    with pytest.raises(pb_utils.TritonModelException, match="must be a pb_utils.TritonError"):
        pb_utils.InferenceResponse([], error=7)
    # Subclasses, as of a Python class (attributes of a model's own: only there, see
    # test_responses_and_tensors_take_no_attributes_of_a_models_own).

    class Answer(pb_utils.InferenceResponse):
        def __init__(self, tensor):
            super().__init__(output_tensors=[tensor])

    assert Answer(out).output_tensors() == [out]


def test_config_lookups():
    config = {
        "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": ["16"]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_INT32", "dims": ["16"]}],
    }
    assert pb_utils.get_input_config_by_name(config, "INPUT0")["data_type"] == "TYPE_FP32"
    assert pb_utils.get_input_config_by_name(config, "OUTPUT0") is None
    assert pb_utils.get_output_config_by_name(config, "OUTPUT0")["data_type"] == "TYPE_INT32"
    assert pb_utils.get_output_config_by_name({}, "OUTPUT0") is None
    assert not pb_utils.using_decoupled_model_transaction_policy(config)
    assert pb_utils.using_decoupled_model_transaction_policy(
        {"model_transaction_policy": {"decoupled": True}}
    )


def test_constants():
    assert pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL == 1
    assert pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START == 1
    assert pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END == 2


# -- auto-complete config ---------------------------------------------------------------------


def test_model_config_auto_complete():
    config = pb_utils.ModelConfig(json.dumps({"name": "m", "max_batch_size": 0}))
    config.set_max_batch_size(8)
    config.add_input({"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]})
    config.add_output({"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]})
    config.set_dynamic_batching()
    config.set_model_transaction_policy({"decoupled": False})
    result = config.as_dict()
    assert result["max_batch_size"] == 8
    assert result["input"] == [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]}]
    assert result["output"] == [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]}]
    assert result["dynamic_batching"] == {}
    assert result["model_transaction_policy"] == {"decoupled": False}


def test_model_config_auto_complete_conflicts():
    config = pb_utils.ModelConfig(
        {
            "name": "m",
            "max_batch_size": 16,
            "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
            "sequence_batching": {},
        }
    )
    with pytest.raises(ValueError, match="configuration specified max_batch_size 16"):
        config.set_max_batch_size(8)
    config.set_max_batch_size(32)
    with pytest.raises(ValueError, match="sequence_batching"):
        config.set_dynamic_batching()
    with pytest.raises(ValueError, match="configuration expects datatype TYPE_FP32"):
        config.add_input({"name": "INPUT0", "data_type": "TYPE_INT32", "dims": [4]})
    with pytest.raises(ValueError, match="the model expects dims"):
        config.add_input({"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [8]})
    with pytest.raises(ValueError, match="missing 'dims' property"):
        config.add_output({"name": "OUTPUT0", "data_type": "TYPE_FP32"})
    with pytest.raises(ValueError, match="property other than"):
        config.add_output({"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [1], "x": 1})
    # Same input again, now with dims known: merged, not duplicated.
    config.add_input({"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4], "optional": True})
    assert len(config.as_dict()["input"]) == 1
    assert config.as_dict()["input"][0]["optional"] is True


# -- logger -----------------------------------------------------------------------------------


def test_logger_writes_to_stderr(capsys):
    logger = pb_utils.Logger
    logger.log_info("info line")
    logger.log_warn("warn line")
    logger.log_error("error line")
    logger.log("plain", pb_utils.Logger.LogLevel.INFO)
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert lines[0].startswith("I") and lines[0].endswith('] "info line"')
    assert "test_pb_utils.py:" in lines[0]
    assert lines[1].startswith("W") and lines[1].endswith('] "warn line"')
    assert lines[2].startswith("E") and lines[2].endswith('] "error line"')
    assert lines[3].endswith('] "plain"')


def test_logger_verbose_follows_the_verbose_level(capsys):
    pb_utils.set_log_verbose(0)
    pb_utils.Logger.log_verbose("hidden")
    assert capsys.readouterr().err == ""
    pb_utils.set_log_verbose(1)
    try:
        pb_utils.Logger.log_verbose("shown")
        assert capsys.readouterr().err.endswith('] "shown"\n')
    finally:
        pb_utils.set_log_verbose(0)
