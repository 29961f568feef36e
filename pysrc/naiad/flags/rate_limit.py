"""tritonserver's rate-limiter flags: --rate-limit and --rate-limit-resource.

The policy itself (resources, priorities, which instance runs next) is the core's
(csrc/core/rate_limiter.h); this module only reads the flags, with Triton's messages.
"""

from __future__ import annotations

import argparse
from typing import NamedTuple


class RateLimitResource(NamedTuple):
    """One --rate-limit-resource=<name>:<count>[:<device>]; device None: every device."""

    name: str
    count: int
    device: int | None = None


def parse_rate_limit(text: str) -> str:
    """execution_count or off, any case, as tritonserver takes it."""
    mode = text.lower()
    if mode not in ("execution_count", "off"):
        raise argparse.ArgumentTypeError("invalid argument for --rate-limit")
    return mode


def parse_rate_limit_resource(text: str) -> RateLimitResource:
    # The name keeps its case: tritonserver's help says case-insensitive, but it parses
    # the flag as given and matches names exactly.
    error = (
        "--rate-limit-resource option format is '<resource_name>:<count>:<device>' or "
        f"'<resource_name>:<count>'. Got {text}"
    )
    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise argparse.ArgumentTypeError(error)
    try:
        count = int(parts[1])
        device = int(parts[2]) if len(parts) == 3 else None
    except ValueError:
        raise argparse.ArgumentTypeError(error) from None
    if count < 0:
        raise argparse.ArgumentTypeError(error)
    return RateLimitResource(parts[0], count, device)
