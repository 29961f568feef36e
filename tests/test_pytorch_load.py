"""The pytorch backend in-process: Triton's naming rules, what refuses a model at load (each
message names the mismatch and the file), the auto-complete hook, batch-major views, and a
server without torch (a torch model UNAVAILABLE with the install hint, the rest serving).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import requests
from naiad.backends import pytorch as pytorch_backend
from naiad.backends.base import Batch, RequestHeader
from naiad.backends.pytorch import (
    FORWARD_ARGUMENT,
    NAMED_INDEX,
    STRICT_CONFIG_ORDERING,
    naming_convention,
    tensor_positions,
)
from naiad.backends.tensors import batch_major
from naiad.repository.config import config_to_json, load_model_config
from server_harness import EXAMPLE_MODELS, NaiadServer, make_repository

TIMEOUT = 10


# -- naming rules (Triton's GetNamingConvention), no torch needed ------------------------------


@pytest.mark.parametrize(
    "names, arguments, convention, positions",
    [
        (["b", "a"], ["a", "b"], FORWARD_ARGUMENT, {"b": 1, "a": 0}),
        (["INPUT__1", "INPUT__0"], ["x", "y"], NAMED_INDEX, {"INPUT__1": 1, "INPUT__0": 0}),
        # Names that are arguments win over the __index form.
        (["x__1", "x__0"], ["x__0", "x__1"], FORWARD_ARGUMENT, {"x__1": 1, "x__0": 0}),
        (["A", "B"], ["x", "y"], STRICT_CONFIG_ORDERING, {"A": 0, "B": 1}),
        # One name without a numeric index sends all to config order.
        (["IN__0", "IN__x"], ["x", "y"], STRICT_CONFIG_ORDERING, {"IN__0": 0, "IN__x": 1}),
        # The index is what follows the first "__"; an empty one counts as 0 (as Triton).
        (["a__b__1"], ["x"], STRICT_CONFIG_ORDERING, {"a__b__1": 0}),
        (["IN__"], ["x"], NAMED_INDEX, {"IN__": 0}),
    ],
)
def test_input_naming_rules(names, arguments, convention, positions):
    assert naming_convention(names, arguments) == convention
    assert tensor_positions(names, convention, arguments) == positions


def test_output_naming_rules():
    assert naming_convention(["OUT__1", "OUT__0"], None) == NAMED_INDEX
    assert tensor_positions(["OUT__1", "OUT__0"], NAMED_INDEX) == {"OUT__1": 1, "OUT__0": 0}
    assert naming_convention(["probabilities", "OUT__1"], None) == STRICT_CONFIG_ORDERING


def test_auto_complete_leaves_the_config_as_it_is(caplog):
    config = {"name": "m", "platform": "pytorch_libtorch", "input": []}
    with caplog.at_level("WARNING", logger="naiad"):
        assert pytorch_backend.auto_complete_config(dict(config), Path("/nowhere/m")) == config
    assert "skipping model configuration auto-complete for 'm'" in caplog.text


# -- batch-major inputs ------------------------------------------------------------------------


def _header(rows):
    return RequestHeader("", (("IN", "FP32", (rows, 2)),), [], {})


def test_consecutive_rows_are_one_view_without_copy():
    arena = memoryview(bytearray(64))
    first = np.ndarray((1, 2), np.float32, arena, 0)
    second = np.ndarray((2, 2), np.float32, arena, 8)
    first[:] = 1
    second[:] = 2
    (whole,) = batch_major(Batch([_header(1), _header(2)], [[first], [second]]), True)
    assert whole.shape == (3, 2) and np.shares_memory(whole, first)
    np.testing.assert_array_equal(whole, [[1, 1], [2, 2], [2, 2]])


def test_requests_naming_inputs_in_another_order():
    arena = memoryview(bytearray(64))
    a1, b1 = np.ndarray((1, 2), np.float32, arena, 0), np.ndarray((1, 2), np.float32, arena, 8)
    b2, a2 = np.ndarray((1, 2), np.float32, arena, 16), np.ndarray((1, 2), np.float32, arena, 24)
    a1[:], b1[:], b2[:], a2[:] = 1, 2, 3, 4
    first = RequestHeader("", (("A", "FP32", (1, 2)), ("B", "FP32", (1, 2))), [], {})
    second = RequestHeader("", (("B", "FP32", (1, 2)), ("A", "FP32", (1, 2))), [], {})
    a, b = batch_major(Batch([first, second], [[a1, b1], [b2, a2]]), True)
    np.testing.assert_array_equal(a, [[1, 1], [4, 4]])
    np.testing.assert_array_equal(b, [[2, 2], [3, 3]])


def test_scattered_rows_are_gathered():
    arena = memoryview(bytearray(64))
    first = np.ndarray((1, 2), np.float32, arena, 0)
    second = np.ndarray((1, 2), np.float32, arena, 32)  # a gap after the first
    first[:] = 1
    second[:] = 2
    (whole,) = batch_major(Batch([_header(1), _header(1)], [[first], [second]]), True)
    assert not np.shares_memory(whole, first)
    np.testing.assert_array_equal(whole, [[1, 1], [2, 2]])


# -- load-time refusals (need torch) -----------------------------------------------------------


@pytest.fixture(scope="module")
def torch_models():
    pytest.importorskip("torch")
    import torch_models

    return torch_models


def _load(folder: Path, name: str, kind: str = "CPU"):
    config = load_model_config(folder, name)
    args = {
        "model_config": json.dumps(config_to_json(config)),
        "model_name": name,
        "model_version": "1",
        "model_repository": str(folder),
        "model_instance_kind": kind,
        "model_instance_name": f"{name}_0",
        "model_instance_device_id": "0",
    }
    return pytorch_backend.PyTorchBackend(args)


def _config(model: str, replace: tuple[str, str] | None = None) -> str:
    from torch_models import MODELS

    text = MODELS[model][0]
    return text.replace(*replace) if replace else text


def test_missing_model_file(tmp_path, torch_models):
    folder = torch_models.build_model(tmp_path, "pt_named")
    (folder / "1" / "model.pt").unlink()
    with pytest.raises(RuntimeError) as error:
        _load(folder, "pt_named")
    assert str(error.value) == (
        f"unable to find '{folder / '1' / 'model.pt'}' for model instance 'pt_named'"
    )


def test_corrupt_model_file(tmp_path, torch_models):
    folder = torch_models.build_model(tmp_path, "pt_named")
    (folder / "1" / "model.pt").write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(RuntimeError, match="failed to load model 'pt_named': '.*/1/model.pt'"):
        _load(folder, "pt_named")


def test_input_count_disagreeing_with_forward(tmp_path, torch_models):
    config = _config("pt_named", ('{ name: "minuend" data_type: TYPE_FP32 dims: [2] }', ""))
    config = config.replace("dims: [2] },\n", "dims: [2] }\n")
    folder = torch_models.build_model(tmp_path, "pt_named", config)
    with pytest.raises(RuntimeError) as error:
        _load(folder, "pt_named")
    assert str(error.value).startswith(
        "unable to load model 'pt_named', configuration expects 1 inputs, model provides 2"
    )
    assert "minuend, subtrahend" in str(error.value) and "model.pt" in str(error.value)


def test_unsupported_datatype(tmp_path, torch_models):
    config = _config("pt_rejects", ("TYPE_FP32 dims: [-1]", "TYPE_UINT32 dims: [-1]"))
    folder = torch_models.build_model(tmp_path, "pt_rejects", config)
    with pytest.raises(RuntimeError) as error:
        _load(folder, "pt_rejects")
    # Triton's message, then the config file and what the backend takes.
    assert str(error.value).startswith(
        "unsupported datatype TYPE_UINT32 for input 'INPUT__0' for model 'pt_rejects' "
        f"({folder / 'config.pbtxt'}; the pytorch backend takes BOOL, UINT8,"
    )


def test_output_index_beyond_what_forward_returns(tmp_path, torch_models):
    config = _config("pt_rejects", ('name: "OUTPUT__0"', 'name: "OUTPUT__3"'))
    folder = torch_models.build_model(tmp_path, "pt_rejects", config)
    with pytest.raises(RuntimeError) as error:
        _load(folder, "pt_rejects")
    assert "output 'OUTPUT__3' of model 'pt_rejects' is output 3 of forward()" in str(error.value)
    assert "model.pt' returns 1 output" in str(error.value)


def test_input_index_beyond_forward_arguments(tmp_path, torch_models):
    config = _config("pt_rejects", ('name: "INPUT__0"', 'name: "INPUT__2"'))
    folder = torch_models.build_model(tmp_path, "pt_rejects", config)
    with pytest.raises(
        RuntimeError, match="input 'INPUT__2' .* forward\\(\\) of '.*model.pt' takes 1"
    ):
        _load(folder, "pt_rejects")


def test_string_input_of_more_than_one_dimension(tmp_path, torch_models):
    config = _config("pt_strings", ("dims: [-1] }\n]\noutput", "dims: [-1, 2] }\n]\noutput"))
    folder = torch_models.build_model(tmp_path, "pt_strings", config)
    with pytest.raises(RuntimeError) as error:
        _load(folder, "pt_strings")
    assert str(error.value) == (
        "Triton only supports 1 dimensional List of String as input for 'INPUT__0' for model "
        "'pt_strings'"
    )


def test_gpu_instance_without_cuda(tmp_path, torch_models):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this torch has CUDA")
    folder = torch_models.build_model(tmp_path, "pt_named")
    with pytest.raises(
        RuntimeError, match="is KIND_GPU \\(device 0\\) but this PyTorch .* has no CUDA"
    ):
        _load(folder, "pt_named", kind="GPU")


def test_without_torch_the_message_says_how_to_install(tmp_path, monkeypatch):
    folder = tmp_path / "pt"
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text('platform: "pytorch_libtorch"\n')
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now fails
    with pytest.raises(RuntimeError) as error:
        _load(folder, "pt")
    assert "model 'pt' needs PyTorch" in str(error.value)
    assert "pip install 'naiad[torch]'" in str(error.value)


# -- a server where torch cannot be imported ---------------------------------------------------


def test_server_without_torch(tmp_path, monkeypatch):
    """A `torch` that fails to import, first on the path of the server and its workers: the
    TorchScript example is UNAVAILABLE with the install hint in the load table, and the
    Python models serve."""
    shadow = tmp_path / "shadow" / "torch"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError(\"No module named 'torch'\")\n")
    monkeypatch.setenv(
        "PYTHONPATH",
        ":".join(p for p in (str(shadow.parent), __import__("os").environ.get("PYTHONPATH")) if p),
    )
    repository = make_repository(tmp_path / "models", ["add_sub", "mlp_torch"])
    server = NaiadServer(repository, log_dir=tmp_path, extra_args=["--exit-on-error=false"])
    server.start(wait="live", timeout=60)
    try:
        deadline = time.monotonic() + 60
        entries = {}
        while time.monotonic() < deadline:
            reply = requests.post(f"{server.url}/v2/repository/index", data=b"{}", timeout=TIMEOUT)
            entries = {entry["name"]: entry for entry in reply.json()}
            if entries.get("mlp_torch", {}).get("state") == "UNAVAILABLE":
                break
            time.sleep(0.2)
        assert entries["mlp_torch"]["state"] == "UNAVAILABLE", entries
        assert "pip install 'naiad[torch]'" in entries["mlp_torch"]["reason"]
        assert entries["add_sub"]["state"] == "READY"
        table = server.stderr_text()
        assert "mlp_torch" in table and "naiad[torch]" in table
    finally:
        server.stop()
    assert (EXAMPLE_MODELS / "mlp_torch" / "1" / "model.pt").is_file()


# -- execution in-process (the rest is black-box in test_pytorch_backend.py) ---------------------


def _batch(requests_inputs: list[dict]) -> Batch:
    """A Batch of requests given as {name: array}, arrays laid out one after another."""
    headers, arrays = [], []
    for inputs in requests_inputs:
        headers.append(
            RequestHeader(
                "",
                tuple((name, "", tuple(array.shape)) for name, array in inputs.items()),
                [],
                {},
            )
        )
        arrays.append(list(inputs.values()))
    return Batch(headers, arrays)


def _outputs(result) -> dict:
    assert not isinstance(result, pytorch_backend.RequestError), result
    return dict(result.outputs)


def test_other_names_bind_in_config_order(tmp_path, torch_models):
    backend = _load(torch_models.build_model(tmp_path, "pt_strict"), "pt_strict")
    assert backend.input_convention == STRICT_CONFIG_ORDERING
    a = np.array([10, 20, 30], np.int32)
    b = np.array([1, 2, 3], np.int32)
    # A is the config's first input, so forward()'s first argument, whatever the request's
    # order: A * 2 + B.
    (result,) = backend.execute(_batch([{"B": b, "A": a}]))
    np.testing.assert_array_equal(_outputs(result)["RESULT"], [21, 42, 63])


def test_dict_input_gets_tensors_by_config_name(tmp_path, torch_models):
    backend = _load(torch_models.build_model(tmp_path, "pt_dict"), "pt_dict")
    assert backend.dict_input
    x = np.array([[1, 2], [5, 6]], np.float64)
    y = np.array([[3, 4], [7, 8]], np.float64)
    first, second = backend.execute(_batch([{"x": x[:1], "y": y[:1]}, {"x": x[1:], "y": y[1:]}]))
    np.testing.assert_array_equal(_outputs(first)["OUTPUT__0"], [[31, 42]])
    np.testing.assert_array_equal(_outputs(second)["OUTPUT__0"], [[75, 86]])


def test_output_of_another_datatype_than_configured(tmp_path, torch_models):
    backend = _load(torch_models.build_model(tmp_path, "pt_wrong_type"), "pt_wrong_type")
    (result,) = backend.execute(_batch([{"INPUT__0": np.ones((1, 2), np.float32)}]))
    assert isinstance(result, pytorch_backend.RequestError)
    assert result.code == pytorch_backend.INVALID_ARG
    assert result.message == (
        "configuration expects datatype TYPE_FP32 for output 'OUTPUT__0', model provides TYPE_INT64"
    )


# -- auto-complete (the framework: repository/autocomplete.py) -----------------------------------


def _autocomplete():
    return pytest.importorskip(
        "naiad.repository.autocomplete", reason="the auto-complete framework is not merged here"
    )


def test_auto_complete_fills_the_backend_fields_only(tmp_path, torch_models):
    """Triton's server fills backend, platform and default_model_filename from model.pt;
    its pytorch backend adds nothing (inputs and outputs stay as the config has them)."""
    autocomplete = _autocomplete()
    folder = torch_models.build_model(tmp_path, "pt_named")
    text = (folder / "config.pbtxt").read_text().replace('platform: "pytorch_libtorch"\n', "")
    (folder / "config.pbtxt").write_text(text)
    config = config_to_json(autocomplete.load_completed_config(folder, "pt_named"))
    assert (config["backend"], config["platform"], config["default_model_filename"]) == (
        "pytorch",
        "pytorch_libtorch",
        "model.pt",
    )
    assert [tensor["name"] for tensor in config["input"]] == ["subtrahend", "minuend"]
    assert config["max_batch_size"] == 4 and "dynamic_batching" not in config


def test_without_config_the_load_says_what_is_missing(tmp_path, torch_models):
    """No config.pbtxt: Triton finds the backend from model.pt, completes no inputs, and the
    pytorch backend refuses the load for the inputs forward() takes."""
    autocomplete = _autocomplete()
    folder = torch_models.build_model(tmp_path, "pt_named")
    (folder / "config.pbtxt").unlink()
    config = autocomplete.load_completed_config(folder, "pt_named")
    assert config.backend == "pytorch" and not config.input
    args = {
        "model_config": json.dumps(config_to_json(config)),
        "model_name": "pt_named",
        "model_version": "1",
        "model_repository": str(folder),
        "model_instance_kind": "CPU",
        "model_instance_name": "pt_named_0",
        "model_instance_device_id": "0",
    }
    with pytest.raises(RuntimeError) as error:
        pytorch_backend.PyTorchBackend(args)
    assert str(error.value).startswith(
        "unable to load model 'pt_named', configuration expects 0 inputs, model provides 2"
    )


def test_warmup_runs_through_the_pytorch_backend(tmp_path, torch_models):
    """model_warmup (the worker's generic warmup) on a TorchScript model: zero data runs;
    a sample the model rejects fails the load with Triton's warmup message."""
    from naiad.worker.warmup import WarmupError, run_warmup

    warmup = (
        'model_warmup [ { name: "zeros" batch_size: 3 count: 2 '
        'inputs { key: "INPUT__0" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } } } ]\n'
    )
    config = torch_models.MODELS["pt_rejects"][0] + warmup
    folder = torch_models.build_model(tmp_path / "good", "pt_rejects", config)
    backend = _load(folder, "pt_rejects")
    args = {
        "model_config": json.dumps(config_to_json(load_model_config(folder, "pt_rejects"))),
        "model_repository": str(folder),
    }
    assert run_warmup(backend, args) == 2
    bad = config.replace("dims: [ 4 ] zero_data", "dims: [ 3 ] zero_data")
    folder = torch_models.build_model(tmp_path / "bad", "pt_rejects", bad)
    backend = _load(folder, "pt_rejects")
    args["model_config"] = json.dumps(config_to_json(load_model_config(folder, "pt_rejects")))
    with pytest.raises(WarmupError) as error:
        run_warmup(backend, args)
    assert error.value.message.startswith("failed to run warmup sample 'zeros': ")
    assert "PyTorch execute failure" in error.value.message
