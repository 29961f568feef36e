"""Python-based backends (Triton 24.x): `<backend-directory>/<name>/model.py`.

A model whose config says `backend: "<name>"`, where `<name>` is none of Naiad's own
backends and `<backend-directory>/<name>/model.py` exists, is served by the Python backend
with that file: every model naming the backend shares the one implementation, each getting
its own initialize() args (model_repository, model_config, model_name, ...). A `model.py`
in the model's own folder is not read, as in Triton.

The directory is `--backend-directory` (Triton's default /opt/tritonserver/backends). The
server sets it in its environment, which its workers and the auto-complete child inherit,
so each process reads the one setting from the same place.
"""

from __future__ import annotations

import os

__all__ = [
    "DEFAULT_BACKEND_DIRECTORY",
    "MODEL_FILENAME",
    "backend_directory",
    "model_file",
    "set_backend_directory",
]

DEFAULT_BACKEND_DIRECTORY = "/opt/tritonserver/backends"  # tritonserver's default
MODEL_FILENAME = "model.py"  # Triton's only name for a Python-based backend's file
# The --backend-directory of the server this process belongs to.
ENVIRONMENT_VARIABLE = "NAIAD_BACKEND_DIRECTORY"


def set_backend_directory(path: str | os.PathLike | None) -> None:
    """--backend-directory for this process and those it starts (None: Triton's default)."""
    if path:
        os.environ[ENVIRONMENT_VARIABLE] = os.path.abspath(os.fspath(path))
    else:
        os.environ.pop(ENVIRONMENT_VARIABLE, None)


def backend_directory() -> str:
    return os.environ.get(ENVIRONMENT_VARIABLE) or DEFAULT_BACKEND_DIRECTORY


def model_file(name: str) -> str | None:
    """`<backend-directory>/<name>/model.py` when it is a file, else None. Whether `name`
    is one of Naiad's own backends is the registry's question (naiad.backends)."""
    if not name or name in (".", "..") or "/" in name or os.sep in name:
        return None  # a backend name is one folder of the directory, never a path
    path = os.path.join(backend_directory(), name, MODEL_FILENAME)
    return path if os.path.isfile(path) else None
