"""Backends: one module per `backend:` / `platform:` of config.pbtxt, loaded in a worker process.

Each module implements `naiad.backends.base.Backend` and knows nothing of HTTP or gRPC. The
registry below maps Triton's backend and platform names to the class that serves them; it
names modules rather than importing them, so a worker imports only the backend it runs.
"""

from __future__ import annotations

import importlib
import json

from naiad.backends.base import Backend

# Triton backend or platform name -> "module:class" of its Backend subclass. Framework
# backends add their backend name and their platform names here (onnxruntime /
# onnxruntime_onnx, pytorch / pytorch_libtorch, tensorrt / tensorrt_plan).
_REGISTRY: dict[str, str] = {
    "python": "naiad.backends.python:PythonModelBackend",
    "onnxruntime": "naiad.backends.onnxruntime:OnnxRuntimeBackend",
    "onnxruntime_onnx": "naiad.backends.onnxruntime:OnnxRuntimeBackend",
    "pytorch": "naiad.backends.pytorch:PyTorchBackend",
    "pytorch_libtorch": "naiad.backends.pytorch:PyTorchBackend",
    "tensorrt": "naiad.backends.tensorrt:TensorRTBackend",
    "tensorrt_plan": "naiad.backends.tensorrt:TensorRTBackend",
}


# The backends above whose class leaves `Backend.batch_tensors` False: their workers read
# each request's inputs apart (Batch.arrays), never the batch-major tensors, so the core
# builds none from client shm regions for their models (Core::set_batch_tensors). An
# ensemble has no workers: the core reads its requests (BatchAssembler::fill_from_regions).
# Named here so that the frontend need not import a backend module;
# tests/test_shm_worker.py checks it against the classes.
_READS_REQUESTS_APART = frozenset({"python"})


def reads_requests_apart(name: str) -> bool:
    """True when backend or platform `name` never takes the batch-major tensors."""
    return name in _READS_REQUESTS_APART


def backend_name(config: dict) -> str:
    """The name a model config selects its backend by: `backend`, else `platform`."""
    return config.get("backend") or config.get("platform") or ""


def load_backend(args: dict) -> Backend:
    """Load the model instance that Triton's initialize() `args` describe with the backend
    its config names. RuntimeError for a backend Naiad does not have."""
    name = backend_name(json.loads(args["model_config"]))
    target = _REGISTRY.get(name)
    if target is None:
        supported = ", ".join(sorted(_REGISTRY))
        raise RuntimeError(
            f"backend '{name}' of model '{args['model_name']}' is not supported yet "
            f"(supported: {supported})"
        )
    module_name, class_name = target.split(":")
    return getattr(importlib.import_module(module_name), class_name)(args)
