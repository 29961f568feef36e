"""Naiad's own per-model limits on its worker processes, read from config `parameters`.

Triton has neither: its request `timeout` and queue policy bound the time a request
waits in the queue, not the time a backend's execute takes, and its stubs run without a
memory limit. Both keys are Naiad's own, named so (`NAIAD_...`); a Triton server loading
the same config ignores them as it ignores any parameter its backend does not read.

    parameters: { key: "NAIAD_EXECUTION_TIMEOUT_SECONDS" value: { string_value: "10" } }
    parameters: { key: "NAIAD_WORKER_MEMORY_LIMIT_BYTES" value: { string_value: "2147483648" } }

- NAIAD_EXECUTION_TIMEOUT_SECONDS: a worker that runs one batch longer than this is
  killed and restarted; the batch's requests fail with an error saying so
  (scheduling/instance.py). Unset: no limit.
- NAIAD_WORKER_MEMORY_LIMIT_BYTES: the worker's address-space limit (RLIMIT_AS), set
  before it loads the model: an allocation past it fails in the worker (MemoryError),
  never in the frontend or another model's worker. Unset: no limit.
"""

from __future__ import annotations

from dataclasses import dataclass

EXECUTION_TIMEOUT_KEY = "NAIAD_EXECUTION_TIMEOUT_SECONDS"
MEMORY_LIMIT_KEY = "NAIAD_WORKER_MEMORY_LIMIT_BYTES"


@dataclass(frozen=True)
class WorkerLimits:
    execution_timeout_s: float | None = None
    memory_limit_bytes: int | None = None


def worker_limits(config) -> WorkerLimits:
    """The limits a (validated) ModelConfig asks for."""
    timeout = _value(config, EXECUTION_TIMEOUT_KEY)
    memory = _value(config, MEMORY_LIMIT_KEY)
    return WorkerLimits(
        float(timeout) if timeout is not None else None,
        int(memory) if memory is not None else None,
    )


def worker_limits_error(config) -> str | None:
    """Why the config's limit parameters are unusable, or None."""
    timeout = _value(config, EXECUTION_TIMEOUT_KEY)
    if timeout is not None and not _positive(timeout, float):
        return (
            f"parameter '{EXECUTION_TIMEOUT_KEY}' of model {config.name} must be a positive "
            f"number of seconds, got '{timeout}'"
        )
    memory = _value(config, MEMORY_LIMIT_KEY)
    if memory is not None and not _positive(memory, int):
        return (
            f"parameter '{MEMORY_LIMIT_KEY}' of model {config.name} must be a positive "
            f"number of bytes, got '{memory}'"
        )
    return None


def _value(config, key: str) -> str | None:
    if key not in config.parameters:
        return None
    return config.parameters[key].string_value.strip()


def _positive(text: str, kind) -> bool:
    try:
        return kind(text) > 0
    except ValueError:
        return False
