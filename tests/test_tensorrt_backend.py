"""The tensorrt backend: Triton's auto-complete rules over engine descriptions (no GPU needed),
the refusals on a host without TensorRT or a GPU, and, where both exist, an engine built
with TensorRT's builder and served over HTTP (skipped here with the reason).
"""

from __future__ import annotations

import copy
import json
import logging
import time

import numpy as np
import pytest
import requests
from naiad.backends import tensorrt as trt_backend
from naiad.backends.tensorrt import (
    CompletionError,
    EngineDescription,
    TensorDescription,
    complete_config,
)
from naiad.memory import gpu
from server_harness import NaiadServer

TIMEOUT = 10


def _engine(batch_max=8, num_profiles=1):
    """input0 [-1, 3, 4] FP32 (profile batch 1..batch_max) -> output0 [-1, 2] FP16."""
    profiles = [((1, 3, 4), (4, 3, 4), (batch_max, 3, 4))] * num_profiles
    return EngineDescription(
        [
            TensorDescription("input0", True, "TYPE_FP32", (-1, 3, 4), profiles=profiles),
            TensorDescription("output0", False, "TYPE_FP16", (-1, 2)),
        ],
        num_profiles,
    )


def test_empty_config_gets_everything_from_the_engine():
    config = complete_config({"name": "m"}, _engine())
    assert config["max_batch_size"] == 8
    assert config["dynamic_batching"] == {}
    assert config["input"] == [
        {
            "name": "input0",
            "data_type": "TYPE_FP32",
            "dims": [3, 4],
            "is_shape_tensor": False,
            "is_non_linear_format_io": False,
        }
    ]
    assert config["output"][0]["dims"] == [2] and config["output"][0]["data_type"] == "TYPE_FP16"


def test_partial_entries_keep_what_they_set_and_get_the_rest():
    config = {
        "name": "m",
        "max_batch_size": 4,
        "input": [{"name": "input0"}],
        "sequence_batching": {},
    }
    complete_config(config, _engine())
    assert config["max_batch_size"] == 4
    assert "dynamic_batching" not in config  # a scheduler is already set
    assert config["input"][0]["dims"] == [3, 4]
    assert config["input"][0]["data_type"] == "TYPE_FP32"
    assert config["output"][0]["name"] == "output0"


def test_full_dims_in_config_mean_no_batching(caplog):
    config = {
        "name": "m",
        "input": [{"name": "input0", "data_type": "TYPE_FP32", "dims": [-1, 3, 4]}],
    }
    with caplog.at_level(logging.WARNING, logger="naiad"):
        complete_config(config, _engine())
    assert config["max_batch_size"] == 0
    assert "hints that batching is unavailable" in caplog.text
    assert config["output"][0]["dims"] == [-1, 2]  # the engine's whole shape


def test_config_asking_for_a_larger_batch_than_the_engine():
    with pytest.raises(CompletionError) as error:
        complete_config({"name": "m", "max_batch_size": 16}, _engine(batch_max=8))
    assert str(error.value) == (
        "autofill failed for model 'm': configuration specified max-batch 16 but TensorRT "
        "engine only supports max-batch 8"
    )


def test_unknown_tensor_name():
    with pytest.raises(CompletionError) as error:
        complete_config({"name": "m", "input": [{"name": "image"}]}, _engine())
    assert str(error.value) == "unexpected inference input 'image', allowed inputs are: input0"


def test_batch_hint_on_an_engine_that_does_not_batch():
    engine = EngineDescription(
        [
            TensorDescription("x", True, "TYPE_INT32", (1, 5), profiles=[((1, 5), (1, 5), (0, 5))]),
            TensorDescription("y", False, "TYPE_INT32", (1, 5)),
        ]
    )
    config = {"name": "m", "input": [{"name": "x", "dims": [5]}]}
    with pytest.raises(
        CompletionError, match="hints for dynamic batching but the underlying engine"
    ):
        complete_config(config, engine)


