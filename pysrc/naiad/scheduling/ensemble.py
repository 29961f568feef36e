"""Ensemble models (`platform: "ensemble"`) in the control plane: the graph check at load,
the graph the core runs, and readiness that follows the composing models.

Where the orchestration lives: in the C++ core (csrc/core/ensemble_scheduler.h). An ensemble
has no worker; the core queues each step on its model's own scheduler (so steps batch
with direct traffic), keeps intermediate tensors in the arena, and answers the request
through the completion path the lanes read. This module resolves each step's model and
version to a core handle and validator spec (`EnsembleModel.refresh_graph`), again
whenever the served models change, since a reload gives a model a new handle.
"""

from __future__ import annotations

import asyncio
from collections import deque

from naiad import _core
from naiad.protos import model_config_pb2
from naiad.repository.config import config_to_json
from naiad.repository.ensemble import check_structure
from naiad.scheduling.model import LOADING, READY, UNAVAILABLE, LoadedModel

ENSEMBLE_PLATFORM = "ensemble"

# The spec of a step whose model is not served (never validated against: the core
# refuses such a step before).
_EMPTY_SPEC = _core.ModelSpec("", "", 0, [], [])


def is_ensemble(config) -> bool:
    return config.platform == ENSEMBLE_PLATFORM


def _type_name(data_type: int) -> str:
    return model_config_pb2.DataType.Name(data_type)


def _dims(tensor) -> list[int]:
    return [int(d) for d in tensor.dims]


def _compatible(a: list[int], b: list[int]) -> bool:
    if len(a) != len(b):
        return False
    return all(x == y or x == -1 or y == -1 for x, y in zip(a, b))


def _shape_text(dims: list[int], batching: bool) -> str:
    return "[" + ",".join(str(d) for d in ([-1] if batching else []) + dims) + "]"


def _compatible_text(a: str, b: str) -> bool:
    left = [int(x) for x in a.strip("[]").split(",") if x]
    right = [int(x) for x in b.strip("[]").split(",") if x]
    return _compatible(left, right)


def check_ensemble(config, find) -> str | None:
    """Why the ensemble `config` cannot be served, or None, with Triton 2.51's messages.
    `find(name, version)` gives the composing model's config (a ModelConfig) or raises
    LookupError with the reason. After `check_structure`: each step's model and
    version are loaded, its mapped tensors are inputs and outputs of that model, and
    every tensor has one datatype and shape wherever it is used."""
    reason = check_structure(config)
    if reason is not None:
        return reason
    name = config.name
    steps = list(config.ensemble_scheduling.step)
    configs = []
    for step in steps:
        try:
            configs.append(find(step.model_name, int(step.model_version)))
        except LookupError as exc:
            return str(exc)
    batching = config.max_batch_size > 0
    # tensor -> (datatype, shape text, the model it is inferred from)
    known: dict[str, tuple[int, str, str]] = {}
    for tensor in (*config.input, *config.output):
        known[tensor.name] = (tensor.data_type, _shape_text(_dims(tensor), batching), name)

    def agree(tensor: str, data_type: int, shape: str, model: str) -> str | None:
        seen = known.get(tensor)
        if seen is None:
            known[tensor] = (data_type, shape, model)
            return None
        if seen[0] != data_type:
            return (
                f"in ensemble {name}, ensemble tensor {tensor}: inconsistent data type: "
                f"{_type_name(seen[0])} is inferred from model {seen[2]} while "
                f"{_type_name(data_type)} is inferred from model {model}"
            )
        if seen[1] != shape and not _compatible_text(seen[1], shape):
            return (
                f"in ensemble {name}, ensemble tensor {tensor}: inconsistent shape: "
                f"{seen[1]} is inferred from model {seen[2]} while {shape} is inferred from "
                f"model {model}"
            )
        return None

    for step, model in zip(steps, configs):
        step_batching = model.max_batch_size > 0
        model_inputs = {t.name: t for t in model.input}
        model_outputs = {t.name: t for t in model.output}
        for model_input, tensor in step.input_map.items():
            if model_input not in model_inputs:
                return (
                    f"in ensemble {name}, ensemble tensor {tensor} is mapping to non-existing "
                    f"input {model_input} in model {step.model_name}"
                )
        for model_output, tensor in step.output_map.items():
            if model_output not in model_outputs:
                return (
                    f"in ensemble {name}, ensemble tensor {tensor} is mapped from non-existing "
                    f"output {model_output} in model {step.model_name}"
                )
        for mapping, tensors in ((step.input_map, model_inputs), (step.output_map, model_outputs)):
            for model_tensor, tensor in mapping.items():
                found = tensors[model_tensor]
                shape = _shape_text(_dims(found), step_batching)
                reason = agree(tensor, found.data_type, shape, step.model_name)
                if reason is not None:
                    return reason
    return None


