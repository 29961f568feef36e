"""Loading, reloading and unloading models while serving (Triton's model control).

One model name is changed by one operation at a time (a lock per name). A load that
finds the model loaded starts the changed versions beside the serving ones; only when
every new instance is READY does traffic move to them (the manager's serving table and
the fast lane's routes, in one step of the event loop), and only then are the replaced
versions drained (their requests in flight finish) and released. A load that fails
leaves whatever was serving untouched and reports why.

As in Triton, a load that changed a model loads again the ensembles that use it, so
their checks and decoupled rules (scheduling/ensemble.py) meet the model as it is now;
an ensemble that no longer fits is unloaded, and loaded again by a later load of a
model it uses.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from naiad.errors import AlreadyExists, Internal, InvalidArgument, Unavailable, Unsupported
from naiad.repository.autocomplete import complete_override
from naiad.repository.catalog import Catalog, check_model_name, version_stamp
from naiad.repository.overrides import (
    OverrideError,
    materialize_files,
    parse_config_override,
    remove_materialized,
    split_parameters,
)
from naiad.repository.registry import RegistrationError
from naiad.repository.remote_store import RepositoryUnreachable
from naiad.repository.repository import ModelEntry, scan_model
from naiad.scheduling.ensemble import EnsembleModel, is_ensemble
from naiad.scheduling.model import (
    LOADING,
    READY,
    UNAVAILABLE,
    UNLOADING,
    LoadedModel,
    UnloadableModel,
)

__all__ = ["ModelControl", "CONTROL_MODES"]

log = logging.getLogger("naiad")

CONTROL_MODES = ("none", "poll", "explicit")

# Triton's answer to a load or unload request when model control is not explicit.
_NOT_EXPLICIT = "explicit model load / unload is not allowed if polling is enabled"


class ModelControl:
    def __init__(
        self,
        manager,
        catalog: Catalog,
        mode: str,
        load_threads: int,
        drain_timeout: float,
        load_retries: int = 0,
    ):
        if mode not in CONTROL_MODES:
            raise ValueError(f"unknown model control mode '{mode}'")
        self.manager = manager
        self.catalog = catalog
        self.mode = mode
        self.drain_timeout = drain_timeout
        self.load_retries = load_retries  # --model-load-retry-count
        # Why a model could not even be tried (no folder, bad config, name in two
        # repositories): shown in the index while no version of it is loaded.
        self.failures: dict[str, str] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        # Versions replaced or unloaded that are still finishing their requests: shutdown
        # stops them too.
        self.retiring: list[LoadedModel] = []
        # Versions loading at once, across models (--model-load-thread-count).
        self._load_slots = asyncio.Semaphore(max(load_threads, 1))
        # Ensembles unloaded because a composing model's reload no longer fits them, by
        # name: what they were loaded from, loaded again with the next load of a model
        # they use (an unload request forgets them).
        self._unfitted: dict[str, ModelEntry] = {}

    # -- the protocol-neutral operations ---------------------------------------------
    async def load(
        self, name: str, parameters: dict | None = None, *, from_model: bool = False, served=None
    ) -> None:
        """A client's load request: only in explicit mode. `from_model`: a model's own
        (pb_utils.load_model), which takes no load slot: its caller may hold one (a
        model loading another from its initialize) and waits for this load. `served`:
        called once the loaded versions serve, before the versions they replace drain
        (a model reloading itself from execute is one of those)."""
        if self.mode != "explicit":
            raise Unavailable(_NOT_EXPLICIT)
        await self.apply_load(name, parameters, slot=not from_model, served=served)

    async def unload(self, name: str, unload_dependents: bool = False, served=None) -> None:
        """A client's unload request: only in explicit mode. Unloading a model that is not
        loaded succeeds, as in Triton. `unload_dependents`: an ensemble's composing
        models go too (and theirs), except those another loaded ensemble uses; without
        it an ensemble whose composing model goes stays loaded and is not ready.
        `served`: called once `name` takes no new request, before its requests in
        flight drain (a model unloading itself from execute is one of them)."""
        if self.mode != "explicit":
            raise Unavailable(_NOT_EXPLICIT)
        composing = self._composing(name) if unload_dependents else []
        await self.apply_unload(name, served=served)
        for model in composing:
            if not self._dependents(model):
                await self.unload(model, unload_dependents=True)

    def register_repository(self, repository: str, mapping: dict[str, str]) -> None:
        """Serves the models of the folder `repository` as well, `mapping` (model name ->
        subfolder) naming some of them (repository/registry.py): only in explicit mode,
        as Triton's. Raises AlreadyExists, InvalidArgument, Unsupported."""
        if self.mode != "explicit":
            raise Unsupported(
                "repository registration is not allowed if model control mode is not EXPLICIT"
            )
        try:
            self.catalog.register(repository, mapping)
        except RegistrationError as exc:
            raise (AlreadyExists if exc.conflict else InvalidArgument)(str(exc)) from None
        log.info("Model repository registered: %s", repository)

    def unregister_repository(self, repository: str) -> None:
        if self.mode != "explicit":
            raise Unsupported(
                "repository unregistration is not allowed if model control mode is not EXPLICIT"
            )
        try:
            self.catalog.unregister(repository)
        except RegistrationError as exc:
            raise InvalidArgument(str(exc)) from None
        log.info("Model repository unregistered: %s", repository)

    def _composing(self, name: str) -> list[str]:
        """The models the loaded ensemble `name` has steps on."""
        found: list[str] = []
        for model in self.manager.models.get(name, {}).values():
            if isinstance(model, EnsembleModel) and model.state == READY:
                for step in model.loaded_from.config.ensemble_scheduling.step:
                    if step.model_name not in found:
                        found.append(step.model_name)
        return found

    # -- what start-up, clients and the poller share ------------------------------------
    async def apply_load(
        self, name: str, parameters: dict | None = None, slot: bool = True, served=None
    ) -> None:
        async with self._lock(name):
            try:
                changed = await self._load(name, parameters or {}, slot, served)
            finally:
                # A cloud model's copy stays only while a version runs from it.
                self.catalog.evict_unused(name, self.manager.uses_path)
        if changed:
            await self._reload_dependents(name)

    async def apply_unload(self, name: str, forget: bool = False, served=None) -> None:
        """Withdraws every version of `name`, drains and releases them. `forget`: the
        model left the repository, so it leaves the index too."""
        async with self._lock(name):
            self._unfitted.pop(name, None)
            await self._unload(name, served)
            if forget:
                self.manager.models.pop(name, None)
            self.catalog.evict_unused(name, self.manager.uses_path)

    async def _unload(self, name: str, served=None) -> None:
        versions = self.manager.models.get(name, {})
        live = [m for m in versions.values() if m.state != UNAVAILABLE]
        self.manager.withdraw(name)
        if served is not None:
            served()
        await self._retire(live)
        # Versions that failed to load keep their reason (and, as in Triton, hold
        # strict readiness) until a load of the model succeeds.
        for model in live:
            model.reason = "unloaded"

    def _dependents(self, name: str) -> dict[str, ModelEntry]:
        """The ensembles with a step on `name`, loaded or unfitted, and what each was
        loaded from."""
        found = {}
        for ensemble, versions in self.manager.models.items():
            for model in versions.values():
                if isinstance(model, EnsembleModel) and model.state == READY:
                    found[ensemble] = model.loaded_from
        found.update(self._unfitted)
        return {
            ensemble: entry
            for ensemble, entry in found.items()
            if any(step.model_name == name for step in entry.config.ensemble_scheduling.step)
        }

    async def _reload_dependents(self, name: str) -> None:
        """Loads again each ensemble using `name` (then those using it); one that fails
        is unloaded, as Triton does, and kept to be tried again."""
        for ensemble, entry in self._dependents(name).items():
            async with self._lock(ensemble):
                try:
                    # No load slot: an ensemble starts no worker.
                    await self._load(ensemble, {}, slot=False, entry=entry)
                except (Internal, InvalidArgument):
                    # _load logged why; the versions it replaced were left serving.
                    await self._unload(ensemble)
                    self._unfitted[ensemble] = entry
                    continue
                self._unfitted.pop(ensemble, None)
            await self._reload_dependents(ensemble)

    def _lock(self, name: str) -> asyncio.Lock:
        lock = self._locks.get(name)
        if lock is None:
            lock = self._locks[name] = asyncio.Lock()
        return lock

    async def _load(
        self, name: str, parameters: dict, slot: bool = True, served=None, entry=None
    ) -> bool:
        """Loads `name` as `parameters` ask; whether anything changed. `entry`: load
        again from it (an ensemble whose composing model changed), whatever is serving."""
        forced = entry is not None
        if forced:
            materialized = False
        else:
            try:
                await self.catalog.fetch(name)  # a cloud model: its copy, up to date
            except (LookupError, RepositoryUnreachable) as exc:
                self._fail(name, str(exc))
            entry, materialized = self._entry(name, parameters)
        # Triton's explicit load of an ensemble loads its composing models too.
        composes = not forced and self.mode == "explicit" and is_ensemble(entry.config)
        old = self.manager.models.get(name, {})
        serving = {v: m for v, m in old.items() if m.state == READY}
        stamps = {v: version_stamp(entry.path, v) for v in entry.versions}
        keep = {
            v: serving[v]
            for v in entry.versions
            if v in serving
            and serving[v].stamp == stamps[v]
            and serving[v].path == entry.path
            and serving[v].loaded_from.config == entry.config
        }
        if forced:
            keep = {}
        elif len(keep) == len(entry.versions) and set(keep) == set(serving):
            if composes:
                await self._load_composing(entry, slot)
            return False  # nothing changed on disk or in the request: Triton does not reload
        for warning in entry.warnings:
            log.warning("%s", warning)
        fresh = [v for v in entry.versions if v not in keep]
        log.info("loading: %s versions %s", name, ", ".join(map(str, fresh)))
        started = []
        for version in fresh:
            model = self._new_version(entry, version)
            model.stamp = stamps[version]
            started.append(model)
        if not serving:
            # A first load: the index shows its versions LOADING meanwhile.
            self.manager.publish(name, {**keep, **{m.version: m for m in started}})
        if composes:
            # After publishing: an ensemble over this one, loading at the same time
            # (start-up), sees it LOADING and waits for it (EnsembleModel.composing_loaded).
            await self._load_composing(entry, slot)
        await asyncio.gather(*(self._start(m, slot) for m in started))
        await self._retry_failed(name, entry, keep, started, stamps, slot, not serving)
        failed = [m for m in started if not m.ready]
        if failed:
            if serving:
                # A reload that failed: the serving versions stay; the new ones go.
                await self._retire([m for m in started if m.ready])
                if materialized:
                    remove_materialized(entry.path)
            elif old and all(getattr(m, "graph_failed", False) for m in failed):
                # An ensemble whose composing models do not fit, unloaded before: as in
                # Triton, the index keeps showing the versions as they were.
                self.manager.publish(name, old)
            else:
                # A first load: the index shows each version's state and reason.
                self.manager.publish(name, {m.version: m for m in started})
                self.failures.pop(name, None)
                if materialized and not any(m.ready for m in started):
                    remove_materialized(entry.path)
            for model in failed:
                log.error("failed to load '%s' version %d: %s", name, model.version, model.reason)
            raise InvalidArgument(self.catalog.for_client(_load_failed(name, failed)))
        versions = {**keep, **{m.version: m for m in started}}
        retired = [m for v, m in old.items() if versions.get(v) is not m]
        self.manager.publish(name, versions)
        self.failures.pop(name, None)
        log.info("successfully loaded '%s'", name)
        if served is not None:
            served()
        await self._retire([m for m in retired if m.state != UNAVAILABLE])
        return True

    async def _load_composing(self, entry: ModelEntry, slot: bool) -> None:
        """The ensemble's composing models that are neither loaded nor loading, loaded
        first, as Triton's explicit load of an ensemble does (`slot` False: the loads
        take no load slot, as the ensemble's, whose caller may hold one). One that fails
        to load is left to the ensemble's own check to report."""
        for step in entry.config.ensemble_scheduling.step:
            name = step.model_name
            versions = self.manager.models.get(name, {}).values()
            # A locked name is being loaded (or is this chain's own: a cycle).
            if any(m.state in (READY, LOADING) for m in versions) or self._lock(name).locked():
                continue
            try:
                await self.apply_load(name, slot=slot)
            except (Internal, InvalidArgument, Unavailable):
                continue

    def _new_version(self, entry: ModelEntry, version: int):
        """Version `version` of `entry`, to start; one that its config refuses
        (entry.refusal) fails at once with the reason, as Triton's does."""
        if entry.refusal is not None:
            return UnloadableModel(entry, version, entry.refusal)
        return self.manager.new_model(entry, version)

    async def _retry_failed(
        self, name, entry, keep, started: list, stamps, slot: bool, publish: bool
    ) -> None:
        """--model-load-retry-count: each version of `started` that failed to load is
        loaded again from the start (a new worker), up to that many times, as Triton
        retries creating a model; `started` then holds the last try of each."""
        for attempt in range(1, self.load_retries + 1):
            if entry.refusal is not None:
                return  # its config, not the try, is what failed
            retry = [
                i
                for i, m in enumerate(started)
                if not m.ready and not getattr(m, "graph_failed", False)
            ]
            if not retry:
                return
            for i in retry:
                failed = started[i]
                log.warning(
                    "failed to load '%s' version %d: %s; retrying (%d of %d)",
                    name,
                    failed.version,
                    failed.reason,
                    attempt,
                    self.load_retries,
                )
                model = self.manager.new_model(entry, failed.version)
                model.stamp = stamps[failed.version]
                started[i] = model
            if publish:  # a first load: the index shows the new tries LOADING
                self.manager.publish(name, {**keep, **{m.version: m for m in started}})
            await asyncio.gather(*(self._start(started[i], slot) for i in retry))

    def _entry(self, name: str, parameters: dict) -> tuple[ModelEntry, bool]:
        """The model as this load would serve it: (entry, whether its folder is a
        temporary copy made for `file:` overrides). Raises Internal with the reason."""
        materialized = None
        try:
            check_model_name(name)
            config_text, files = split_parameters(parameters)
            if files and config_text is None:
                raise OverrideError("'file:' parameters need a 'config' parameter as well")
            config = parse_config_override(config_text, name) if config_text else None
            try:
                folder = self.catalog.locate(name)
            except LookupError:
                if not files:
                    raise
                folder = None  # a model that exists only in this request
            if files:
                materialized = folder = materialize_files(folder, name, files)
            if config is not None and folder is not None:
                config = complete_override(config, folder)  # auto-complete, as config.pbtxt
            entry = scan_model(folder, config=config, name=name)
        except (LookupError, OverrideError, OSError) as exc:
            if materialized is not None:
                remove_materialized(materialized)
            self._fail(name, str(exc))
        if entry.error:
            if materialized is not None:
                remove_materialized(materialized)
            self._fail(name, entry.error)
        return entry, materialized is not None

    def _fail(self, name: str, reason: str):
        # The index shows why a model of the repositories is not served; a name that is
        # no folder of theirs (a typo, `../x`) is only answered, as in Triton.
        serving = any(m.state == READY for m in self.manager.models.get(name, {}).values())
        folders, duplicates = self.catalog.scan()
        if not serving and (name in folders or name in duplicates):
            self.failures[name] = reason
        log.error("failed to load '%s': %s", name, reason)
        raise Internal(
            self.catalog.for_client(
                f"failed to load '{name}', failed to poll from model repository: {reason}"
            )
        )

    async def _start(self, model: LoadedModel, slot: bool = True) -> None:
        """Loads `model` (READY, or UNAVAILABLE with the reason); `slot` False: without
        waiting for a load slot."""
        if model.state == UNAVAILABLE:
            return  # could not even be registered
        composing_loaded = getattr(model, "composing_loaded", None)  # an ensemble
        if composing_loaded is not None:
            await composing_loaded()  # holding no slot: its composing models need them
        if not slot:
            await model.load()
            return
        async with self._load_slots:
            await model.load()

    async def _retire(self, models: list[LoadedModel]) -> None:
        """Lets `models`' requests in flight finish (up to the drain timeout), then stops
        their workers and releases them. Their routes are already elsewhere."""
        if not models:
            return
        loop = asyncio.get_running_loop()
        for model in models:
            model._set_state(UNLOADING)
        self.retiring.extend(models)
        try:
            deadline = loop.time() + self.drain_timeout
            while any(self.manager.draining(m) for m in models) and loop.time() < deadline:
                await asyncio.sleep(0.005)
            await asyncio.gather(*(m.unload(max(deadline - loop.time(), 1.0)) for m in models))
        finally:
            self.retiring = [m for m in self.retiring if m not in models]
        self.remove_temporary_folders(models)

    def remove_temporary_folders(self, models: list[LoadedModel]) -> None:
        """Deletes the temporary copies (file: overrides) that no loaded version uses."""
        for path in {m.path for m in models}:
            if self._temporary(path) and not self.manager.uses_path(path):
                remove_materialized(path)

    @staticmethod
    def _temporary(path: Path) -> bool:
        return Path(path).parent.name.startswith("naiad-model-")

    # -- the index -------------------------------------------------------------------------
    def index(self, ready_only: bool = False) -> list[dict]:
        """Triton's repository index: the models of the repositories (not those that exist
        only in a load request's files, as in Triton), one entry per version tried,
        `{"name"}` alone for one never loaded, sorted by name."""
        folders, duplicates = self.catalog.scan()
        models = self.manager.models
        names = sorted(set(folders) | set(duplicates))
        entries = []
        for name in names:
            versions = models.get(name)
            if versions:
                for version in sorted(versions):
                    entry = versions[version].entry()
                    if "reason" in entry:
                        entry["reason"] = self.catalog.for_client(entry["reason"])
                    entries.append(entry)
            elif name in self.failures or name in duplicates:
                reason = self.failures.get(name) or duplicates[name]
                entries.append(
                    {"name": name, "state": UNAVAILABLE, "reason": self.catalog.for_client(reason)}
                )
            else:
                entries.append({"name": name})
        if ready_only:
            entries = [e for e in entries if e.get("state") == READY]
        return entries

    def load_table(self) -> list[tuple[str, str, str]]:
        """(model, version, status) rows, as Triton prints them after start-up."""
        rows = []
        for name, versions in self.manager.models.items():
            for version, model in versions.items():
                status = READY if model.ready else f"{model.state}: {model.reason}"
                rows.append((name, str(version), status))
        for name, reason in self.failures.items():
            if not self.manager.models.get(name):
                rows.append((name, "-", f"UNAVAILABLE: {reason}"))
        return sorted(rows)


def _load_failed(name: str, failed: list) -> str:
    """Triton's answer to a load whose versions `failed` (ascending): each version's
    state and reason, then one newline; an ensemble whose composing models do not fit
    gets its plain reason."""
    if all(getattr(m, "graph_failed", False) for m in failed):
        return f"load failed for model '{name}': " + "".join(f"{m.reason}\n" for m in failed)
    states = "".join(f"version {m.version} is at UNAVAILABLE state: {m.reason};" for m in failed)
    return f"load failed for model '{name}': {states}\n"