def test_scalar_tensor_gets_dims_1_and_an_empty_reshape():
    engine = EngineDescription(
        [
            TensorDescription("x", True, "TYPE_INT64", (), profiles=[((), (), ())]),
            TensorDescription("y", False, "TYPE_INT64", ()),
        ]
    )
    config = complete_config({"name": "m"}, engine)
    assert config["max_batch_size"] == 0
    assert config["input"][0]["dims"] == [1] and config["input"][0]["reshape"] == {"shape": []}


def test_profiles_named_by_the_instance_group():
    engine = EngineDescription(
        [
            TensorDescription(
                "input0",
                True,
                "TYPE_FP32",
                (-1, 3, 4),
                profiles=[((1, 3, 4), (1, 3, 4), (2, 3, 4)), ((1, 3, 4), (8, 3, 4), (16, 3, 4))],
            ),
            TensorDescription("output0", False, "TYPE_FP32", (-1, 2)),
        ],
        num_profiles=2,
    )
    only_first = {"name": "m", "instance_group": [{"profile": ["0"]}]}
    assert complete_config(copy.deepcopy(only_first), engine)["max_batch_size"] == 2
    assert complete_config({"name": "m"}, engine)["max_batch_size"] == 2  # profile 0 by default
    both = {"name": "m", "instance_group": [{"profile": ["0", "1"]}]}
    assert complete_config(both, engine)["max_batch_size"] == 16
    with pytest.raises(CompletionError, match="configuration specified invalid profile 2 "):
        complete_config({"name": "m", "instance_group": [{"profile": ["2"]}]}, engine)


# -- a host without TensorRT (or without a GPU) ------------------------------------------------

HAVE_TENSORRT = True
try:
    import tensorrt  # noqa: F401
except ImportError:
    HAVE_TENSORRT = False


def _args(tmp_path, kind="GPU"):
    (tmp_path / "1").mkdir(exist_ok=True)
    config = {"name": "plan", "platform": "tensorrt_plan", "backend": "tensorrt"}
    return {
        "model_config": json.dumps(config),
        "model_name": "plan",
        "model_version": "1",
        "model_repository": str(tmp_path),
        "model_instance_kind": kind,
        "model_instance_name": "plan_0",
        "model_instance_device_id": "0",
    }


@pytest.mark.skipif(HAVE_TENSORRT, reason="TensorRT is installed here")
def test_without_tensorrt_the_message_says_how_to_install(tmp_path):
    with pytest.raises(RuntimeError) as error:
        trt_backend.TensorRTBackend(_args(tmp_path))
    assert "model 'plan' needs TensorRT" in str(error.value)
    assert "pip install 'naiad[gpu]'" in str(error.value)
    # Auto-complete cannot read the engine: the config stays as it is.
    config = {"name": "plan", "platform": "tensorrt_plan"}
    assert trt_backend.auto_complete_config(dict(config), tmp_path) == config


def test_server_lists_a_tensorrt_model_unavailable_with_the_reason(tmp_path):
    if HAVE_TENSORRT and gpu.device_count():
        pytest.skip("this host can serve TensorRT models")
    model = tmp_path / "models" / "plan"
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.plan").write_bytes(b"not an engine")
    (model / "config.pbtxt").write_text(
        'platform: "tensorrt_plan"\nmax_batch_size: 0\n'
        'input [ { name: "x" data_type: TYPE_FP32 dims: [ 2 ] } ]\n'
        'output [ { name: "y" data_type: TYPE_FP32 dims: [ 2 ] } ]\n'
    )
    server = NaiadServer(
        tmp_path / "models", log_dir=tmp_path, extra_args=["--exit-on-error=false"]
    )
    server.start(wait="live", timeout=60)
    try:
        deadline = time.monotonic() + 30
        entry = {}
        while time.monotonic() < deadline:
            reply = requests.post(f"{server.url}/v2/repository/index", data=b"{}", timeout=TIMEOUT)
            entry = reply.json()[0]
            if entry.get("state") == "UNAVAILABLE":
                break
            time.sleep(0.2)
        assert entry["state"] == "UNAVAILABLE", entry
        if not HAVE_TENSORRT:
            assert "needs TensorRT" in entry["reason"] and "naiad[gpu]" in entry["reason"]
        else:
            assert "TensorRT backend supports only GPU device" in entry["reason"]
    finally:
        server.stop()


