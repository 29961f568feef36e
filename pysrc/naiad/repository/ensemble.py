"""An ensemble's config checked on its own (`ensemble_scheduling`), as Triton checks it
when it reads the model repository: a wrong one fails like any bad config (the model
is not loaded, the reason in the index). What needs the composing models (their
versions, tensors, datatypes and shapes) is checked at load (scheduling/ensemble.py).
"""

from __future__ import annotations


def check_structure(config) -> str | None:
    """The checks Triton makes on an ensemble's config alone, with its messages: each
    step names a model and maps inputs and outputs, every tensor is produced once,
    every ensemble input is used, every ensemble output is written from the inputs
    (no cycle, nothing unmapped)."""
    name = config.name
    steps = list(config.ensemble_scheduling.step)
    if not steps:
        return f"ensemble scheduling must be set for ensemble {name} whose platform is ensemble"
    inputs = {t.name for t in config.input}
    producer: dict[str, int] = {}
    consumed: set[str] = set()
    for index, step in enumerate(steps):
        if not step.model_name:
            return f"must specify 'model_name' in step {index} of ensemble '{name}'"
        if not step.input_map:
            return f"must specify 'input_map' in step {index} of ensemble '{name}'"
        if not step.output_map:
            return f"must specify 'output_map' in step {index} of ensemble '{name}'"
        consumed.update(step.input_map.values())
        for tensor in step.output_map.values():
            if tensor in producer or tensor in inputs:
                return (
                    f"ensemble tensor '{tensor}' can appear in an output map only once for "
                    f"ensemble '{name}' step {index}"
                )
            producer[tensor] = index
    for tensor in config.input:
        if tensor.name not in consumed:
            return f"ensemble input '{tensor.name}' for ensemble {name}' is not used"
    # Tensors reachable from the ensemble inputs: a step runs once all its inputs are.
    connected = set(inputs)
    changed = True
    while changed:
        changed = False
        for step in steps:
            if all(t in connected for t in step.input_map.values()):
                for t in step.output_map.values():
                    if t not in connected:
                        connected.add(t)
                        changed = True
    for tensor in config.output:
        if tensor.name not in producer:
            return f"ensemble output '{tensor.name}' for ensemble {name}' is not used"
        if tensor.name not in connected:
            culprit = _unconnected(tensor.name, steps, producer, connected, set())
            return (
                f"output '{tensor.name}' for ensemble '{name}' is not written: at least one of "
                f"its depending tensors, '{culprit}', is not connected"
            )
    return None


def _unconnected(tensor: str, steps, producer, connected, visiting) -> str:
    """A tensor that `tensor` depends on and that is not reachable: one nothing produces,
    or the one that closes a cycle."""
    if tensor not in producer:
        return tensor
    visiting.add(tensor)
    for before in steps[producer[tensor]].input_map.values():
        if before in connected:
            continue
        if before in visiting:
            return tensor
        return _unconnected(before, steps, producer, connected, visiting)
    return tensor
