"""instance_group: completed and checked as Triton completes and checks it.

Triton resolves every group before a model loads (its NormalizeInstanceGroup and
ValidateInstanceGroup), and its config endpoint shows the result:

- no `instance_group`: one group named after the model, of kind KIND_AUTO;
- an unnamed group: `<model>_<index>`;
- KIND_AUTO: KIND_GPU when the host has supported GPUs, every GPU the group lists is
  one of them and the model's backend can run on a GPU here (`backend_runs_on_gpu`),
  else KIND_CPU;
- no `count`: 1 (2 for onnxruntime and tensorflow models on KIND_CPU);
- KIND_GPU without `gpus`: every supported GPU;
- then a KIND_GPU group with no GPU, or a GPU the host lacks, is refused with Triton's
  message (a host without CUDA has no supported GPU: `naiad.memory.gpu`).

`supported` is the list of usable device ids (`naiad.memory.gpu.supported_gpus()`) and
`runs_on_gpu` the backend check; tests pass their own.

The backend check is Triton's "preferred instance group" of a backend built without GPU
support: `pip install naiad` on a GPU host brings onnxruntime's CPU build, and a model
that names no group should run on the CPU there rather than be refused for want of the
CUDA provider. An explicit KIND_GPU group is still refused, by the backend, with the reason.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from pathlib import Path

from naiad.memory import gpu
from naiad.protos import model_config_pb2

Group = model_config_pb2.ModelInstanceGroup
KIND_AUTO, KIND_GPU, KIND_CPU, KIND_MODEL = (
    Group.KIND_AUTO,
    Group.KIND_GPU,
    Group.KIND_CPU,
    Group.KIND_MODEL,
)

# Backends whose KIND_CPU groups get two instances by default (Triton's
# SetDefaultInstanceCount: they run well with more than one).
_TWO_CPU_INSTANCES = frozenset(("onnxruntime", "tensorflow"))


# The library a framework's CUDA build ships beside its CPU code: looked for, not loaded
# (the frontend imports neither framework). The backend's own check at load time
# (onnxruntime's available providers, torch.cuda.is_available) stays the authority.
_CUDA_BUILD_MARKERS = {
    "onnxruntime": ("onnxruntime", "capi/libonnxruntime_providers_cuda.so"),
    "pytorch": ("torch", "lib/libtorch_cuda.so"),
}


@functools.cache
def backend_runs_on_gpu(backend: str) -> bool:
    """Whether `backend` can run a KIND_GPU instance with what is installed here: the
    onnxruntime and pytorch backends only with their framework's CUDA build; the others
    (python, whose model decides; tensorrt, GPU-only) always."""
    marker = _CUDA_BUILD_MARKERS.get(backend)
    if marker is None:
        return True
    package, library = marker
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return False
    return any((Path(folder) / library).exists() for folder in spec.submodule_search_locations)


def normalize_instance_groups(
    config,
    supported: list[int] | None = None,
    runs_on_gpu: Callable[[str], bool] = backend_runs_on_gpu,
) -> None:
    """Complete `config.instance_group` in place (see the module doc)."""
    if config.HasField("ensemble_scheduling") or config.platform == "ensemble":
        return  # instance groups do not apply to an ensemble
    if supported is None:
        supported = gpu.supported_gpus()
    available = set(supported)
    # KIND_AUTO takes only GPUs this backend can use; an explicit KIND_GPU names the
    # host's and is left to the backend to take or refuse.
    for_auto = available if runs_on_gpu(config.backend) else set()
    if not config.instance_group:
        config.instance_group.add(name=config.name)
    for index, group in enumerate(config.instance_group):
        if not group.name:
            group.name = f"{config.name}_{index}"
        if group.kind == KIND_AUTO:
            if for_auto and all(gid in for_auto for gid in group.gpus):
                group.kind = KIND_GPU
            else:
                group.kind = KIND_CPU
        if group.count == 0:  # a negative count stays, for validation to refuse
            group.count = 1
            if group.kind == KIND_CPU and config.backend in _TWO_CPU_INSTANCES:
                group.count = 2
        if group.kind == KIND_GPU and not group.gpus:
            group.gpus.extend(sorted(available))


def instance_group_error(config, supported: list[int] | None = None) -> str | None:
    """Triton's reason for refusing the (normalized) groups, or None when they are fine."""
    if config.HasField("ensemble_scheduling") or config.platform == "ensemble":
        return None
    if supported is None:
        supported = gpu.supported_gpus()
    model = config.name
    for group in config.instance_group:
        where = f"instance group {group.name} of model {model}"
        if group.kind == KIND_GPU:
            if not group.gpus:
                if not supported:
                    return f"{where} has kind KIND_GPU but no GPUs are available"
                return f"{where} has kind KIND_GPU but specifies no GPUs"
            for gid in group.gpus:
                if gid not in supported:
                    listed = ", ".join(str(device) for device in sorted(supported))
                    # Triton prints the capability with std::to_string(double).
                    return (
                        f"{where} specifies invalid or unsupported gpu id {gid}. GPUs with "
                        "at least the minimum required CUDA compute compatibility of "
                        f"{gpu.MIN_COMPUTE_CAPABILITY:.6f} are: {listed}"
                    )
        elif group.kind in (KIND_CPU, KIND_MODEL) and group.gpus:
            kind = Group.Kind.Name(group.kind)
            return f"{where} has kind {kind} but specifies one or more GPUs"
    return None
