"""The model version a request names, read as Triton reads it (std::stol): leading
white space, a sign and the digits that follow; anything after them is ignored ("2abc"
is version 2). A string with no number, one out of range, or a negative number is
INVALID_ARGUMENT with Triton's message. The rule is the C++ lanes' own
(csrc/codec/model_lookup.h parse_model_version)."""

from __future__ import annotations

from naiad import _core
from naiad.errors import InvalidArgument

__all__ = ["parse_version"]


def parse_version(text: str) -> int:
    """The version number of a non-empty version string (0 is valid here and names no
    version, as in Triton: the lookup answers NOT_FOUND)."""
    version = _core.parse_model_version(text)
    if type(version) is str:
        raise InvalidArgument(version)
    return version
