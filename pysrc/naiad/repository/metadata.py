"""Model and server metadata in the KServe v2 JSON shape (GET /v2/models/<m>, GET /v2).

The gRPC front end fills ModelMetadataResponse / ServerMetadataResponse from the same dicts.
"""

from __future__ import annotations

import naiad
from naiad.datatypes import wire_of_config
from naiad.protos import model_config_pb2

# Triton protocol extensions Naiad implements; front ends append as they add more.
SUPPORTED_EXTENSIONS = ["binary_tensor_data", "model_configuration", "parameters", "statistics"]
SUPPORTED_EXTENSIONS.append("sequence")  # the sequence batcher (scheduling/sequence.py)
SUPPORTED_EXTENSIONS.append("trace")  # trace settings and trace files (tracing/)


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


def server_metadata() -> dict:
    """{"name", "version", "extensions"}. Clients do not check the name; we do not pose as Triton."""
    return {
        "name": "naiad",
        "version": naiad.__version__,
        "extensions": list(SUPPORTED_EXTENSIONS),
    }
