"""The onnxruntime backend, black-box over HTTP: inference with dynamic batching, every
datatype onnxruntime serves, configs auto-completed from the model file (checked against
the rules of Triton's onnxruntime backend), warmup, and every bad model (UNAVAILABLE with
a reason naming the mismatch and the file) next to good ones that keep serving.

One server (module scope) serves tests/onnx_support.py's repository. The in-process tests
at the end check the auto-complete rules and the backend's load checks without a server.
"""

from __future__ import annotations

import json
import re

import numpy as np
import onnx_support
import pytest
import requests
import tritonclient.http as httpclient
from naiad.backends import onnxruntime as ort_backend
from naiad.repository import autocomplete
from naiad.repository.config import ConfigError
from server_harness import NaiadServer


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = onnx_support.build_repository(tmp_path_factory.mktemp("onnx") / "models")
    naiad = NaiadServer(
        root, log_dir=tmp_path_factory.mktemp("onnx-logs"), extra_args=["--exit-on-error=false"]
    )
    naiad.start(wait="live", timeout=180)
    yield naiad
    naiad.stop()


@pytest.fixture(scope="module")
def client(server):
    return httpclient.InferenceServerClient(f"{server.host}:{server.http_port}", concurrency=16)


@pytest.fixture(scope="module")
def index(server):
    entries = requests.post(server.url + "/v2/repository/index", json={}).json()
    return {entry["name"]: entry for entry in entries}


def _infer(client, model, arrays: dict, outputs=None, asynchronous=False):
    inputs = []
    for name, array in arrays.items():
        datatype = "BYTES" if array.dtype == object else httpclient.np_to_triton_dtype(array.dtype)
        tensor = httpclient.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array, binary_data=True)
        inputs.append(tensor)
    requested = [httpclient.InferRequestedOutput(o) for o in outputs] if outputs else None
    if asynchronous:
        return client.async_infer(model, inputs, outputs=requested)
    return client.infer(model, inputs, outputs=requested)


# ---- good models ---------------------------------------------------------------------------


def test_good_models_are_ready(index):
    for name in [*onnx_support.GOOD, "mlp_onnx", "conv_onnx"]:
        assert index[name].get("state") == "READY", (name, index[name])


def test_mlp_example_matches_onnxruntime_in_process(client):
    import onnxruntime
    from server_harness import EXAMPLE_MODELS

    x = np.random.default_rng(1).standard_normal((5, 16)).astype(np.float32)
    result = _infer(client, "mlp_onnx", {"INPUT": x})
    session = onnxruntime.InferenceSession(str(EXAMPLE_MODELS / "mlp_onnx/1/model.onnx"))
    logits, probabilities = session.run(None, {"INPUT": x})
    np.testing.assert_allclose(result.as_numpy("OUTPUT"), logits, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(result.as_numpy("PROBABILITIES"), probabilities, rtol=1e-5)


def test_dynamic_batching_forms_batches_and_answers_each_request(server, client):
    rng = np.random.default_rng(2)
    cases = [
        (
            rng.standard_normal((rows, 16)).astype(np.float32),
            rng.standard_normal((rows, 16)).astype(np.float32),
        )
        for rows in (1, 2, 1, 3, 1, 1, 2, 1) * 2
    ]
    stats_url = server.url + "/v2/models/onnx_add_sub_full/stats"
    one = {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": [0.0] * 16}
    body = {"inputs": [one, {**one, "name": "INPUT1"}]}
    with requests.Session() as idle:
        # An open connection that has sent an inference request: Naiad's batcher then
        # waits out max_queue_delay_microseconds instead of leaving early.
        assert idle.post(server.url + "/v2/models/onnx_add_sub/infer", json=body).ok
        before = requests.get(stats_url).json()
        handles = [
            _infer(client, "onnx_add_sub_full", {"INPUT0": a, "INPUT1": b}, asynchronous=True)
            for a, b in cases
        ]
        results = [handle.get_result() for handle in handles]
    executions_before = before["model_stats"][0]["execution_count"]
    for (a, b), result in zip(cases, results):
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    stats = requests.get(stats_url).json()["model_stats"][0]
    sizes = {b["batch_size"] for b in stats["batch_stats"]}
    assert stats["inference_count"] >= sum(len(a) for a, _ in cases)
    # some requests shared an execution
    assert stats["execution_count"] - executions_before < len(cases), stats
    assert max(sizes) > 1, sizes


def test_requested_outputs_only(client):
    a = np.ones((1, 16), np.float32)
    result = _infer(client, "onnx_add_sub", {"INPUT0": a, "INPUT1": a}, outputs=["OUTPUT1"])
    assert result.as_numpy("OUTPUT0") is None
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), np.zeros((1, 16), np.float32))