def decoupled_workflow(config, configs) -> tuple[str | None, bool]:
    """Triton 2.51's walk of an ensemble's data flow (ensemble_utils.cc), after
    `check_ensemble`; `configs` are the steps' model configs. Each decoupled step gives its
    outputs a new label, any other step passes on its inputs' label; a step (or the
    ensemble's outputs, named as the ensemble) fed by tensors of different labels is
    refused. Returns (the reason, or None; whether the ensemble is decoupled): decoupled
    exactly when some step is, whatever its own config says, as Triton sets it."""
    name = config.name
    steps = list(config.ensemble_scheduling.step)
    sink = object()  # the ensemble's outputs, taken together
    # The model each tensor is first inferred from, which Triton's message names.
    origin: dict = {t.name: name for t in (*config.input, *config.output)}
    origin[sink] = name
    producer: dict = {}  # tensor -> its step's index
    before: dict = {sink: [t.name for t in config.output]}  # node -> the tensors it needs
    after: dict = {}  # tensor -> the nodes that need it
    for index, (step, model) in enumerate(zip(steps, configs)):
        mapped = dict(step.input_map)
        for model_input in model.input:
            if model_input.name in mapped:
                origin.setdefault(mapped[model_input.name], step.model_name)
        for tensor in step.output_map.values():
            origin.setdefault(tensor, step.model_name)
            producer[tensor] = index
            before[tensor] = list(step.input_map.values())
            for needed in before[tensor]:
                after.setdefault(needed, []).append(tensor)
    for tensor in config.output:
        after.setdefault(tensor.name, []).append(sink)
    labels: dict = {t.name: 0 for t in config.input}  # visited tensors' labels
    step_labels: dict[int, int] = {}  # a step's outputs share one label
    made = 0  # labels made, one per decoupled step reached
    waiting = deque(t.name for t in config.input)
    while waiting:
        for node in after.get(waiting.popleft(), []):
            if node in labels or any(t not in labels for t in before[node]):
                continue
            first = labels[before[node][0]]
            if any(labels[t] != first for t in before[node]):
                return (
                    f"in ensemble {name}, step of model '{origin[node]}' receives inputs "
                    "originated from different decoupled models",
                    False,
                )
            index = producer.get(node)
            if index is None:  # the sink
                labels[node] = first
            elif index in step_labels:
                labels[node] = step_labels[index]
            else:
                if configs[index].model_transaction_policy.decoupled:
                    made += 1
                    first = made
                labels[node] = step_labels[index] = first
            waiting.append(node)
    return None, made != 0


