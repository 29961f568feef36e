"""Backends: one module per `backend:` / `platform:` of config.pbtxt, loaded in a worker process.

Each module implements `naiad.backends.base.Backend` and knows nothing of HTTP or gRPC. The
registry below maps Triton's backend and platform names to the class that serves them; it
names modules rather than importing them, so a worker imports only the backend it runs.
A name that is none of them may be a Python-based backend (`<backend-directory>/<name>/
model.py`, naiad.backends.python_based), served by the Python backend with that file.
"""

from __future__ import annotations

import importlib
import json

from naiad.backends import python_based
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
    return name in _READS_REQUESTS_APART or python_based_model_file(name) is not None


def python_based_model_file(name: str) -> str | None:
    """The model.py of Python-based backend `name` (`<backend-directory>/<name>/model.py`),
    or None: Naiad's own backends come first, as a backend library found would in
    Triton."""
    if name in _REGISTRY:
        return None
    return python_based.model_file(name)


def is_known(name: str) -> bool:
    """True when backend or platform `name` is one Naiad can load a model with."""
    return name in _REGISTRY or python_based_model_file(name) is not None


def unknown_backend_message(name: str, model_name: str) -> str:
    """What a model naming a backend Naiad does not have fails to load with."""
    supported = ", ".join(sorted(_REGISTRY))
    return (
        f"backend '{name}' of model '{model_name}' is not supported yet "
        f"(supported: {supported}; or a Python-based backend "
        f"{python_based.backend_directory()}/{name}/{python_based.MODEL_FILENAME})"
    )


def backend_name(config: dict) -> str:
    """The name a model config selects its backend by: `backend`, else `platform`."""
    return config.get("backend") or config.get("platform") or ""


def load_backend(args: dict) -> Backend:
    """Load the model instance that Triton's initialize() `args` describe with the backend
    its config names. RuntimeError for a backend Naiad does not have."""
    name = backend_name(json.loads(args["model_config"]))
    target = _REGISTRY.get(name)
    if target is None:
        backend_file = python_based_model_file(name)
        if backend_file is None:
            raise RuntimeError(unknown_backend_message(name, args["model_name"]))
        from naiad.backends.python import PythonModelBackend

        return PythonModelBackend(args, backend_file=backend_file)
    module_name, class_name = target.split(":")
    return getattr(importlib.import_module(module_name), class_name)(args)
