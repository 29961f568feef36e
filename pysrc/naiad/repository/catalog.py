"""The models of one or more repository folders: where each lives and how it looks now.

Triton serves several `--model-repository` folders as one namespace; a name found in two
of them is an error for that name, not for the others. A model's *stamp* summarises what
is on disk for one version (config and file sizes and times), so that poll mode and a
repeated load can tell a changed model from an unchanged one without reading its files.
"""

from __future__ import annotations

import os
from pathlib import Path

from naiad.repository.redact import PathRedactor

__all__ = ["Catalog", "check_model_name", "folder_stamp", "version_stamp"]


class Catalog:
    def __init__(self, repositories: list[Path]):
        self.repositories = [Path(r) for r in repositories]
        # What a client may read of the paths in a load error (redact.py).
        self.for_client = PathRedactor(self.repositories).for_client

    def scan(self) -> tuple[dict[str, Path], dict[str, str]]:
        """(name -> model folder, name -> why it cannot be served) over every repository.

        A name in two repositories goes into the second map with Triton's reason."""
        found: dict[str, list[Path]] = {}
        for repository in self.repositories:
            try:
                children = sorted(repository.iterdir())
            except OSError:
                continue  # a repository removed while serving: its models go away
            for child in children:
                if child.name.startswith(".") or not child.is_dir():
                    continue
                found.setdefault(child.name, []).append(child)
        folders = {name: paths[0] for name, paths in found.items() if len(paths) == 1}
        duplicates = {
            name: f"failed to poll model '{name}': not unique across all model repositories"
            for name, paths in found.items()
            if len(paths) > 1
        }
        return folders, duplicates

    def locate(self, name: str) -> Path:
        """The folder of model `name`; raises LookupError with the reason when there is none
        or more than one."""
        check_model_name(name)
        paths = [r / name for r in self.repositories if (r / name).is_dir()]
        if not paths:
            raise LookupError(f"no model folder '{name}' in any model repository")
        if len(paths) > 1:
            raise LookupError(
                f"failed to poll model '{name}': not unique across all model repositories"
            )
        return paths[0]


def check_model_name(name: str) -> None:
    """A model name is one folder name: refuse anything that would reach another folder
    (`../x`, `a/b`, absolute paths) before it is joined to a path. Raises LookupError."""
    if (
        not name
        or name in (".", "..")
        or "/" in name
        or "\\" in name
        or "\0" in name
        or name.startswith(".")
    ):
        raise LookupError(f"invalid model name '{name}': a model name is one folder name")


def folder_stamp(model_dir: Path) -> tuple:
    """Every file of the model folder, every version included (see version_stamp)."""
    return version_stamp(model_dir, None)


def version_stamp(model_dir: Path, version: int | None) -> tuple:
    """What decides whether version `version` of the model in `model_dir` changed: the
    config file and every file of the version folder and of the model folder outside the
    version folders, by relative path, size and modification time. Folders count too,
    so that a new empty version folder is a change."""
    model_dir = Path(model_dir)
    entries = []
    for root, dirs, files in os.walk(model_dir):
        relative = os.path.relpath(root, model_dir)
        top = relative.split(os.sep, 1)[0]
        if version is not None and top != "." and top.isdigit() and top != str(version):
            dirs[:] = []  # another version's folder
            continue
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for folder in dirs:
            if version is None or relative != "." or not folder.isdigit():
                entries.append((os.path.join(relative, folder), -1, 0))
        for file in sorted(files):
            if file.endswith(".pyc"):
                continue
            path = os.path.join(root, file)
            try:
                info = os.stat(path)
            except OSError:
                continue
            entries.append((os.path.join(relative, file), info.st_size, info.st_mtime_ns))
    return tuple(entries)
