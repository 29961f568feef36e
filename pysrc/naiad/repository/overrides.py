"""The `parameters` of a load request: a config override and `file:<path>` model files.

A config override is Triton's model config as JSON text; it replaces config.pbtxt. Files
sent with the request are written into a fresh temporary copy of the model folder, never
into the repository: the copy is what the model loads from, and it goes away with the
model. Every path is checked to stay inside that copy (no `..`, no absolute path, no
symbolic link leading out), so a request can never write anywhere else.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from google.protobuf import json_format

from naiad.protos.model_config_pb2 import ModelConfig
from naiad.repository.config import (
    ConfigError,
    VersionConfigError,
    complete_model_config,
    validate_model_config,
)

__all__ = [
    "OverrideError",
    "materialize_files",
    "parse_config_override",
    "remove_materialized",
    "split_parameters",
]

FILE_PREFIX = "file:"


class OverrideError(ValueError):
    """A load parameter that cannot be used; the message says which and why."""


def split_parameters(parameters: dict) -> tuple[str | None, dict[str, bytes]]:
    """(config JSON text or None, {relative path: bytes}) from a load request's parameters."""
    config = None
    files: dict[str, bytes] = {}
    for key, value in (parameters or {}).items():
        if key == "config":
            if not isinstance(value, str):
                raise OverrideError("load parameter 'config' must be a string of JSON")
            config = value
        elif key.startswith(FILE_PREFIX):
            if not isinstance(value, (bytes, bytearray)):
                raise OverrideError(f"load parameter '{key}' must carry the file's bytes")
            files[key[len(FILE_PREFIX) :]] = bytes(value)
    return config, files


def parse_config_override(text: str, name: str) -> ModelConfig:
    """The override's ModelConfig, completed and checked as a config.pbtxt would be."""
    config = ModelConfig()
    try:
        json_format.Parse(text, config)
    except json_format.ParseError as exc:
        raise OverrideError(f"Invalid config override: {exc}") from None
    try:
        complete_model_config(config, name)
        validate_model_config(config)
    except VersionConfigError:
        pass  # each version of the load fails with it, as for config.pbtxt (scan_model)
    except ConfigError as exc:
        raise OverrideError(f"Invalid config override: {exc.message}") from None
    return config


def materialize_files(source: Path | None, name: str, files: dict[str, bytes]) -> Path:
    """A new temporary folder `<tmp>/<name>` holding a copy of `source` (when the model has
    one) with `files` written over it; returns the model folder. Raises OverrideError for
    a path that would leave the folder, and leaves nothing behind then."""
    root = Path(tempfile.mkdtemp(prefix="naiad-model-"))
    model_dir = root / name
    try:
        if source is not None:
            # Links are copied as links, so the containment check below sees through them.
            shutil.copytree(
                source,
                model_dir,
                symlinks=True,
                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
            )
        else:
            model_dir.mkdir()
        real_dir = os.path.realpath(model_dir)
        for relative, data in files.items():
            _write_inside(real_dir, relative, data)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return model_dir


def _write_inside(real_dir: str, relative: str, data: bytes) -> None:
    key = f"{FILE_PREFIX}{relative}"
    parts = relative.replace("\\", "/").split("/")
    if (
        not relative
        or "\0" in relative
        or os.path.isabs(relative)
        or relative.startswith("/")
        or any(part in ("", ".", "..") for part in parts)
    ):
        raise OverrideError(
            f"load parameter '{key}': the path must be relative and stay inside the model folder"
        )
    # Folder by folder, so that no folder is made through a link that leads elsewhere.
    folder = real_dir
    for part in parts[:-1]:
        folder = os.path.join(folder, part)
        if os.path.islink(folder):
            raise OverrideError(f"load parameter '{key}': the path leads through a link")
        if not os.path.isdir(folder):
            os.mkdir(folder)
    target = os.path.join(folder, parts[-1])
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
    try:
        fd = os.open(target, flags, 0o644)
    except OSError as exc:
        raise OverrideError(f"load parameter '{key}': cannot write the file: {exc}") from None
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def remove_materialized(model_dir: Path) -> None:
    """Deletes a folder made by materialize_files (its temporary parent with it)."""
    root = Path(model_dir).parent
    if root.name.startswith("naiad-model-"):
        shutil.rmtree(root, ignore_errors=True)