def test_every_datatype_round_trips(client):
    rng = np.random.default_rng(3)
    arrays = {}
    for wire in onnx_support.ONNX_TYPES:
        if wire == "BYTES":
            arrays[f"IN_{wire}"] = np.array(
                [[b"a", b"", "é".encode()], [b"xyz", b"0", b"  "]], dtype=object
            )
        elif wire == "BOOL":
            arrays[f"IN_{wire}"] = rng.integers(0, 2, (2, 3)).astype(bool)
        else:
            dtype = httpclient.triton_to_np_dtype(wire)
            if np.issubdtype(dtype, np.integer):
                info = np.iinfo(dtype)
                arrays[f"IN_{wire}"] = rng.integers(
                    info.min, info.max, (2, 3), dtype=dtype, endpoint=True
                )
            else:
                arrays[f"IN_{wire}"] = rng.standard_normal((2, 3)).astype(dtype)
    result = _infer(client, "onnx_identity_all", arrays)
    for wire in onnx_support.ONNX_TYPES:
        got = result.as_numpy(f"OUT_{wire}")
        sent = arrays[f"IN_{wire}"]
        assert got.shape == sent.shape, wire
        if wire == "BYTES":
            assert got.tolist() == sent.tolist()
        else:
            assert got.dtype == sent.dtype, wire
            np.testing.assert_array_equal(got, sent)
        assert result.get_output(f"OUT_{wire}")["datatype"] == wire


def _output_counts(server) -> tuple[int, int]:
    """(outputs written in place, outputs copied) into workers' response blocks so far."""
    shm = requests.get(server.url + "/v2/naiad/shm", timeout=10).json()
    return shm["outputs_in_place"], shm["outputs_copied"]


def test_fixed_size_outputs_are_written_in_place_into_the_response_block(server, client):
    # onnxruntime writes each output once, into the block the reply is read from: the
    # core counts them from the blocks' headers. Every fixed-size datatype, 2 rows.
    rng = np.random.default_rng(4)
    arrays = {}
    for wire in onnx_support.FIXED_TYPES:
        dtype = bool if wire == "BOOL" else httpclient.triton_to_np_dtype(wire)
        arrays[f"IN_{wire}"] = (rng.standard_normal((2, 3)) * 100).astype(dtype)
    in_place, copied = _output_counts(server)
    result = _infer(client, "onnx_identity_fixed", arrays)
    for wire in onnx_support.FIXED_TYPES:
        np.testing.assert_array_equal(result.as_numpy(f"OUT_{wire}"), arrays[f"IN_{wire}"])
        assert result.get_output(f"OUT_{wire}")["shape"] == [2, 3]
    after = _output_counts(server)
    assert after == (in_place + len(onnx_support.FIXED_TYPES), copied), after
    # Only the outputs asked for are bound and written.
    result = _infer(client, "onnx_identity_fixed", arrays, outputs=["OUT_INT16", "OUT_FP64"])
    np.testing.assert_array_equal(result.as_numpy("OUT_FP64"), arrays["IN_FP64"])
    assert result.as_numpy("OUT_FP32") is None
    assert _output_counts(server) == (after[0] + 2, copied)


def test_bytes_outputs_are_copied_into_the_response_block(server, client):
    in_place, copied = _output_counts(server)
    text = np.array([[b"a", b"bc", b""]], dtype=object)
    result = _infer(client, "onnx_identity_text", {"IN_BYTES": text})
    assert result.as_numpy("OUT_BYTES").tolist() == text.tolist()
    assert _output_counts(server) == (in_place, copied + 1)