class EnsembleModel(LoadedModel):
    """An ensemble version: orchestrated by the core (no instances), its graph checked
    once its composing models have loaded, ready only while they are."""

    graph_set = False  # the core has its graph (after the check at load)
    carries_sequence = True  # its steps join the request's sequence, as in Triton

    def _instance_groups(self):
        return []

    def _serving(self, name: str, version: int):
        """The composing model version a step runs on now, or None."""
        versions = self.manager.models.get(name) or {}
        if version < 0:
            ready = [m for m in versions.values() if m.ready]
            return max(ready, key=lambda m: m.version) if ready else None
        model = versions.get(version)
        return model if model is not None and model.ready else None

    def refresh_graph(self) -> None:
        """Gives the core the graph with each step's current handle and spec (handle 0:
        the step's model is not served, and the step fails as Triton's does)."""
        if self.core_model is None or self.state == UNAVAILABLE:
            return
        steps = []
        for step in self.config.ensemble_scheduling.step:
            model = self._serving(step.model_name, int(step.model_version))
            handle = 0 if model is None or model.core_model is None else model.core_model
            spec = model._validate.spec if handle else _EMPTY_SPEC
            steps.append(
                (handle, spec, list(step.input_map.items()), list(step.output_map.items()))
            )
        outputs = [output.name for output in self.config.output]
        self.core.set_ensemble_graph(self.core_model, self.name, outputs, steps, self.decoupled)
        self.graph_set = True

    def composing(self) -> list[tuple[str, int]]:
        return [(s.model_name, int(s.model_version)) for s in self.config.ensemble_scheduling.step]

    def _find(self, name: str, version: int):
        versions = self.manager.models.get(name) or {}
        ready = [m for m in versions.values() if m.ready]
        if not ready:
            raise LookupError(
                f"ensemble {self.name} contains models that are not available or ambiguous: {name}"
            )
        if version < 0:
            return max(ready, key=lambda m: m.version).config
        model = versions.get(version)
        if model is None or not model.ready:
            raise LookupError(
                f"ensemble '{self.name}' depends on '{name}' whose required version {version} "
                "is not loaded."
            )
        return model.config

    async def composing_loaded(self) -> None:
        """Returns once no composing model is LOADING (at start-up they load at the same
        time). The repository calls it before taking a load slot: an ensemble waiting
        in one would keep its composing models (an inner ensemble's too) from theirs."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 600.0
        while loop.time() < deadline:
            loading = [
                name
                for name, _v in self.composing()
                if any(m.state == LOADING for m in (self.manager.models.get(name) or {}).values())
            ]
            if not loading:
                break
            await asyncio.sleep(0.05)

    async def load(self) -> None:
        await self.composing_loaded()  # composing models loading at the same time first
        reason = check_ensemble(self.config, self._find)
        if reason is None:
            reason = self._settle_decoupled()
        if reason is not None:
            self.graph_failed = True  # control.py words the load's failure as Triton
            self._set_state(UNAVAILABLE)
            self.reason = reason
            self.release()
            return
        self.refresh_graph()
        await super().load()

    def _settle_decoupled(self) -> str | None:
        """Applies Triton's decoupled rules (decoupled_workflow): the ensemble is
        decoupled exactly when a step is, and its config says so, also when it is not
        (an outer ensemble's check reads it too)."""
        configs = [self._find(n, v) for n, v in self.composing()]
        reason, decoupled = decoupled_workflow(self.config, configs)
        said = self.config.HasField("model_transaction_policy")
        if reason is None and (decoupled != self.decoupled or not said):
            config = type(self.config)()
            config.CopyFrom(self.config)
            config.model_transaction_policy.decoupled = decoupled
            self.config, self.decoupled = config, decoupled
            self._config_json = config_to_json(config)
        return reason

    def _composing_ready(self) -> bool:
        for name, version in self.composing():
            versions = self.manager.models.get(name) or {}
            if version < 0:
                if not any(m.ready for m in versions.values()):
                    return False
            elif not (versions.get(version) is not None and versions[version].ready):
                return False
        return True

    @property
    def ready(self) -> bool:
        return self.state == READY and self._composing_ready()

    @property
    def healthy(self) -> bool:
        return self.ready and not self.instances_down
