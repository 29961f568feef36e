"""Restricted APIs (`--http-restricted-api`, `--grpc-restricted-protocol`) and header
forwarding (`--http-header-forward-pattern`, `--grpc-header-forward-pattern`), as
tritonserver takes them: one rule for both front ends.

A restricted category answers only requests that carry its header with its value
exactly (HTTP: the header name in any case; gRPC: the metadata key
`triton-grpc-protocol-<key>`). Otherwise HTTP answers 403 and gRPC UNAVAILABLE, each
with Triton's message. Forwarding: request headers (call metadata) whose name matches
the pattern anywhere, in any case, reach the model as string request parameters named
as sent.
"""

from __future__ import annotations

import re

# Triton's API categories, in its order (restricted_features.h).
CATEGORIES = (
    "health",
    "metadata",
    "inference",
    "shared-memory",
    "model-config",
    "model-repository",
    "statistics",
    "trace",
    "logging",
)

GRPC_KEY_PREFIX = "triton-grpc-protocol-"

# The gRPC methods of each category (grpc_server.cc registers them so).
GRPC_CATEGORIES = {
    "/inference.GRPCInferenceService/ServerLive": "health",
    "/inference.GRPCInferenceService/ServerReady": "health",
    "/inference.GRPCInferenceService/ModelReady": "health",
    "/grpc.health.v1.Health/Check": "health",
    "/inference.GRPCInferenceService/ServerMetadata": "metadata",
    "/inference.GRPCInferenceService/ModelMetadata": "metadata",
    "/inference.GRPCInferenceService/ModelInfer": "inference",
    "/inference.GRPCInferenceService/ModelStreamInfer": "inference",
    "/inference.GRPCInferenceService/ModelConfig": "model-config",
    "/inference.GRPCInferenceService/ModelStatistics": "statistics",
    "/inference.GRPCInferenceService/RepositoryIndex": "model-repository",
    "/inference.GRPCInferenceService/RepositoryModelLoad": "model-repository",
    "/inference.GRPCInferenceService/RepositoryModelUnload": "model-repository",
    "/inference.GRPCInferenceService/SystemSharedMemoryStatus": "shared-memory",
    "/inference.GRPCInferenceService/SystemSharedMemoryRegister": "shared-memory",
    "/inference.GRPCInferenceService/SystemSharedMemoryUnregister": "shared-memory",
    "/inference.GRPCInferenceService/CudaSharedMemoryStatus": "shared-memory",
    "/inference.GRPCInferenceService/CudaSharedMemoryRegister": "shared-memory",
    "/inference.GRPCInferenceService/CudaSharedMemoryUnregister": "shared-memory",
    "/inference.GRPCInferenceService/TraceSetting": "trace",
    "/inference.GRPCInferenceService/LogSettings": "logging",
}

# HTTP paths /v2/models/{m}[/versions/{v}]/{action} by action ("" is the metadata).
MODEL_ACTION_CATEGORIES = {
    "": "metadata",
    "ready": "health",
    "infer": "inference",
    "generate": "inference",
    "generate_stream": "inference",
    "config": "model-config",
    "stats": "statistics",
    "trace": "trace",
}

# HTTP paths /v2/{section}/... by section.
SECTION_CATEGORIES = {
    "health": "health",
    "systemsharedmemory": "shared-memory",
    "cudasharedmemory": "shared-memory",
    "repository": "model-repository",
    "trace": "trace",
    "logging": "logging",
}


class Restrictions:
    """{category: (header, value)} of the restricted categories of one front end."""

    def __init__(self, rules: dict[str, tuple[str, str]] | None = None):
        self.rules = rules or {}

    def __bool__(self) -> bool:
        return bool(self.rules)

    def rule(self, category: str) -> tuple[str, str] | None:
        return self.rules.get(category)

    @staticmethod
    def http_denial(header: str) -> str:
        return f"This API is restricted, expecting header '{header}'"

    @staticmethod
    def grpc_denial(header: str) -> str:
        return f"This protocol is restricted, expecting header '{header}'"


def parse_restrictions(
    values: list[str], option: str, key_prefix: str = "", feature: str = "api"
) -> Restrictions:
    """The restrictions of repeated `--<option>=<a>[,<b>...]:<key>=<value>` flags.
    ValueError with tritonserver's message for a malformed one."""
    rules: dict[str, tuple[str, str]] = {}
    for text in values:
        colon = text.find(":")
        equals = text.find("=", colon + 1) if colon >= 0 else -1
        names, key, value = text[:colon], text[colon + 1 : equals], text[equals + 1 :]
        if colon < 0 or equals < 0 or not names or not key or not value:
            raise ValueError(
                f"--{option} option format is '<config name>:<setting>=<value>'. Got {text}"
            )
        for name in names.split(","):
            if name not in CATEGORIES:
                raise ValueError(f"unknown restricted {feature} '{name}' ")
            if name in rules:
                raise ValueError(
                    f"restricted {feature} '{name}' can not be specified in multiple config groups"
                )
            rules[name] = (key_prefix + key, value)
    return Restrictions(rules)


def forward_pattern(pattern: str | None):
    """The compiled header forward pattern (case-insensitive, as tritonserver prefixes
    it with (?i)), or None when there is none."""
    if not pattern:
        return None
    try:
        return re.compile(pattern, re.IGNORECASE)
    except re.error as exc:
        raise ValueError(f"invalid header forward pattern '{pattern}': {exc}") from None


def add_forwarded(request, forwarded: list) -> None:
    """Headers (call metadata) matching the forward pattern, as (name, value) pairs in
    the order received: string parameters of `request`, after its own (a name in both,
    or sent twice, takes the last value, as Triton sets them one after another)."""
    parameters = dict(request.parameters or {})
    parameters.update(forwarded)
    request.parameters = parameters
