"""tritonserver's flags that `naiad serve` takes so that Triton's command lines start it,
but whose feature Naiad does not have or has no use for on this host.

Each is parsed with Triton's syntax (a bad value is a usage error, as in Triton) and
defaults to None. At start-up the server logs one line for each flag given, saying what
it does here (`startup_notes`); a flag that asks for a feature Naiad does not serve
(the SageMaker and Vertex AI endpoints, model namespacing) stops the start with
an error (`startup_error`) rather than serve without it. docs/flags.md is the table."""

from __future__ import annotations

import argparse
import os
import re

__all__ = ["add_arguments", "parse_bool", "startup_error", "startup_notes"]


def parse_bool(text: str) -> bool:
    """Triton's ParseBoolOption: the value of every true/false flag of `naiad serve`."""
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got '{text}'")


def _matching(pattern: str, syntax: str):
    compiled = re.compile(pattern)

    def parse(text: str) -> str:
        if not compiled.fullmatch(text):
            raise argparse.ArgumentTypeError(f"expected {syntax}, got '{text}'")
        return text

    return parse


_INT = r"[+-]?[0-9]+"
_FLOAT = r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?"
_DEVICE_BYTES = _matching(rf"{_INT}:{_INT}", "<device id>:<bytes>")
_DEVICE_FRACTION = _matching(rf"{_INT}:{_FLOAT}", "<device id>:<fraction>")
_PORT_RANGE = _matching(rf"{_INT}-{_INT}", "<port>-<port>")
_POLICY = _matching(r"[^,]+,[^=]+=.*", "<policy name>,<setting>=<value>")

# flag, type, what it does in Naiad (logged when the flag is given). The meaning is
# Triton's; the words say why it has no effect here.
_NO_EFFECT = (
    # Threads and pools of Triton's front ends: Naiad's are sized its own way.
    (
        "--http-thread-count",
        int,
        "HTTP connections are read and answered by one C++ I/O thread; the flag sets "
        "no thread count",
    ),
    (
        "--grpc-infer-allocation-pool-size",
        int,
        "gRPC requests and responses are built in the request's own buffers; there is "
        "no pool of request/response objects to size",
    ),
    (
        "--buffer-manager-thread-count",
        int,
        "tensors are copied once into the shared arena by the thread that reads them; "
        "there are no buffer-manager threads",
    ),
    ("--sagemaker-port", int, "the SageMaker endpoint is not served"),
    ("--sagemaker-safe-port-range", _PORT_RANGE, "the SageMaker endpoint is not served"),
    ("--sagemaker-thread-count", int, "the SageMaker endpoint is not served"),
    ("--vertex-ai-port", int, "the Vertex AI endpoint is not served"),
    ("--vertex-ai-thread-count", int, "the Vertex AI endpoint is not served"),
    ("--vertex-ai-default-model", str, "the Vertex AI endpoint is not served"),
    # Shared libraries Triton loads: Naiad's repository agents and cache are built in.
    # (--backend-directory has a use: Python-based backends, add_arguments.)
    (
        "--repoagent-directory",
        str,
        "no repository agent libraries are loaded",
    ),
    # GPU memory management of Triton's core.
    (
        "--cuda-memory-pool-byte-size",
        _DEVICE_BYTES,
        "Naiad keeps no CUDA memory pool; a GPU model's framework allocates its own memory",
    ),
    (
        "--cuda-virtual-address-size",
        _DEVICE_BYTES,
        "Naiad has no growable implicit state memory",
    ),
    (
        "--min-supported-compute-capability",
        float,
        "GPUs are not filtered by compute capability; a model's framework refuses a GPU "
        "it cannot use",
    ),
    (
        "--enable-peer-access",
        parse_bool,
        "Naiad copies no tensors between GPUs; peer access is not set up",
    ),
    (
        "--host-policy",
        _POLICY,
        "host policies (numa-node, cpu-cores) are not applied; instances run where the "
        "OS schedules them",
    ),
    (
        "--model-load-gpu-limit",
        _DEVICE_FRACTION,
        "not enforced: GPU memory use is not checked before a model loads",
    ),
)

# Switches whose true asks for something Naiad does not serve: (flag, why not).
_REFUSED_WHEN_TRUE = (
    ("--allow-sagemaker", "the SageMaker endpoint is not served by Naiad yet"),
    ("--allow-vertex-ai", "the Vertex AI endpoint is not served by Naiad yet"),
    (
        "--model-namespacing",
        "model namespacing is not implemented: models of the same name in two "
        "repositories are both unavailable, as without namespacing",
    ),
)


def _dest(flag: str) -> str:
    return flag[2:].replace("-", "_")


def add_arguments(serve: argparse.ArgumentParser) -> None:
    serve.add_argument(
        "--backend-directory",
        default=None,
        help='where Python-based backends are found: a model with backend: "<name>" is '
        "served with <dir>/<name>/model.py (default /opt/tritonserver/backends). Naiad's "
        "own backends (onnxruntime, pytorch, tensorrt, python) are built in",
    )
    group = serve.add_argument_group(
        "tritonserver flags without effect here",
        "accepted with Triton's syntax; start-up logs what each given one does in Naiad "
        "(docs/flags.md)",
    )
    for flag, kind, _ in _NO_EFFECT:
        group.add_argument(flag, type=kind, default=None)
    for flag, why in _REFUSED_WHEN_TRUE:
        group.add_argument(
            flag, type=parse_bool, default=None, help=f"true: start-up error ({why})"
        )


def startup_error(options) -> str | None:
    """Why the server must not start with `options`, or None."""
    for flag, why in _REFUSED_WHEN_TRUE:
        if getattr(options, _dest(flag), None):
            return f"{flag}=true: {why}"
    return None


def startup_notes(options) -> list[str]:
    """One line per flag of this module given a value on the command line (a switch
    given false asks for nothing: none), and for the environment Triton reads, saying
    what they do in Naiad."""
    notes = []
    for flag, _, effect in _NO_EFFECT:
        value = getattr(options, _dest(flag), None)
        if value is not None:
            notes.append(f"{flag}={value}: accepted for Triton's command line; {effect}")
    if (
        os.environ.get("AIP_MODE") == "PREDICTION"
        and getattr(options, "allow_vertex_ai", None) is None
    ):
        # Triton would serve Vertex AI here by default.
        notes.append(
            "AIP_MODE=PREDICTION: Triton would serve the Vertex AI endpoint by default; "
            "Naiad does not serve it"
        )
    return notes
