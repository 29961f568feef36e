"""A cloud repository seen as a local one: the listing of its models, and a cache folder
holding a copy of each model that is loaded.

The catalog (catalog.py) names a remote model by its folder in the cache (`<cache>/<model>`)
whether it is there yet or not; its stamp comes from the listing (each object's key, size
and ETag), so the poller notices added, removed and changed models and versions without
downloading anything. Loading a model brings its folder up to date first (`fetch`: new
and changed objects are downloaded, objects gone from the bucket are deleted), and the
rest of Naiad reads it as any local folder; unloading it deletes the copy (`evict`), and
`close` (shutdown) deletes the cache.

Where the cache lives: Triton's TRITON_AWS_MOUNT_DIRECTORY, TRITON_GCS_MOUNT_DIRECTORY or
TRITON_AZURE_MOUNT_DIRECTORY (an existing folder; each repository gets a numbered folder
in it), else a new temporary folder.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path

from naiad.repository import cloud_url
from naiad.repository.remote_store import ObjectInfo, RepositoryUnreachable, open_store

__all__ = ["RemoteRepository", "RepositoryUnreachable", "open_remote"]

log = logging.getLogger("naiad")


def open_remote(url: str, index: int) -> RemoteRepository:
    """Opens repository `url` (the `index`th --model-repository) and lists it: blocking.
    Raises CloudPathError or RepositoryUnreachable, leaving no cache folder behind."""
    repository = RemoteRepository(url, index)
    try:
        repository.refresh()
    except BaseException:
        repository.close()
        raise
    return repository


class RemoteRepository:
    def __init__(self, url: str, index: int):
        self.location = cloud_url.parse(url)
        self.url = url
        self.store = open_store(self.location)
        self.root = self._make_root(index)
        # The last listing that succeeded: model name -> relative key -> object. A poll
        # that cannot reach the bucket keeps it, so what is serving stays.
        self.models: dict[str, dict[str, ObjectInfo]] = {}
        # What each model's folder in the cache holds: relative key -> (size, ETag).
        self._fetched: dict[str, dict[str, tuple[int, str]]] = {}
        self.unreachable: str | None = None  # why the last listing failed, once logged

    def _make_root(self, index: int) -> Path:
        variable = cloud_url.MOUNT_DIRECTORY_VARIABLES[self.location.scheme]
        mount = os.environ.get(variable)
        if not mount:
            return Path(tempfile.mkdtemp(prefix="naiad-repository-"))
        if not os.path.isdir(mount):
            raise cloud_url.CloudPathError(
                f"model repository '{self.url}': {variable} '{mount}' is not a folder"
            )
        root = Path(mount) / f"repository-{index}"
        if root.exists() and any(root.iterdir()):
            raise cloud_url.CloudPathError(
                f"model repository '{self.url}': {variable} '{mount}' holds '{root.name}' "
                "already (it must be empty, as Triton asks)"
            )
        root.mkdir(exist_ok=True)
        return root

    # -- the listing ------------------------------------------------------------------
    def refresh(self) -> None:
        """Lists the whole repository again (blocking); raises RepositoryUnreachable and
        keeps the last listing when it cannot."""
        models: dict[str, dict[str, ObjectInfo]] = {}
        for info in self.store.list(""):
            name, _, rest = info.key.partition("/")
            if name and _ and _safe(info.key):
                models.setdefault(name, {})[rest] = info
        self.models = models

    def names(self) -> list[str]:
        return sorted(self.models)

    def stamp(self, name: str) -> tuple:
        """What poll mode compares: every object of the model, by key, size and ETag."""
        objects = self.models.get(name, {})
        return tuple((key, info.size, info.etag) for key, info in sorted(objects.items()))

    # -- the cache ----------------------------------------------------------------------
    def fetch(self, name: str) -> bool:
        """Brings `<cache>/<name>` up to date with the bucket (blocking): whether the model
        is in the bucket. Raises RepositoryUnreachable."""
        objects = {
            info.key: info for info in self.store.list(name + "/") if _safe(name + "/" + info.key)
        }
        # A new dict, not a change in place: the event loop reads the listing meanwhile.
        models = {n: listed for n, listed in self.models.items() if n != name}
        if not objects:
            self.models = models
            self.evict(name)
            return False
        self.models = {**models, name: objects}
        folder = self.root / name
        have = self._fetched.setdefault(name, {})
        for key in sorted(set(have) - set(objects)):  # gone from the bucket
            have.pop(key)
            target = folder / key
            if target.is_dir():
                shutil.rmtree(target, ignore_errors=True)
            else:
                target.unlink(missing_ok=True)
        for key, info in sorted(objects.items()):
            target = folder / key
            if key.endswith("/") or key == "":  # a folder marker: an empty folder
                target.mkdir(parents=True, exist_ok=True)
                have[key] = (info.size, info.etag)
                continue
            if have.get(key) == (info.size, info.etag) and target.is_file():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            # Written beside and renamed: a worker reading the folder never sees half a file.
            partial = target.with_name(f".{target.name}.naiad-partial")
            try:
                self.store.download(self.location.prefix + name + "/" + key, str(partial))
                os.replace(partial, target)
            finally:
                partial.unlink(missing_ok=True)
            have[key] = (info.size, info.etag)
        self._remove_strays(folder, set(objects))
        return True

    def _remove_strays(self, folder: Path, keys: set[str]) -> None:
        """Files in the model's cache folder that are no object of the bucket (left by an
        earlier fetch that failed half-way)."""
        for root, _, files in os.walk(folder):
            for file in files:
                relative = os.path.relpath(os.path.join(root, file), folder)
                if relative not in keys:
                    os.unlink(os.path.join(root, file))

    def evict(self, name: str) -> None:
        """Deletes the model's copy (it is no longer loaded)."""
        self._fetched.pop(name, None)
        shutil.rmtree(self.root / name, ignore_errors=True)

    def close(self) -> None:
        """Deletes the cache (shutdown)."""
        self._fetched.clear()
        # The temporary folder, or our numbered folder in the mount directory.
        shutil.rmtree(self.root, ignore_errors=True)


def _safe(key: str) -> bool:
    """A key that stays inside the model's folder once joined to it."""
    parts = key.split("/")
    return not key.startswith("/") and not any(p in (".", "..") for p in parts) and "\0" not in key
