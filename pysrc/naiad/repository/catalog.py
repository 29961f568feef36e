"""The models of one or more repository folders: where each lives and how it looks now.

Triton serves several `--model-repository` folders as one namespace; a name found in two
of them is an error for that name, not for the others. A model's *stamp* summarises what
is on disk for one version (config and file sizes and times), so that poll mode and a
repeated load can tell a changed model from an unchanged one without reading its files.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

from naiad.repository.redact import PathRedactor
from naiad.repository.registry import RepositoryRegistry
from naiad.repository.remote_repository import RemoteRepository, RepositoryUnreachable

__all__ = ["Catalog", "check_model_name", "folder_stamp", "version_stamp"]

log = logging.getLogger("naiad")


class Catalog:
    def __init__(self, repositories: list):
        """`repositories`: local folders, and cloud repositories already opened
        (remote_repository.py), each standing in the list as its cache folder."""
        self.remotes = {r.root: r for r in repositories if isinstance(r, RemoteRepository)}
        self.repositories = [
            r.root if isinstance(r, RemoteRepository) else Path(r) for r in repositories
        ]
        # Repositories registered while serving, with their folder -> name mappings.
        self.registry = RepositoryRegistry(self.repositories)
        # What a client may read of the paths in a load error (redact.py).
        self.for_client = PathRedactor(self.repositories).for_client

    def register(self, repository: str, mapping: dict[str, str]) -> None:
        """Serves the models of the folder `repository` too, `mapping` (model name ->
        subfolder) naming some of them; RegistrationError (registry.py) if it cannot."""
        self.registry.register(repository, mapping)
        self.for_client = PathRedactor(self._all()).for_client

    def unregister(self, repository: str) -> None:
        self.registry.unregister(repository)
        self.for_client = PathRedactor(self._all()).for_client

    def _all(self) -> list[Path]:
        return self.repositories + self.registry.folders

    def scan(self) -> tuple[dict[str, Path], dict[str, str]]:
        """(name -> model folder, name -> why it cannot be served) over every repository.

        A name in two repositories goes into the second map with Triton's reason."""
        found: dict[str, list[Path]] = {}
        for repository in self._all():
            remote = self.remotes.get(repository)
            if remote is not None:  # its last listing: the folders need not be in the cache
                for name in remote.names():
                    if not name.startswith("."):
                        found.setdefault(name, []).append(repository / name)
                continue
            try:
                children = sorted(repository.iterdir())
            except OSError:
                continue  # a repository removed while serving: its models go away
            for child in children:
                if child.name.startswith(".") or not child.is_dir():
                    continue
                found.setdefault(self.registry.name_of(child), []).append(child)
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
        mapped = self.registry.folder_of(name)
        if mapped is not None:
            if not mapped.is_dir():
                raise LookupError(f"mapped path '{mapped}' does not exist for model '{name}'")
            return mapped
        paths = [r / name for r in self._all() if self._holds(r, name)]
        if not paths:
            raise LookupError(f"no model folder '{name}' in any model repository")
        if len(paths) > 1:
            raise LookupError(
                f"failed to poll model '{name}': not unique across all model repositories"
            )
        return paths[0]

    def _holds(self, repository: Path, name: str) -> bool:
        remote = self.remotes.get(repository)
        if remote is not None:
            return name in remote.models
        folder = repository / name
        return folder.is_dir() and not self.registry.is_mapped(folder)

    def stamp(self, model_dir: Path) -> tuple:
        """What poll mode compares for the model in `model_dir`: its files (folder_stamp),
        or for a cloud repository its objects as last listed."""
        remote = self.remotes.get(Path(model_dir).parent)
        if remote is not None:
            return remote.stamp(Path(model_dir).name)
        return folder_stamp(model_dir)

    async def refresh(self) -> None:
        """Lists the cloud repositories again (poll mode). One that cannot be reached is
        logged, naming it, and keeps its last listing: its models keep serving."""
        loop = asyncio.get_running_loop()
        for remote in self.remotes.values():
            try:
                await loop.run_in_executor(None, remote.refresh)
            except RepositoryUnreachable as exc:
                if remote.unreachable != str(exc):
                    log.error("%s; its models keep serving", exc)
                remote.unreachable = str(exc)
            else:
                if remote.unreachable is not None:
                    log.info("model repository '%s' can be read again", remote.url)
                remote.unreachable = None

    async def fetch(self, name: str) -> None:
        """Brings the cache's copy of model `name` up to date in each cloud repository (a
        load reads it from there). Raises RepositoryUnreachable, LookupError for a name
        that is no folder name."""
        if not self.remotes:
            return
        check_model_name(name)
        loop = asyncio.get_running_loop()
        for remote in self.remotes.values():
            await loop.run_in_executor(None, remote.fetch, name)

    def evict_unused(self, name: str, in_use) -> None:
        """Deletes the cache's copy of `name` unless `in_use(folder)` (a loaded version
        runs from it)."""
        for root, remote in self.remotes.items():
            if not in_use(root / name):
                remote.evict(name)

    def close(self) -> None:
        """Deletes the cloud repositories' cache folders (shutdown)."""
        for remote in self.remotes.values():
            remote.close()


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
