"""GPU instances: instance groups completed and refused as Triton 2.51 does, device discovery
and arena pinning (naiad/memory/gpu.py).

The normalization rules are checked with made-up device lists (a host with GPUs 0 and 1);
the black-box part runs on this host as it is: without CUDA, a KIND_GPU group is refused
with Triton's exact message (compared with the real Triton 2.51 on a CPU host), KIND_AUTO
becomes KIND_CPU, and the rest of the repository keeps serving. Tests that need a GPU skip
with the reason.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import requests
from naiad.backends.base import Batch
from naiad.memory import gpu
from naiad.protos import model_config_pb2
from naiad.repository.config import ConfigError, load_model_config, parse_model_config
from naiad.repository.instance_groups import instance_group_error, normalize_instance_groups
from server_harness import EXAMPLE_MODELS, NaiadServer

Group = model_config_pb2.ModelInstanceGroup
NO_GPU_HERE = gpu.device_count() == 0
TIMEOUT = 10


def _config(text: str, name: str = "m"):
    config = parse_model_config(text)
    config.name = name
    return config


def _groups(config):
    return [
        (group.name, Group.Kind.Name(group.kind), group.count, list(group.gpus))
        for group in config.instance_group
    ]


@pytest.mark.parametrize(
    "text, supported, expected",
    [
        # No group: one named after the model, KIND_AUTO resolved against the host.
        ('backend: "python"', [], [("m", "KIND_CPU", 1, [])]),
        ('backend: "python"', [0, 1], [("m", "KIND_GPU", 1, [0, 1])]),
        # Triton's SetDefaultInstanceCount: two CPU instances for onnxruntime only.
        ('backend: "onnxruntime"', [], [("m", "KIND_CPU", 2, [])]),
        ('backend: "onnxruntime"', [0], [("m", "KIND_GPU", 1, [0])]),
        ('backend: "pytorch"', [], [("m", "KIND_CPU", 1, [])]),
        # A GPU host whose onnxruntime is the CPU build ("cpu_ort" below): KIND_AUTO is
        # the CPU (two instances); an explicit KIND_GPU still lists the host's GPUs.
        ('backend: "cpu_ort"', [0], [("m", "KIND_CPU", 2, [])]),
        (
            'backend: "cpu_ort" instance_group [ { kind: KIND_GPU } ]',
            [0],
            [("m_0", "KIND_GPU", 1, [0])],
        ),
        # KIND_AUTO listing a GPU the host lacks falls back to the CPU.
        (
            "instance_group [ { kind: KIND_AUTO gpus: [ 3 ] } ]",
            [0, 1],
            [("m_0", "KIND_CPU", 1, [3])],
        ),
        (
            "instance_group [ { kind: KIND_AUTO gpus: [ 1 ] count: 2 } ]",
            [0, 1],
            [("m_0", "KIND_GPU", 2, [1])],
        ),
        # KIND_GPU without gpus: every supported GPU; names per index.
        (
            'instance_group [ { kind: KIND_CPU }, { name: "g" kind: KIND_GPU count: 3 } ]',
            [0, 1],
            [("m_0", "KIND_CPU", 1, []), ("g", "KIND_GPU", 3, [0, 1])],
        ),
        ("instance_group [ { kind: KIND_GPU } ]", [], [("m_0", "KIND_GPU", 1, [])]),
    ],
)
def test_normalization(text, supported, expected):
    config = _config(text)
    if config.backend == "":
        config.backend = "python"
    if config.backend == "cpu_ort":  # onnxruntime's count rule, without its CUDA build
        config.backend = "onnxruntime"
        normalize_instance_groups(config, supported, runs_on_gpu=lambda backend: False)
    else:
        normalize_instance_groups(config, supported, runs_on_gpu=lambda backend: True)
    assert _groups(config) == expected


def test_which_backends_run_on_a_gpu_here():
    """KIND_AUTO's backend check agrees with what each framework says at load time."""
    from naiad.repository.instance_groups import backend_runs_on_gpu

    assert backend_runs_on_gpu("python") and backend_runs_on_gpu("tensorrt")
    import onnxruntime

    ort_cuda = "CUDAExecutionProvider" in onnxruntime.get_available_providers()
    assert backend_runs_on_gpu("onnxruntime") == ort_cuda
    torch = pytest.importorskip("torch")
    assert backend_runs_on_gpu("pytorch") == (torch.version.cuda is not None)


@pytest.mark.parametrize(
    "text, supported, message",
    [
        (
            "instance_group [ { kind: KIND_GPU } ]",
            [],
            "instance group m_0 of model m has kind KIND_GPU but no GPUs are available",
        ),
        (
            "instance_group [ { kind: KIND_GPU gpus: [ 1 ] } ]",
            [],
            "instance group m_0 of model m specifies invalid or unsupported gpu id 1. GPUs with "
            "at least the minimum required CUDA compute compatibility of 6.000000 are: ",
        ),
        (
            "instance_group [ { kind: KIND_GPU gpus: [ 0, 2 ] } ]",
            [0, 1],
            "instance group m_0 of model m specifies invalid or unsupported gpu id 2. GPUs with "
            "at least the minimum required CUDA compute compatibility of 6.000000 are: 0, 1",
        ),
        (
            "instance_group [ { kind: KIND_CPU gpus: [ 0 ] } ]",
            [0],
            "instance group m_0 of model m has kind KIND_CPU but specifies one or more GPUs",
        ),
        ("instance_group [ { kind: KIND_GPU gpus: [ 1 ] } ]", [0, 1], None),
        # As Triton: KIND_AUTO becomes KIND_CPU but keeps its gpus, which KIND_CPU refuses.
        (
            "instance_group [ { kind: KIND_AUTO gpus: [ 1 ] } ]",
            [],
            "instance group m_0 of model m has kind KIND_CPU but specifies one or more GPUs",
        ),
    ],
)
def test_refusal_messages(text, supported, message):
    config = _config(text)
    normalize_instance_groups(config, supported, runs_on_gpu=lambda backend: True)
    assert instance_group_error(config, supported) == message


