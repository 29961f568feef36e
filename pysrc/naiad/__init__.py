"""Naiad: a Triton-compatible inference server."""

__version__ = "0.1.0"

# The in-process API (naiad/inprocess/), imported on first use: `import naiad` stays
# cheap and loads no core (the CLI, workers and tools import the package too).
_INPROCESS = frozenset(
    {
        "Server",
        "Options",
        "Model",
        "InferenceRequest",
        "InferenceResponse",
        "ModelControlMode",
        "Tensor",
        "TritonError",
        "InvalidArgumentError",
        "NotFoundError",
        "UnavailableError",
        "UnsupportedError",
        "InternalError",
        "AlreadyExistsError",
        "UnknownError",
        "SEQUENCE_START",
        "SEQUENCE_END",
    }
)


def __getattr__(name: str):
    if name in _INPROCESS:
        from naiad import inprocess

        return getattr(inprocess, name)
    raise AttributeError(f"module 'naiad' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | _INPROCESS)
