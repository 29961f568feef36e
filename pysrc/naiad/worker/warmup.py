"""Model warmup (`model_warmup` in config.pbtxt), run by a worker before it reports ready.

As Triton: each sample with a non-zero `batch_size` becomes `batch_size` requests of one
row each (inputs shaped `[1, *dims]` when the model batches, `dims` otherwise) executed
together, `count` times (at least once). Input data is zeros (`zero_data`), random bytes
(`random_data`; BYTES inputs get zeros, i.e. empty strings) or the bytes of
`<model folder>/warmup/<input_data_file>`. The first sample that fails makes the load fail
with Triton's "failed to run warmup sample '<name>': <error>; " message, so the model is
UNAVAILABLE with that reason. Works for every backend: it goes through `Backend.execute`.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from naiad import datatypes
from naiad.backends.base import Backend, Batch, RequestError, RequestHeader

WARMUP_FOLDER = "warmup"


class WarmupError(Exception):
    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def run_warmup(backend: Backend, args: dict) -> int:
    """Run every warmup sample of the model's config on `backend`; returns how many
    executions ran. WarmupError (the reason for the load table) on a failure."""
    config = json.loads(args["model_config"])
    samples = config.get("model_warmup") or []
    if not samples:
        return 0
    batching = int(config.get("max_batch_size", 0) or 0) != 0
    model_dir = Path(args.get("model_repository", "."))
    runs = 0
    for sample in samples:
        name = sample.get("name", "")
        batch_size = int(sample.get("batch_size", 0) or 0)
        if batch_size == 0:
            continue  # Triton skips these
        count = max(int(sample.get("count", 0) or 0), 1)
        batch = _sample_batch(sample, batch_size, batching, model_dir, backend)
        for _ in range(count):
            try:
                results = backend.execute(batch)
            except Exception as exc:  # the backend itself failed: same as an error response
                message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
                raise WarmupError(f"failed to run warmup sample '{name}': {message}; ") from None
            errors = [r.message for r in results if isinstance(r, RequestError)]
            if len(results) != len(batch):
                errors.append(
                    f"the backend answered {len(results)} of the sample's {len(batch)} requests"
                )
            if errors:
                raise WarmupError(
                    f"failed to run warmup sample '{name}': " + "".join(f"{e}; " for e in errors)
                )
            runs += 1
    return runs


def _sample_batch(
    sample: dict, batch_size: int, batching: bool, model_dir: Path, backend: Backend
) -> Batch:
    inputs = []  # (name, wire datatype, shape, array)
    for input_name, spec in (sample.get("inputs") or {}).items():
        config_type = spec.get("data_type", "TYPE_INVALID")
        try:
            wire = datatypes.wire_of_config(config_type)
        except KeyError:
            raise WarmupError(
                f"warmup setting of input '{input_name}' has an invalid data_type {config_type}"
            ) from None
        dims = [int(d) for d in spec.get("dims", [])]
        if any(d < 0 for d in dims):
            raise WarmupError(
                "warmup setting expects all variable-size dimensions are specified for input "
                f"'{input_name}'"
            )
        shape = ([1] if batching else []) + dims
        inputs.append(
            (input_name, wire, tuple(shape), _data(input_name, wire, shape, spec, model_dir))
        )
    header = RequestHeader("", tuple((n, w, s) for n, w, s, _ in inputs), [], {})
    headers = [header] * batch_size
    arrays = [[array for *_, array in inputs] for _ in range(batch_size)]
    tensors = {}
    if getattr(backend, "batch_tensors", False) and batching:
        tensors = {
            n: np.concatenate([array] * batch_size) for n, w, _s, array in inputs if w != "BYTES"
        }
    return Batch(headers, arrays, tensors)


def _data(name: str, wire: str, shape: list, spec: dict, model_dir: Path) -> np.ndarray:
    count = datatypes.element_count(shape)
    if "input_data_file" in spec:
        filename = spec["input_data_file"]
        path = model_dir / WARMUP_FOLDER / filename
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise WarmupError(
                f"failed to read warmup data file {path} for input '{name}': {exc.strerror}"
            ) from None
        if wire == "BYTES":
            try:
                return datatypes.deserialize_bytes(data, count).reshape(shape)
            except Exception as exc:
                raise WarmupError(
                    f"warmup data file {path} for input '{name}' does not hold {count} "
                    f"BYTES elements: {exc}"
                ) from None
        dtype = datatypes.numpy_dtype(wire)
        needed = count * dtype.itemsize
        if len(data) < needed:
            raise WarmupError(
                f"warmup setting expects {needed} bytes, but the data provided from "
                f"{filename} only has {len(data)} bytes"
            )
        return np.frombuffer(data[:needed], dtype=dtype).reshape(shape)
    if wire == "BYTES":  # zero data, and random data too (as Triton): empty strings
        return np.array([b""] * count, dtype=object).reshape(shape)
    dtype = datatypes.numpy_dtype(wire)
    if spec.get("random_data"):
        raw = np.random.default_rng().bytes(count * dtype.itemsize)
        array = np.frombuffer(raw, dtype=dtype).reshape(shape)
        if wire == "BOOL":
            array = np.frombuffer(raw, dtype=np.uint8).reshape(shape) & 1
            array = array.astype(np.bool_)
        return array
    if not spec.get("zero_data"):
        raise WarmupError(f"warmup setting expects input '{name}' to have input_data_type set")
    return np.zeros(shape, dtype=dtype)
