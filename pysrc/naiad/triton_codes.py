"""Triton's error codes (TRITONSERVER_Error_Code): the codes of pb_utils.TritonError, and
what a worker reports a failed response with. They are the core's one table
(csrc/codec/error_status.h, with the error kind each code answers as), read through
_core; every Python use of a code takes it from here."""

from naiad import _core

# Code -> its name as pb_utils.TritonError's constant ("INVALID_ARG").
NAMES = {row["code"]: row["name"] for row in _core.triton_error_codes()}
_CODES = {name: code for code, name in NAMES.items()}

UNKNOWN = _CODES["UNKNOWN"]
INTERNAL = _CODES["INTERNAL"]
NOT_FOUND = _CODES["NOT_FOUND"]
INVALID_ARG = _CODES["INVALID_ARG"]
UNAVAILABLE = _CODES["UNAVAILABLE"]
UNSUPPORTED = _CODES["UNSUPPORTED"]
ALREADY_EXISTS = _CODES["ALREADY_EXISTS"]
CANCELLED = _CODES["CANCELLED"]
