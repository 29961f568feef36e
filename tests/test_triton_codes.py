"""One table of Triton's error codes: the core's (csrc/codec/error_status.h). Python's
view of it (naiad.triton_codes) is the same rows, every TRITONSERVER_Error_Code is there
with pb_utils' name for it, and each answers with Triton's HTTP status."""

from naiad import _core, triton_codes
from naiad import triton_python_backend_utils as pb_utils
from naiad.errors import error_of_triton_code

# TRITONSERVER_Error_Code (tritonserver.h) and pb_utils.TritonError's names, with the HTTP
# status Triton 2.51 answers a model's error of that code with.
TRITON = [
    (0, "UNKNOWN", 500),
    (1, "INTERNAL", 500),
    (2, "NOT_FOUND", 404),
    (3, "INVALID_ARG", 400),
    (4, "UNAVAILABLE", 503),
    (5, "UNSUPPORTED", 501),
    (6, "ALREADY_EXISTS", 400),
    (7, "CANCELLED", 500),
]


def test_the_python_view_is_the_cores_table():
    rows = _core.triton_error_codes()
    assert {row["code"]: row["name"] for row in rows} == triton_codes.NAMES
    for row in rows:
        assert _core.error_kind_of_code(row["code"]) == row["kind"]


def test_every_triton_error_code_is_there_with_its_name_and_status():
    assert triton_codes.NAMES == {code: name for code, name, _status in TRITON}
    for code, name, status in TRITON:
        assert getattr(triton_codes, name) == code
        assert getattr(pb_utils.TritonError, name) == code
        assert pb_utils.TritonError("m", code).code_name() == name
        assert error_of_triton_code(code, "m").http_status == status
    assert error_of_triton_code(99, "m").http_status == 500  # no such code: internal