def test_host_without_cuda_has_no_devices_and_pins_nothing():
    if not NO_GPU_HERE:
        pytest.skip("this host has a CUDA device")
    assert gpu.device_count() == 0 and gpu.supported_gpus() == []
    assert gpu.pin_arena(memoryview(bytearray(4096))) is False
    arena = memoryview(bytearray(64))
    batch = Batch([], [[np.ndarray((2, 2), np.float32, arena, 0)]])
    assert gpu.pin_batch_arena(batch, 0) is False


@pytest.mark.skipif(NO_GPU_HERE, reason="needs a CUDA device (none on this host)")
def test_pin_arena_on_a_gpu_host():
    import mmap

    mapping = mmap.mmap(-1, 1 << 20)
    view = memoryview(mapping)
    assert gpu.pin_arena(view) is True
    assert gpu.pin_arena(view) is True  # once per process
    gpu.unpin_arena(view)
    del view
    mapping.close()


def test_config_file_with_gpu_group_is_refused_on_this_host(tmp_path):
    if not NO_GPU_HERE:
        pytest.skip("this host has a CUDA device")
    model = tmp_path / "gpu_model"
    model.mkdir()
    (model / "config.pbtxt").write_text(
        'backend: "python"\ninstance_group [ { kind: KIND_GPU } ]\n'
    )
    with pytest.raises(ConfigError, match="has kind KIND_GPU but no GPUs are available"):
        load_model_config(model, "gpu_model")


# -- black-box: a repository with GPU groups, on this host ------------------------------------

_ADD_SUB = (EXAMPLE_MODELS / "add_sub" / "config.pbtxt").read_text()


def _add_sub_config(name: str, group: str) -> str:
    text = _ADD_SUB.replace('name: "add_sub"', f'name: "{name}"')
    head, _sep, _tail = text.partition("instance_group")
    return head + group + "\n"


@pytest.fixture(scope="module")
def gpu_repository_server(tmp_path_factory):
    if not NO_GPU_HERE:
        pytest.skip("checks the refusals of a host without CUDA")
    root = tmp_path_factory.mktemp("gpu_groups")
    repository = root / "models"
    groups = {
        "gpu_none": "instance_group [ { kind: KIND_GPU } ]",
        "gpu_one": "instance_group [ { kind: KIND_GPU gpus: [ 1 ] } ]",
        "auto_two": "instance_group [ { kind: KIND_AUTO count: 2 } ]",
    }
    for name, group in groups.items():
        (repository / name / "1").mkdir(parents=True)
        (repository / name / "config.pbtxt").write_text(_add_sub_config(name, group))
        (repository / name / "1" / "model.py").write_text(
            (EXAMPLE_MODELS / "add_sub" / "1" / "model.py").read_text()
        )
    server = NaiadServer(repository, log_dir=root, extra_args=["--exit-on-error=false"], name="gpu")
    server.start(wait="live", timeout=120)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if (
            requests.get(f"{server.url}/v2/models/auto_two/ready", timeout=TIMEOUT).status_code
            == 200
        ):
            break
        time.sleep(0.2)
    yield server
    server.stop()


def test_gpu_groups_refused_with_triton_messages(gpu_repository_server):
    server = gpu_repository_server
    reply = requests.post(f"{server.url}/v2/repository/index", data=b"{}", timeout=TIMEOUT)
    entries = {entry["name"]: entry for entry in reply.json()}
    # Triton 2.51 on a host without CUDA gives these reasons (after its "Invalid argument: ").
    assert entries["gpu_none"]["state"] == "UNAVAILABLE"
    assert entries["gpu_none"]["reason"].endswith(
        "instance group gpu_none_0 of model gpu_none has kind KIND_GPU but no GPUs are available"
    )
    assert entries["gpu_one"]["state"] == "UNAVAILABLE"
    assert entries["gpu_one"]["reason"].endswith(
        "instance group gpu_one_0 of model gpu_one specifies invalid or unsupported gpu id 1. "
        "GPUs with at least the minimum required CUDA compute compatibility of 6.000000 are: "
    )
    assert entries["auto_two"]["state"] == "READY"
    table = server.stderr_text()
    assert "gpu_none" in table and "no GPUs are available" in table


def test_kind_auto_serves_on_cpu_with_two_instances(gpu_repository_server):
    server = gpu_repository_server
    config = requests.get(f"{server.url}/v2/models/auto_two/config", timeout=TIMEOUT).json()
    (group,) = config["instance_group"]
    assert (group["name"], group["kind"], group["count"], group["gpus"]) == (
        "auto_two_0",
        "KIND_CPU",
        2,
        [],
    )
    body = {
        "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": [1] * 16},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": [2] * 16},
        ]
    }
    reply = requests.post(f"{server.url}/v2/models/auto_two/infer", json=body, timeout=TIMEOUT)
    assert reply.status_code == 200, reply.content
    assert reply.json()["outputs"][0]["data"] == [3] * 16
