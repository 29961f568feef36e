"""Backends: one module per `backend:` / `platform:` of config.pbtxt, loaded in a worker process.

Each module is named after Triton's backend name (`python`, `onnxruntime`, `pytorch`,
`tensorrt`) and knows nothing of HTTP or gRPC; a worker imports only the one it runs.
"""

from __future__ import annotations

import importlib
from types import ModuleType


def backend_module(backend_name: str) -> ModuleType:
    """The module `naiad.backends.<backend_name>`; ImportError if Naiad has none by that name."""
    if not backend_name.isidentifier():
        raise ImportError(f"no Naiad backend named {backend_name!r}")
    try:
        return importlib.import_module(f"{__name__}.{backend_name}")
    except ModuleNotFoundError as exc:
        if exc.name == f"{__name__}.{backend_name}":
            raise ImportError(f"no Naiad backend named {backend_name!r}") from exc
        raise