def test_conv_example_matches_onnxruntime_in_process(server, client):
    import onnxruntime
    from server_harness import EXAMPLE_MODELS

    images = np.random.default_rng(5).standard_normal((3, 3, 64, 64)).astype(np.float32)
    handles = [
        _infer(client, "conv_onnx", {"INPUT": images[i : i + 1]}, asynchronous=True)
        for i in range(3)
    ]
    results = [handle.get_result() for handle in handles]
    session = onnxruntime.InferenceSession(str(EXAMPLE_MODELS / "conv_onnx/1/model.onnx"))
    (logits,) = session.run(None, {"INPUT": images})
    for i, result in enumerate(results):
        np.testing.assert_allclose(
            result.as_numpy("OUTPUT"), logits[i : i + 1], rtol=1e-4, atol=1e-5
        )


def test_a_shape_the_model_rejects_gets_tritons_error_and_the_instance_keeps_serving(
    server, client
):
    body = {
        "inputs": [
            {"name": "INPUT0", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]},
            {"name": "INPUT1", "shape": [1, 5], "datatype": "FP32", "data": [1, 2, 3, 4, 5]},
        ]
    }
    response = requests.post(server.url + "/v2/models/onnx_variable/infer", json=body)
    assert response.status_code == 500, response.text
    message = response.json()["error"]
    assert re.match(r"onnx runtime error \d+: Non-zero status code returned while running", message)
    a = np.arange(6, dtype=np.float32).reshape(1, 6)
    result = _infer(client, "onnx_variable", {"INPUT0": a, "INPUT1": a})
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)


# ---- auto-complete, as GET /v2/models/{m}/config shows it ----------------------------------


def _config(server, model):
    response = requests.get(f"{server.url}/v2/models/{model}/config")
    assert response.status_code == 200, response.text
    return response.json()


def _io(config, kind):
    return [(io["name"], io["data_type"], io["dims"], "reshape" in io) for io in config[kind]]


def test_autocomplete_with_no_config(server, client):
    config = _config(server, "onnx_auto")
    assert config["backend"] == "onnxruntime"
    assert config["platform"] == "onnxruntime_onnx"
    assert config["default_model_filename"] == "model.onnx"
    assert config["max_batch_size"] == 4  # Triton's default-max-batch-size
    assert "dynamic_batching" in config  # added because max_batch_size > 1
    assert _io(config, "input") == [
        ("INPUT0", "TYPE_FP32", [16], False),
        ("INPUT1", "TYPE_FP32", [16], False),
    ]
    assert _io(config, "output") == [
        ("OUTPUT0", "TYPE_FP32", [16], False),
        ("OUTPUT1", "TYPE_FP32", [16], False),
    ]
    a = np.ones((4, 16), np.float32)
    np.testing.assert_array_equal(
        _infer(client, "onnx_auto", {"INPUT0": a, "INPUT1": a}).as_numpy("OUTPUT0"), a + a
    )
    metadata = requests.get(f"{server.url}/v2/models/onnx_auto").json()
    assert metadata["platform"] == "onnxruntime_onnx"
    assert metadata["inputs"][0] == {"name": "INPUT0", "datatype": "FP32", "shape": [-1, 16]}


def test_autocomplete_without_batch_dimension(server, client):
    config = _config(server, "onnx_auto_nobatch")
    assert config["max_batch_size"] == 0
    assert "dynamic_batching" not in config
    assert _io(config, "input")[0] == ("INPUT0", "TYPE_FP32", [2, 3], False)
    a = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(
        _infer(client, "onnx_auto_nobatch", {"INPUT0": a, "INPUT1": a}).as_numpy("OUTPUT1"), a - a
    )


def test_scalar_model_with_auto_completed_dims(server, client):
    config = _config(server, "onnx_auto_scalar")
    assert (config["max_batch_size"], _io(config, "input")) == (0, [("X", "TYPE_FP32", [1], False)])
    result = _infer(client, "onnx_auto_scalar", {"X": np.array([2.5], np.float32)})
    assert result.as_numpy("Y").tolist() == [-2.5]


def test_autocomplete_every_datatype(server):
    config = _config(server, "onnx_identity_all")
    types = {name: datatype for name, datatype, _, _ in _io(config, "input")}
    assert types["IN_BYTES"] == "TYPE_STRING"
    assert types["IN_FP16"] == "TYPE_FP16"
    assert types["IN_BOOL"] == "TYPE_BOOL"
    assert len(types) == len(onnx_support.ONNX_TYPES)


