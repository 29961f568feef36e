"""The model version a request names, read as Triton reads it (std::stol): leading
white space, a sign and the digits that follow; anything after them is ignored ("2abc"
is version 2). A string with no number, one out of range, or a negative number is
INVALID_ARGUMENT with Triton's message."""

from __future__ import annotations

import re

from naiad.errors import InvalidArgument

__all__ = ["parse_version"]

# std::stol: isspace() white space, an optional sign, then at least one digit.
_STOL = re.compile(r"[ \t\n\v\f\r]*([+-]?[0-9]+)")
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1


def parse_version(text: str) -> int:
    """The version number of a non-empty version string (0 is valid here and names no
    version, as in Triton: the lookup answers NOT_FOUND)."""
    match = _STOL.match(text)
    value = int(match.group(1)) if match else None
    if value is None or not _LONG_MIN <= value <= _LONG_MAX:
        raise InvalidArgument(
            f"failed to get model version from specified version string '{text}' "
            "(details: stol), version should be an integral value > 0"
        )
    if value < 0:
        raise InvalidArgument(
            f"invalid model version specified '{text}' , version should be an integral value > 0"
        )
    return value
