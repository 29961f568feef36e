"""Ensemble models (`platform: "ensemble"`) in the control plane: the graph check at load
and readiness that follows the composing models.

Where the orchestration lives, and why: each ensemble has one worker process running
`backends/ensemble.py`, which sends every step to the core as a request of its own
(the BLS path: channel.h SubmitMessage), so each step goes through its model's own
queue and batcher, and intermediate tensors go from response block to request block
inside the shared arena. Doing it in the C++ core instead would spare one hop through
that worker's ring per step; the core has no per-request graph state today, and the
measured cost of the Python hop is in perf/README.md (ensemble scenarios).
"""

from __future__ import annotations

import asyncio

from naiad.protos import model_config_pb2
from naiad.scheduling.model import LOADING, READY, UNAVAILABLE, LoadedModel

ENSEMBLE_PLATFORM = "ensemble"

_KIND_CPU = model_config_pb2.ModelInstanceGroup.KIND_CPU


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


def check_ensemble(config, find) -> str | None:
    """Why the ensemble `config` cannot be served, or None. `find(name, version)` gives
    the composing model's config (a ModelConfig) or raises LookupError with the reason.
    Checks: each step's model and version, its mapped tensors against that model's
    inputs and outputs, every tensor produced once (by an ensemble input or one step),
    every step input and ensemble output produced, no cycle, and the datatype and shape
    of each tensor agreeing between its producer and its consumers."""
    name = config.name
    steps = list(config.ensemble_scheduling.step)
    if not steps:
        return f"ensemble scheduling must be set for ensemble {name} whose platform is ensemble"
    # tensor -> (datatype, dims, who): who produces it
    produced: dict[str, tuple[int, list[int], str]] = {}
    for tensor in config.input:
        produced[tensor.name] = (tensor.data_type, _dims(tensor), "ensemble input")
    configs = []
    for index, step in enumerate(steps):
        if not step.model_name:
            return f"must specify 'model_name' in step {index} of ensemble '{name}'"
        try:
            model = find(step.model_name, int(step.model_version))
        except LookupError as exc:
            return str(exc)
        configs.append(model)
        outputs = {t.name: t for t in model.output}
        for model_output, tensor in step.output_map.items():
            if model_output not in outputs:
                return (
                    f"in ensemble {name}, ensemble tensor {tensor} is mapped from non-existing "
                    f"output {model_output} in model {step.model_name}"
                )
            if tensor in produced:
                return (
                    f"ensemble tensor '{tensor}' can appear in an output map only once for "
                    f"ensemble '{name}' step {index}"
                )
            out = outputs[model_output]
            produced[tensor] = (out.data_type, _dims(out), f"model {step.model_name}")
    # Consumers: each step input must exist, with the producer's datatype and shape.
    for index, (step, model) in enumerate(zip(steps, configs)):
        if not step.input_map:
            return f"must specify 'input_map' in step {index} of ensemble '{name}'"
        inputs = {t.name: t for t in model.input}
        for model_input, tensor in step.input_map.items():
            if model_input not in inputs:
                return (
                    f"in ensemble {name}, ensemble tensor {tensor} is mapping to non-existing "
                    f"input {model_input} in model {step.model_name}"
                )
            if tensor not in produced:
                return (
                    f"in ensemble {name}, ensemble tensor {tensor} is used as input of model "
                    f"{step.model_name} but no ensemble input or step output produces it"
                )
            data_type, dims, who = produced[tensor]
            wanted = inputs[model_input]
            if data_type != wanted.data_type:
                return (
                    f"in ensemble {name}, ensemble tensor {tensor} has datatype "
                    f"{_type_name(data_type)} from {who} but input {model_input} of model "
                    f"{step.model_name} takes {_type_name(wanted.data_type)}"
                )
            if not _compatible(dims, _dims(wanted)):
                return (
                    f"in ensemble {name}, ensemble tensor {tensor} has shape {dims} from {who} "
                    f"but input {model_input} of model {step.model_name} takes shape "
                    f"{_dims(wanted)}"
                )
    for tensor in config.output:
        if tensor.name not in produced:
            return f"in ensemble {name}, no step produces ensemble output {tensor.name}"
        data_type, dims, who = produced[tensor.name]
        if data_type != tensor.data_type:
            return (
                f"in ensemble {name}, ensemble output {tensor.name} has datatype "
                f"{_type_name(tensor.data_type)} but {who} produces "
                f"{_type_name(data_type)}"
            )
    cycle = _cycle(steps)
    if cycle is not None:
        return f"in ensemble {name}, the steps form a cycle through tensor {cycle}"
    return None


def _cycle(steps) -> str | None:
    """A tensor on a cycle of steps (a step needing what it helps produce), or None."""
    producer = {}
    for index, step in enumerate(steps):
        for tensor in step.output_map.values():
            producer[tensor] = index
    state = {}  # step -> 1 visiting, 2 done

    def visit(index: int) -> str | None:
        state[index] = 1
        for tensor in steps[index].input_map.values():
            before = producer.get(tensor)
            if before is None:
                continue
            if state.get(before) == 1:
                return tensor
            if state.get(before) is None:
                found = visit(before)
                if found is not None:
                    return found
        state[index] = 2
        return None

    for index in range(len(steps)):
        if index not in state:
            found = visit(index)
            if found is not None:
                return found
    return None


class EnsembleModel(LoadedModel):
    """An ensemble version: one scheduler worker (backends/ensemble.py), its graph checked
    once its composing models have loaded, ready only while they are."""

    # Ensemble requests that one scheduler execution may take together (they still run
    # their steps each on their own, so this only spares per-batch overhead).
    BATCH_REQUESTS = 64

    def _core_config(self):
        config = model_config_pb2.ModelConfig()
        config.CopyFrom(self.config)
        config.max_batch_size = max(config.max_batch_size, 1) * self.BATCH_REQUESTS
        config.dynamic_batching.SetInParent()
        return config

    def _instance_groups(self):
        group = model_config_pb2.ModelInstanceGroup(name=self.name, kind=_KIND_CPU, count=1)
        return [group]

    def composing(self) -> list[tuple[str, int]]:
        return [(s.model_name, int(s.model_version)) for s in self.config.ensemble_scheduling.step]

    def _find(self, name: str, version: int):
        versions = self.manager.models.get(name) or {}
        if version < 0:
            ready = [m for m in versions.values() if m.ready]
            if not ready:
                raise LookupError(
                    f"ensemble '{self.name}' depends on '{name}' which has no loaded version(s)"
                )
            return max(ready, key=lambda m: m.version).config
        model = versions.get(version)
        if model is None or not model.ready:
            raise LookupError(
                f"ensemble '{self.name}' depends on '{name}' whose version {version} is not loaded"
            )
        return model.config

    async def load(self) -> None:
        # Composing models loading at the same time (start-up) load first.
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
        reason = check_ensemble(self.config, self._find)
        if reason is not None:
            self._set_state(UNAVAILABLE)
            self.reason = reason
            self.release()
            return
        await super().load()

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