# ---- warmup ---------------------------------------------------------------------------------


def test_warmup_runs_before_ready(server, client):
    stats = requests.get(server.url + "/v2/models/onnx_warmup/stats").json()["model_stats"][0]
    assert stats["inference_count"] == 0  # warmup is not counted, as in Triton
    a = np.ones((1, 16), np.float32)
    assert _infer(client, "onnx_warmup", {"INPUT0": a, "INPUT1": a}).as_numpy("OUTPUT0").sum() == 32


def test_failing_warmup_makes_the_model_unavailable(index):
    entry = index["bad_warmup"]
    assert entry["state"] == "UNAVAILABLE"
    assert "failed to run warmup sample 'wrong_width': " in entry["reason"], entry
    assert "onnx runtime error" in entry["reason"]


# ---- bad models ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "model, expected",
    [
        (
            "bad_missing_file",
            ["unable to find '", "bad_missing_file/1/model.onnx' for model instance"],
        ),
        ("bad_corrupt", ["onnx runtime error", "bad_corrupt/1/model.onnx"]),
        (
            "bad_input_name",
            [
                "unexpected inference input 'INPUTX', allowed inputs are: INPUT0, INPUT1",
                "model.onnx",
            ],
        ),
        (
            "bad_datatype",
            [
                "unable to load model 'bad_datatype', configuration expects datatype TYPE_INT32 for "
                "input 'INPUT0', model provides TYPE_FP32",
                "bad_datatype/1/model.onnx",
            ],
        ),
        (
            "bad_dims",
            [
                "model 'bad_dims', tensor 'INPUT0': the model expects 2 dimensions (shape [-1,16]) but "
                "the model configuration specifies 2 dimensions",
                "[-1,8]",
            ],
        ),
        (
            "bad_max_batch",
            [
                "model 'bad_max_batch', tensor 'INPUT0': for the model to support batching the shape "
                "should have at least 1 dimension and the first dimension must be -1; but shape "
                "expected by the model is [16]",
                "bad_max_batch/1/model.onnx",
            ],
        ),
        (
            "bad_autofill_batch",
            [
                "autofill failed for model 'bad_autofill_batch': model does not support batching "
                "while non-zero max_batch_size is specified",
                "bad_autofill_batch/1/model.onnx",
            ],
        ),
        (
            "bad_unsupported_type",
            [
                "unsupported datatype seq(tensor(float)) (no Triton datatype) for input 'X' for "
                "model 'bad_unsupported_type'",
                "bad_unsupported_type/1/model.onnx",
            ],
        ),
        (
            "bad_bf16",
            [
                "unsupported datatype TYPE_BF16 for input 'X' for model 'bad_bf16'",
                "bad_bf16/1/model.onnx",
            ],
        ),
        (
            "bad_bf16_config",
            [
                "unsupported datatype TYPE_BF16 for input 'X' for model 'bad_bf16_config'",
                "model.onnx",
            ],
        ),
        ("bad_custom_op", ["NoSuchOp", "bad_custom_op/1/model.onnx"]),
    ],
)
def test_bad_model_is_unavailable_with_the_reason(server, index, model, expected):
    entry = index[model]
    assert entry.get("state") == "UNAVAILABLE", entry
    for text in expected:
        assert text in entry["reason"], (text, entry["reason"])
    assert requests.get(f"{server.url}/v2/models/{model}/ready").status_code == 400


def test_good_models_still_serve_next_to_bad_ones(client):
    a = np.ones((1, 16), np.float32)
    assert (
        _infer(client, "onnx_add_sub", {"INPUT0": a, "INPUT1": a}).as_numpy("OUTPUT0").sum() == 32
    )


# ---- in-process: the auto-complete rules and the load checks ---------------------------------


def _completed(tmp_path, name, onnx_bytes, config_text):
    folder = onnx_support.write_model(tmp_path, name, onnx_bytes, config_text, {})
    return json.loads(json.dumps(_to_json(autocomplete.load_completed_config(folder, name))))


def _to_json(config):
    from naiad.repository.config import config_to_json

    return config_to_json(config)


