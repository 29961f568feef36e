"""A loaded model version: validation, its instances, submission to the core, stats."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import logging
from functools import partial

from naiad.backends import reads_requests_apart
from naiad.errors import InvalidArgument, Unavailable, Unsupported
from naiad.repository.config import config_to_json
from naiad.repository.labels import output_labels
from naiad.repository.metadata import model_metadata
from naiad.scheduling.instance import Instance
from naiad.scheduling.stats import ModelStats
from naiad.sequence_parameters import END, START, sequence_of
from naiad.types import InferRequest
from naiad.validation import RequestValidator

log = logging.getLogger("naiad")

LOADING, READY, UNAVAILABLE = "LOADING", "READY", "UNAVAILABLE"
UNLOADING = "UNLOADING"  # no new requests; those in flight finish before it is released

# Triton's answers to a one-response infer call on a decoupled model.
DECOUPLED_HTTP_INFER = "HTTP end point doesn't support models with decoupled transaction policy"
DECOUPLED_GRPC_INFER = "ModelInfer RPC doesn't support models with decoupled transaction policy"

_KIND_NAMES = {0: "MODEL", 1: "GPU", 2: "CPU", 3: "MODEL"}  # ModelInstanceGroup.Kind


class LoadedModel:
    # The request's correlation id and flags go to the core though the model has no
    # sequence batcher (an ensemble passes them on to its steps).
    carries_sequence = False

    def __init__(self, manager, entry, version: int, config):
        self.manager = manager
        self.core = manager.core
        self.name = entry.name
        self.version = version
        self.config = config
        # model_transaction_policy { decoupled: true }: 0..N responses per request,
        # served by streaming front ends only (submit with on_response).
        self.decoupled = bool(config.model_transaction_policy.decoupled)
        self.path = entry.path
        self.versions = entry.versions
        # What it was loaded from (a load's config override included): what a later load
        # compares with, and what an ensemble is loaded again from when a composing model
        # changes (repository/control.py). `config` may say more (an ensemble's decoupled).
        self.loaded_from = entry
        self.state = LOADING
        self.reason = ""
        self.ready_once = False  # restarts only make sense for a model that has served
        # What the model was loaded from (repository.catalog.version_stamp), so that a
        # repeated load or a poll can tell whether it changed.
        self.stamp: tuple = ()
        # Instances whose worker died and is not back yet: the model is not healthy
        # (not ready to health checks) until they are.
        self.instances_down: set[str] = set()
        self.stats = ModelStats(self.name, version)
        self._validate = RequestValidator(config, self.name, version)
        self.sequence_batching = config.HasField("sequence_batching")
        # Its requests may run several times (rescheduled): each run is counted.
        self.iterative = self.sequence_batching and config.sequence_batching.iterative_sequence
        self._own_sequences = itertools.count(1)  # iterative: see _own_sequence
        self._config_json = config_to_json(config)
        self._metadata = model_metadata(config, entry.versions)
        # Classification names classes after these (label_filename of an output).
        self.labels = output_labels(config, entry.path)
        self._validate.spec.set_labels(self.labels)
        # What registers the model with the core, the fast lane and the manager's lane
        # table; release() undoes each, also when one of them fails here.
        self.core_model: int | None = None  # the core's handle
        self.lane_model: int | None = None  # the fast lane's (KServeCodec::add_model)
        self.instances: list[Instance] = []
        self.response_cache = False
        try:
            core_config = self._core_config()
            self.core_model = self.core.add_model(
                core_config,
                batch_tensors=not reads_requests_apart(core_config.backend or core_config.platform),
            )
            # The lane validates with the same spec and validator as the general path.
            self.lane_model = manager.lane.add_model(
                self.core_model, self._validate.spec, config.response_cache.enable
            )
            # response_cache { enable: true } with the server's cache (--cache-config):
            # both paths look up and fill the one C++ cache under this `lane_model`.
            self.response_cache = bool(config.response_cache.enable) and manager.lane.cache_enabled
            if self.response_cache:
                self.stats.cache_counters = partial(manager.lane.cache_counters, self.lane_model)
            manager.register_lane_model(self, self.lane_model)
            manager.lane.set_accepting(self.lane_model, False)  # until READY
            self._create_instances()
        except BaseException:
            self.release()
            raise

    def _core_config(self):
        """The config the core schedules the model by (an ensemble's differs)."""
        return self.config

    def _instance_groups(self):
        """The instance groups to start workers for (an ensemble has its own)."""
        return self.config.instance_group

    def _create_instances(self) -> None:
        instances = self.instances  # filled as created, so release() finds each
        config_json = json.dumps(self._config_json)
        for group in self._instance_groups():
            kind = _KIND_NAMES.get(group.kind, "CPU")
            devices = list(group.gpus) if group.kind == 1 and group.gpus else [0]
            limits = group.rate_limiter if group.HasField("rate_limiter") else None
            for device in devices:
                for index in range(max(group.count, 1)):
                    try:
                        channel = self.core.add_instance(self.core_model, device, limits)
                    except ValueError as exc:  # the rate limiter's refusal, Triton's words
                        raise InvalidArgument(f"Invalid argument: {exc}") from None
                    args = {
                        "model_config": config_json,
                        "model_instance_kind": kind,
                        "model_instance_name": f"{group.name}_{len(instances)}"
                        if len(devices) > 1
                        else f"{group.name}_{index}",
                        "model_instance_device_id": str(device),
                        "model_repository": str(self.path),
                        "model_version": str(self.version),
                        "model_name": self.name,
                    }
                    instances.append(
                        Instance(
                            self, channel.instance_id, channel.channel_offset, channel.wake_fd, args
                        )
                    )

    async def load(self) -> None:
        """Starts every instance; on any failure stops the others and marks the model
        UNAVAILABLE with the reason."""
        results = await asyncio.gather(
            *(instance.start() for instance in self.instances), return_exceptions=True
        )
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            self._set_state(UNAVAILABLE)
            self.reason = str(errors[0])
            await asyncio.gather(*(instance.stop() for instance in self.instances))
            self.release()
            return
        self._set_state(READY)
        self.reason = ""
        self.ready_once = True

    async def unload(self, timeout: float) -> None:
        """Stops taking requests, lets the instances finish the batches they run and
        stop, then releases the model (its queued requests fail as unloaded)."""
        self._set_state(UNAVAILABLE)
        self.reason = "unloaded"
        await asyncio.gather(*(instance.stop(timeout) for instance in self.instances))
        self.release()

    def release(self) -> None:
        """Unregisters the model from the fast lane, the manager's lane table and the
        core. The core fails its queued requests (COMPLETION_MODEL_GONE), and frees its
        instances' channels once their workers are gone. Safe to call again."""
        if self.state != UNAVAILABLE:
            self._set_state(UNAVAILABLE)
            self.reason = self.reason or "unloaded"
        if self.lane_model is not None:
            self.manager.lane.remove_model(self.lane_model)
            self.manager.grpc_lane.remove_model(self.lane_model)
            self.manager.lane.drop_cached(self.lane_model)  # a reload may answer differently
            self.manager.unregister_lane_model(self.lane_model)
            self.lane_model = None
        if self.core_model is not None:
            self.core.remove_model(self.core_model)
            self.core_model = None

    def _set_state(self, state: str) -> None:
        self.state = state
        if self.lane_model is not None:
            # An iterative model's requests take the general path, whose completions
            # count each run of a rescheduled request (CompletionRouter._count_runs).
            accepting = state == READY and not self.iterative
            self.manager.lane.set_accepting(self.lane_model, accepting)
        self.manager.models_changed()

    @property
    def ready(self) -> bool:
        return self.state == READY

    @property
    def healthy(self) -> bool:
        """Ready with every instance up: what the readiness endpoints report."""
        return self.state == READY and not self.instances_down

    def entry(self) -> dict:
        """This version's entry of the repository index (reason only when there is one:
        while READY, the config's fields that Naiad ignores as hints, if any)."""
        entry = {"name": self.name, "version": str(self.version), "state": self.state}
        if self.state != READY and self.reason:
            entry["reason"] = self.reason
        elif self.state == READY and getattr(self.loaded_from, "hints", None):
            entry["reason"] = "; ".join(self.loaded_from.hints)
        return entry

    def metadata(self) -> dict:
        return self._metadata

    def config_json(self) -> dict:
        return self._config_json

    def submit(self, request: InferRequest, on_response=None) -> asyncio.Future:
        """Validates and queues `request`; the future resolves to its InferResponse.
        With `on_response`, every response goes there instead (scheduling/streaming.py)
        and the core's request id comes back (ModelManager.cancel).

        Raises NaiadError at once for a request that cannot be queued."""
        if self.decoupled and on_response is None:
            raise Unsupported(DECOUPLED_HTTP_INFER)
        if self.state != READY:
            raise Unavailable(
                f"Request for unknown model: '{self.name}' version {self.version} is not ready"
            )
        try:
            priority, timeout_us = _scheduling_parameters(request.parameters)
        except InvalidArgument:
            self._validate.check(request)  # the validator's error comes first
            raise
        if self.sequence_batching or self.carries_sequence:
            return self._submit_sequence(request, priority, timeout_us, on_response)
        return self.manager.submit(
            self, self._validate.spec, request, priority, timeout_us, on_response=on_response
        )

    def _submit_sequence(
        self, request: InferRequest, priority: int, timeout_us: int, on_response=None
    ):
        """A request to a sequence model: its correlation id and flags go to the core's
        sequence batcher (sequence_parameters.py)."""
        sequence = sequence_of(request.parameters)
        if self.iterative:
            sequence, request = self._iterative_sequence(sequence, request)
        return self.manager.submit(
            self,
            self._validate.spec,
            request,
            priority,
            timeout_us,
            sequence=sequence,
            on_response=on_response,
        )

    def _iterative_sequence(self, sequence: tuple, request: InferRequest) -> tuple:
        """(sequence for the core, request for the model) of an iterative model's
        request, as Triton 2.51's sequence batcher takes it: a request that starts a
        sequence also ends it, once the model releases it (a later request of that
        sequence is refused as one of a sequence never started); one without a
        correlation id is a sequence of its own (_own_sequence). The model sees START
        alone: the worker leaves the core's END out (SequenceBackend._model_word)."""
        number, key, flags = sequence
        if not number and not key:
            return sequence, self._own_sequence(request)
        if flags & START:
            return (number, key, flags | END), request
        return sequence, request

    def _own_sequence(self, request: InferRequest) -> InferRequest:
        """An iterative model's request without a correlation id: the core schedules it
        as a sequence of its own (SequenceConfig::iterative); the model sees it as
        Triton 2.51's does, with a correlation id of its own (1, 2, ... per model
        version) and START."""
        parameters = dict(request.parameters)
        parameters.pop("sequence_end", None)
        parameters["sequence_id"] = next(self._own_sequences)
        parameters["sequence_start"] = True
        return dataclasses.replace(request, parameters=parameters)


class UnloadableModel:
    """A version that could not even be registered (no room for its channels, ...):
    it stands in the model table so the index and the load table say why."""

    lane_model = None
    ready = healthy = ready_once = False
    state = UNAVAILABLE

    def __init__(self, entry, version: int, reason: str):
        self.name = entry.name
        self.version = version
        self.path = entry.path
        self.config = entry.config
        self.reason = reason
        self.stamp: tuple = ()

    entry = LoadedModel.entry

    def _set_state(self, state: str) -> None:
        pass

    async def unload(self, timeout: float) -> None:
        pass


def _scheduling_parameters(parameters: dict) -> tuple[int, int]:
    """Triton's `priority` and `timeout` (microseconds) request parameters."""
    if not parameters:
        return 0, 0
    values = []
    for name in ("priority", "timeout"):
        value = parameters.get(name, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidArgument(
                f"request parameter '{name}' must be a non-negative integer, got {value!r}"
            )
        values.append(value)
    return values[0], values[1]
