"""Model and server metadata in the KServe v2 JSON shape (GET /v2/models/<m>, GET /v2).

The gRPC front end fills ModelMetadataResponse / ServerMetadataResponse from the same dicts.
"""

from __future__ import annotations

import naiad
from naiad.datatypes import wire_of_config
from naiad.protos import model_config_pb2

# Triton protocol extensions Naiad implements; front ends append as they add more.
# tests/test_extensions.py checks that each one listed has its routes answering.
SUPPORTED_EXTENSIONS = ["binary_tensor_data", "model_configuration", "parameters", "statistics"]
SUPPORTED_EXTENSIONS.append("sequence")  # the sequence batcher (sequence_parameters.py)
SUPPORTED_EXTENSIONS.append("classification")  # csrc/codec/classification.h
# /v2/repository/... (http/repository_routes.py), and its unload's parameter that unloads
# an ensemble's composing models too (repository/control.py).
SUPPORTED_EXTENSIONS.append("model_repository")
SUPPORTED_EXTENSIONS.append("model_repository(unload_dependents)")
SUPPORTED_EXTENSIONS.append("schedule_policy")  # priority levels, queue policy (core)
SUPPORTED_EXTENSIONS.append("trace")  # trace settings and trace files (tracing/)
# /v2/logging, gRPC LogSettings (naiad/observability/triton_log.py)
SUPPORTED_EXTENSIONS.append("logging")

# The order Triton 2.51 lists them in, which server_metadata keeps.
_TRITON_ORDER = (
    "classification",
    "sequence",
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "model_configuration",
    "system_shared_memory",
    "cuda_shared_memory",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "trace",
    "logging",
)


def model_metadata(config: model_config_pb2.ModelConfig, versions: list[int]) -> dict:
    """{"name", "versions", "platform", "inputs", "outputs"} as Triton reports them.

    A batching model (max_batch_size > 0) gets -1 prepended to each shape for the batch
    dimension. A model with a backend but no platform (python) reports the backend name.
    """
    batched = config.max_batch_size > 0
    return {
        "name": config.name,
        "versions": [str(version) for version in sorted(versions)],
        "platform": config.platform or config.backend,
        "inputs": [_tensor_metadata(tensor, batched) for tensor in config.input],
        "outputs": [_tensor_metadata(tensor, batched) for tensor in config.output],
    }


def _tensor_metadata(tensor, batched: bool) -> dict:
    shape = list(tensor.dims)
    return {
        "name": tensor.name,
        "datatype": wire_of_config(model_config_pb2.DataType.Name(tensor.data_type)),
        "shape": [-1, *shape] if batched else shape,
    }


def server_metadata(name: str = "naiad") -> dict:
    """{"name", "version", "extensions"}. `name`: --id; by default we do not pose as
    Triton (whose default id is "triton")."""
    return {
        "name": name,
        "version": naiad.__version__,
        "extensions": sorted(SUPPORTED_EXTENSIONS, key=_extension_rank),
    }


def _extension_rank(name: str) -> int:
    return _TRITON_ORDER.index(name) if name in _TRITON_ORDER else len(_TRITON_ORDER)
