"""A loaded model version: validation, its instances, submission to the core, stats."""

from __future__ import annotations

import asyncio
import json
import logging

import orjson

from naiad import _core, arena_format
from naiad.errors import InvalidArgument, Unavailable
from naiad.repository.config import config_to_json
from naiad.repository.metadata import model_metadata
from naiad.scheduling.instance import Instance
from naiad.scheduling.stats import ModelStats
from naiad.types import InferRequest, InferResponse
from naiad.validation import RequestValidator

log = logging.getLogger("naiad")

LOADING, READY, UNAVAILABLE = "LOADING", "READY", "UNAVAILABLE"

_KIND_NAMES = {0: "MODEL", 1: "GPU", 2: "CPU", 3: "MODEL"}  # ModelInstanceGroup.Kind


class LoadedModel:
    def __init__(self, manager, entry, version: int, config):
        self.manager = manager
        self.core = manager.core
        self.name = entry.name
        self.version = version
        self.config = config
        self.path = entry.path
        self.versions = entry.versions
        self.state = LOADING
        self.reason = ""
        self.ready_once = False  # restarts only make sense for a model that has served
        self.stats = ModelStats(self.name, version)
        self._validate = RequestValidator(config, self.name, version)
        self._config_json = config_to_json(config)
        self._metadata = model_metadata(config, entry.versions)
        self.model_id = self.core.add_model(scheduling_config(config))
        # Requests whose non-batch shapes differ may not share a batch: only models
        # with variable dims need the per-request shape key.
        self._shape_inputs = _variable_shape_inputs(config)
        # Config index of each input: the core joins inputs into batch tensors by it.
        self._input_index = {model_input.name: i for i, model_input in enumerate(config.input)}
        self.lane_id = _add_to_lane(
            manager.lane, self.model_id, self._validate, self._shape_inputs, config, version
        )
        if self.lane_id is not None:
            manager.register_lane_model(self, self.lane_id)
            manager.lane.set_accepting(self.lane_id, False)  # until READY
        self.instances = self._create_instances()

    def _create_instances(self) -> list[Instance]:
        instances = []
        config_json = json.dumps(self._config_json)
        for group in self.config.instance_group:
            kind = _KIND_NAMES.get(group.kind, "CPU")
            devices = list(group.gpus) if group.kind == 1 and group.gpus else [0]
            for device in devices:
                for index in range(max(group.count, 1)):
                    instance_id, channel_offset, wake_fd = self.core.add_instance(self.model_id)
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
                    instances.append(Instance(self, instance_id, channel_offset, wake_fd, args))
        return instances

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
            return
        self._set_state(READY)
        self.ready_once = True

    async def unload(self, timeout: float) -> None:
        self._set_state(UNAVAILABLE)
        self.reason = "unloaded"
        await asyncio.gather(*(instance.stop(timeout) for instance in self.instances))

    def _set_state(self, state: str) -> None:
        self.state = state
        if self.lane_id is not None:
            self.manager.lane.set_accepting(self.lane_id, state == READY)

    @property
    def ready(self) -> bool:
        return self.state == READY

    def metadata(self) -> dict:
        return self._metadata

    def config_json(self) -> dict:
        return self._config_json

    async def infer(self, request: InferRequest) -> InferResponse:
        return await self.submit(request)

    def submit(self, request: InferRequest) -> asyncio.Future:
        """Validates and queues `request`; the future resolves to its InferResponse.

        Raises NaiadError at once for a request that cannot be queued. Front ends on
        the hot path use this rather than `infer` to spare a task per request."""
        if self.state != READY:
            raise Unavailable(
                f"Request for unknown model: '{self.name}' version {self.version} is not ready"
            )
        batch_size = self._validate(request)
        outputs = [output.name for output in request.outputs] if request.outputs else None
        metadata = arena_format.request_metadata(
            request.id, request.inputs, outputs, request.parameters
        )
        priority, timeout_us = _scheduling_parameters(request.parameters)
        shape_key = self._shape_key(request) if self._shape_inputs else 0
        input_order = _core.input_order_key([self._input_index[t.name] for t in request.inputs])
        return self.manager.submit(
            self,
            request,
            metadata,
            [t.data for t in request.inputs],
            batch_size,
            priority,
            timeout_us,
            shape_key,
            input_order,
        )

    def _shape_key(self, request: InferRequest) -> int:
        # The same key as the fast lane's: (config index, shape without the batch dim)
        # of the variable-shape inputs, in config order.
        shapes = {t.name: t.shape for t in request.inputs}
        skip = 1 if self.config.max_batch_size > 0 else 0
        keyed = []
        for index, model_input in enumerate(self.config.input):
            shape = shapes.get(model_input.name)
            if shape is not None and model_input.name in self._shape_inputs:
                keyed.append((index, list(shape[skip:])))
        return _core.shape_key(keyed)


def scheduling_config(config) -> dict:
    """The core's scheduling policy (Core.add_model) from a ModelConfig."""
    max_batch_size = int(config.max_batch_size)
    scheduling = {"max_batch_size": max(max_batch_size, 1), "dynamic_batching": False}
    if not config.HasField("dynamic_batching") or max_batch_size == 0:
        return scheduling
    batching = config.dynamic_batching
    scheduling.update(
        dynamic_batching=True,
        preferred_batch_size=[int(size) for size in batching.preferred_batch_size],
        max_queue_delay_microseconds=int(batching.max_queue_delay_microseconds),
        preserve_ordering=bool(batching.preserve_ordering),
        priority_levels=int(batching.priority_levels),
        default_priority_level=int(batching.default_priority_level),
        default_queue_policy=_queue_policy(batching.default_queue_policy),
        priority_queue_policy={
            int(level): _queue_policy(policy)
            for level, policy in batching.priority_queue_policy.items()
        },
    )
    return scheduling


def _queue_policy(policy) -> dict:
    return {
        "timeout_action": "DELAY" if policy.timeout_action == 1 else "REJECT",
        "default_timeout_microseconds": int(policy.default_timeout_microseconds),
        "allow_timeout_override": bool(policy.allow_timeout_override),
        "max_queue_size": int(policy.max_queue_size),
    }


def _variable_shape_inputs(config) -> frozenset:
    """Inputs whose non-batch dims may vary between requests (and are not ragged)."""
    return frozenset(
        i.name for i in config.input if -1 in list(i.dims) and not i.allow_ragged_batch
    )


def _add_to_lane(
    lane, core_model_id: int, validator: RequestValidator, shape_inputs, config, version: int
):
    """Registers the model with the fast lane, from the validator's input specs so both
    paths check the same; None for models it cannot serve (shape tensors, whose batch
    rules the lane does not repeat)."""
    specs = []
    for name in validator.input_order:
        spec = validator.inputs[name]
        if spec.is_shape_tensor:
            return None
        specs.append(
            (name, spec.wire, list(spec.dims), spec.size, spec.optional, name in shape_inputs)
        )
    name_json = orjson.dumps(validator.model_name).decode()[1:-1]
    outputs = [output.name for output in config.output]
    return lane.add_model(
        core_model_id, name_json, str(version), validator.max_batch_size, specs, outputs
    )


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