# -- a GPU host with TensorRT: an engine built here, served over HTTP --------------------------

needs_gpu_and_tensorrt = pytest.mark.skipif(
    not (HAVE_TENSORRT and gpu.device_count() and gpu._cudart() is not None),
    reason="needs TensorRT, cuda-python and a CUDA device (pip install 'naiad[gpu]' on a GPU host)",
)


def _build_doubling_engine(path):
    """x [-1, 4] FP32 -> y = x * 2, one optimization profile with batch 1..8."""
    import tensorrt as trt

    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    x = network.add_input("x", trt.float32, (-1, 4))
    two = network.add_constant((1, 4), np.full((1, 4), 2, np.float32))
    y = network.add_elementwise(x, two.get_output(0), trt.ElementWiseOperation.PROD).get_output(0)
    y.name = "y"
    network.mark_output(y)
    profile = builder.create_optimization_profile()
    profile.set_shape("x", (1, 4), (4, 4), (8, 4))
    settings = builder.create_builder_config()
    settings.add_optimization_profile(profile)
    path.write_bytes(bytes(builder.build_serialized_network(network, settings)))


@needs_gpu_and_tensorrt
def test_engine_served_with_auto_completed_config(tmp_path):
    model = tmp_path / "models" / "doubler"
    (model / "1").mkdir(parents=True)
    _build_doubling_engine(model / "1" / "model.plan")
    (model / "config.pbtxt").write_text('platform: "tensorrt_plan"\n')
    server = NaiadServer(tmp_path / "models", log_dir=tmp_path)
    server.start(wait="ready", timeout=120)
    try:
        config = requests.get(f"{server.url}/v2/models/doubler/config", timeout=TIMEOUT).json()
        assert config["max_batch_size"] == 8
        assert config["instance_group"][0]["kind"] == "KIND_GPU"
        body = {
            "inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP32", "data": list(range(8))}]
        }
        reply = requests.post(f"{server.url}/v2/models/doubler/infer", json=body, timeout=TIMEOUT)
        assert reply.status_code == 200, reply.content
        assert reply.json()["outputs"][0]["data"] == [2 * v for v in range(8)]
        too_many = {
            "inputs": [{"name": "x", "shape": [9, 4], "datatype": "FP32", "data": [0] * 36}]
        }
        reply = requests.post(
            f"{server.url}/v2/models/doubler/infer", json=too_many, timeout=TIMEOUT
        )
        assert reply.status_code == 400  # more than max_batch_size, refused before the model
    finally:
        server.stop()


def test_completed_config_is_a_valid_model_config():
    """What the auto-complete framework hands the hook (the config as Triton's JSON) and
    reads back (protobuf's JSON parser): every key the completion writes is a config field."""
    from google.protobuf import json_format
    from naiad.repository.config import ModelConfig, complete_model_config, config_to_json

    config = ModelConfig(platform="tensorrt_plan")
    complete_model_config(config, "m")
    engine = EngineDescription(
        [
            *_engine().tensors,
            TensorDescription("scalar", True, "TYPE_INT32", (-1,), profiles=[((1,), (1,), (8,))]),
        ]
    )
    completed = complete_config(config_to_json(config), engine)
    result = json_format.ParseDict(completed, ModelConfig())
    assert result.max_batch_size == 8 and result.HasField("dynamic_batching")
    scalar = next(tensor for tensor in result.input if tensor.name == "scalar")
    assert list(scalar.dims) == [1] and scalar.HasField("reshape") and not scalar.reshape.shape
