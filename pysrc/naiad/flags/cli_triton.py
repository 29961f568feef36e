"""tritonserver's flags that `naiad serve` takes so that Triton's command lines start it,
but whose feature Naiad does not have or has no use for on this host.

Each is parsed with Triton's syntax (a bad value is a usage error, as in Triton) and
defaults to None. At start-up the server logs one line for each flag given, saying what
it does here (`startup_notes`); a flag that asks for a feature Naiad does not serve
(model namespacing) stops the start with an error (`startup_error`) rather than serve
without it. The SageMaker and Vertex AI endpoints' flags are here too, with their effect
(http/endpoint_routes.py). docs/flags.md is the table."""

from __future__ import annotations

import argparse
import os
import re

__all__ = [
    "add_arguments",
    "environment_defaults",
    "parse_bool",
    "startup_error",
    "startup_notes",
]


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
    (
        "--sagemaker-thread-count",
        int,
        "the SageMaker endpoint's connections are read by the C++ I/O threads "
        "(--http-thread-count)",
    ),
    (
        "--vertex-ai-thread-count",
        int,
        "the Vertex AI endpoint's connections are read by the C++ I/O threads "
        "(--http-thread-count)",
    ),
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
    endpoints = serve.add_argument_group(
        "SageMaker and Vertex AI endpoints",
        "Triton's flags, with its meaning and defaults (docs/sagemaker_vertex.md)",
    )
    endpoints.add_argument(
        "--allow-sagemaker", type=parse_bool, default=None, help="serve the SageMaker endpoint"
    )
    endpoints.add_argument(
        "--sagemaker-port", type=int, default=None, help="its port (default 8080)"
    )
    endpoints.add_argument(
        "--sagemaker-safe-port-range",
        type=_PORT_RANGE,
        default=None,
        help="<low>-<high>: the range the other ports must lie in",
    )
    endpoints.add_argument(
        "--allow-vertex-ai",
        type=parse_bool,
        default=None,
        help="serve the Vertex AI endpoint (default: true where AIP_MODE=PREDICTION)",
    )
    endpoints.add_argument(
        "--vertex-ai-port",
        type=int,
        default=None,
        help="its port (default: AIP_HTTP_PORT, else 8080)",
    )
    endpoints.add_argument(
        "--vertex-ai-default-model",
        default=None,
        help="the model its predict route infers (default: the repository's one model)",
    )


def startup_error(options) -> str | None:
    """Why the server must not start with `options`, or None."""
    for flag, why in _REFUSED_WHEN_TRUE:
        if getattr(options, _dest(flag), None):
            return f"{flag}=true: {why}"
    if getattr(options, "allow_sagemaker", None):
        from naiad.http.endpoint_routes import safe_port_range_error, vertex_allowed, vertex_port

        ports = [
            (name, getattr(options, attribute))
            for name, allowed, attribute in (
                ("HTTP", "allow_http", "http_port"),
                ("GRPC", "allow_grpc", "grpc_port"),
                ("metrics", "allow_metrics", "metrics_port"),
            )
            if getattr(options, allowed, False)
        ]
        if vertex_allowed(options):
            ports.append(("Vertex AI", vertex_port(options)))
        return safe_port_range_error(getattr(options, "sagemaker_safe_port_range", None), ports)
    return None


def environment_defaults(options) -> None:
    """Triton's defaults that the environment sets: where AIP_MODE=PREDICTION (a Vertex
    AI container), the HTTP and gRPC ports are off unless their flags say otherwise (and
    the Vertex AI endpoint is on: http/endpoint_routes.py)."""
    prediction = os.environ.get("AIP_MODE") == "PREDICTION"
    for name in ("allow_http", "allow_grpc"):
        if getattr(options, name, True) is None:
            setattr(options, name, not prediction)


def startup_notes(options) -> list[str]:
    """One line per flag of this module without effect here given a value on the
    command line, saying what it does in Naiad."""
    notes = []
    for flag, _, effect in _NO_EFFECT:
        value = getattr(options, _dest(flag), None)
        if value is not None:
            notes.append(f"{flag}={value}: accepted for Triton's command line; {effect}")
    return notes
