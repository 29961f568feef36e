"""Repository agents: what a config's `model_repository_agents` asks to run before a load.

Triton loads each agent as a library (libtritonrepoagent_<name>.so). Naiad runs no agent
library; it has Triton's checksum agent built in, and refuses a model that names any other
agent, so that a check the config asks for is never skipped.

The checksum agent, as Triton's (triton-inference-server/checksum_repository_agent): each
parameter `key: "<algorithm>:<file relative to the model folder>" value: "<hex digest>"`; the
only algorithm is MD5 (any case); the digest is compared, as lowercase hex, with the value
as written. A mismatch, a missing file, a key without ':' or another algorithm keeps the
model from loading, with the agent's words.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from naiad.protos import model_config_pb2

CHECKSUM = "checksum"

# Digests the checksum agent knows, by the name its key gives (lowercased).
_ALGORITHMS = {"md5": ("MD5", hashlib.md5)}


def agents_refusal(config: model_config_pb2.ModelConfig, model_dir: Path) -> str | None:
    """Why the agents `config` names keep the model in `model_dir` from loading, or None."""
    for agent in config.model_repository_agents.agents:
        if agent.name != CHECKSUM:
            return (
                f"unable to find 'libtritonrepoagent_{agent.name}.so' for repo agent "
                f"'{agent.name}' of model '{config.name}': Naiad runs no repository agent "
                f"library and has only the built-in '{CHECKSUM}' agent "
                "(field 'model_repository_agents.agents.name')"
            )
        reason = checksum_refusal(agent.parameters, Path(model_dir))
        if reason is not None:
            return reason
    return None


def checksum_refusal(parameters, model_dir: Path) -> str | None:
    """The checksum agent's verdict on `model_dir`: None when every listed file matches."""
    # Sorted: a protobuf map has no order, and the first failure found is the one reported.
    for key in sorted(parameters):
        expected = parameters[key]
        algorithm, sep, relative = key.partition(":")
        if not sep:
            return f"failed to parse key: {key}"
        known = _ALGORITHMS.get(algorithm.lower())
        if known is None:
            return f"Unsupported checksum algorithm: {algorithm}"
        label, digest = known
        try:
            data = (model_dir / relative).read_bytes()
        except OSError as exc:
            detail = os.strerror(exc.errno) if exc.errno else str(exc)
            return f"failed to open text file for read {relative}: {detail}"
        got = digest(data).hexdigest()
        if got != expected:
            return f"Mismatched {label} hash for file {relative}, expect: {expected}, got: {got}"
    return None
