"""Poll mode: every --repository-poll-secs, apply what changed in the repositories.

A model folder that appeared is loaded, one that went away is unloaded (and leaves the
index), and one whose files changed (config, a version folder added or removed, a file
rewritten) is loaded again: ModelControl starts only the versions that changed and
moves traffic once they are ready. A change that fails to load leaves what was serving,
and is not tried again until the folder changes once more.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from naiad.errors import NaiadError

__all__ = ["RepositoryPoller"]

log = logging.getLogger("naiad")


class RepositoryPoller:
    def __init__(self, control, interval: float):
        self.control = control
        self.interval = interval
        self._task: asyncio.Task | None = None
        # name -> the folder stamp last acted on; start-up already loaded what is there.
        folders, _ = control.catalog.scan()
        self._seen = {name: control.catalog.stamp(path) for name, path in folders.items()}

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.poll_once()
            except Exception:  # one bad poll must not end polling
                log.exception("polling the model repositories failed")

    async def poll_once(self) -> None:
        control = self.control
        await control.catalog.refresh()  # cloud repositories: list them again
        folders, duplicates = control.catalog.scan()
        control.failures.update(duplicates)
        known = set(self._seen) | set(control.manager.models)
        gone = [name for name in known if name not in folders]
        changed = []
        for name, path in folders.items():
            stamp = control.catalog.stamp(path)
            if self._seen.get(name) != stamp:
                self._seen[name] = stamp
                changed.append(name)
        for name in gone:
            self._seen.pop(name, None)
            control.failures.pop(name, None)
            log.info("model '%s' left the repository: unloading it", name)
        await asyncio.gather(
            *(control.apply_unload(name, forget=True) for name in gone),
            *(self._load(name) for name in changed),
        )

    async def _load(self, name: str) -> None:
        try:
            await self.control.apply_load(name)
        except NaiadError:
            pass  # logged and recorded by ModelControl; the serving versions stay
