"""instance_group: completed and checked as Triton completes and checks it.

Triton resolves every group before a model loads (its NormalizeInstanceGroup and
ValidateInstanceGroup), and its config endpoint shows the result:

- no `instance_group`: one group named after the model, of kind KIND_AUTO;
- an unnamed group: `<model>_<index>`;
- KIND_AUTO: KIND_GPU when the host has supported GPUs and every GPU the group lists is
  one of them, else KIND_CPU;
- no `count`: 1 (2 for onnxruntime and tensorflow models on KIND_CPU);
- KIND_GPU without `gpus`: every supported GPU;
- then a KIND_GPU group with no GPU, or a GPU the host lacks, is refused with Triton's
  message (a host without CUDA has no supported GPU: `naiad.gpu`).

`supported` is the list of usable device ids (`naiad.gpu.supported_gpus()`); tests pass
their own.
"""

from __future__ import annotations

from naiad import gpu
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


def normalize_instance_groups(config, supported: list[int] | None = None) -> None:
    """Complete `config.instance_group` in place (see the module doc)."""
    if config.HasField("ensemble_scheduling") or config.platform == "ensemble":
        return  # instance groups do not apply to an ensemble
    if supported is None:
        supported = gpu.supported_gpus()
    available = set(supported)
    if not config.instance_group:
        config.instance_group.add(name=config.name)
    for index, group in enumerate(config.instance_group):
        if not group.name:
            group.name = f"{config.name}_{index}"
        if group.kind == KIND_AUTO:
            if available and all(gid in available for gid in group.gpus):
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