def test_rule_partial_config_keeps_max_batch_size(tmp_path):
    config = _completed(
        tmp_path, "m", onnx_support.add_sub(), 'backend: "onnxruntime"\nmax_batch_size: 16'
    )
    assert config["max_batch_size"] == 16
    assert "dynamic_batching" in config
    assert [io["dims"] for io in config["input"]] == [[16], [16]]


def test_rule_max_batch_size_one_adds_no_dynamic_batching(tmp_path):
    config = _completed(
        tmp_path, "m", onnx_support.add_sub(), 'platform: "onnxruntime_onnx"\nmax_batch_size: 1'
    )
    assert config["max_batch_size"] == 1
    assert config["backend"] == "onnxruntime"
    assert "dynamic_batching" not in config


def test_rule_sequence_batching_is_kept_instead_of_dynamic(tmp_path):
    config = _completed(
        tmp_path, "m", onnx_support.add_sub(), "max_batch_size: 8\nsequence_batching { }"
    )
    assert "dynamic_batching" not in config
    assert "sequence_batching" in config


def test_rule_scalar_tensors_get_dims_one(tmp_path):
    config = _completed(tmp_path, "m", onnx_support.scalar_model(), None)
    assert config["max_batch_size"] == 0
    assert [(io["name"], io["dims"], "reshape" in io) for io in config["input"]] == [
        ("X", [1], False)
    ]


def test_rule_only_missing_side_is_completed(tmp_path):
    config = _completed(
        tmp_path,
        "m",
        onnx_support.add_sub(),
        'max_batch_size: 4\ninput [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] },'
        ' { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]',
    )
    assert [io["name"] for io in config["input"]] == ["INPUT0", "INPUT1"]
    assert [io["name"] for io in config["output"]] == ["OUTPUT0", "OUTPUT1"]


def test_rule_nothing_is_read_when_inputs_and_outputs_are_given(tmp_path):
    # The model file is not even opened: a corrupt one still auto-completes (and fails at load).
    text = (
        'backend: "onnxruntime"\n'
        'input [ { name: "A" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "B" data_type: TYPE_FP32 dims: [ 1 ] } ]'
    )
    config = _completed(tmp_path, "m", b"garbage", text)
    assert config["max_batch_size"] == 0
    assert "dynamic_batching" not in config


def test_rule_backend_from_the_model_file(tmp_path):
    config = _completed(tmp_path, "m", onnx_support.add_sub(), None)
    assert (config["backend"], config["platform"]) == ("onnxruntime", "onnxruntime_onnx")


def test_strict_mode_needs_the_config(tmp_path):
    folder = onnx_support.write_model(tmp_path, "m", onnx_support.add_sub(), None, {})
    autocomplete.configure(False)
    try:
        with pytest.raises(ConfigError, match="failed to open text file for read"):
            autocomplete.load_completed_config(folder, "m")
        (folder / "config.pbtxt").write_text('backend: "onnxruntime"\nmax_batch_size: 4')
        config = autocomplete.load_completed_config(folder, "m")  # taken as written
        assert not config.input and not config.output
        assert not config.HasField("dynamic_batching")
    finally:
        autocomplete.configure(True)


def test_session_options_from_parameters():
    import onnxruntime

    config = {
        "parameters": {
            "intra_op_thread_count": {"string_value": "2"},
            "inter_op_thread_count": {"string_value": "3"},
            "execution_mode": {"string_value": "1"},
            "enable_mem_arena": {"string_value": "false"},
            "enable_mem_pattern": {"string_value": "0"},
        },
        "optimization": {"graph": {"level": 2}},
    }
    options = ort_backend.session_options(config)
    assert options.intra_op_num_threads == 2
    assert options.inter_op_num_threads == 3
    assert options.execution_mode == onnxruntime.ExecutionMode.ORT_PARALLEL
    assert options.graph_optimization_level == onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    assert options.enable_cpu_mem_arena is False
    assert options.enable_mem_pattern is False
    with pytest.raises(ort_backend.OnnxModelError, match="execution_mode are 0 or 1 but got 3"):
        ort_backend.session_options({"parameters": {"execution_mode": {"string_value": "3"}}})


