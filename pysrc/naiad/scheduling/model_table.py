"""The table of served models: every loaded version by name, which one serves by default,
and publishing a change of it to the lanes' routes and the workers' model directory.

Owns `models` (name -> version -> LoadedModel), `serving` (name -> the highest ready
version), the model of each `lane_model` (the codec's index of a model, which the lanes
and the I/O loop name requests by: `lane_models`, and `lane_models_ever` for the I/O
loop's requests in flight after a removal), the HTTP lane's infer routes, the gRPC lane's
table and the model directory file. Called only on the event loop; ModelControl decides
what changes (`publish`, `withdraw`) and the swap happens in one step of the loop, so
there is no lock.
"""

from __future__ import annotations

import re
from pathlib import Path

from naiad.errors import NotFound, Unavailable
from naiad.model_directory import ModelDirectory
from naiad.repository.version_string import parse_version
from naiad.scheduling.ensemble import EnsembleModel
from naiad.scheduling.model import UNAVAILABLE, LoadedModel

# Model names that appear in a URL as they are.
_PLAIN_NAME = re.compile(r"[A-Za-z0-9._-]+")


class ModelTable:
    def __init__(self, lane, grpc_lane, fast_lane: bool):
        self.lane = lane  # _core.FastLane: the HTTP lane's routes
        self.grpc_lane = grpc_lane  # _core.GrpcLane: the gRPC lane's table
        self.fast_lane = fast_lane  # False: no lane routes, every request goes the general way
        self.models: dict[str, dict[int, LoadedModel]] = {}
        self.serving: dict[str, LoadedModel] = {}  # name -> highest ready version
        self.lane_models: dict[int, LoadedModel] = {}  # lane_model -> model
        # Every lane_model's model, removed ones too: the C++ I/O loop's requests in flight
        # keep theirs (IoLoopLink.record_answered).
        self.lane_models_ever: dict[int, LoadedModel] = {}
        # name/version -> core handle, for workers' own requests (BLS, ensemble steps).
        self.directory = ModelDirectory(self)

    # -- changes, decided by ModelControl ------------------------------------------
    def publish(self, name: str, versions: dict[int, LoadedModel]) -> None:
        """Makes `versions` the versions of `name`, in one step of the event loop: the
        serving table and the lane's routes point at them before anything else runs. The
        versions they replace take no new request (their requests in flight finish)."""
        old = self.models.get(name, {})
        self.models[name] = versions
        ready = [m for m in versions.values() if m.ready]
        if ready:
            self.serving[name] = max(ready, key=lambda m: m.version)
        else:
            self.serving.pop(name, None)
        self._add_lane_routes(name)  # replaces the targets of the routes they share
        for model in old.values():
            if versions.get(model.version) is not model and model.lane_model is not None:
                self.lane.remove_model(model.lane_model)  # the routes left to it go
        self.models_changed()

    def withdraw(self, name: str) -> None:
        """`name` takes no new request, on either path; its requests in flight finish."""
        self.serving.pop(name, None)
        for model in self.models.get(name, {}).values():
            if model.lane_model is not None:
                self.lane.remove_model(model.lane_model)
        self.models_changed()

    def models_changed(self) -> None:
        """The served models or their states changed: workers' directory and the core's
        ensemble graphs (steps name models by handle) follow."""
        directory = getattr(self, "directory", None)
        if directory is not None:
            directory.update()
        self._set_grpc_routes()
        for versions in self.models.values():
            for model in versions.values():
                if isinstance(model, EnsembleModel) and model.graph_set:
                    model.refresh_graph()

    def register_lane_model(self, model: LoadedModel, lane_model: int) -> None:
        """`model` answers for the lane's model `lane_model`."""
        self.lane_models[lane_model] = model
        self.lane_models_ever[lane_model] = model

    def unregister_lane_model(self, lane_model: int) -> None:
        """The lane's model `lane_model` was removed; its requests in flight keep their model."""
        self.lane_models.pop(lane_model, None)

    def _add_lane_routes(self, name: str) -> None:
        """Infer URLs the lane takes in take_http_requests for `name`: every version's,
        and the unversioned one for the version served by default. Names that a URL
        would carry escaped or split stay with the full parser."""
        if not self.fast_lane or not _PLAIN_NAME.fullmatch(name):
            return
        if any(getattr(m, "decoupled", False) for m in self.models.get(name, {}).values()):
            return  # infer on a decoupled model is refused by the general path (501)
        for version, model in self.models.get(name, {}).items():
            if model.lane_model is not None and model.ready:
                self.lane.add_route(f"/v2/models/{name}/versions/{version}/infer", model.lane_model)
        serving = self.serving.get(name)
        if serving is not None and serving.lane_model is not None:
            self.lane.add_route(f"/v2/models/{name}/infer", serving.lane_model)

    def _set_grpc_routes(self) -> None:
        """The lanes' table of every known version and its state (the codec's, read by
        both): the gRPC lane serves the ready ones with a lane model, and both answer
        unknown or unready ones with Triton's status and message themselves
        (csrc/codec/model_lookup.h). The versions of a name
        withdrawn, or one the HTTP lane leaves to the general path, stay the general
        path's."""
        table = {}
        for name, versions in self.models.items():
            served = (
                self.fast_lane
                and name in self.serving
                and _PLAIN_NAME.fullmatch(name) is not None
                and not any(getattr(m, "decoupled", False) for m in versions.values())
            )
            table[name] = [
                (version, model.ready, model.lane_model if served else None)
                for version, model in versions.items()
            ]
        self.grpc_lane.set_models(table)

    # -- queries -------------------------------------------------------------------
    def get(self, name: str, version: str = "") -> LoadedModel:
        if not version:  # the hot path: the version the policy serves by default
            model = self.serving.get(name)
            if model is not None and model.ready:
                return model
        versions = self.models.get(name)
        if not versions:
            raise NotFound(f"Request for unknown model: '{name}' is not found")
        if version:
            version = parse_version(version)  # Triton's INVALID_ARGUMENT if not a number
            model = versions.get(version)
            if model is None:
                raise NotFound(
                    f"Request for unknown model: '{name}' version {version} is not found"
                )
            if not model.ready:
                raise Unavailable(
                    f"Request for unknown model: '{name}' version {version} is not at ready state"
                )
            return model
        ready = [v for v, m in versions.items() if m.ready]
        if not ready:
            raise NotFound(f"Request for unknown model: '{name}' has no available versions")
        return versions[max(ready)]

    def model_ready(self, name: str, version: str = "") -> bool:
        """Whether the model (version) is ready; an unknown one is not. A version that is
        no number is InvalidArgument, as in Triton."""
        try:
            return self.get(name, version).healthy
        except (NotFound, Unavailable):
            return False

    def all_healthy(self) -> bool:
        """Every version that was loaded and not unloaded since is ready with all its
        instances up. Models whose config could not be read have no version to wait for;
        Triton does not count them either (they are in the index, with the reason)."""
        for versions in self.models.values():
            for model in versions.values():
                if model.reason == "unloaded":
                    continue  # unloaded on purpose
                if not model.healthy:
                    return False
        return True

    def statistics(self, name: str = "", version: str = "") -> dict:
        if name:
            if version:
                models = [self.get(name, version)]
            else:
                self.get(name)  # raises for an unknown or unavailable model
                models = [m for m in self.models[name].values() if m.ready]
        else:
            models = [m for v in self.models.values() for m in v.values() if m.ready]
        return {"model_stats": [m.stats.to_json() for m in models]}

    def uses_path(self, path: Path) -> bool:
        """Whether a loaded version still runs from folder `path`."""
        return any(
            m.path == path and m.state != UNAVAILABLE
            for versions in self.models.values()
            for m in versions.values()
        )

    def all_versions(self) -> list:
        """Every loaded version of every model."""
        return [m for versions in self.models.values() for m in versions.values()]

    def core_models(self) -> dict:
        """Loaded model versions by core handle."""
        return {m.core_model: m for m in self.all_versions() if m.core_model is not None}

    def is_ensemble(self, name: str, version: int) -> bool:
        return isinstance(self.models.get(name, {}).get(version), EnsembleModel)
