"""pb_utils takes bytes where it takes a string, as Triton's Python backend does.

Triton's pb_utils classes are C++ bindings (pybind11), which convert `bytes` as well as
`str` to a std::string: real models pass `name.as_numpy()[0]` (bytes, from a TYPE_STRING
input) as a BLS model name, a tensor name or a log line. The model
tests/models/pb_utils_bytes runs each case; the answers below are the real Triton 2.51's,
and the same test runs against it where it is installed."""

from __future__ import annotations

import time

import numpy as np
import pytest
import tritonclient.http as httpclient
from server_harness import NaiadServer, make_repository
from triton_peer import TritonPeer, skip_without_triton

pytestmark = pytest.mark.timeout(300)

LOG_LINE = "a line from bytes"

# (probe, argument as bytes) -> RESULT, as Triton 2.51 answers.
CASES = {
    ("tensor_name", "OUT"): "ok: OUT",
    ("bls_model_name", "add_sub"): "ok: 6.0 '' ['OUTPUT0']",
    ("bls_model_name", "nope"): "ok: error: Model nope - Error when running inference: "
    "Failed for execute the inference request. Model 'nope' is not ready.",
    ("bls_output_names", "OUTPUT0"): "ok: 6.0 '' ['OUTPUT0']",
    ("bls_request_id", "rid"): "ok: 6.0 'rid' ['OUTPUT0']",
    # A correlation ID is an integer or a str, and bytes are neither (Triton's check).
    ("bls_correlation_id", "cid"): "raised TritonModelException: "
    "Correlation ID must be integer or string",
    ("error_message", "boom"): "ok: 'boom'",
    # Lookups by name compare with the str names: bytes find nothing, in Triton too.
    ("input_by_name", "PROBE"): "ok: None",
    ("logger", LOG_LINE): "ok: logged",
    ("is_model_ready", "add_sub"): "ok: True",
    ("metric_family", "bytes_named_counter"): "ok: 2.0",
}


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    return make_repository(tmp_path_factory.mktemp("pb_utils_bytes"), ["add_sub", "pb_utils_bytes"])


@pytest.fixture(scope="module", params=["naiad", "triton"])
def server(request, repository, tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("logs")
    if request.param == "naiad":
        naiad = NaiadServer(repository, log_dir=log_dir).start()
        try:
            yield naiad.url, lambda: naiad.stderr_text() + naiad.stdout_text()
        finally:
            naiad.stop()
        return
    skip_without_triton()
    with TritonPeer(repository, log_dir, []) as triton:
        yield triton.url, lambda: triton.log_path.read_text(errors="replace")


def _probe(url: str, probe: str, argument: str) -> str:
    client = httpclient.InferenceServerClient(url.removeprefix("http://"))
    tensor = httpclient.InferInput("PROBE", [2], "BYTES")
    tensor.set_data_from_numpy(np.array([probe.encode(), argument.encode()], dtype=np.object_))
    result = client.infer("pb_utils_bytes", [tensor])
    return result.as_numpy("RESULT")[0].decode()


@pytest.mark.parametrize("case", list(CASES), ids=[f"{p}-{a}" for p, a in CASES])
def test_bytes_where_a_string_is_taken(server, case):
    url, _ = server
    assert _probe(url, *case) == CASES[case]


def test_a_bytes_log_line_is_logged_as_text(server):
    url, log_text = server
    assert _probe(url, "logger", LOG_LINE) == "ok: logged"
    # Triton's stub hands the line to the server, which writes it after the answer.
    deadline = time.monotonic() + 30
    while f'] "{LOG_LINE}"' not in log_text():
        assert time.monotonic() < deadline, log_text()[-2000:]
        time.sleep(0.05)