def test_execution_providers_follow_the_accelerators():
    config = {
        "optimization": {
            "execution_accelerators": {
                "gpu_execution_accelerator": [
                    {
                        "name": "tensorrt",
                        "parameters": {
                            "precision_mode": "FP16",
                            "max_workspace_size_bytes": "1073741824",
                        },
                    },
                    {"name": "cuda", "parameters": {"cudnn_conv_use_max_workspace": "1"}},
                ]
            }
        }
    }
    providers = ort_backend.execution_providers(config, "GPU", 1)
    assert [name for name, _ in providers] == [
        "TensorrtExecutionProvider",
        "CUDAExecutionProvider",
        "CPUExecutionProvider",
    ]
    trt, cuda = providers[0][1], providers[1][1]
    assert trt == {"device_id": "1", "trt_fp16_enable": "1", "trt_max_workspace_size": "1073741824"}
    assert cuda == {"cudnn_conv_use_max_workspace": "1", "device_id": "1"}
    assert [name for name, _ in ort_backend.execution_providers(config, "CPU", 0)] == [
        "CPUExecutionProvider"
    ]
    with pytest.raises(ort_backend.OnnxModelError, match="unknown Execution Accelerator 'x'"):
        ort_backend.execution_providers(
            {
                "optimization": {
                    "execution_accelerators": {"gpu_execution_accelerator": [{"name": "x"}]}
                }
            },
            "GPU",
            0,
        )


def _gpu_args(folder, config):
    return {
        "model_config": json.dumps(config),
        "model_name": "m",
        "model_version": "1",
        "model_repository": str(folder),
        "model_instance_kind": "GPU",
        "model_instance_device_id": "0",
        "model_instance_name": "m_0",
    }


def test_gpu_instance_without_the_cuda_provider_is_refused(tmp_path):
    import onnxruntime

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("this onnxruntime has the CUDA provider (the refusal is for builds without)")
    folder = onnx_support.write_model(tmp_path, "m", onnx_support.add_sub(), None, {})
    config = _to_json(autocomplete.load_completed_config(folder, "m"))
    with pytest.raises(ort_backend.OnnxModelError) as info:
        ort_backend.OnnxRuntimeBackend(_gpu_args(folder, config))
    assert "CUDAExecutionProvider requested for a KIND_GPU instance is not available" in str(
        info.value
    )
    assert "onnxruntime-gpu" in str(info.value)


def test_gpu_instance_with_tensorrt_or_skips(tmp_path):
    import onnxruntime

    if "TensorrtExecutionProvider" not in onnxruntime.get_available_providers():
        pytest.skip(
            "no TensorRT execution provider here (needs onnxruntime-gpu, TensorRT and a GPU)"
        )
    folder = onnx_support.write_model(tmp_path, "m", onnx_support.add_sub(), None, {})
    config = _to_json(autocomplete.load_completed_config(folder, "m"))
    config["optimization"]["execution_accelerators"] = {
        "gpu_execution_accelerator": [
            {"name": "tensorrt", "parameters": {"precision_mode": "FP16"}}
        ]
    }
    backend = ort_backend.OnnxRuntimeBackend(_gpu_args(folder, config))
    assert backend.session.get_providers()[0] == "TensorrtExecutionProvider"


def test_gpu_instance_runs_on_cuda_or_skips(tmp_path):
    import onnxruntime

    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        pytest.skip("no CUDA execution provider here (needs onnxruntime-gpu and a GPU)")
    folder = onnx_support.write_model(tmp_path, "m", onnx_support.add_sub(), None, {})
    config = _to_json(autocomplete.load_completed_config(folder, "m"))
    backend = ort_backend.OnnxRuntimeBackend(
        {
            "model_config": json.dumps(config),
            "model_name": "m",
            "model_version": "1",
            "model_repository": str(folder),
            "model_instance_kind": "GPU",
            "model_instance_device_id": "0",
            "model_instance_name": "m_0",
        }
    )
    assert backend.session.get_providers()[0] == "CUDAExecutionProvider"


def test_example_model_is_what_the_script_builds():
    import subprocess
    import sys

    from server_harness import REPO_ROOT

    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "tools/build_onnx_models.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def _backend(folder, name="m"):
    config = _to_json(autocomplete.load_completed_config(folder, name))
    return ort_backend.OnnxRuntimeBackend(
        {
            "model_config": json.dumps(config),
            "model_name": name,
            "model_version": "1",
            "model_repository": str(folder),
            "model_instance_kind": "CPU",
            "model_instance_device_id": "0",
            "model_instance_name": f"{name}_0",
        }
    )


@pytest.mark.parametrize("layout", ["default_model_filename", "folder"])
def test_model_file_name_and_folder(tmp_path, layout):
    import numpy as np
    from naiad.backends.base import Batch, RequestHeader, Response

    folder = tmp_path / "m"
    if layout == "folder":
        # `model.onnx` may be a folder holding model.onnx (Triton: large models)
        (folder / "1" / "model.onnx").mkdir(parents=True)
        (folder / "1" / "model.onnx" / "model.onnx").write_bytes(onnx_support.add_sub())
        (folder / "config.pbtxt").write_text('backend: "onnxruntime"')
    else:
        (folder / "1").mkdir(parents=True)
        (folder / "1" / "net.onnx").write_bytes(onnx_support.add_sub())
        (folder / "config.pbtxt").write_text(
            'default_model_filename: "net.onnx"\nbackend: "onnxruntime"'
        )
    backend = _backend(folder)
    a = np.arange(48, dtype=np.float32).reshape(3, 16)
    b = np.ones((3, 16), np.float32)
    headers = [
        RequestHeader("r0", (("INPUT0", "FP32", (1, 16)), ("INPUT1", "FP32", (1, 16))), [], {}),
        RequestHeader(
            "r1", (("INPUT0", "FP32", (2, 16)), ("INPUT1", "FP32", (2, 16))), ["OUTPUT1"], {}
        ),
    ]
    batch = Batch(headers, [[a[:1], b[:1]], [a[1:], b[1:]]], {"INPUT0": a, "INPUT1": b})
    first, second = backend.execute(batch)
    assert isinstance(first, Response) and [n for n, _ in first.outputs] == ["OUTPUT0", "OUTPUT1"]
    np.testing.assert_array_equal(first.outputs[0][1], a[:1] + 1)
    assert [n for n, _ in second.outputs] == ["OUTPUT1"]
    np.testing.assert_array_equal(second.outputs[0][1], a[1:] - 1)
    # Without the batch-major tensors (another backend's worker), the rows are joined.
    batch = Batch(headers, [[a[:1], b[:1]], [a[1:], b[1:]]])
    np.testing.assert_array_equal(backend.execute(batch)[1].outputs[0][1], a[1:] - 1)
    backend.finalize()


def test_backend_config_default_max_batch_size(tmp_path):
    autocomplete.configure(True, ["onnxruntime,default-max-batch-size=16"])
    try:
        config = _completed(tmp_path, "m", onnx_support.add_sub(), None)
        assert config["max_batch_size"] == 16 and "dynamic_batching" in config
        autocomplete.configure(True, ["default-max-batch-size=1"])  # every backend
        config = _completed(tmp_path / "b", "m", onnx_support.add_sub(), None)
        assert config["max_batch_size"] == 1 and "dynamic_batching" not in config
        with pytest.raises(ValueError, match="--backend-config option format"):
            autocomplete.configure(True, ["onnxruntime,default-max-batch-size"])
    finally:
        autocomplete.configure(True)


def test_batch_of_scalars_takes_the_empty_reshape(tmp_path):
    from naiad.backends.base import Batch, RequestHeader

    folder = onnx_support.write_model(
        tmp_path, "m", onnx_support.add_sub(shape=("batch",)), None, {}
    )
    config = _to_json(autocomplete.load_completed_config(folder, "m"))
    assert config["max_batch_size"] == 4
    assert [(i["dims"], i.get("reshape")) for i in config["input"]] == [([1], {"shape": []})] * 2
    backend = _backend(folder)
    a = np.array([[1.0], [2.0], [3.0]], np.float32)
    headers = [
        RequestHeader("", (("INPUT0", "FP32", (1, 1)), ("INPUT1", "FP32", (1, 1))), [], {}),
        RequestHeader("", (("INPUT0", "FP32", (2, 1)), ("INPUT1", "FP32", (2, 1))), [], {}),
    ]
    batch = Batch(headers, [[a[:1], a[:1]], [a[1:], a[1:]]], {"INPUT0": a, "INPUT1": a})
    first, second = backend.execute(batch)
    assert first.outputs[0][1].tolist() == [[2.0]]
    assert second.outputs[0][1].tolist() == [[4.0], [6.0]]
